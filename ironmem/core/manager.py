"""The manager: rule 1 (one external provider), tool routing, and the start of sessions.

Data flows one way: adapter -> Session -> providers -> storage.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

from .builtin import BuiltinMemoryProvider
from .builtin.storage import MemoryStorage
from .builtin.store import format_usage
from .errors import BuiltinProviderError, ProviderConflictError
from .fence import sanitize
from .isolation import Background, Guard, ProviderHealth
from .provider import MemoryProvider, ToolSchema
from .security import redact_secrets, scan
from .session import Session
from .snapshot import Snapshot, render_snapshot

__all__ = ["MemoryManager", "default_home"]

log = logging.getLogger(__name__)

#: An external provider may expose at most this many tools (rule 1 is about schema budget too).
MAX_EXTERNAL_TOOLS = 4


def default_home() -> Path:
    """``$IRONMEM_HOME``, else ``~/.ironmem``."""
    return Path(os.environ.get("IRONMEM_HOME") or Path.home() / ".ironmem").expanduser()


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
        storage: str | MemoryStorage | None = None,
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
            self.home, memory_char_limit=memory_char_limit, user_char_limit=user_char_limit, storage=storage
        )
        self.builtin.add_write_listener(self._mirror_write)
        self.external: MemoryProvider | None = None
        self._health: dict[str, ProviderHealth] = {"builtin": ProviderHealth("builtin", "builtin")}
        self._guard: Guard | None = None
        self._tools: dict[str, tuple[MemoryProvider, ToolSchema]] = {}
        self._background = Background()
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
        self._guard = Guard(provider, self._health[name])
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
            "storage": self.builtin.storage.describe(),
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
