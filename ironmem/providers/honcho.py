"""Honcho (Plastic Labs) as ironmem's external provider, on the official ``honcho-ai`` SDK (2.7).

Install with ``pip install 'ironmem[honcho]'`` and set ``HONCHO_API_KEY`` (Honcho Cloud), or give ``base_url`` of
a self-hosted server (a ``localhost`` server may run without a key).

How ironmem's hooks map to Honcho (API v3):

- one Honcho **workspace** (``workspace``, default ``ironmem``); the user is a **peer** named after the session's
  ``user_id`` (``peer_name`` when a session has none), the agent is the peer ``ai_peer``; an ironmem session is a
  Honcho **session** of the same id.
- ``prefetch``: the user's past messages matching the turn (``peer.search``) and Honcho's model of the user
  focused on the turn (``peer.context(search_query=...)``: representation and peer card).
- ``sync_turn``: the exchange is added to the Honcho session as two messages (user peer, AI peer); messages longer
  than ``message_max_chars`` are split. A write that fails stays queued and is sent before the next one.
- ``on_memory_write``: a note the agent saves with the built-in ``memory`` tool is mirrored as a Honcho
  *conclusion* (about the user for ``USER.md``, about the agent for ``MEMORY.md``).
- tools (``tools`` chooses; default ``honcho_search``, ``honcho_profile``, ``honcho_conclude``): the names of
  Hermes's Honcho plugin. ``honcho_context`` and ``honcho_reasoning`` (which asks Honcho's own LLM) are
  available on request.

Failures never stop a turn: a bad key (401), rate limiting (429, honouring ``Retry-After``), server errors,
timeouts and answers that do not parse are reported to the manager, which shows them in ``status``.

Example:
    >>> provider = HonchoProvider(api_key="hch-short", base_url="http://127.0.0.1:9")  # nothing is sent yet
    >>> [tool.name for tool in provider.tool_schemas()]
    ['honcho_search', 'honcho_profile', 'honcho_conclude']
    >>> provider.status_info()["config"]["api_key"]
    '****'
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.provider import ToolSchema
from ._base import hashed_id
from ._hosted import (
    Failure,
    HostedProvider,
    HostedService,
    clip_text,
    is_local_url,
    known_tools,
    merge_hermes_file,
)
from ._tools import ToolArgumentError, search_result, search_schema
from ._tools import err as _err
from ._tools import ok as _ok

__all__ = ["DEFAULT_HONCHO_TOOLS", "HONCHO_TOOLS", "HonchoProvider", "HonchoSettings"]

log = logging.getLogger(__name__)

KEY_ENV = "HONCHO_API_KEY"
DEFAULT_BASE_URL = "https://api.honcho.dev"
_ID_RE = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_QUERY_CHARS = 2000

SEARCH_TOOL = search_schema(
    "honcho_search", "Search past conversations with the user (Honcho) for messages about a topic."
)
PROFILE_TOOL = ToolSchema(
    "honcho_profile", "The user's profile card from Honcho: short key facts about who they are.",
    {"type": "object", "properties": {}},
)
CONTEXT_TOOL = ToolSchema(
    "honcho_context",
    "Honcho's model of the user (representation and profile card), optionally focused on a topic.",
    {"type": "object", "properties": {"query": {"type": "string", "description": "Optional topic to focus on."}}},
)
REASONING_TOOL = ToolSchema(
    "honcho_reasoning",
    "Ask Honcho a question about the user; Honcho's own LLM answers from all it knows (slower).",
    {"type": "object", "properties": {"query": {"type": "string", "description": "The question about the user."}},
     "required": ["query"]},
)
CONCLUDE_TOOL = ToolSchema(
    "honcho_conclude",
    "Record a lasting conclusion about the user in Honcho, or delete one by its id.",
    {"type": "object", "properties": {
        "content": {"type": "string", "description": "The conclusion to record, one short sentence."},
        "delete_id": {"type": "string", "description": "Id of a conclusion to delete instead."},
    }},
)
#: Every tool the provider can expose, by name.
HONCHO_TOOLS: dict[str, ToolSchema] = {t.name: t for t in (SEARCH_TOOL, PROFILE_TOOL, CONTEXT_TOOL, REASONING_TOOL,
                                                             CONCLUDE_TOOL)}
#: Exposed unless ``tools`` says otherwise: no tool that runs Honcho's LLM, three small schemas.
DEFAULT_HONCHO_TOOLS = ("honcho_search", "honcho_profile", "honcho_conclude")

# honcho.json key (Hermes) -> setting name. Keys not listed are reported as ignored by `status`.
_HERMES_KEYS = {
    "apiKey": "api_key", "baseUrl": "base_url", "environment": "environment", "workspace": "workspace",
    "peerName": "peer_name", "aiPeer": "ai_peer", "timeout": "timeout", "requestTimeout": "timeout",
    "recallMode": "recall_mode", "saveMessages": "save_messages", "messageMaxChars": "message_max_chars",
    "contextTokens": "context_tokens", "enabled": "enabled_in_file",
}


def _recall_mode(value: Any) -> Any:
    return "hybrid" if value == "auto" else value


def safe_id(value: str, *, what: str = "id") -> str:
    """A Honcho id (``^[a-zA-Z0-9_-]+$``, at most 512 chars) for any text; distinct inputs stay distinct.

    Example:
        >>> safe_id("alice"), safe_id("bob@example.com")[:16]
        ('alice', 'bob_example_com-')
    """
    text = str(value or "").strip()
    if not text:
        raise ValueError(f"empty {what}")
    return hashed_id(text, _ID_RE, max_len=200, keep=180, digest=12, sep="-")


class HonchoSettings(BaseModel):
    """The ``honcho`` section of ``config.yaml``; Hermes's ``honcho.json`` keys are accepted too.

    ``config_file`` names a Hermes ``honcho.json``: its root, overridden by its ``hosts.<host>`` block, fills every
    setting the section does not give. ``api_key`` also comes from ``HONCHO_API_KEY``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_key: SecretStr | None = Field(None, alias="apiKey", description="Honcho API key; or HONCHO_API_KEY")
    base_url: str | None = Field(None, alias="baseUrl", description="Honcho server URL (self-hosted); default Honcho Cloud")
    environment: Literal["production", "local"] | None = Field(None, description="SDK environment when no base_url")
    workspace: str = Field("ironmem", min_length=1, description="Honcho workspace id")
    peer_name: str = Field("user", alias="peerName", min_length=1, description="user peer when a session has no user_id")
    ai_peer: str = Field("ironmem", alias="aiPeer", min_length=1, description="the agent's peer id")
    timeout: float = Field(5.0, gt=0, le=120, description="seconds per HTTP request")
    max_retries: int = Field(0, ge=0, le=5, description="SDK retries (0: ironmem queues failed writes instead)")
    recall_mode: Literal["hybrid", "context", "tools"] = Field(
        "hybrid", alias="recallMode", description="hybrid: recall + tools; context: recall only; tools: tools only"
    )
    recall: list[Literal["search", "context"]] = Field(
        default=["search", "context"], description="what prefetch asks Honcho for"
    )
    top_k: int = Field(5, ge=1, le=20, description="messages / conclusions recalled per turn")
    context_tokens: int | None = Field(None, alias="contextTokens", gt=0, description="cap recall at ~4 chars/token")
    save_messages: bool = Field(True, alias="saveMessages", description="send each finished exchange to Honcho")
    message_max_chars: int = Field(25000, alias="messageMaxChars", ge=100, le=25000, description="split longer messages")
    mirror_builtin: bool = Field(True, description="mirror built-in memory writes as Honcho conclusions")
    tools: list[str] = Field(default_factory=lambda: list(DEFAULT_HONCHO_TOOLS), description="tools to expose")
    max_pending_writes: int = Field(200, ge=1, description="failed writes kept for a retry")
    config_file: str | None = Field(None, description="a Hermes honcho.json to read settings from")
    host: str = Field("hermes", description="which hosts.<host> block of honcho.json applies")
    enabled_in_file: bool | None = Field(None, description="honcho.json's 'enabled' (informational)")
    ignored_keys: list[str] = Field(default_factory=list, description="honcho.json keys ironmem does not use")

    @model_validator(mode="before")
    @classmethod
    def _from_hermes_file(cls, data: Any) -> Any:
        return merge_hermes_file(data, section="honcho", known=_HERMES_KEYS, host_key="hermes",
                                 renames={"recall_mode": _recall_mode})

    @field_validator("recall_mode", mode="before")
    @classmethod
    def _legacy_mode(cls, value: Any) -> Any:
        return _recall_mode(value)

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, value: list[str]) -> list[str]:
        return known_tools(value, HONCHO_TOOLS, "Honcho")

    @model_validator(mode="after")
    def _need_key(self) -> HonchoSettings:
        if self.api_key is None and not is_local_url(self.base_url) and self.environment != "local":
            raise ValueError(
                f"honcho.api_key is not set: set the environment variable {KEY_ENV} (or IRONMEM_HONCHO_API_KEY), "
                "or apiKey in honcho.json. A self-hosted server on localhost needs none: set base_url"
            )
        return self


def _classify(exc: BaseException) -> Failure:
    """Map honcho-ai / httpx / pydantic exceptions to a :class:`Failure`."""
    from honcho.http import exceptions as hx
    from pydantic import ValidationError

    detail = str(getattr(exc, "message", "") or exc)
    if isinstance(exc, (hx.AuthenticationError, hx.PermissionDeniedError)):
        return Failure("auth", exc.status, detail=detail)
    if isinstance(exc, hx.RateLimitError):
        return Failure("rate_limited", 429, exc.retry_after, detail)
    if isinstance(exc, hx.ServerError):
        return Failure("server", exc.status, detail=detail)
    if isinstance(exc, hx.TimeoutError):
        return Failure("timeout", detail=detail)
    if isinstance(exc, hx.ConnectionError):
        if isinstance(exc.__cause__, ValueError):  # the body was not JSON
            return Failure("malformed", detail=detail)
        return Failure("connection", detail=detail)
    if isinstance(exc, hx.APIError):
        return Failure("client", exc.status, detail=detail)
    if isinstance(exc, (ValidationError, ValueError, KeyError, TypeError)):
        return Failure("malformed", detail=f"{type(exc).__name__}: {detail}")
    return Failure("error", detail=f"{type(exc).__name__}: {detail}")


class HonchoProvider(HostedProvider[HonchoSettings]):
    """Honcho memory through the official SDK: recall from the user's messages and Honcho's model of the user.

    Args:
        api_key: Honcho API key; default ``$HONCHO_API_KEY``. A missing key is a :class:`ConfigError` naming the
            variable, unless ``base_url`` is a local server.
        base_url: a self-hosted Honcho server; default Honcho Cloud.
        workspace / peer_name / ai_peer: identities (see the module docstring).
        tools: the tool names to expose (default :data:`DEFAULT_HONCHO_TOOLS`).
        settings: a :class:`HonchoSettings` instead of keyword arguments.

    Example:
        >>> HonchoProvider(api_key="k" * 20, tools=["honcho_search"]).tool_schemas()[0].name
        'honcho_search'
    """

    name = "honcho"
    requires = ("honcho", "the honcho-ai SDK is not installed: pip install 'ironmem[honcho]'")
    settings_model: ClassVar[type[BaseModel]] = HonchoSettings
    env_aliases: ClassVar[dict[str, str]] = {"api_key": KEY_ENV, "base_url": "HONCHO_BASE_URL"}
    env_options = ("api_key",)

    def __init__(self, *, settings: HonchoSettings | None = None, **options: Any) -> None:
        super().__init__(settings=settings, **options)
        self._peers: dict[str, Any] = {}
        self._sessions: dict[str, Any] = {}
        self._current_user = safe_id(self.settings.peer_name, what="peer_name")
        self.service = HostedService(
            "Honcho", key_env=KEY_ENV, url=self.base_url, classify=_classify, timeout=self.settings.timeout,
            on_answer=self.outbox.replay_soon,
        )

    # -- config ---------------------------------------------------------------------------------
    @classmethod
    def from_hermes_config(cls, path: str | Path = "~/.hermes/honcho.json", *, host: str = "hermes",
                           **overrides: Any) -> HonchoProvider:
        """Build from a Hermes ``honcho.json`` (root values, overridden by ``hosts.<host>``, then ``overrides``)."""
        return cls._from_file({"config_file": str(path), "host": host, **overrides})

    @property
    def base_url(self) -> str:
        if self.settings.base_url:
            return self.settings.base_url.rstrip("/")
        if self.settings.environment == "local":
            return "http://localhost:8000"
        return DEFAULT_BASE_URL

    # -- contract -------------------------------------------------------------------------------
    def initialize(self, session_id: str, **ctx: Any) -> None:
        user = safe_id(str(ctx.get("user_id") or self.settings.peer_name), what="user_id")
        with self._lock:
            self._users[session_id] = user
            self._current_user = user
        self._attach_outbox(ctx)

    def tool_schemas(self) -> list[ToolSchema]:
        if self.settings.recall_mode == "context":
            return []
        return [HONCHO_TOOLS[name] for name in self.settings.tools]

    def system_prompt_block(self) -> str:
        return ""

    # -- SDK objects ----------------------------------------------------------------------------
    def _honcho(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx
                from honcho import Honcho

                self._http = httpx.Client(timeout=httpx.Timeout(self.settings.timeout))
                key = self.settings.api_key.get_secret_value() if self.settings.api_key else None
                self._client = Honcho(
                    api_key=key, base_url=self.base_url, workspace_id=safe_id(self.settings.workspace),
                    timeout=self.settings.timeout, max_retries=self.settings.max_retries, http_client=self._http,
                )
            return self._client

    def _peer(self, peer_id: str) -> Any:
        with self._lock:
            peer = self._peers.get(peer_id)
        if peer is None:
            peer = self.service.call("peer", lambda: self._honcho().peer(peer_id))
            with self._lock:
                self._peers[peer_id] = peer
        return peer

    def _session(self, session_id: str) -> Any:
        sid = safe_id(session_id, what="session_id")
        with self._lock:
            session = self._sessions.get(sid)
        if session is None:
            session = self.service.call("session", lambda: self._honcho().session(sid))
            with self._lock:
                self._sessions[sid] = session
        return session

    def _user(self, session_id: str | None = None) -> str:
        with self._lock:
            if session_id is not None and session_id in self._users:
                return self._users[session_id]
            return self._current_user

    @property
    def _ai(self) -> str:
        return safe_id(self.settings.ai_peer, what="ai_peer")

    # -- operations -----------------------------------------------------------------------------
    def search(self, query: str, *, user: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """The user's past messages matching ``query``: ``[{"content", "session_id", "created_at"}]``."""
        query = clip_text(query, _MAX_QUERY_CHARS)
        if not query:
            return []
        peer = self._peer(user or self._current_user)
        messages = self.service.call("search", lambda: peer.search(query, limit=limit or self.settings.top_k))
        return [{"content": m.content, "session_id": m.session_id, "created_at": str(m.created_at)}
                for m in messages if getattr(m, "content", "")]

    def context(self, query: str | None = None, *, user: str | None = None) -> dict[str, Any]:
        """Honcho's representation of the user and their peer card, optionally focused on ``query``."""
        peer = self._peer(user or self._current_user)
        kwargs: dict[str, Any] = {}
        if query and query.strip():
            kwargs = {"search_query": clip_text(query, _MAX_QUERY_CHARS), "search_top_k": self.settings.top_k}
        ctx = self.service.call("context", lambda: peer.context(**kwargs))
        return {"representation": ctx.representation or "", "peer_card": list(ctx.peer_card or [])}

    def profile(self, *, user: str | None = None) -> list[str]:
        peer = self._peer(user or self._current_user)
        return list(self.service.call("profile", peer.get_card) or [])

    def conclude(self, content: str, *, about: str | None = None, session_id: str | None = None) -> list[dict[str, Any]]:
        content = (content or "").strip()
        if not content:
            raise ToolArgumentError("'content' is empty: give the conclusion to record")
        ai = self._peer(self._ai)
        observed = about or self._current_user
        item: dict[str, Any] = {"content": content}
        if session_id:
            item["session_id"] = safe_id(session_id)
        created = self.service.call("conclude", lambda: ai.conclusions_of(observed).create([item]))
        return [{"id": c.id, "content": c.content} for c in created]

    def probe(self) -> None:
        """One cheap authenticated request (get-or-create the workspace); raises ExternalServiceError on failure."""
        self.service.call("probe", lambda: self._honcho().get_configuration())

    # -- hooks ----------------------------------------------------------------------------------
    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        if self.settings.recall_mode == "tools" or not (query or "").strip():
            return []
        user = self._user(session_id)
        items: list[str] = []
        if "context" in self.settings.recall:
            ctx = self.context(query, user=user)
            if ctx["peer_card"]:
                items.append("[Honcho profile] " + "; ".join(ctx["peer_card"]))
            if ctx["representation"].strip():
                items.append("[Honcho, about the user] " + ctx["representation"].strip())
        if "search" in self.settings.recall:
            for hit in self.search(query, user=user):
                items.append("[Honcho, past message] " + hit["content"])
        if self.settings.context_tokens:
            budget, kept, used = self.settings.context_tokens * 4, [], 0
            for item in items:
                if used + len(item) > budget:
                    break
                kept.append(item)
                used += len(item)
            items = kept
        return items

    def _chunks(self, text: str) -> list[str]:
        size = self.settings.message_max_chars
        text = (text or "").strip()
        return [text[i:i + size] for i in range(0, len(text), size)] if text else []

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        if not self.settings.save_messages:
            return
        user_peer, ai_peer = self._user(session_id), self._ai
        parts = [[user_peer, c] for c in self._chunks(user)] + [[ai_peer, c] for c in self._chunks(assistant)]
        if not parts:
            return
        record = {"op": "sync_turn", "session_id": session_id, "parts": parts}
        self.outbox.write(record)

    def _send_messages(self, session_id: str, parts: list[list[str]]) -> None:
        from honcho.api_types import MessageCreateParams

        session = self._session(session_id)
        messages = [MessageCreateParams(peer_id=peer, content=content) for peer, content in parts]
        for start in range(0, len(messages), 100):  # the API takes at most 100 messages per request
            session.add_messages(messages[start:start + 100])

    def _replay(self, record: dict[str, Any]) -> Any:
        """The send function of a write kept as data (queued, or saved by an earlier run)."""
        op = record.get("op")
        if op == "sync_turn":
            return lambda: self._send_messages(str(record["session_id"]), list(record["parts"]))
        if op == "conclude":
            return lambda: self.conclude(str(record["content"]), about=str(record["about"]))
        if op == "unconclude":
            return lambda: self._forget_conclusion(str(record["content"]), about=str(record["about"]))
        log.error("honcho: skipped a saved write of unknown kind %r", op)
        return lambda: None

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        if not self.settings.mirror_builtin or not (content or "").strip():
            return
        about = self._current_user if target == "user" else self._ai
        op = {"add": "conclude", "replace": "conclude", "remove": "unconclude"}.get(action)
        if op is not None:
            record = {"op": op, "content": content, "about": about}
            self.outbox.write(record)

    def _forget_conclusion(self, content: str, *, about: str) -> int:
        """Delete the AI peer's conclusions about ``about`` whose text is exactly ``content`` (a removed note)."""
        text = content.strip()
        view = self._peer(self._ai).conclusions_of(about)
        found = self.service.call("query conclusions", lambda: view.query(clip_text(text, _MAX_QUERY_CHARS), top_k=20))
        removed = 0
        for conclusion in found:
            if (conclusion.content or "").strip() == text:
                cid = str(conclusion.id)
                self.service.call("delete conclusion", lambda: view.delete(cid))  # noqa: B023 - called at once
                removed += 1
        return removed

    def _forget_session(self, session_id: str) -> None:
        super()._forget_session(session_id)
        self._sessions.pop(safe_id(session_id), None)

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        if name == "honcho_search":
            return search_result(args, self.settings.top_k, lambda q, n: self.search(q, limit=n))
        if name == "honcho_profile":
            card = self.profile()
            return _ok(profile=card, count=len(card))
        if name == "honcho_context":
            focus = args.get("query")
            if focus is not None and not isinstance(focus, str):
                return _err("'query' must be a string (or left out)")
            return _ok(**self.context(focus))
        if name == "honcho_reasoning":
            question = args.get("query")
            if not isinstance(question, str) or not question.strip():
                return _err("'query' is required: the question about the user")
            peer = self._peer(self._current_user)
            asked = clip_text(question, 10000)
            answer = self.service.call("reasoning", lambda: peer.chat(asked))
            return _ok(answer=answer or "")
        if name == "honcho_conclude":
            return self._conclude_tool(args)
        return _err(f"unknown tool {name!r}")

    def _conclude_tool(self, args: dict[str, Any]) -> str:
        content, delete_id = args.get("content"), args.get("delete_id")
        if delete_id is not None:
            if not isinstance(delete_id, str) or not delete_id.strip():
                return _err("'delete_id' must be the id of a conclusion")
            ai = self._peer(self._ai)
            target = delete_id.strip()
            self.service.call("delete conclusion",
                              lambda: ai.conclusions_of(self._current_user).delete(target))
            return _ok(deleted=target)
        if not isinstance(content, str) or not content.strip():
            return _err("give 'content' (the conclusion to record) or 'delete_id' (a conclusion to delete)")
        return _ok(created=self.conclude(content))

    # -- status ---------------------------------------------------------------------------------
    def _config_info(self) -> dict[str, Any]:
        s = self.settings
        return {"workspace": s.workspace, "ai_peer": s.ai_peer, "recall_mode": s.recall_mode, "recall": list(s.recall),
                "save_messages": s.save_messages, "tools": [t.name for t in self.tool_schemas()]}

    def shutdown(self) -> None:
        super().shutdown()
        with self._lock:
            self._peers.clear()
            self._sessions.clear()

    def __repr__(self) -> str:
        return f"<HonchoProvider url={self.base_url!r} workspace={self.settings.workspace!r}>"


