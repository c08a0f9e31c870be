"""Supermemory as ironmem's external provider, on the official ``supermemory`` SDK, major version 5 (API v5).

Install with ``pip install 'ironmem[supermemory]'`` and set ``SUPERMEMORY_API_KEY``.

Why 5.x and not the 3.x that Hermes's plugin uses: 5.x is the current SDK, generated from the published API
description (``fern/openapi.json`` in supermemoryai/python-sdk) that ironmem's offline contract tests validate
every request against; that description covers only the v5, namespace-first API (``/ns/{namespace}/...``). The
3.x calls (``/v3/documents``, ``/v4/search``, ``/v4/profile``, ``/v4/conversations``) are absent from it, so a 3.x
backend could not be checked the same way, and supporting both would double the code for an API the vendor has
replaced. Hermes's ``supermemory.json`` is read as is: its ``container_tag`` is the v5 namespace.

How ironmem's hooks map to Supermemory:

- the **namespace** is ``container_tag`` with ``{user_id}`` (and Hermes's ``{identity}``) filled in: the default
  ``ironmem_{user_id}`` keeps users apart; a tag without a placeholder is shared by every user.
- ``prefetch`` (``auto_recall``): a search of the namespace for the turn, plus the profile (static and recent
  facts) on a session's first turn and every ``profile_frequency`` turns.
- ``sync_turn`` (``auto_capture``): the exchange is appended to one document per session (same document id, as
  the API allows), so Supermemory extracts memories with the conversation's context. Failed writes stay queued.
- ``on_memory_write``: notes saved with the built-in ``memory`` tool are stored as documents too.
- tools (``tools`` chooses; default ``supermemory_search``, ``supermemory_store``, ``supermemory_forget``):
  the names of Hermes's plugin; ``supermemory_profile`` on request.

Example:
    >>> provider = SupermemoryProvider(api_key="sm-test-key-000", base_url="http://127.0.0.1:9")
    >>> provider.namespace_for("alice@example.com")[:19]
    'ironmem_alice_examp'
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.provider import ToolSchema
from ._base import hashed_id, turn_text
from ._hosted import Failure, HostedProvider, HostedService, clip_text, known_tools, merge_hermes_file
from ._tools import ToolArgumentError, search_result, search_schema
from ._tools import err as _err
from ._tools import ok as _ok

__all__ = ["DEFAULT_SUPERMEMORY_TOOLS", "SUPERMEMORY_TOOLS", "SupermemoryProvider", "SupermemorySettings"]

log = logging.getLogger(__name__)

KEY_ENV = "SUPERMEMORY_API_KEY"
DEFAULT_BASE_URL = "https://api.supermemory.ai"
_NS_RE = re.compile(r"[^a-zA-Z0-9_:-]+")
_DOC_RE = re.compile(r"[^a-zA-Z0-9_.:-]+")
_MAX_QUERY_CHARS = 1000

STORE_TOOL = ToolSchema(
    "supermemory_store", "Save a fact to long-term memory (Supermemory) for later conversations.",
    {"type": "object", "properties": {"content": {"type": "string", "description": "The fact to remember."}},
     "required": ["content"]},
)
SEARCH_TOOL = search_schema("supermemory_search", "Search long-term memory (Supermemory) by meaning.")
FORGET_TOOL = ToolSchema(
    "supermemory_forget", "Forget a memory (Supermemory) by its id, or the best match for a query.",
    {"type": "object", "properties": {
        "id": {"type": "string", "description": "Exact memory id (from a search result)."},
        "query": {"type": "string", "description": "Text of the memory to forget, if no id."},
    }},
)
PROFILE_TOOL = ToolSchema(
    "supermemory_profile", "The user's profile from Supermemory: lasting facts and recent context.",
    {"type": "object", "properties": {}},
)
#: Every tool the provider can expose, by name.
SUPERMEMORY_TOOLS: dict[str, ToolSchema] = {t.name: t for t in (SEARCH_TOOL, STORE_TOOL, FORGET_TOOL, PROFILE_TOOL)}
#: Exposed unless ``tools`` says otherwise (the profile already reaches the model through recall).
DEFAULT_SUPERMEMORY_TOOLS = ("supermemory_search", "supermemory_store", "supermemory_forget")

# supermemory.json key (Hermes) -> setting name; the rest are reported as ignored by `status`.
_HERMES_KEYS = {
    "container_tag": "container_tag", "auto_recall": "auto_recall", "auto_capture": "auto_capture",
    "max_recall_results": "max_recall_results", "profile_frequency": "profile_frequency",
    "search_mode": "search_mode", "entity_context": "entity_context", "api_timeout": "api_timeout",
    "base_url": "base_url", "api_key": "api_key",
}


def _search_mode(value: Any) -> Any:
    return "chunks" if value == "documents" else value  # v3's "documents" is v5's "chunks"


class SupermemorySettings(BaseModel):
    """The ``supermemory`` section of ``config.yaml``; the keys of Hermes's ``supermemory.json`` are the same.

    ``config_file`` names a Hermes ``supermemory.json`` that fills every setting the section does not give.
    ``api_key`` comes from ``SUPERMEMORY_API_KEY``; ``container_tag`` also from ``SUPERMEMORY_CONTAINER_TAG``.
    """

    model_config = ConfigDict(extra="forbid")

    api_key: SecretStr | None = Field(None, description="Supermemory API key; or SUPERMEMORY_API_KEY")
    base_url: str | None = Field(None, description="API URL; or SUPERMEMORY_BASE_URL; default Supermemory's cloud")
    container_tag: str = Field("ironmem_{user_id}", min_length=1,
                               description="namespace; {user_id} / {identity} are filled in per session")
    identity: str = Field("default", min_length=1, description="what {identity} in container_tag stands for")
    auto_recall: bool = Field(True, description="recall on every turn")
    auto_capture: bool = Field(True, description="store each finished exchange")
    max_recall_results: int = Field(5, ge=1, le=20, description="search results recalled per turn")
    profile_frequency: int = Field(50, ge=1, le=500, description="recall the profile every N turns (and turn 1)")
    search_mode: Literal["hybrid", "memories", "chunks"] = Field("hybrid", description="v5 search surface")
    entity_context: str | None = Field(None, max_length=1500, description="guidance for memory extraction")
    api_timeout: float = Field(5.0, ge=0.5, le=60, description="seconds per HTTP request")
    max_retries: int = Field(0, ge=0, le=5, description="SDK retries (0: ironmem queues failed writes instead)")
    mirror_builtin: bool = Field(True, description="store built-in memory writes in Supermemory too")
    tools: list[str] = Field(default_factory=lambda: list(DEFAULT_SUPERMEMORY_TOOLS), description="tools to expose")
    max_pending_writes: int = Field(200, ge=1, description="failed writes kept for a retry")
    config_file: str | None = Field(None, description="a Hermes supermemory.json to read settings from")
    ignored_keys: list[str] = Field(default_factory=list, description="supermemory.json keys ironmem does not use")

    @model_validator(mode="before")
    @classmethod
    def _from_hermes_file(cls, data: Any) -> Any:
        return merge_hermes_file(data, section="supermemory", known=_HERMES_KEYS,
                                 renames={"search_mode": _search_mode})

    @field_validator("search_mode", mode="before")
    @classmethod
    def _v3_mode(cls, value: Any) -> Any:
        return _search_mode(value)

    @field_validator("entity_context", mode="before")
    @classmethod
    def _clamp_context(cls, value: Any) -> Any:
        return value.strip()[:1500] if isinstance(value, str) else value

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, value: list[str]) -> list[str]:
        return known_tools(value, SUPERMEMORY_TOOLS, "Supermemory")

    @model_validator(mode="after")
    def _need_key(self) -> SupermemorySettings:
        if self.api_key is None or not self.api_key.get_secret_value().strip():
            raise ValueError(
                f"supermemory.api_key is not set: set the environment variable {KEY_ENV} "
                "(or IRONMEM_SUPERMEMORY_API_KEY)"
            )
        return self


def _classify(exc: BaseException) -> Failure:
    """Map supermemory (Fern) / httpx / parsing exceptions to a :class:`Failure`."""
    import httpx
    import supermemory
    from supermemory.core.api_error import ApiError
    from supermemory.core.parse_error import ParsingError

    from ._hosted import json_detail

    timeout_error = getattr(supermemory, "APITimeoutError", None)
    connection_error = getattr(supermemory, "APIConnectionError", None)
    validation_error = getattr(supermemory, "APIResponseValidationError", None)
    if timeout_error is not None and isinstance(exc, timeout_error):
        return Failure("timeout", detail=str(exc))
    if connection_error is not None and isinstance(exc, connection_error):
        return Failure("connection", detail=str(exc))
    if validation_error is not None and isinstance(exc, validation_error):
        return Failure("malformed", getattr(exc, "status_code", None), detail=str(exc))
    if isinstance(exc, ParsingError):
        return Failure("malformed", exc.status_code, detail="the answer does not have the documented shape")
    status_error = getattr(supermemory, "APIStatusError", None)
    if isinstance(exc, ApiError) or (status_error is not None and isinstance(exc, status_error)):
        status = getattr(exc, "status_code", None) or 0
        detail = json_detail(getattr(exc, "body", None))
        if status in (401, 403):
            return Failure("auth", status, detail=detail)
        if status == 429:
            headers = {k.lower(): v for k, v in (getattr(exc, "headers", None) or {}).items()}
            retry = None
            try:
                if headers.get("retry-after-ms"):
                    retry = float(headers["retry-after-ms"]) / 1000
                elif headers.get("retry-after"):
                    retry = float(headers["retry-after"])
            except ValueError:
                retry = None
            return Failure("rate_limited", 429, retry, detail)
        if status >= 500:
            return Failure("server", status, detail=detail)
        if 200 <= status < 300:
            return Failure("malformed", status, detail="the body is not JSON")
        return Failure("client", status or None, detail=detail)
    if isinstance(exc, httpx.TimeoutException):
        return Failure("timeout", detail=str(exc))
    if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectError)):
        return Failure("connection", detail=str(exc))
    if isinstance(exc, (ValueError, KeyError, TypeError, AttributeError)):
        return Failure("malformed", detail=f"{type(exc).__name__}: {exc}")
    return Failure("error", detail=f"{type(exc).__name__}: {exc}")


def _need(obj: Any, attr: str) -> Any:
    value = getattr(obj, attr, None)
    if value is None:
        raise ValueError(f"the answer has no {attr!r}")
    return value


class SupermemoryProvider(HostedProvider[SupermemorySettings]):
    """Supermemory through the official SDK (v5): namespace per user, search recall, per-session documents.

    Args:
        api_key: default ``$SUPERMEMORY_API_KEY``; missing is a :class:`ConfigError` naming the variable.
        base_url: default ``$SUPERMEMORY_BASE_URL`` or Supermemory's cloud.
        container_tag: the namespace template (default ``ironmem_{user_id}``).
        settings: a :class:`SupermemorySettings` instead of keyword arguments.

    Example:
        >>> [t.name for t in SupermemoryProvider(api_key="sm-key-0123456789").tool_schemas()]
        ['supermemory_search', 'supermemory_store', 'supermemory_forget']
    """

    name = "supermemory"
    requires = ("supermemory", "the supermemory SDK is not installed: pip install 'ironmem[supermemory]'")
    settings_model: ClassVar[type[BaseModel]] = SupermemorySettings
    env_aliases: ClassVar[dict[str, str]] = {"api_key": KEY_ENV, "base_url": "SUPERMEMORY_BASE_URL",
                                             "container_tag": "SUPERMEMORY_CONTAINER_TAG"}
    env_options = ("api_key", "base_url", "container_tag")

    def __init__(self, *, settings: SupermemorySettings | None = None, **options: Any) -> None:
        super().__init__(settings=settings, **options)
        self._turns: dict[str, int] = {}
        self._current_user = "default"
        self.service = HostedService(
            "Supermemory", key_env=KEY_ENV, url=self.base_url, classify=_classify, timeout=self.settings.api_timeout,
            on_answer=self.outbox.replay_soon,
        )

    # -- config ---------------------------------------------------------------------------------
    @classmethod
    def from_hermes_config(cls, path: str | Path = "~/.hermes/supermemory.json", **overrides: Any) -> SupermemoryProvider:
        """Build from a Hermes ``supermemory.json``; the key still comes from ``SUPERMEMORY_API_KEY``."""
        return cls._from_file({"config_file": str(path), **overrides})

    @property
    def base_url(self) -> str:
        return (self.settings.base_url or DEFAULT_BASE_URL).rstrip("/")

    def namespace_for(self, user_id: str | None) -> str:
        """The namespace (``^[a-zA-Z0-9_:-]+$``, at most 100 chars) for a user; distinct users stay distinct."""
        user = str(user_id or "default")
        raw = self.settings.container_tag.replace("{user_id}", user).replace("{user}", user)
        raw = raw.replace("{identity}", self.settings.identity)
        return hashed_id(raw, _NS_RE, max_len=100, keep=80, digest=12, sep="-", strip="_", empty="ironmem")

    # -- contract -------------------------------------------------------------------------------
    def initialize(self, session_id: str, **ctx: Any) -> None:
        user = str(ctx.get("user_id") or "default")
        with self._lock:
            self._users[session_id] = user
            self._current_user = user
            self._turns.setdefault(session_id, 0)
        self._attach_outbox(ctx)

    def tool_schemas(self) -> list[ToolSchema]:
        return [SUPERMEMORY_TOOLS[name] for name in self.settings.tools]

    # -- SDK ------------------------------------------------------------------------------------
    def _sm(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx
                from supermemory import Supermemory

                self._http = httpx.Client(timeout=httpx.Timeout(self.settings.api_timeout), follow_redirects=True)
                assert self.settings.api_key is not None
                self._client = Supermemory(
                    api_key=self.settings.api_key.get_secret_value(), base_url=self.base_url,
                    timeout=self.settings.api_timeout, max_retries=self.settings.max_retries,
                    headers={"x-sm-source": "ironmem"}, httpx_client=self._http,
                )
            return self._client

    def _ns(self, session_id: str | None = None, user: str | None = None) -> str:
        with self._lock:
            if user is None:
                user = self._users.get(session_id, self._current_user) if session_id else self._current_user
        return self.namespace_for(user)

    # -- operations -----------------------------------------------------------------------------
    def store(self, content: str, *, namespace: str | None = None, doc_id: str | None = None,
              metadata: dict[str, Any] | None = None) -> str:
        """Add ``content`` (to document ``doc_id`` when given: appended); returns the document id."""
        content = (content or "").strip()
        if not content:
            raise ToolArgumentError("'content' is empty: give the fact to remember")
        ns = namespace or self._ns()
        kwargs: dict[str, Any] = {"content": content, "metadata": {"sm_source": "ironmem", **(metadata or {})}}
        if doc_id:
            kwargs["id"] = doc_id
        if self.settings.entity_context:
            kwargs["supporting_context"] = self.settings.entity_context
        ref = self.service.call("store", lambda: self._sm().add(ns, **kwargs))
        return str(_need(ref, "id"))

    def search(self, query: str, *, namespace: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """``[{"id", "memory", "similarity"}]`` for ``query`` in the namespace."""
        query = clip_text(query, _MAX_QUERY_CHARS)
        if not query:
            return []
        ns = namespace or self._ns()

        def run() -> list[dict[str, Any]]:
            response = self._sm().search(ns, query=query, limit=limit or self.settings.max_recall_results,
                                         search_mode=self.settings.search_mode)
            out = []
            for item in _need(response, "results"):
                text = getattr(item, "memory", None) or getattr(item, "chunk", None)
                if text:
                    out.append({"id": getattr(item, "id", ""), "memory": text,
                                "similarity": getattr(item, "similarity", None)})
            return out

        return self.service.call("search", run)

    def profile(self, *, namespace: str | None = None) -> dict[str, list[str]]:
        ns = namespace or self._ns()

        def run() -> dict[str, list[str]]:
            prof = _need(self._sm().profile(ns), "profile")
            return {kind: [str(getattr(f, "memory", "")) for f in (getattr(prof, kind, None) or [])
                           if getattr(f, "memory", "")] for kind in ("static", "dynamic")}

        return self.service.call("profile", run)

    def forget(self, memory_ids: list[str], *, namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or self._ns()
        result = self.service.call("forget", lambda: self._sm().memories.forget(ns, ids=memory_ids))
        errors = [{"id": getattr(e, "id", ""), "error": getattr(e, "error", "")} for e in (getattr(result, "errors", None) or [])]
        return {"count": getattr(result, "count", 0), "errors": errors}

    def probe(self) -> None:
        """One cheap authenticated request (the profile of the current namespace); raises on failure."""
        self.profile()

    # -- hooks ----------------------------------------------------------------------------------
    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        if not self.settings.auto_recall or not (query or "").strip():
            return []
        ns = self._ns(session_id)
        with self._lock:
            turn = self._turns.get(session_id, 0) + 1
            self._turns[session_id] = turn
        items: list[str] = []
        if turn == 1 or turn % self.settings.profile_frequency == 0:
            prof = self.profile(namespace=ns)
            if prof["static"]:
                items.append("[Supermemory profile] " + "; ".join(prof["static"]))
            if prof["dynamic"]:
                items.append("[Supermemory, recent] " + "; ".join(prof["dynamic"]))
        seen = {i.split("] ", 1)[-1] for i in items}
        for hit in self.search(query, namespace=ns):
            if hit["memory"] not in seen:
                items.append("[Supermemory] " + hit["memory"])
        return items

    def _doc_id(self, session_id: str) -> str:
        return hashed_id(f"ironmem-session-{session_id}", _DOC_RE, max_len=200, keep=180, digest=12, sep="-")

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        if not self.settings.auto_capture:
            return
        content = turn_text(user, assistant, ("user", "assistant"))
        if not content:
            return
        record = {"op": "store", "content": content, "namespace": self._ns(session_id),
                  "doc_id": self._doc_id(session_id), "metadata": {"type": "conversation", "session_id": session_id}}
        self.outbox.write(record)

    def _replay(self, record: dict[str, Any]) -> Any:
        """The send function of a write kept as data (queued, or saved by an earlier run)."""
        op = record.get("op")
        if op == "store":
            return lambda: self.store(str(record["content"]), namespace=str(record["namespace"]),
                                      doc_id=record.get("doc_id"), metadata=dict(record.get("metadata") or {}))
        if op == "forget_text":
            return lambda: self._forget_text(str(record["content"]), namespace=str(record["namespace"]))
        log.error("supermemory: skipped a saved write of unknown kind %r", op)
        return lambda: None

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        if not self.settings.mirror_builtin or not (content or "").strip():
            return
        ns = self._ns()
        if action in ("add", "replace"):
            record: dict[str, Any] = {"op": "store", "content": content, "namespace": ns, "doc_id": None,
                                      "metadata": {"type": "explicit_memory", "target": target}}
        elif action == "remove":
            record = {"op": "forget_text", "content": content, "namespace": ns}
        else:
            return
        self.outbox.write(record)

    def _forget_text(self, content: str, *, namespace: str) -> int:
        """Forget the memories whose text is exactly ``content`` (a note removed from the built-in memory)."""
        text = content.strip()
        ids = [h["id"] for h in self.search(text, namespace=namespace, limit=20) if h["memory"].strip() == text and h["id"]]
        if ids:
            self.forget(ids, namespace=namespace)
        return len(ids)

    def _forget_session(self, session_id: str) -> None:
        super()._forget_session(session_id)
        self._turns.pop(session_id, None)

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        if name == "supermemory_search":
            return search_result(args, self.settings.max_recall_results, lambda q, n: self.search(q, limit=n))
        if name == "supermemory_store":
            content = args.get("content")
            if not isinstance(content, str) or not content.strip():
                return _err("'content' is required: the fact to remember")
            doc = self.store(content, metadata={"type": "explicit_memory"})
            return _ok(saved=True, id=doc, preview=clip_text(content, 80))
        if name == "supermemory_forget":
            return self._forget_tool(args)
        if name == "supermemory_profile":
            return _ok(**self.profile())
        return _err(f"unknown tool {name!r}")

    def _forget_tool(self, args: dict[str, Any]) -> str:
        memory_id, query = args.get("id"), args.get("query")
        if memory_id is not None and (not isinstance(memory_id, str) or not memory_id.strip()):
            return _err("'id' must be a memory id from a supermemory_search result")
        if query is not None and not isinstance(query, str):
            return _err("'query' must be a string")
        if not memory_id and not (query or "").strip():
            return _err("give 'id' (from a search result) or 'query' (the memory to forget)")
        if not memory_id:
            hits = self.search(str(query), limit=1)
            if not hits:
                return _err(f"no memory matches {query!r}; nothing was forgotten")
            memory_id = hits[0]["id"]
            forgotten_text = hits[0]["memory"]
        else:
            forgotten_text = None
        result = self.forget([str(memory_id).strip()])
        if result["errors"] or not result["count"]:
            reason = result["errors"][0]["error"] if result["errors"] else "not found"
            return _err(f"could not forget {memory_id!r}: {reason}")
        return _ok(forgotten=memory_id, **({"memory": forgotten_text} if forgotten_text else {}))

    # -- status ---------------------------------------------------------------------------------
    def _config_info(self) -> dict[str, Any]:
        s = self.settings
        return {"container_tag": s.container_tag, "namespace": self._ns(), "auto_recall": s.auto_recall,
                "auto_capture": s.auto_capture, "search_mode": s.search_mode, "tools": list(s.tools)}

    def __repr__(self) -> str:
        return f"<SupermemoryProvider url={self.base_url!r} container_tag={self.settings.container_tag!r}>"
