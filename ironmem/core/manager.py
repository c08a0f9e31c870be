"""The manager (rule 1, routing, failure isolation) and the session (one conversation).

Data flows one way: adapter -> Session -> providers -> storage.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .builtin import BuiltinMemoryProvider
from .builtin.store import format_usage
from .errors import BuiltinProviderError, ProviderConflictError
from .fence import fence, sanitize
from .provider import MemoryProvider, ToolSchema
from .security import redact_secrets, scan
from .snapshot import Snapshot, render_snapshot

__all__ = ["MemoryManager", "Session", "Recall", "RecallItem", "ProviderHealth", "default_home"]

log = logging.getLogger("ironmem")

T = TypeVar("T")

#: An external provider may expose at most this many tools (rule 1 is about schema budget too).
MAX_EXTERNAL_TOOLS = 4
#: Past-turn hits the built-in layer adds to a recall.
RECALL_TURNS = 3
RECALL_ITEM_CHARS = 600


#: Recall repeats the same items turn after turn (past turns, live entries): scan each distinct text once.
_scan_recalled = functools.lru_cache(maxsize=4096)(scan)


def default_home() -> Path:
    """``$IRONMEM_HOME``, else ``~/.ironmem``."""
    return Path(os.environ.get("IRONMEM_HOME") or Path.home() / ".ironmem").expanduser()


def _json_error(message: str, **extra: Any) -> str:
    return json.dumps({"success": False, "error": message, **extra}, ensure_ascii=False)


def _redact_args(value: Any) -> Any:
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: _redact_args(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_args(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------------
# Health and isolation of the external provider
# --------------------------------------------------------------------------------------------------
@dataclass
class ProviderHealth:
    """What ``status()`` reports for one provider: degraded while any hook's last call failed."""

    name: str
    kind: str  # "builtin" | "external"
    reason: str = ""
    failures: int = 0
    last_failure_at: float | None = None
    failing: dict[str, str] = field(default_factory=dict)  # hook -> why its last call failed

    @property
    def state(self) -> str:
        return "degraded" if self.failing else "active"

    def fail(self, hook: str, reason: str) -> None:
        self.failing[hook] = reason
        self.reason = reason
        self.failures += 1
        self.last_failure_at = time.time()

    def ok(self, hook: str) -> None:
        self.failing.pop(hook, None)
        if self.failing:
            self.reason = next(reversed(self.failing.values()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "state": self.state}
        if self.failing:
            out["reason"] = self.reason
            out["failing_hooks"] = dict(self.failing)
        if self.failures:
            out["failures"] = self.failures
        return out


class _Guard:
    """Runs calls into the external provider so that a raise or a hang never reaches the caller."""

    def __init__(self, provider: MemoryProvider, health: ProviderHealth) -> None:
        self.provider = provider
        self.health = health
        self._busy: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def call(self, hook: str, fn: Callable[[], T], default: T, *, timeout: float | None = None) -> T:
        """Call ``fn``; on an exception or after ``timeout`` seconds, record it and return ``default``."""
        if timeout is None:
            try:
                result = fn()
            except Exception as exc:
                self._failed(hook, f"{hook} raised {type(exc).__name__}: {exc}")
                return default
            self.health.ok(hook)
            return result
        with self._lock:
            running = self._busy.get(hook)
            if running is not None and running.is_alive():
                # The previous call never came back; don't pile up threads behind a hung backend.
                self._failed(hook, f"{hook} skipped: an earlier call is still running (hung provider)")
                return default
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - reported below
                box["error"] = exc

        worker = threading.Thread(target=target, name=f"ironmem-{self.provider.name}-{hook}", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            with self._lock:  # only a call that overran its timeout blocks later calls of the same hook
                self._busy[hook] = worker
            self._failed(hook, f"{hook} timed out after {timeout:g}s")
            return default
        if "error" in box:
            exc = box["error"]
            self._failed(hook, f"{hook} raised {type(exc).__name__}: {exc}")
            return default
        self.health.ok(hook)
        return box.get("value", default)

    def _failed(self, hook: str, reason: str) -> None:
        log.warning("external memory provider %r: %s", self.provider.name, reason)
        self.health.fail(hook, reason)


class _Background:
    """One worker thread that runs queued calls in order (turn N lands before turn N+1)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="ironmem-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except Exception:  # jobs are guarded; this is a last line of defence
                log.exception("background memory job failed")
            finally:
                self._queue.task_done()

    def submit(self, job: Callable[[], None]) -> None:
        self._queue.put(job)

    def drain(self, timeout: float) -> bool:
        """Wait until every job queued so far has run. False if ``timeout`` passed first."""
        done = threading.Event()
        self._queue.put(done.set)
        return done.wait(timeout)

    def stop(self, timeout: float) -> None:
        self.drain(timeout)
        self._queue.put(None)


# --------------------------------------------------------------------------------------------------
# Recall
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecallItem:
    """One recalled piece of memory and where it came from."""

    source: str  # "live" (written this session), "history" (past turns) or an external provider's name
    text: str


_SECTION_TITLES = {"live": "Saved to memory during this session", "history": "From past conversations"}


@dataclass(frozen=True)
class Recall:
    """What a prefetch found for one user message. ``fenced()`` is what goes before the user's text.

    Example:
        >>> Recall(()).fenced()
        ''
    """

    items: tuple[RecallItem, ...]
    query: str = ""
    dropped: tuple[str, ...] = field(default_factory=tuple)  # reasons for items the scanner refused

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def text(self) -> str:
        """The recalled content, grouped by source, without the fence."""
        sections: list[str] = []
        order: list[str] = []
        for item in self.items:
            if item.source not in order:
                order.append(item.source)
        for source in order:
            title = _SECTION_TITLES.get(source, f"From {source}")
            lines = [f"- {item.text}" for item in self.items if item.source == source]
            sections.append(f"## {title}\n" + "\n".join(lines))
        return "\n\n".join(sections)

    def fenced(self) -> str:
        """The fenced recall text, or "" when nothing was recalled."""
        return fence(self.text) if self.items else ""


def _as_items(result: Any) -> list[str]:
    if result is None:
        return []
    if isinstance(result, str):
        return [result] if result.strip() else []
    if isinstance(result, Sequence):
        return [str(x) for x in result if str(x).strip()]
    return [str(result)]


def _clip(text: str, limit: int = RECALL_ITEM_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------------
# Manager
# --------------------------------------------------------------------------------------------------
class MemoryManager:
    """Holds the built-in provider and at most one external provider (rule 1), and starts sessions.

    Example:
        >>> import tempfile
        >>> manager = MemoryManager(home=tempfile.mkdtemp())
        >>> session = manager.start_session("demo")
        >>> "MEMORY" in session.system_prompt_block()
        True
        >>> manager.close()
    """

    def __init__(
        self,
        home: str | Path | None = None,
        *,
        external: MemoryProvider | None = None,
        memory_char_limit: int = 2200,
        user_char_limit: int = 1375,
        strict: bool = False,
        prefetch_timeout: float = 3.0,
        tool_timeout: float = 30.0,
        sync_drain_timeout: float = 30.0,
    ) -> None:
        for label, value in (("memory_char_limit", memory_char_limit), ("user_char_limit", user_char_limit)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{label} must be a positive number of characters, got {value!r}")
        if prefetch_timeout <= 0:
            raise ValueError(f"prefetch_timeout must be > 0 seconds, got {prefetch_timeout!r}")
        self.home = Path(home).expanduser() if home is not None else default_home()
        self.strict = strict
        self.prefetch_timeout = float(prefetch_timeout)
        self.tool_timeout = float(tool_timeout)
        self.sync_drain_timeout = float(sync_drain_timeout)
        self.builtin = BuiltinMemoryProvider(
            self.home, memory_char_limit=memory_char_limit, user_char_limit=user_char_limit
        )
        self.builtin.add_write_listener(self._mirror_write)
        self.external: MemoryProvider | None = None
        self._health: dict[str, ProviderHealth] = {"builtin": ProviderHealth("builtin", "builtin")}
        self._guard: _Guard | None = None
        self._tools: dict[str, tuple[MemoryProvider, ToolSchema]] = {}
        self._background = _Background()
        self._closed = False
        self._rebuild_tools()
        if external is not None:
            self.add_provider(external)

    @classmethod
    def from_config(cls, path: str | Path) -> MemoryManager:
        """Build a manager from a ``config.yaml`` (see :mod:`ironmem.core.config`)."""
        from .config import manager_from_config

        return manager_from_config(path)

    # -- rule 1 ---------------------------------------------------------------------------------
    @property
    def providers(self) -> list[MemoryProvider]:
        """The built-in provider, then the external one if any."""
        return [self.builtin] + ([self.external] if self.external is not None else [])

    def add_provider(self, provider: MemoryProvider) -> bool:
        """Add the external provider. Returns False (and logs why) when it cannot join.

        A second external provider is refused with a warning naming the active one; with ``strict=True``
        it raises :class:`ProviderConflictError` instead.
        """
        if not isinstance(provider, MemoryProvider):
            raise TypeError(f"add_provider() takes a MemoryProvider instance, got {type(provider).__name__}")
        name = getattr(provider, "name", "") or ""
        if not name or name == "builtin":
            raise ValueError(f"an external provider needs a unique non-empty name other than 'builtin' (got {name!r})")
        if self.external is not None:
            message = (
                f"refused external memory provider {name!r}: {self.external.name!r} is already active and ironmem "
                "allows only one external provider (more would add tools to every request and split writes). "
                f"Remove {self.external.name!r} first to switch."
            )
            if self.strict:
                raise ProviderConflictError(message)
            log.warning(message)
            return False
        try:
            available = bool(provider.is_available())
        except Exception as exc:
            log.warning("external memory provider %r not registered: is_available() raised %s", name, exc)
            return False
        if not available:
            log.warning("external memory provider %r not registered: it reports it is not available", name)
            return False
        try:
            schemas = list(provider.tool_schemas())
        except Exception as exc:
            log.warning("external memory provider %r not registered: tool_schemas() raised %s", name, exc)
            return False
        if len(schemas) > MAX_EXTERNAL_TOOLS:
            message = (
                f"refused external memory provider {name!r}: it exposes {len(schemas)} tools, more than the "
                f"{MAX_EXTERNAL_TOOLS} allowed"
            )
            if self.strict:
                raise ProviderConflictError(message)
            log.warning(message)
            return False
        self.external = provider
        self._health[name] = ProviderHealth(name, "external")
        self._guard = _Guard(provider, self._health[name])
        self._rebuild_tools(schemas)
        return True

    def remove_provider(self, provider: str | MemoryProvider) -> bool:
        """Remove the external provider. The built-in provider cannot be removed."""
        name = provider if isinstance(provider, str) else provider.name
        if name == "builtin" or provider is self.builtin:
            raise BuiltinProviderError(
                "the built-in provider is always present and cannot be removed; it holds MEMORY.md and USER.md. "
                "To start empty, point the manager at another home folder"
            )
        if self.external is None or self.external.name != name:
            return False
        old, guard = self.external, self._guard
        self._background.drain(self.sync_drain_timeout)
        if guard is not None:
            guard.call("shutdown", old.shutdown, None, timeout=self.tool_timeout)
        self.external, self._guard = None, None
        self._health.pop(name, None)
        self._rebuild_tools()
        return True

    def _rebuild_tools(self, external_schemas: list[ToolSchema] | None = None) -> None:
        tools: dict[str, tuple[MemoryProvider, ToolSchema]] = {}
        for schema in self.builtin.tool_schemas():
            tools[schema.name] = (self.builtin, schema)
        if self.external is not None:
            for schema in external_schemas or []:
                if schema.name in tools:
                    log.warning(
                        "tool %r of provider %r ignored: %r already provides a tool of that name",
                        schema.name, self.external.name, tools[schema.name][0].name,
                    )
                    continue
                owned = ToolSchema(schema.name, schema.description, schema.parameters, provider=self.external.name)
                tools[schema.name] = (self.external, owned)
        self._tools = tools

    def tool_schemas(self) -> list[ToolSchema]:
        """Every tool the model gets: the built-in ones, then the external provider's."""
        return [schema for _, schema in self._tools.values()]

    # -- sessions -------------------------------------------------------------------------------
    def start_session(
        self,
        session_id: str | None = None,
        user_id: str | None = None,
        *,
        snapshot: Snapshot | dict[str, Any] | None = None,
    ) -> Session:
        """Start a conversation: renders and freezes its snapshot.

        To resume a conversation in another process (a thread restored from a checkpoint), pass the
        ``snapshot`` it was started with (``session.snapshot.to_dict()``): the session then keeps those exact
        bytes, and its live delta covers every write made since, by anyone.
        """
        if self._closed:
            raise RuntimeError("this MemoryManager is closed; create a new one")
        if isinstance(snapshot, dict):
            snapshot = Snapshot.from_dict(snapshot)
        return Session(self, session_id or uuid.uuid4().hex, user_id, snapshot=snapshot)

    def render_snapshot(self) -> Snapshot:
        """What a session starting now would show in its system prompt."""
        states = {target: self.builtin.state(target) for target in ("memory", "user")}
        blocks: list[str] = []
        if self.external is not None and self._guard is not None:
            block = self._guard.call("system_prompt_block", self.external.system_prompt_block, "",
                                     timeout=self.prefetch_timeout)
            block = block if isinstance(block, str) else ""
            verdict = scan(block)
            if verdict.blocked:
                log.warning("system prompt block of %r dropped: %s", self.external.name, verdict.reason)
            elif block.strip():
                blocks.append(sanitize(block))
        return render_snapshot(states, self.builtin.limits, blocks)

    # -- writes from the built-in layer, mirrored out -------------------------------------------
    def _mirror_write(self, action: str, target: str, content: str) -> None:
        external, guard = self.external, self._guard
        if external is None or guard is None:
            return
        clean = redact_secrets(content)
        self._background.submit(
            lambda: guard.call("on_memory_write", lambda: external.on_memory_write(action, target, clean), None,
                               timeout=self.tool_timeout)
        )

    # -- status ---------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Providers and their health, file usage, the snapshot hash a new session would get."""
        files: dict[str, Any] = {}
        for target in ("memory", "user"):
            state = self.builtin.files[target].read()
            info: dict[str, Any] = {
                "path": str(self.builtin.files[target].path),
                "entries": len(state.entries),
                "chars": state.chars,
                "limit": self.builtin.limits[target],
                "usage": format_usage(state.chars, self.builtin.limits[target]),
            }
            if state.corrupt:
                info.update(error=state.corrupt, backup=str(state.backup))
            files[target] = info
        providers = []
        for provider in self.providers:
            entry = self._health[provider.name].to_dict()
            entry["tools"] = [s.name for s in self.tool_schemas() if s.provider == provider.name]
            providers.append(entry)
        return {
            "home": str(self.home),
            "providers": providers,
            "files": files,
            "turns_indexed": self.builtin.index.turn_count(),
            "snapshot_hash": self.render_snapshot().hash,
        }

    def health(self, name: str) -> ProviderHealth:
        return self._health[name]

    # -- lifecycle ------------------------------------------------------------------------------
    def drain(self, timeout: float | None = None) -> bool:
        """Wait for queued background work (syncs to the external provider)."""
        return self._background.drain(self.sync_drain_timeout if timeout is None else timeout)

    def close(self) -> None:
        """Drain background work, shut the external provider down, close the index."""
        if self._closed:
            return
        self._closed = True
        self._background.stop(self.sync_drain_timeout)
        if self.external is not None and self._guard is not None:
            self._guard.call("shutdown", self.external.shutdown, None, timeout=self.tool_timeout)
        self.builtin.shutdown()

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ext = self.external.name if self.external else None
        return f"<MemoryManager home={str(self.home)!r} external={ext!r}>"


# --------------------------------------------------------------------------------------------------
# Session
# --------------------------------------------------------------------------------------------------
class Session:
    """One conversation: a frozen snapshot, per-turn recall, tool routing and turn syncing.

    Example:
        >>> import tempfile
        >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s1")
        >>> before = session.system_prompt_block()
        >>> _ = session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Likes tea"})
        >>> session.system_prompt_block() == before  # frozen
        True
        >>> "Likes tea" in session.prefetch("what do I drink?").fenced()  # the live delta
        True
    """

    def __init__(
        self, manager: MemoryManager, session_id: str, user_id: str | None, *, snapshot: Snapshot | None = None
    ) -> None:
        self.manager = manager
        self.id = session_id
        self.user_id = user_id
        self._lock = threading.Lock()
        self.prefetch_count = 0
        self.turns_synced = 0
        self.last_recall: Recall | None = None
        self._ended = False
        manager.builtin.initialize(session_id, user_id=user_id, home=str(manager.home))
        if manager.external is not None and manager._guard is not None:
            external = manager.external
            manager._guard.call(
                "initialize",
                lambda: external.initialize(session_id, user_id=user_id, home=str(manager.home)),
                None,
                timeout=manager.prefetch_timeout,
            )
        self._snapshot = snapshot if snapshot is not None else manager.render_snapshot()
        # Entries already shown (in the snapshot or in an earlier recall), per target.
        self._surfaced: dict[str, set[str]] = {t: set(e) for t, e in self._snapshot.entries.items()}
        self._removed_shown: dict[str, set[str]] = {t: set() for t in self._snapshot.entries}

    # -- rule 3 ---------------------------------------------------------------------------------
    def system_prompt_block(self) -> str:
        """The frozen memory block: byte-identical for the whole session."""
        return self._snapshot.text

    @property
    def snapshot_hash(self) -> str:
        return self._snapshot.hash

    @property
    def snapshot(self) -> Snapshot:
        """The frozen snapshot and the entries it was rendered from (``to_dict()`` to save it)."""
        return self._snapshot

    # -- recall (rule 2) ------------------------------------------------------------------------
    def prefetch(self, user_message: str) -> Recall:
        """Recall what is relevant to ``user_message``: entries written since the snapshot (the live delta),
        matching past turns, and the external provider's recall, all scanned. Never raises, never hangs
        longer than the manager's ``prefetch_timeout``."""
        manager = self.manager
        items: list[RecallItem] = []
        dropped: list[str] = []
        with self._lock:
            self.prefetch_count += 1
            items.extend(self._live_delta())
        external, guard = manager.external, manager._guard
        if external is not None and guard is not None:
            query = redact_secrets(user_message)
            result = guard.call(
                "prefetch", lambda: external.prefetch(query, session_id=self.id), "", timeout=manager.prefetch_timeout
            )
            for text in _as_items(result):
                items.append(RecallItem(external.name, _clip(text)))
        try:
            hits = manager.builtin.index.search(
                user_message, kinds=("turn",), user_id=self.user_id, exclude_session=self.id, limit=RECALL_TURNS
            )
        except Exception as exc:  # the index is local; still, a recall failure must not break the turn
            log.warning("built-in recall failed: %s", exc)
            hits = []
        for hit in hits:
            items.append(RecallItem("history", _clip(hit.text)))
        kept: list[RecallItem] = []
        seen: set[str] = set()
        for item in items:
            key = " ".join(item.text.split()).casefold()
            if key in seen:  # the same text from two sources (e.g. a past turn both layers stored) shows once
                continue
            seen.add(key)
            verdict = _scan_recalled(item.text)
            if verdict.blocked:
                reason = f"{item.source}: {verdict.reason}"
                log.warning("recalled item dropped by the security scan (%s)", reason)
                dropped.append(reason)
                continue
            kept.append(item)
        recall = Recall(tuple(kept), query=user_message, dropped=tuple(dropped))
        self.last_recall = recall
        return recall

    async def aprefetch(self, user_message: str) -> Recall:
        return await asyncio.to_thread(self.prefetch, user_message)

    def _live_delta(self) -> list[RecallItem]:
        """Entries added or removed since the snapshot that this session has not been shown yet."""
        out: list[RecallItem] = []
        for target in ("memory", "user"):
            state = self.manager.builtin.files[target].read()
            if state.corrupt:
                continue
            label = "memory" if target == "memory" else "user profile"
            current = set(state.entries)
            for entry in state.entries:
                if entry not in self._surfaced[target]:
                    self._surfaced[target].add(entry)
                    out.append(RecallItem("live", f"[{label}] {entry}"))
            for entry in sorted(self._snapshot.entries[target]):
                if entry not in current and entry not in self._removed_shown[target]:
                    self._removed_shown[target].add(entry)
                    out.append(RecallItem("live", f"[{label}, removed - no longer true] {_clip(entry, 200)}"))
        return out

    # -- tools ----------------------------------------------------------------------------------
    def tool_schemas(self) -> list[ToolSchema]:
        return self.manager.tool_schemas()

    def handle_tool_call(self, name: str, args: dict[str, Any] | str | None) -> str:
        """Route a tool call to its provider. Always returns JSON text; never raises."""
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                return _json_error(f"arguments for {name!r} are not valid JSON ({exc.msg}); send a JSON object")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return _json_error(f"arguments for {name!r} must be a JSON object, got {type(args).__name__}")
        owner = self.manager._tools.get(name)
        if owner is None:
            available = ", ".join(self.manager._tools)
            return _json_error(f"unknown tool {name!r}; available memory tools: {available}")
        provider = owner[0]
        if provider is self.manager.builtin:
            try:
                return self.manager.builtin.handle_tool_call(name, args, user_id=self.user_id)
            except Exception as exc:
                log.exception("built-in tool %r failed", name)
                return _json_error(f"{name} failed: {type(exc).__name__}: {exc}")
        guard = self.manager._guard
        assert guard is not None
        clean = _redact_args(args)
        sentinel = object()
        result: Any = guard.call(
            f"tool:{name}", lambda: provider.handle_tool_call(name, clean), sentinel, timeout=self.manager.tool_timeout
        )
        if result is sentinel:
            return _json_error(f"memory provider {provider.name!r} failed on {name!r}: {guard.health.reason}")
        if not isinstance(result, str):
            try:
                result = json.dumps(result, ensure_ascii=False)
            except (TypeError, ValueError):
                result = json.dumps({"success": True, "result": str(result)}, ensure_ascii=False)
        return result

    async def ahandle_tool_call(self, name: str, args: dict[str, Any] | str | None) -> str:
        return await asyncio.to_thread(self.handle_tool_call, name, args)

    # -- turns ----------------------------------------------------------------------------------
    def sync_turn(self, user: str, assistant: str) -> None:
        """Record a finished exchange: indexed locally now, sent to the external provider in the background."""
        if not (user or "").strip() and not (assistant or "").strip():
            return
        manager = self.manager
        try:
            manager.builtin.index.add_turn(self.id, user or "", assistant or "", user_id=self.user_id)
        except Exception as exc:  # a full disk or a locked database must not break the agent's turn
            log.error("could not index the turn of session %s: %s", self.id, exc)
            manager._health["builtin"].fail("sync_turn", f"sync_turn could not index the turn: {exc}")
        else:
            manager._health["builtin"].ok("sync_turn")
            self.turns_synced += 1
        external, guard = manager.external, manager._guard
        if external is not None and guard is not None:
            clean_user, clean_assistant = redact_secrets(user or ""), redact_secrets(assistant or "")
            manager._background.submit(
                lambda: guard.call(
                    "sync_turn",
                    lambda: external.sync_turn(clean_user, clean_assistant, session_id=self.id),
                    None,
                    timeout=manager.tool_timeout,
                )
            )

    async def async_turn(self, user: str, assistant: str) -> None:
        await asyncio.to_thread(self.sync_turn, user, assistant)

    def end(self) -> None:
        """Finish the session: wait for its queued syncs, tell the external provider."""
        if self._ended:
            return
        self._ended = True
        manager = self.manager
        if not manager._background.drain(manager.sync_drain_timeout):
            log.warning("session %s ended before its background syncs finished", self.id)
        external, guard = manager.external, manager._guard
        if external is not None and guard is not None:
            guard.call("on_session_end", lambda: external.on_session_end(self.id), None, timeout=manager.tool_timeout)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"<Session id={self.id!r} user={self.user_id!r} snapshot={self.snapshot_hash[:12]}>"
