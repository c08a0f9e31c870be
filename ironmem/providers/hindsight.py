"""Hindsight as ironmem's external provider: a client of a running Hindsight server (``hindsight-client``).

Install with ``pip install 'ironmem[hindsight]'`` (the client only). The server (``hindsight-api-slim``) runs
elsewhere: on this machine with its embedded PostgreSQL, in Docker, or Hindsight Cloud. See
``docs/providers/hindsight.md`` for starting a local server with no LLM and local embeddings.

What ironmem does with it:

- ``prefetch`` recalls facts for the user's message from the user's bank (``recall`` with ``recall_types``,
  default the raw facts ``world`` and ``experience``: without a server-side LLM, Hindsight builds no
  ``observation``, so Hermes's default ``observation`` would recall nothing).
- ``sync_turn`` retains each exchange (``User: ... / Assistant: ...``), every ``retain_every_n_turns`` turns;
  the rest is flushed by ``on_session_end``. Retains go through the provider's outbox: while the server is down
  they wait, in order (saved under ``<home>/hindsight/``), and are sent as soon as it answers again.
- built-in ``memory`` additions are mirrored as retained facts (replace/remove are not: Hindsight facts carry no
  id ironmem could match, the same limit as Hermes's plugin).
- tools ``hindsight_retain`` and ``hindsight_recall``; ``hindsight_reflect`` (LLM synthesis) only with
  ``reflect: true``, since a server without an LLM answers it with HTTP 400.

Banks: ``bank_id_template`` (default ``{bank_id}-{user}``) gives every user a bank of their own; an empty
placeholder collapses (``ironmem-{user}`` with no user is ``ironmem``).

The client is async (aiohttp); the provider runs it on one private loop thread, so the sync hooks work from the
manager's worker threads and the async twins (``aprefetch``, ``arecall``) await it
without blocking the caller's loop.

Example:
    >>> provider = HindsightProvider(api_url="http://127.0.0.1:8888")  # cheap: no request is made
    >>> [tool.name for tool in provider.tool_schemas()]
    ['hindsight_retain', 'hindsight_recall']
    >>> provider.bank_for("alice")
    'ironmem-alice'
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ..core.errors import ProviderUnavailableError
from ..core.provider import ToolSchema
from ..core.security import redact_secrets
from ._aio import LoopThread
from ._base import ProviderBase, ServerErrors, hashed_id, http_url, merged_settings, turn_text
from ._tools import ToolArgumentError, run_tool, search_result, search_schema
from ._tools import err as _err
from ._tools import ok as _ok

__all__ = ["HindsightProvider", "HindsightSettings", "HindsightUnavailableError"]

log = logging.getLogger("ironmem.providers.hindsight")

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8888"
CLOUD_URL = "https://api.hindsight.vectorize.io"
FACT_TYPES = ("world", "experience", "observation")
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.\-]+")

RETAIN_TOOL = ToolSchema(
    name="hindsight_retain",
    description="Store a fact in long-term memory (Hindsight) so later conversations can recall it.",
    parameters={
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The fact to remember, in a sentence or two."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Optional tags for filtering."},
        },
        "required": ["content"],
    },
)
RECALL_TOOL = search_schema(
    "hindsight_recall", "Search long-term memory (Hindsight) for facts about the user and past conversations."
)
REFLECT_TOOL = ToolSchema(
    name="hindsight_reflect",
    description="Ask Hindsight to reason over everything it remembers and answer (needs an LLM on the server).",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "The question to answer from memory."}},
        "required": ["query"],
    },
)


class HindsightUnavailableError(ProviderUnavailableError):
    """The Hindsight server could not be reached or refused a call; the message says which and what to do."""


_ERRORS = ServerErrors("Hindsight", HindsightUnavailableError, "hindsight.api_url", "docs/providers/hindsight.md",
                       frozenset({"ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
                                  "ConnectionRefusedError"}))


# --------------------------------------------------------------------------------------------------
# Settings: the ``hindsight`` config section (Hermes's plugin keys where they map)
# --------------------------------------------------------------------------------------------------
#: Hermes keys that ironmem reads but that have no effect here, with the reason (a warning is logged).
_IGNORED_KEYS = {
    "recall_indicator": "ironmem shows no status lines",
    "retain_indicator": "ironmem shows no status lines",
    "recall_sync": "ironmem always recalls for the current message (bounded by memory.prefetch_timeout)",
    "retain_source": "use retain_tags to mark what ironmem stores",
}
#: Hermes keys that cannot work in ironmem: an error says what to do instead.
_UNSUPPORTED_KEYS = {
    "llm_provider": "the LLM is a setting of the Hindsight server (HINDSIGHT_API_LLM_PROVIDER), not of the client",
    "llm_model": "the LLM is a setting of the Hindsight server (HINDSIGHT_API_LLM_MODEL), not of the client",
    "llm_base_url": "the LLM is a setting of the Hindsight server (HINDSIGHT_API_LLM_BASE_URL), not of the client",
    "recall_prompt_preamble": "recalled memory goes in ironmem's fence, whose system note is fixed (rule 2)",
    "bank_mission": "set the bank's mission once with the Hindsight client or UI (it needs an LLM to matter)",
    "bank_retain_mission": "set the bank's retain mission once with the Hindsight client or UI",
}


class HindsightSettings(BaseModel):
    """The ``hindsight`` section of ``config.yaml``. Keys follow Hermes's ``hindsight/config.json``.

    Example:
        >>> HindsightSettings(api_url="http://127.0.0.1:8888", recall_types="world,experience").recall_types
        ['world', 'experience']
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["local_external", "cloud"] = Field(
        "local_external", description="local_external: a server you run (api_url); cloud: Hindsight Cloud"
    )
    api_url: str = Field(DEFAULT_URL, description="Base URL of the Hindsight API server")
    api_key: SecretStr | None = Field(None, description="API key (Hindsight Cloud or a server with auth)")
    timeout: float = Field(30.0, gt=0, description="Seconds one HTTP call may take")
    bank_id: str = Field("ironmem", min_length=1, description="Memory bank name (the {bank_id} placeholder)")
    bank_id_template: str = Field(
        "{bank_id}-{user}", description="Bank per scope; placeholders {bank_id}, {user}, {session}"
    )
    memory_mode: Literal["hybrid", "context", "tools"] = Field(
        "hybrid", description="hybrid: recall + tools; context: recall only (no tools); tools: tools only"
    )
    auto_recall: bool = Field(True, description="Recall before each turn (prefetch)")
    auto_retain: bool = Field(True, description="Retain each finished turn")
    recall_budget: Literal["low", "mid", "high"] = Field("mid", description="Recall thoroughness")
    recall_max_tokens: int = Field(1024, gt=0, description="Maximum tokens of recalled facts per prefetch")
    recall_max_results: int = Field(5, ge=0, description="Facts kept per prefetch (0 keeps all the server returns)")
    recall_max_input_chars: int = Field(800, gt=0, description="The query is cut to this many characters")
    recall_types: list[str] = Field(
        ["world", "experience"], description="Fact types to recall: world, experience, observation"
    )
    recall_tags: list[str] = Field([], description="Only recall facts with these tags")
    recall_tags_match: Literal["any", "all", "any_strict", "all_strict", "exact"] = Field("any")
    retain_every_n_turns: int = Field(1, ge=1, description="Retain every N turns (the rest at session end)")
    retain_async: bool = Field(False, description="Let the server process retains in the background")
    retain_context: str = Field("conversation between an AI agent and the user", description="Context label")
    retain_tags: list[str] = Field([], description="Tags added to every retained fact")
    retain_user_prefix: str = Field("User", description="Label before the user's message")
    retain_assistant_prefix: str = Field("Assistant", description="Label before the assistant's message")
    mirror_builtin: bool = Field(True, description="Retain the built-in memory tool's additions too")
    reflect: bool = Field(False, description="Offer hindsight_reflect (the server needs an LLM)")

    @model_validator(mode="before")
    @classmethod
    def _hermes_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key, why in _UNSUPPORTED_KEYS.items():
            if key in data:
                raise ValueError(f"'{key}' is a Hermes setting that does not apply here: {why}; remove it")
        if data.get("mode") == "cloud" and not data.get("api_url"):
            data["api_url"] = CLOUD_URL
        if data.get("mode") == "local_embedded":
            raise ValueError(
                "mode 'local_embedded' (Hermes starts a Hindsight daemon itself) is not supported: start the server "
                "yourself (docs/providers/hindsight.md) and use mode 'local_external' with its api_url"
            )
        if data.get("recall_prefetch_method", "recall") != "recall":
            raise ValueError("recall_prefetch_method 'reflect' needs an LLM on every turn; ironmem prefetches with "
                             "'recall' (use the hindsight_reflect tool with reflect: true instead)")
        data.pop("recall_prefetch_method", None)
        for key, why in _IGNORED_KEYS.items():
            if key in data:
                data.pop(key)
                log.warning("hindsight.%s is ignored: %s", key, why)
        return data

    @field_validator("recall_types", "recall_tags", "retain_tags", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("recall_types")
    @classmethod
    def _known_types(cls, value: list[str]) -> list[str]:
        bad = [v for v in value if v not in FACT_TYPES]
        if bad or not value:
            raise ValueError(f"recall_types must name one or more of {list(FACT_TYPES)}, got {value!r}")
        return value

    @field_validator("api_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value, "api_url", DEFAULT_URL)

    @field_validator("bank_id_template")
    @classmethod
    def _template(cls, value: str) -> str:
        try:
            value.format(bank_id="b", user="u", session="s")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"bank_id_template may use {{bank_id}}, {{user}} and {{session}} only ({exc})") from exc
        return value


# --------------------------------------------------------------------------------------------------
# The provider
# --------------------------------------------------------------------------------------------------
class HindsightProvider(ProviderBase):
    """Hindsight memory over its HTTP API: recall per user message, retain per turn, two or three tools.

    Args:
        api_url: the server's base URL (default ``http://127.0.0.1:8888``).
        api_key: for Hindsight Cloud or a server with authentication.
        settings: a :class:`HindsightSettings`; keyword arguments override its fields.

    Example:
        >>> p = HindsightProvider(bank_id="team", bank_id_template="{bank_id}")
        >>> p.bank_for("bob")
        'team'
    """

    name = "hindsight"
    requires = ("hindsight_client", "hindsight-client is not installed: pip install 'ironmem[hindsight]'")
    settings_model: ClassVar[type[BaseModel]] = HindsightSettings
    env_aliases: ClassVar[dict[str, str]] = {
        "api_key": "HINDSIGHT_API_KEY",
        "api_url": "HINDSIGHT_API_URL",
        "bank_id": "HINDSIGHT_BANK_ID",
        "recall_budget": "HINDSIGHT_BUDGET",
        "mode": "HINDSIGHT_MODE",
    }

    def __init__(self, settings: HindsightSettings | None = None, **overrides: Any) -> None:
        self.settings = merged_settings(HindsightSettings, settings, overrides)
        self._loop = LoopThread("hindsight")
        self._client: Any = None
        self._lock = threading.RLock()
        self._users: dict[str, str] = {}
        self._current_session = ""
        self._batch: dict[str, list[str]] = {}  # turns waiting for retain_every_n_turns
        self._open_outbox(self._send)

    # -- config ---------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, settings: HindsightSettings, *, home: Path) -> HindsightProvider:
        """Build from the ``hindsight`` config section and load the client (no request is made)."""
        return cls(settings).open()

    def open(self) -> HindsightProvider:
        """Import and build the client now (importing aiohttp can take seconds), so the first recall is fast."""
        self._loop.run(self._get_client, timeout=None)
        return self

    # -- contract -------------------------------------------------------------------------------
    @property
    def unavailable_reason(self) -> str:
        """Why :meth:`is_available` is False ("" when True). Cheap: no network."""
        reason = super().unavailable_reason  # the client package
        if not reason and self.settings.mode == "cloud" and self.settings.api_key is None:
            return "mode 'cloud' needs api_key (or HINDSIGHT_API_KEY)"
        return reason

    def initialize(self, session_id: str, **ctx: Any) -> None:
        user = str(ctx.get("user_id") or "")
        with self._lock:
            self._users[session_id] = user
            self._current_session = session_id
        self._attach_outbox(ctx)
        if self._client is None:
            try:
                self._loop.submit(self._get_client)  # warm up on the provider's loop; the first call queues behind it
            except Exception as exc:  # shut down already: the next call reports it
                log.debug("hindsight warm-up not started: %s", exc)

    def tool_schemas(self) -> list[ToolSchema]:
        if self.settings.memory_mode == "context":
            return []
        tools = [RETAIN_TOOL, RECALL_TOOL]
        if self.settings.reflect:
            tools.append(REFLECT_TOOL)
        return tools

    def system_prompt_block(self) -> str:
        if self.settings.memory_mode == "context":
            return ""
        return ("Long-term memory (Hindsight): use hindsight_recall to look up past facts and hindsight_retain to "
                "store a durable fact the user shares.")

    # -- banks ----------------------------------------------------------------------------------
    def bank_for(self, user: str = "", session: str = "") -> str:
        """The bank a user's (and session's) memories go to, from ``bank_id_template``."""
        raw = self.settings.bank_id_template.format(bank_id=self.settings.bank_id, user=_safe(user),
                                                    session=_safe(session))
        bank = re.sub(r"[-_.]{2,}", lambda m: m.group(0)[0], raw).strip("-_.")
        return bank or _safe(self.settings.bank_id) or "ironmem"

    def _bank(self, session_id: str) -> str:
        with self._lock:
            user = self._users.get(session_id, self._users.get(self._current_session, ""))
        return self.bank_for(user, session_id)

    # -- the client, on its own loop --------------------------------------------------------------
    async def _get_client(self) -> Any:
        if self._client is None:
            from hindsight_client import Hindsight

            key = self.settings.api_key.get_secret_value() if self.settings.api_key else None
            self._client = Hindsight(base_url=self.settings.api_url, api_key=key, timeout=self.settings.timeout,
                                     user_agent="ironmem", max_attempts=1)
        return self._client

    def _call(self, what: str, factory: Callable[[Any], Awaitable[T]]) -> T:
        async def run() -> T:
            return await factory(await self._get_client())

        try:
            result = self._loop.run(run, timeout=self.settings.timeout)
        except Exception as exc:
            raise self._explain(what, exc) from exc
        self.outbox.replay_soon()  # the server answers: send what waits for it
        return result

    async def _acall(self, what: str, factory: Callable[[Any], Awaitable[T]]) -> T:
        async def run() -> T:
            return await factory(await self._get_client())

        try:
            result = await self._loop.arun(run, timeout=self.settings.timeout)
        except Exception as exc:
            raise self._explain(what, exc) from exc
        self.outbox.replay_soon()
        return result

    def _explain(self, what: str, exc: BaseException) -> BaseException:
        status = getattr(exc, "status", None)
        if status is not None and not isinstance(exc, HindsightUnavailableError):  # the server answered: an error
            return _ERRORS.refused(what, status, getattr(exc, "body", None) or getattr(exc, "reason", "") or "")
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        return _ERRORS.explain(what, exc, url=self.settings.api_url, timeout=self.settings.timeout, detail=text)

    # -- recall -----------------------------------------------------------------------------------
    def _recall_args(self, query: str, limit: int | None) -> dict[str, Any]:
        s = self.settings
        args: dict[str, Any] = {
            "query": query[: s.recall_max_input_chars],
            "types": list(s.recall_types),
            "budget": s.recall_budget,
            "max_tokens": s.recall_max_tokens,
        }
        if s.recall_tags:
            args.update(tags=list(s.recall_tags), tags_match=s.recall_tags_match)
        return args

    def _facts(self, response: Any, limit: int) -> list[dict[str, Any]]:
        out = []
        for item in getattr(response, "results", None) or []:
            text = (getattr(item, "text", "") or "").strip()
            if not text:
                continue
            out.append({
                "id": getattr(item, "id", None),
                "text": text,
                "type": getattr(item, "type", None),
                "date": getattr(item, "mentioned_at", None) or getattr(item, "occurred_start", None),
                "tags": getattr(item, "tags", None) or [],
            })
        return out[:limit] if limit > 0 else out

    def recall(self, query: str, *, session_id: str = "", limit: int | None = None) -> list[dict[str, Any]]:
        """Facts for ``query`` from the session user's bank: ``[{id, text, type, date, tags}]``."""
        bank, n = self._bank(session_id), self.settings.recall_max_results if limit is None else limit
        args = self._recall_args(redact_secrets(query), limit)
        return self._facts(self._call("recall", lambda c: _recall_or_empty(c, bank, args)), n)

    async def arecall(self, query: str, *, session_id: str = "", limit: int | None = None) -> list[dict[str, Any]]:
        bank, n = self._bank(session_id), self.settings.recall_max_results if limit is None else limit
        args = self._recall_args(redact_secrets(query), limit)
        return self._facts(await self._acall("recall", lambda c: _recall_or_empty(c, bank, args)), n)

    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        if not self.settings.auto_recall or self.settings.memory_mode == "tools" or not (query or "").strip():
            return []
        return [f["text"] for f in self.recall(query, session_id=session_id)]

    async def aprefetch(self, query: str, *, session_id: str) -> list[str]:
        if not self.settings.auto_recall or self.settings.memory_mode == "tools" or not (query or "").strip():
            return []
        return [f["text"] for f in await self.arecall(query, session_id=session_id)]

    # -- retain -----------------------------------------------------------------------------------
    def _retain_record(self, content: str, *, session_id: str, context: str, tags: list[str]) -> dict[str, Any]:
        """One retain as a JSON record (what the outbox queues, saves and replays); secrets masked here."""
        all_tags = list(dict.fromkeys([*self.settings.retain_tags, *tags]))
        return {
            "op": "retain",
            "bank_id": self._bank(session_id),
            "content": redact_secrets(content),
            "context": context,
            "timestamp": datetime.now(UTC).isoformat(),
            "tags": all_tags or None,
            "metadata": {"session_id": session_id} if session_id else None,
            "retain_async": self.settings.retain_async,
        }

    def _send(self, record: dict[str, Any]) -> Any:
        """Send one retain record (the outbox's sender)."""
        args = {k: v for k, v in record.items() if k != "op"}
        args["timestamp"] = datetime.fromisoformat(str(record["timestamp"]))
        return self._call("retain", lambda c: c.aretain(**args))

    def retain(self, content: str, *, session_id: str = "", context: str | None = None,
               tags: list[str] | None = None) -> dict[str, Any]:
        """Store ``content`` in the session user's bank now (not queued). Returns ``{bank_id, items}``."""
        record = self._retain_record(content, session_id=session_id or self._current_session,
                                     context=context or self.settings.retain_context, tags=tags or [])
        return {"bank_id": record["bank_id"], "items": getattr(self._send(record), "items_count", None)}

    def _queue_turn(self, user: str, assistant: str, session_id: str) -> str | None:
        """Add a turn to the session's batch; the text to retain now, or None to wait for more turns."""
        text = turn_text(user, assistant, (self.settings.retain_user_prefix, self.settings.retain_assistant_prefix))
        if not text or not self.settings.auto_retain or self.settings.memory_mode == "tools":
            return None
        with self._lock:
            batch = self._batch.setdefault(session_id, [])
            batch.append(text)
            if len(batch) < self.settings.retain_every_n_turns:
                return None
            self._batch[session_id] = []
        return "\n\n".join(batch)

    def _retain_turns(self, text: str, session_id: str) -> None:
        self.outbox.write(self._retain_record(text, session_id=session_id, context=self.settings.retain_context,
                                              tags=[f"session:{_safe(session_id)}"]))

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        text = self._queue_turn(user, assistant, session_id)
        if text:
            self._retain_turns(text, session_id)

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        if not self.settings.mirror_builtin or action != "add" or not (content or "").strip():
            return
        about = "the user's profile" if target == "user" else "the agent's notes"
        self.outbox.write(self._retain_record(
            content, session_id=self._current_session, tags=[f"ironmem:{target}"],
            context=f"an entry of {about}, saved with the built-in memory tool"))

    def on_session_end(self, session_id: str) -> None:
        with self._lock:
            batch = self._batch.pop(session_id, [])
        try:
            if batch:
                self._retain_turns("\n\n".join(batch), session_id)
            else:
                self.outbox.drain()
        finally:
            with self._lock:
                self._users.pop(session_id, None)

    # -- tools ------------------------------------------------------------------------------------
    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        # Every failure is reported as "<tool> failed: <message>": the server's errors are explained already.
        return run_tool(name, args, lambda a: self._tool(name, a), log=log, label="hindsight", expected=(Exception,))

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        offered = {t.name for t in self.tool_schemas()}
        if name not in offered:
            return _err(f"unknown tool {name!r}; Hindsight provides {', '.join(sorted(offered)) or 'no tools here'}")
        if name == RETAIN_TOOL.name:
            content, tags = _retain_tool_args(args)
            result = self.retain(content, context="saved by the agent with hindsight_retain", tags=tags)
            return _ok(retained=True, bank_id=result["bank_id"])
        if name == RECALL_TOOL.name:
            return search_result(args, 5, lambda q, n: self.recall(q, session_id=self._current_session, limit=n))
        question = args.get("query")
        if not isinstance(question, str) or not question.strip():
            return _err("'query' is required: the question to answer from memory")
        bank = self._bank(self._current_session)
        answer = self._call("reflect", lambda c: c.areflect(bank_id=bank, query=redact_secrets(question),
                                                            budget=self.settings.recall_budget))
        return _ok(answer=getattr(answer, "text", None) or str(answer))

    # -- health -----------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """Ask the server for its version: ``{"ok": True, "api_version": ...}`` or ``{"ok": False, "error": ...}``."""
        try:
            version = self._call("a version check", lambda c: c.aget_version())
        except Exception as exc:
            return {"ok": False, "url": self.settings.api_url, "error": str(exc)}
        return {"ok": True, "url": self.settings.api_url, "api_version": getattr(version, "api_version", None)}

    def probe(self) -> None:
        """One cheap request (the server's version); raises :class:`HindsightUnavailableError` saying why."""
        self._call("a version check", lambda c: c.aget_version())

    def status(self) -> dict[str, Any]:
        """What this provider is configured to do (no network)."""
        s = self.settings
        return {"url": s.api_url, "mode": s.mode, "bank": self._bank(self._current_session),
                "memory_mode": s.memory_mode, "recall_types": list(s.recall_types)}

    def shutdown(self) -> None:
        async def close() -> None:
            if self._client is not None:
                await self._client.aclose()

        self.outbox.close()
        self._loop.close(close)

    def __repr__(self) -> str:
        return f"<HindsightProvider url={self.settings.api_url!r} bank_template={self.settings.bank_id_template!r}>"


async def _recall_or_empty(client: Any, bank: str, args: dict[str, Any]) -> Any:
    """Recall from ``bank``; a bank that does not exist yet (nothing retained for this user) recalls nothing."""
    try:
        return await client.arecall(bank_id=bank, **args)
    except Exception as exc:
        if getattr(exc, "status", None) == 404 and "not found" in str(getattr(exc, "body", "") or exc).lower():
            return None
        raise


def _safe(value: str) -> str:
    """A bank-id-safe form of a user or session id (long or odd ids keep a short hash, so they stay distinct)."""
    return hashed_id(value or "", _SAFE_ID, max_len=48, keep=36, digest=10, strip="_")


def _retain_tool_args(args: dict[str, Any]) -> tuple[str, list[str]]:
    content = args.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ToolArgumentError("'content' is required: the fact to remember")
    tags = args.get("tags", [])
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise ToolArgumentError("'tags' must be a list of strings")
    return content, [t.strip() for t in tags if t.strip()][:10]
