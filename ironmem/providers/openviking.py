"""OpenViking as ironmem's external provider: a client of a running OpenViking server (HTTP API, ``httpx``).

Install with ``pip install 'ironmem[openviking]'`` (the client needs only httpx). The server (``openviking``
0.5.2, AGPL-3.0) runs on its own, by default on ``127.0.0.1:1933``; see ``docs/providers/openviking.md`` for a
local server with local storage and a local embedding endpoint.

What ironmem does with it (all of it works without an LLM on the server):

- memories are files under the user's memory folder, ``viking://user/<user>/memories/ironmem/`` by default
  (``memory_root``): ``sync_turn`` writes each exchange there (``content/write``, ``mode: create``), built-in
  ``memory`` additions are mirrored there, and the ``viking_remember`` tool writes there too.
- ``prefetch`` runs ``search/find`` (vector search with the server's embedder) over that folder and returns the
  matching files' text.
- tools: ``viking_search``, ``viking_read``, ``viking_browse``, ``viking_remember``, ``viking_forget`` (Hermes's
  names). ``viking_forget`` deletes one memory file, only inside the memory folder. ``viking_add_resource``
  (ingesting URLs and documents) is not offered: it fetches from the network and its parsing needs a VLM.
- ``session_commit: true`` also sends each turn to an OpenViking session and commits it at session end, which
  lets the server's own memory extraction run; that extraction needs an LLM (VLM) configured on the server.
- turn files, mirrored additions and session messages go through the provider's outbox: while the server is down
  they wait, in order (saved under ``<home>/openviking/``), and are sent as soon as it answers again.

Config: the ``openviking`` section takes Hermes's keys (``endpoint``/``url``, ``api_key``, ``account``,
``user``, ``agent``/``actor_peer_id``). The design article describes keys ``db_path``, ``embedding_model`` and
``collection`` (a sqlite-vec store): OpenViking 0.5.2 is a server and has none of them. ``collection`` maps to
the folder under the memory root; ``db_path`` and ``embedding_model`` are server settings (``storage.workspace``
and ``embedding.dense.model`` in ``ov.conf``) and are refused with that explanation.

Example:
    >>> provider = OpenVikingProvider(url="http://127.0.0.1:1933")  # cheap: no request is made
    >>> [tool.name for tool in provider.tool_schemas()][:2]
    ['viking_search', 'viking_read']
    >>> provider.memory_root("alice")
    'viking://user/alice/memories/ironmem'
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.errors import ProviderUnavailableError
from ..core.provider import ToolSchema
from ..core.security import redact_secrets
from ._base import ProviderBase, ServerErrors, hashed_id, http_url, merged_settings, turn_text
from ._tools import MAX_LIMIT, ToolArgumentError, run_tool, search_result, search_schema
from ._tools import err as _err
from ._tools import ok as _ok

__all__ = ["OpenVikingProvider", "OpenVikingSettings", "OpenVikingUnavailableError"]

log = logging.getLogger("ironmem.providers.openviking")

DEFAULT_URL = "http://127.0.0.1:1933"
_SAFE = re.compile(r"[^A-Za-z0-9_\-]+")
_URI = re.compile(r"^viking://[^\s?#]+$")

SEARCH_TOOL = search_schema(
    "viking_search", "Semantic search of long-term memory (OpenViking) for facts about the user and past conversations."
)
READ_TOOL = ToolSchema(
    name="viking_read",
    description="Read the full text at a viking:// URI that viking_search or viking_browse returned.",
    parameters={
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "A viking:// file URI."}},
        "required": ["uri"],
    },
)
BROWSE_TOOL = ToolSchema(
    name="viking_browse",
    description="List the memory files and folders under a viking:// URI (default: your memory folder).",
    parameters={
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "A viking:// folder URI (optional)."}},
    },
)
REMEMBER_TOOL = ToolSchema(
    name="viking_remember",
    description="Store a fact in long-term memory (OpenViking) so later conversations can recall it.",
    parameters={
        "type": "object",
        "properties": {"content": {"type": "string", "description": "The fact to remember, in a sentence or two."}},
        "required": ["content"],
    },
)
FORGET_TOOL = ToolSchema(
    name="viking_forget",
    description="Delete one memory file by its viking:// URI (from viking_search); only memory files can be deleted.",
    parameters={
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "The viking:// URI of the memory file."}},
        "required": ["uri"],
    },
)
ALL_TOOLS = (SEARCH_TOOL, READ_TOOL, BROWSE_TOOL, REMEMBER_TOOL, FORGET_TOOL)


class OpenVikingUnavailableError(ProviderUnavailableError):
    """The OpenViking server could not be reached or refused a call; the message says which and what to do."""


_ERRORS = ServerErrors("OpenViking", OpenVikingUnavailableError, "openviking.url", "docs/providers/openviking.md",
                       frozenset({"ConnectError", "RemoteProtocolError", "ReadError", "WriteError"}))


# --------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------
_ARTICLE_SERVER_KEYS = {
    "db_path": "where OpenViking stores data is the server's 'storage.workspace' in ov.conf",
    "embedding_model": "the embedder is the server's 'embedding.dense' (provider, model, api_base) in ov.conf",
}


class OpenVikingSettings(BaseModel):
    """The ``openviking`` section of ``config.yaml`` (Hermes's keys where they map; the article's keys explained).

    Example:
        >>> OpenVikingSettings.model_validate({"endpoint": "http://127.0.0.1:1933", "collection": "notes"}).folder
        'notes'
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(DEFAULT_URL, description="Server URL (Hermes: OPENVIKING_URL / endpoint)")
    api_key: SecretStr | None = Field(None, description="User/admin key, or a trusted-mode root key")
    account: str = Field("default", description="Tenant account (local and trusted mode)")
    user: str | None = Field(None, description="Tenant user; default: the session's user_id, else 'default'")
    actor_peer_id: str = Field("ironmem", description="Agent id sent as X-OpenViking-Actor-Peer")
    folder: str = Field("ironmem", min_length=1, description="Folder of ironmem's files under the memory root")
    memory_root: str = Field("viking://user/{user}/memories", description="Where memories live; {user} placeholder")
    timeout: float = Field(30.0, gt=0, description="Seconds one HTTP call may take")
    recall_limit: int = Field(5, ge=1, le=MAX_LIMIT, description="Files recalled per prefetch")
    score_threshold: float | None = Field(None, description="Minimum similarity for recall (server default if unset)")
    auto_recall: bool = Field(True, description="Recall before each turn (prefetch)")
    sync_turns: bool = Field(True, description="Write each finished turn as a memory file")
    mirror_builtin: bool = Field(True, description="Write the built-in memory tool's additions too")
    session_commit: bool = Field(False, description="Also send turns to an OpenViking session, commit at the end "
                                                    "(server-side extraction needs an LLM)")
    wait_indexed: bool = Field(True, description="Writes wait until the file is searchable")
    max_read_chars: int = Field(4000, gt=0, description="viking_read returns at most this many characters")

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key, why in _ARTICLE_SERVER_KEYS.items():
            if key in data:
                raise ValueError(
                    f"'{key}' does not exist in OpenViking 0.5.2, which is a server: {why}. Remove it from the "
                    "openviking section (see docs/providers/openviking.md)")
        for alias, key in (("endpoint", "url"), ("agent", "actor_peer_id"), ("collection", "folder")):
            if alias in data:
                if key in data and data[key] != data[alias]:
                    raise ValueError(f"'{alias}' and '{key}' are the same setting; keep one")
                data[key] = data.pop(alias)
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value, "url", DEFAULT_URL)

    @field_validator("memory_root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not value.startswith("viking://"):
            raise ValueError(f"memory_root must be a viking:// URI, got {value!r}")
        try:
            value.format(user="u")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"memory_root may use the {{user}} placeholder only ({exc})") from exc
        return value.rstrip("/")

    @field_validator("folder")
    @classmethod
    def _folder(cls, value: str) -> str:
        clean = value.strip("/")
        if not clean or ".." in clean.split("/") or not re.fullmatch(r"[A-Za-z0-9_\-/.]+", clean):
            raise ValueError(f"folder (collection) must be a plain folder name such as 'ironmem', got {value!r}")
        return clean


# --------------------------------------------------------------------------------------------------
# The provider
# --------------------------------------------------------------------------------------------------
class OpenVikingProvider(ProviderBase):
    """OpenViking memory over its HTTP API: recall with ``search/find``, turns and facts as memory files.

    Example:
        >>> OpenVikingProvider(folder="team").memory_root("bob")
        'viking://user/bob/memories/team'
    """

    name = "openviking"
    requires = ("httpx", "httpx is not installed: pip install 'ironmem[openviking]'")
    settings_model: ClassVar[type[BaseModel]] = OpenVikingSettings
    env_aliases: ClassVar[dict[str, str]] = {
        "url": "OPENVIKING_URL",
        "api_key": "OPENVIKING_API_KEY",
        "account": "OPENVIKING_ACCOUNT",
        "user": "OPENVIKING_USER",
        "actor_peer_id": "OPENVIKING_ACTOR_PEER_ID",
    }

    def __init__(self, settings: OpenVikingSettings | None = None, **overrides: Any) -> None:
        self.settings = merged_settings(OpenVikingSettings, settings, overrides)
        self._client: Any = None
        self._lock = threading.RLock()
        self._users: dict[str, str] = {}
        self._current_session = ""
        self._sessions: dict[str, str] = {}  # ironmem session -> OpenViking session id
        self._closed = False
        self._open_outbox(self._send)

    @classmethod
    def from_config(cls, settings: OpenVikingSettings, *, home: Path) -> OpenVikingProvider:
        """Build from the ``openviking`` config section (no request is made until the first session)."""
        return cls(settings)

    # -- contract -------------------------------------------------------------------------------
    def initialize(self, session_id: str, **ctx: Any) -> None:
        user = str(self.settings.user or ctx.get("user_id") or "default")
        with self._lock:
            self._users[session_id] = user
            self._current_session = session_id
        self._attach_outbox(ctx)

    def tool_schemas(self) -> list[ToolSchema]:
        return list(ALL_TOOLS)

    def system_prompt_block(self) -> str:
        return ("Long-term memory (OpenViking): viking_search finds past facts, viking_read opens one, "
                "viking_remember stores a durable fact the user shares.")

    # -- scope ----------------------------------------------------------------------------------
    def user_of(self, session_id: str = "") -> str:
        with self._lock:
            user = self._users.get(session_id) or self._users.get(self._current_session)
        return _safe(user or self.settings.user or "default")

    def memory_root(self, user: str = "default") -> str:
        """The folder holding ironmem's memory files for ``user``."""
        return f"{self.settings.memory_root.format(user=_safe(user))}/{self.settings.folder}"

    def _in_scope(self, uri: str, session_id: str = "") -> bool:
        root = self.memory_root(self.user_of(session_id))
        return uri == root or uri.startswith(root + "/")

    def _readable(self, uri: str, session_id: str) -> str:
        """``uri`` if this user may read it: anything but another user's ``viking://user/<name>/`` space."""
        if uri.startswith("viking://user/"):
            own = f"viking://user/{self.user_of(session_id)}"
            if not (uri == own or uri.startswith(own + "/")):
                raise ToolArgumentError(f"{uri!r} belongs to another user; you can read under {own}/ and shared "
                                        "resources (viking://resources/...)")
        return uri

    # -- HTTP -----------------------------------------------------------------------------------
    def _headers(self, user: str) -> dict[str, str]:
        """Identity headers: account and user in local / trusted mode; with a user key the server derives them."""
        headers = {"X-OpenViking-Actor-Peer": self.settings.actor_peer_id, "User-Agent": "ironmem"}
        if self.settings.api_key is None or self.settings.user:
            headers.update({"X-OpenViking-Account": self.settings.account, "X-OpenViking-User": user})
        if self.settings.api_key is not None:
            headers["X-API-Key"] = self.settings.api_key.get_secret_value()
        return headers

    def _http(self) -> Any:
        with self._lock:
            if self._closed:
                raise OpenVikingUnavailableError("the OpenViking provider was shut down")
            if self._client is None:
                import httpx

                self._client = httpx.Client(base_url=self.settings.url, timeout=self.settings.timeout)
            return self._client

    def _request(self, method: str, path: str, what: str, *, user: str, **kwargs: Any) -> Any:
        try:
            response = self._http().request(method, path, headers=self._headers(user), **kwargs)
        except Exception as exc:
            raise self._explain(what, exc) from exc
        result = self._result(response, what)
        self.outbox.replay_soon()  # the server answers: send what waits for it
        return result

    def _result(self, response: Any, what: str) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"message": response.text[:300]}}
        if response.status_code >= 400 or (isinstance(body, dict) and body.get("status") == "error"):
            error = body.get("error") if isinstance(body, dict) else None
            message = (error or {}).get("message") if isinstance(error, dict) else (error or body)
            raise _ERRORS.refused(what, response.status_code, message)
        return body.get("result") if isinstance(body, dict) and "result" in body else body

    def _explain(self, what: str, exc: BaseException) -> BaseException:
        return _ERRORS.explain(what, exc, url=self.settings.url, timeout=self.settings.timeout)

    # -- operations -----------------------------------------------------------------------------
    def _write_record(self, content: str, *, session_id: str, kind: str) -> dict[str, Any]:
        """A new memory file as a JSON record (what the outbox queues, saves and replays); secrets masked here."""
        user = self.user_of(session_id)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        uri = f"{self.memory_root(user)}/{kind}/{stamp}-{uuid.uuid4().hex[:8]}.md"
        return {"op": "write", "user": user, "uri": uri, "content": redact_secrets(content)}

    def _send(self, record: dict[str, Any]) -> Any:
        """Send one queued record: a memory file, a session message or a session commit (the outbox's sender)."""
        user, op = str(record["user"]), record.get("op")
        if op == "write":
            body = {"uri": record["uri"], "content": record["content"], "mode": "create",
                    "wait": self.settings.wait_indexed}
            return self._request("POST", "/api/v1/content/write", "write", user=user, json=body)
        if op == "message":
            ov_session = self._session_for(str(record["session"]), user)
            return self._request("POST", f"/api/v1/sessions/{ov_session}/messages", "add_message", user=user,
                                 json={"role": record["role"], "content": record["content"]})
        if op == "commit":
            with self._lock:
                committed: str | None = self._sessions.pop(str(record["session"]), None)
            if committed is not None:
                self._request("POST", f"/api/v1/sessions/{committed}/commit", "commit", user=user, json={})
            return None
        log.error("openviking: skipped a queued write of unknown kind %r", op)
        return None

    def write(self, content: str, *, session_id: str = "", kind: str = "facts") -> str:
        """Write ``content`` as a new memory file now (not queued); returns its URI."""
        record = self._write_record(content, session_id=session_id, kind=kind)
        result = self._send(record)
        return str((result or {}).get("uri") or record["uri"]) if isinstance(result, dict) else str(record["uri"])

    def _find_body(self, query: str, user: str, limit: int) -> dict[str, Any]:
        body: dict[str, Any] = {"query": redact_secrets(query)[:2000], "target_uri": self.memory_root(user),
                                "limit": limit, "read_content": True}
        if self.settings.score_threshold is not None:
            body["score_threshold"] = self.settings.score_threshold
        return body

    def _hits(self, result: Any, limit: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not isinstance(result, dict):
            return out
        for group in ("memories", "resources", "skills"):
            for item in result.get(group) or []:
                if not isinstance(item, dict):
                    continue
                text = item.get("content") or item.get("abstract") or item.get("overview") or ""
                if isinstance(text, str) and text.strip():
                    out.append({"uri": item.get("uri"), "text": text.strip(), "score": item.get("score")})
        out.sort(key=lambda h: -(h["score"] or 0.0))
        return out[:limit]

    def find(self, query: str, *, session_id: str = "", limit: int | None = None) -> list[dict[str, Any]]:
        """Memory files matching ``query``: ``[{uri, text, score}]``, best first."""
        user, n = self.user_of(session_id), limit or self.settings.recall_limit
        result = self._request("POST", "/api/v1/search/find", "find", user=user, json=self._find_body(query, user, n))
        return self._hits(result, n)

    def read(self, uri: str, *, session_id: str = "") -> str:
        user = self.user_of(session_id)
        result = self._request("GET", "/api/v1/content/read", "read", user=user, params={"uri": uri})
        return result if isinstance(result, str) else str(result or "")

    def browse(self, uri: str, *, session_id: str = "") -> list[dict[str, Any]]:
        user = self.user_of(session_id)
        result = self._request("GET", "/api/v1/fs/ls", "browse", user=user, params={"uri": uri, "node_limit": 200})
        items = result if isinstance(result, list) else (result or {}).get("items", []) if isinstance(result, dict) else []
        return [{"uri": i.get("uri"), "dir": bool(i.get("isDir", i.get("is_dir", False))),
                 "abstract": (i.get("abstract") or "")[:200]} for i in items if isinstance(i, dict)]

    def forget(self, uri: str, *, session_id: str = "") -> None:
        self._request("DELETE", "/api/v1/fs", "forget", user=self.user_of(session_id), params={"uri": uri})

    # -- hooks ----------------------------------------------------------------------------------
    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        if not self.settings.auto_recall or not (query or "").strip():
            return []
        return [h["text"] for h in self.find(query, session_id=session_id)]

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        text = turn_text(user, assistant, ("User", "Assistant"))
        if not text:
            return
        records = []
        if self.settings.sync_turns:
            records.append(self._write_record(text, session_id=session_id,
                                              kind=f"turns/{_safe(session_id) or 'default'}"))
        if self.settings.session_commit:
            who = self.user_of(session_id)
            records += [{"op": "message", "user": who, "session": session_id, "role": role,
                         "content": redact_secrets(content)}
                        for role, content in (("user", user), ("assistant", assistant)) if (content or "").strip()]
        for record in records:
            self.outbox.write(record)

    def _session_for(self, session_id: str, user: str) -> str:
        with self._lock:
            if session_id not in self._sessions:
                result = self._request("POST", "/api/v1/sessions", "create_session", user=user, json={})
                sid = (result or {}).get("session_id") if isinstance(result, dict) else None
                self._sessions[session_id] = str(sid or uuid.uuid4().hex)
            return self._sessions[session_id]

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        if self.settings.mirror_builtin and action == "add" and (content or "").strip():
            self.outbox.write(self._write_record(content, session_id="", kind="profile" if target == "user" else "notes"))

    def on_session_end(self, session_id: str) -> None:
        try:
            if self.settings.session_commit:  # after the session's messages, in the outbox's order
                self.outbox.write({"op": "commit", "user": self.user_of(session_id), "session": session_id})
            else:
                self.outbox.drain()
        finally:
            with self._lock:
                self._users.pop(session_id, None)

    # -- tools ----------------------------------------------------------------------------------
    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        # Every failure is reported as "<tool> failed: <message>": the server's errors are explained already.
        return run_tool(name, args, lambda a: self._tool(name, a), log=log, label="openviking", expected=(Exception,))

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        session = self._current_session
        if name == SEARCH_TOOL.name:
            return search_result(args, self.settings.recall_limit, lambda q, n: self.find(q, session_id=session, limit=n))
        if name == REMEMBER_TOOL.name:
            content = args.get("content")
            if not isinstance(content, str) or not content.strip():
                return _err("'content' is required: the fact to remember")
            return _ok(uri=self.write(content, session_id=session))
        if name == READ_TOOL.name:
            uri = self._readable(_uri_arg(args, "uri", required=True), session)
            text = self.read(uri, session_id=session)
            limit = self.settings.max_read_chars
            return _ok(uri=uri, content=text[:limit], truncated=len(text) > limit)
        if name == BROWSE_TOOL.name:
            uri = self._readable(_uri_arg(args, "uri", required=False) or self.memory_root(self.user_of(session)),
                                 session)
            return _ok(uri=uri, items=self.browse(uri, session_id=session))
        if name == FORGET_TOOL.name:
            uri = _uri_arg(args, "uri", required=True)
            if not self._in_scope(uri, session) or uri == self.memory_root(self.user_of(session)) \
                    or not uri.endswith(".md"):
                return _err(f"viking_forget deletes one memory file under {self.memory_root(self.user_of(session))}"
                            f"/ (a .md URI from viking_search); {uri!r} is not one")
            self.forget(uri, session_id=session)
            return _ok(forgotten=uri)
        return _err(f"unknown tool {name!r}; OpenViking provides {', '.join(t.name for t in ALL_TOOLS)}")

    # -- health -----------------------------------------------------------------------------------
    def probe(self) -> None:
        """One cheap request (``/health``); raises :class:`OpenVikingUnavailableError` saying why."""
        self._request("GET", "/health", "a health check", user=self.user_of())

    def health(self) -> dict[str, Any]:
        """Ask the server's ``/health``: ``{"ok": True, ...}`` or ``{"ok": False, "error": ...}``."""
        try:
            response = self._http().get("/health", headers=self._headers(self.user_of()))
            ok = response.status_code == 200
            return {"ok": ok, "url": self.settings.url, **({} if ok else {"error": f"HTTP {response.status_code}"})}
        except Exception as exc:
            return {"ok": False, "url": self.settings.url, "error": str(self._explain("a health check", exc))}

    def status(self) -> dict[str, Any]:
        """What this provider is configured to do (no network)."""
        return {"url": self.settings.url, "account": self.settings.account,
                "memory_root": self.memory_root(self.user_of()), "session_commit": self.settings.session_commit}

    def shutdown(self) -> None:
        self.outbox.close()
        with self._lock:
            client, self._client = self._client, None
            self._closed = True
        if client is not None:
            client.close()

    def __repr__(self) -> str:
        return f"<OpenVikingProvider url={self.settings.url!r} root={self.settings.memory_root!r}>"


def _safe(value: str) -> str:
    """A path-safe form of a user or session id (odd or long ids keep a short hash, so they stay distinct)."""
    return hashed_id(value or "", _SAFE, max_len=48, keep=36, digest=10, strip="_") or "default"


def _uri_arg(args: dict[str, Any], key: str, *, required: bool) -> str:
    value = args.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not _URI.match(value.strip()):
        raise ToolArgumentError(f"'{key}' must be a viking:// URI (from viking_search or viking_browse)")
    return value.strip()
