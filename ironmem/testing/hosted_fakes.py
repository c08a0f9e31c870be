"""In-memory fakes of the hosted memory services, served by :class:`~ironmem.testing.openapi_stub.StubServer`.

Each fake answers the operations ironmem's provider uses, with bodies shaped as the service's published OpenAPI
description says (the stub validates every request and every answer against it). Search is a plain word-overlap
ranking: enough to check that what was written comes back for the right user, not a model of the real ranking.

Example:
    >>> from pathlib import Path
    >>> import httpx
    >>> spec = Path("tests/data/openapi/supermemory-v5.openapi.json")
    >>> with supermemory_stub(spec, api_key="sm-test") as stub:  # doctest: +SKIP
    ...     httpx.post(stub.url + "/ns/alice/search", json={"query": "x"}, headers={"Authorization": "Bearer sm-test"})
"""

from __future__ import annotations

import itertools
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .openapi_stub import OpenAPIDescription, StubRequest, StubResponse, StubServer

__all__ = ["HonchoFake", "SupermemoryFake", "honcho_stub", "supermemory_stub"]

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(["a", "an", "and", "are", "at", "be", "do", "does", "for", "from", "i", "in", "is", "it", "me", "my", "of", "on", "or", "the", "to", "was", "what", "where", "who", "why", "how", "with", "you", "your"])


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _words(text: str) -> set[str]:
    return {w for w in (m.group(0).casefold() for m in _WORD.finditer(text or "")) if w not in _STOP}


def _score(query: str, text: str) -> float:
    q = _words(query)
    if not q:
        return 0.0
    return len(q & _words(text)) / len(q)


# --------------------------------------------------------------------------------------------------
# Honcho (API v3)
# --------------------------------------------------------------------------------------------------
class HonchoFake:
    """Workspaces, peers, sessions, messages and conclusions of a Honcho server, in memory.

    ``api_key``: the bearer token every request must carry (``None`` accepts any).
    """

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.workspaces: dict[str, dict[str, Any]] = {}
        self.peers: dict[tuple[str, str], dict[str, Any]] = {}
        self.sessions: dict[tuple[str, str], dict[str, Any]] = {}
        self.messages: list[dict[str, Any]] = []
        self.conclusions: dict[str, dict[str, Any]] = {}
        self.cards: dict[tuple[str, str], list[str]] = {}

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def __call__(self, req: StubRequest) -> StubResponse:
        if self.api_key is not None and req.bearer != self.api_key:
            return StubResponse(401, {"detail": "Invalid or missing API key"})
        route = (req.method, req.operation.template)
        handler = self._routes().get(route)
        if handler is None:
            return StubResponse(501, {"detail": f"the Honcho fake does not implement {req.operation}"})
        with self._lock:
            return handler(req, req.path_params, req.body or {})

    def _routes(self) -> dict[tuple[str, str], Any]:
        w = "/v3/workspaces/{workspace_id}"
        return {
            ("POST", "/v3/workspaces"): self._workspace,
            ("POST", f"{w}/peers"): self._peer,
            ("POST", f"{w}/sessions"): self._session,
            ("POST", f"{w}/sessions/{{session_id}}/peers"): self._session_peers,
            ("POST", f"{w}/sessions/{{session_id}}/messages"): self._add_messages,
            ("POST", f"{w}/peers/{{peer_id}}/search"): self._peer_search,
            ("GET", f"{w}/peers/{{peer_id}}/card"): self._card,
            ("GET", f"{w}/peers/{{peer_id}}/context"): self._context,
            ("POST", f"{w}/peers/{{peer_id}}/chat"): self._chat,
            ("POST", f"{w}/conclusions"): self._create_conclusions,
            ("POST", f"{w}/conclusions/query"): self._query_conclusions,
            ("DELETE", f"{w}/conclusions/{{conclusion_id}}"): self._delete_conclusion,
            ("GET", "/health"): lambda req, p, b: StubResponse(200, {"status": "ok"}),
        }

    def _workspace(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        ws = self.workspaces.setdefault(body["id"], {"id": body["id"], "metadata": {}, "configuration": {},
                                                      "created_at": _now()})
        return StubResponse(200, ws)

    def _ensure_peer(self, ws: str, peer_id: str) -> dict[str, Any]:
        self.workspaces.setdefault(ws, {"id": ws, "metadata": {}, "configuration": {}, "created_at": _now()})
        return self.peers.setdefault((ws, peer_id), {"id": peer_id, "workspace_id": ws, "created_at": _now(),
                                                     "metadata": {}, "configuration": {}})

    def _peer(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        return StubResponse(200, self._ensure_peer(p["workspace_id"], body["id"]))

    def _ensure_session(self, ws: str, sid: str) -> dict[str, Any]:
        return self.sessions.setdefault((ws, sid), {"id": sid, "is_active": True, "workspace_id": ws,
                                                    "metadata": {}, "configuration": {}, "created_at": _now()})

    def _session(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        return StubResponse(200, self._ensure_session(p["workspace_id"], body["id"]))

    def _session_peers(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        for peer_id in body:
            self._ensure_peer(p["workspace_id"], peer_id)
        return StubResponse(200, self._ensure_session(p["workspace_id"], p["session_id"]))

    def _add_messages(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        ws, sid = p["workspace_id"], p["session_id"]
        self._ensure_session(ws, sid)
        created = []
        for m in body["messages"]:
            self._ensure_peer(ws, m["peer_id"])
            msg = {"id": self._id("msg"), "content": m["content"], "peer_id": m["peer_id"], "session_id": sid,
                   "metadata": m.get("metadata") or {}, "created_at": _now(), "workspace_id": ws,
                   "token_count": len(m["content"].split())}
            self.messages.append(msg)
            created.append(msg)
        return StubResponse(201, created)

    def _peer_search(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        ws, peer = p["workspace_id"], p["peer_id"]
        scored = [(_score(body["query"], m["content"]), m) for m in self.messages
                  if m["workspace_id"] == ws and m["peer_id"] == peer]
        hits = [m for s, m in sorted(scored, key=lambda x: -x[0]) if s > 0]
        return StubResponse(200, hits[: body.get("limit", 10)])

    def _about(self, ws: str, peer: str, query: str | None, top_k: int) -> list[dict[str, Any]]:
        items = [c for c in self.conclusions.values() if c["_ws"] == ws and c["observed_id"] == peer]
        if query:
            items = [c for c in items if _score(query, c["content"]) > 0]
        return items[:top_k]

    def _card(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        target = (req.query.get("target") or [p["peer_id"]])[-1]
        card = self.cards.get((p["workspace_id"], target))
        return StubResponse(200, {"peer_card": card})

    def _context(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        target = (req.query.get("target") or [p["peer_id"]])[-1]
        query = req.query["search_query"][-1] if req.query.get("search_query") else None
        top_k = int((req.query.get("search_top_k") or ["10"])[-1])
        facts = self._about(p["workspace_id"], target, query, top_k)
        representation = "\n".join(f"- {c['content']}" for c in facts) or None
        return StubResponse(200, {"peer_id": p["peer_id"], "target_id": target, "representation": representation,
                                  "peer_card": self.cards.get((p["workspace_id"], target))})

    def _chat(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        facts = self._about(p["workspace_id"], body.get("target") or p["peer_id"], body["query"], 5)
        return StubResponse(200, {"content": " ".join(c["content"] for c in facts) or None})

    def _public(self, c: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in c.items() if not k.startswith("_")}

    def _create_conclusions(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        out = []
        for item in body["conclusions"]:
            c = {"id": self._id("concl"), "content": item["content"], "observer_id": item["observer_id"],
                 "observed_id": item["observed_id"], "session_id": item.get("session_id"), "level": "explicit",
                 "created_at": _now(), "_ws": p["workspace_id"]}
            self.conclusions[c["id"]] = c
            out.append(self._public(c))
        return StubResponse(201, out)

    def _query_conclusions(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        filters = body.get("filters") or {}
        items = [c for c in self.conclusions.values() if c["_ws"] == p["workspace_id"]
                 and all(c.get(k) == v for k, v in filters.items() if k in ("observer_id", "observed_id", "level"))
                 and _score(body["query"], c["content"]) > 0]
        return StubResponse(200, [self._public(c) for c in items[: body.get("top_k", 10)]])

    def _delete_conclusion(self, req: StubRequest, p: dict[str, str], body: dict[str, Any]) -> StubResponse:
        if self.conclusions.pop(p["conclusion_id"], None) is None:
            return StubResponse(422, {"detail": [{"loc": ["path", "conclusion_id"], "msg": "conclusion not found",
                                                  "type": "value_error"}]})
        return StubResponse(204, None)


# --------------------------------------------------------------------------------------------------
# Supermemory (API v5)
# --------------------------------------------------------------------------------------------------
class SupermemoryFake:
    """Namespaces, documents and the memories 'extracted' from them (one per line), in memory."""

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.documents: dict[tuple[str, str], dict[str, Any]] = {}
        self.memories: dict[str, dict[str, Any]] = {}
        self.namespaces: dict[str, str] = {}

    def __call__(self, req: StubRequest) -> StubResponse:
        if self.api_key is not None and req.bearer != self.api_key:
            return StubResponse(401, {"error": "Unauthorized", "details": "invalid API key"})
        routes = {
            ("POST", "/ns/{namespace}/document"): self._add,
            ("DELETE", "/ns/{namespace}/document"): self._delete_documents,
            ("POST", "/ns/{namespace}/search"): self._search,
            ("POST", "/ns/{namespace}/profile"): self._profile,
            ("DELETE", "/ns/{namespace}/memories"): self._forget,
            ("GET", "/ns/{namespace}"): self._namespace,
        }
        handler = routes.get((req.method, req.operation.template))
        if handler is None:
            return StubResponse(500, {"error": f"the Supermemory fake does not implement {req.operation}"})
        with self._lock:
            return handler(req, req.path_params["namespace"], req.body or {})

    def _add(self, req: StubRequest, ns: str, body: dict[str, Any]) -> StubResponse:
        self.namespaces.setdefault(ns, _now())
        doc_id = body.get("id") or f"doc_{next(self._ids):06d}"
        doc = self.documents.setdefault((ns, doc_id), {"id": doc_id, "content": "", "metadata": {}})
        doc["content"] = (doc["content"] + "\n" + body["content"]).strip()
        doc["metadata"].update(body.get("metadata") or {})
        for line in body["content"].splitlines():
            text = re.sub(r"^\s*(user|assistant)\s*:\s*", "", line).strip()
            if text:
                mem_id = f"mem_{next(self._ids):06d}"
                self.memories[mem_id] = {"id": mem_id, "memory": text, "ns": ns, "doc": doc_id,
                                         "metadata": dict(body.get("metadata") or {}), "forgotten": False,
                                         "createdAt": _now()}
        return StubResponse(200, {"id": doc_id, "status": "queued"})

    def _live(self, ns: str) -> list[dict[str, Any]]:
        return [m for m in self.memories.values() if m["ns"] == ns and not m["forgotten"]]

    def _search(self, req: StubRequest, ns: str, body: dict[str, Any]) -> StubResponse:
        threshold = body.get("threshold", 0.3)
        scored = sorted(((_score(body["query"], m["memory"]), m) for m in self._live(ns)), key=lambda x: -x[0])
        mode = body.get("searchMode", "hybrid")
        results = []
        for score, m in scored[: body.get("limit", 10)]:
            if score <= 0 or score < min(threshold, 0.2):
                continue
            item: dict[str, Any] = {"id": m["id"], "metadata": m["metadata"], "similarity": round(score, 3),
                                    "isLatest": True, "isInference": False,
                                    "system": {"updatedAt": m["createdAt"], "createdAt": m["createdAt"]}}
            item["chunk" if mode == "chunks" else "memory"] = m["memory"]
            results.append(item)
        return StubResponse(200, {"results": results, "searchTime": 1.5})

    def _profile(self, req: StubRequest, ns: str, body: dict[str, Any]) -> StubResponse:
        live = self._live(ns)
        static = [{"id": m["id"], "memory": m["memory"]} for m in live if m["metadata"].get("target") == "user"]
        dynamic = [{"id": m["id"], "memory": m["memory"]} for m in live[-3:]]
        return StubResponse(200, {"profile": {"static": static, "dynamic": dynamic, "buckets": {}}})

    def _forget(self, req: StubRequest, ns: str, body: dict[str, Any]) -> StubResponse:
        matches, errors = [], []
        for mem_id in body["ids"]:
            m = self.memories.get(mem_id)
            if m is None or m["ns"] != ns or m["forgotten"]:
                errors.append({"id": mem_id, "error": "memory not found in this namespace"})
                continue
            m["forgotten"] = True
            matches.append({"id": mem_id, "memory": m["memory"]})
        return StubResponse(200, {"count": len(matches), "errors": errors, "matches": matches})

    def _delete_documents(self, req: StubRequest, ns: str, body: dict[str, Any]) -> StubResponse:
        count, errors = 0, []
        for doc_id in body["ids"]:
            if self.documents.pop((ns, doc_id), None) is None:
                errors.append({"id": doc_id, "error": "document not found"})
                continue
            count += 1
            for m in self.memories.values():
                if m["ns"] == ns and m["doc"] == doc_id:
                    m["forgotten"] = True
        return StubResponse(200, {"count": count, "errors": errors})

    def _namespace(self, req: StubRequest, ns: str, body: dict[str, Any]) -> StubResponse:
        created = self.namespaces.get(ns)
        if created is None:
            return StubResponse(404, {"error": "Namespace not found"})
        return StubResponse(200, {"namespace": ns, "supportingContext": None,
                                  "system": {"createdAt": created, "updatedAt": created}})


def honcho_stub(spec: str | Path, *, api_key: str | None = None) -> StubServer:
    """A (not yet started) stub server of Honcho's API v3 backed by a :class:`HonchoFake`."""
    return StubServer(OpenAPIDescription(spec), HonchoFake(api_key))


def supermemory_stub(spec: str | Path, *, api_key: str | None = None) -> StubServer:
    """A (not yet started) stub server of Supermemory's API v5 backed by a :class:`SupermemoryFake`."""
    return StubServer(OpenAPIDescription(spec), SupermemoryFake(api_key))
