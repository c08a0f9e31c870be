"""The manager: rule 1 (one external provider), tool routing, and the start of sessions.

Data flows one way: adapter -> Session -> providers -> storage.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .budget import DEFAULT_TOOL_BUDGET, ToolBudget, measure_tools, select_tools
from .builtin import BuiltinMemoryProvider
from .builtin.scope import scope_folder
from .builtin.storage import FILE_NAMES, MemoryStorage
from .builtin.store import format_usage
from .errors import (
    ArgumentTypeError,
    BuiltinProviderError,
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    ProviderConflictError,
    ProviderUnavailableError,
)
from .fence import sanitize
from .home import default_home
from .isolation import GuardedProvider, ProviderHealth
from .provider import MemoryProvider, ToolSchema
from .recall import RecallBudget
from .security import scan
from .security.policy import Policy
from .session import Session
from .snapshot import Snapshot, render_cap, render_snapshot

__all__ = ["MemoryManager", "default_home"]

log = logging.getLogger(__name__)

#: Rule 1 is about schema size too: the external provider's exposed tools may cost at most this many tokens by
#: default (see :mod:`ironmem.core.budget`; ``MemoryManager(tool_budget=...)``, ``memory.tool_budget``).
TOOL_BUDGET = DEFAULT_TOOL_BUDGET


# --------------------------------------------------------------------------------------------------
# Manager
# --------------------------------------------------------------------------------------------------
class MemoryManager:
    """Holds the built-in provider and at most one external provider (rule 1), and starts sessions.

    ``read_only=True`` opens the memory for inspection (``ironmem status``, ``show``, ``search``): entries,
    snapshot, status and search work on a home this user cannot write, and nothing is created or changed there
    (no folder, lock file, backup or index write; the search index is opened with SQLite's ``mode=ro``, or kept in
    memory when there is none; a database is not migrated). Every write raises
    :class:`~ironmem.core.errors.ReadOnlyError`, and the ``memory`` tool answers with that error.

    ``overflow`` says what a write that does not fit its file's limit does: ``"archive"`` (the default) moves the
    least recalled, oldest entries to the archive beside the file (still searched and recalled, restorable with
    ``ironmem archive restore``); ``"refuse"`` refuses the write and asks the model to consolidate, as Hermes
    does. See :mod:`ironmem.core.builtin.archive`.

    ``embeddings`` chooses recall's ranking. ``"auto"`` (the default): hybrid recall (BM25 fused with a local
    embedding model, e5, else MiniLM) when ``ironmem[embeddings]`` is installed and the storage is files + SQLite,
    lexical (BM25) otherwise; ``status()["recall"]`` says which and why. ``False``: lexical. ``True``, ``"e5"`` or
    ``"minilm"``: hybrid, and :class:`~ironmem.core.builtin.vectors.EmbeddingsUnavailable` when the model cannot
    run here. Any embedder :func:`~ironmem.core.embedding.as_embedder` accepts works too. The model is loaded once
    per process; turns are embedded by a background worker, and a search first embeds the few the worker has not
    reached yet (docs/recall.md).

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
        memory_enabled: bool = True,
        user_profile_enabled: bool = True,
        memory_per_user: bool = True,
        tool_budget: int = DEFAULT_TOOL_BUDGET,
        recall_budget: RecallBudget | int | None = None,
        embeddings: Any = "auto",
        storage: str | MemoryStorage | None = None,
        read_only: bool = False,
        overflow: str = "archive",
        policy: Policy | None = None,
    ) -> None:
        for label, value in (("memory_char_limit", memory_char_limit), ("user_char_limit", user_char_limit)):
            if not isinstance(value, int) or value <= 0:
                raise InvalidArgumentError(f"{label} must be a positive number of characters, got {value!r}")
        if prefetch_timeout <= 0:
            raise InvalidArgumentError(f"prefetch_timeout must be > 0 seconds, got {prefetch_timeout!r}")
        if isinstance(tool_budget, bool) or not isinstance(tool_budget, int) or tool_budget < 0:
            raise InvalidArgumentError(f"tool_budget must be a whole number of tokens >= 0, got {tool_budget!r}")
        self.home = Path(home).expanduser() if home is not None else default_home()
        self.tool_budget = tool_budget
        #: What the external provider's exposed tools cost (None without an external provider).
        self.tool_budget_report: ToolBudget | None = None
        self.strict = strict
        self.prefetch_timeout = float(prefetch_timeout)
        self.tool_timeout = float(tool_timeout)
        self.sync_drain_timeout = float(sync_drain_timeout)
        #: With a user id, the session gets its own MEMORY.md too (USER.md is always per user). False opts in to
        #: agent notes shared by every user (one MEMORY.md in the home); the memory tool's description says which.
        self.memory_per_user = bool(memory_per_user)
        #: Items (and so fence tokens) a prefetch may recall: one setting, see :class:`RecallBudget`.
        self.recall_budget = RecallBudget.of(recall_budget)
        self.builtin = BuiltinMemoryProvider(
            self.home,
            memory_char_limit=memory_char_limit,
            user_char_limit=user_char_limit,
            memory_enabled=memory_enabled,
            user_profile_enabled=user_profile_enabled,
            storage=storage,
            read_only=read_only,
            overflow=overflow,
            policy=policy,
        )
        self.builtin.add_write_listener(self._mirror_write)
        #: The external provider behind its guard (None without one): the only way calls reach it.
        self.guarded: GuardedProvider | None = None
        #: The built-in layer's health (a failed index write degrades it; ``status()`` reports it).
        self.builtin_health = ProviderHealth("builtin", "builtin")
        self._tools: dict[str, tuple[MemoryProvider, ToolSchema]] = {}
        self._closed = False
        self._rebuild_tools()
        try:
            self._start_embeddings(embeddings, read_only=read_only)
        except BaseException:
            self.close()
            raise
        if external is not None and not isinstance(external, MemoryProvider):
            self.close()
            hint = (f" To choose a provider by name, put `provider: {external}` in a config.yaml and use "
                    "MemoryManager.from_config(path)" if isinstance(external, str) else "")
            raise ArgumentTypeError(
                f"external takes a MemoryProvider instance, got {type(external).__name__} {external!r}.{hint}"
            )
        if external is not None and not self.add_provider(external):
            # Asked for by name: running on the built-in layer alone would hide the problem.
            reason = getattr(external, "unavailable_reason", "") or "see the warning logged by add_provider()"
            self.close()
            raise ProviderUnavailableError(
                f"external memory provider {getattr(external, 'name', external)!r} cannot join: {reason}"
            )

    @classmethod
    def from_config(cls, path: str | Path) -> MemoryManager:
        """Build a manager from a ``config.yaml`` (see :mod:`ironmem.core.config`)."""
        from .config import manager_from_config

        return manager_from_config(path)

    # -- rule 1 ---------------------------------------------------------------------------------
    @property
    def external(self) -> MemoryProvider | None:
        """The external provider, if one joined (rule 1: at most one)."""
        return self.guarded.provider if self.guarded is not None else None

    @property
    def providers(self) -> list[MemoryProvider]:
        """The built-in provider, then the external one if any."""
        return [self.builtin] + ([self.external] if self.external is not None else [])

    def add_provider(self, provider: MemoryProvider, *, tools: Sequence[str] | None = None) -> bool:
        """Add the external provider. Returns False (and logs why) when it cannot join.

        ``tools`` names which of the provider's tools the model gets (default: all it offers; ``[]``: none, recall
        and sync only). A name the provider does not offer raises :class:`ConfigError`.

        A second external provider is refused with a warning naming the active one, and so is a provider whose
        exposed tool schemas cost more than ``tool_budget`` tokens; with ``strict=True`` both raise
        :class:`ProviderConflictError` instead.
        """
        if not isinstance(provider, MemoryProvider):
            raise ArgumentTypeError(f"add_provider() takes a MemoryProvider instance, got {type(provider).__name__}")
        name = getattr(provider, "name", "") or ""
        if not name or name == "builtin":
            raise InvalidArgumentError(f"an external provider needs a unique non-empty name other than 'builtin' (got {name!r})")
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
        try:
            exposed = select_tools(schemas, tools, provider=name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        shown = {s.name for s in exposed}
        hidden = [s.name for s in schemas if s.name not in shown]
        budget = measure_tools(exposed, self.tool_budget, hidden)
        if not budget.fits:
            message = (
                f"refused external memory provider {name!r}: its tool schemas cost {budget.describe()}, over the "
                f"tool budget (every tool is sent with every request). Expose fewer tools with 'tools: [...]' in its "
                f"config section (add_provider(p, tools=[...])), or raise memory.tool_budget"
            )
            if self.strict:
                raise ProviderConflictError(message)
            log.warning(message)
            return False
        self.guarded = GuardedProvider(provider, timeout=self.tool_timeout, fast_timeout=self.prefetch_timeout)
        self.tool_budget_report = budget
        self._rebuild_tools(exposed)
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
        assert self.guarded is not None
        self.guarded.close(self.sync_drain_timeout)
        self.guarded = None
        self.tool_budget_report = None
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

    def tool_schemas(self, user_id: str | None = None, *, scopes: dict[str, str] | None = None) -> list[ToolSchema]:
        """Every tool the model gets: the built-in ones, then the external provider's. With ``user_id``, as that
        user's sessions see them: the ``memory`` tool says whether the agent's notes are shared between users or
        private to this one (``scopes``, default: the manager's setting for the user)."""
        schemas = [schema for _, schema in self._tools.values()]
        if user_id is None:
            return schemas
        scoped = {s.name: s for s in self.builtin.tool_schemas_for(scopes or self.scopes_for(user_id), user_id)}
        return [scoped.get(s.name, s) if s.provider == "builtin" else s for s in schemas]

    def tool_owner(self, name: str) -> MemoryProvider | None:
        """The provider that answers tool ``name`` (the first to offer it), or None for an unknown tool."""
        owner = self._tools.get(name)
        return owner[0] if owner is not None else None

    # -- sessions -------------------------------------------------------------------------------
    def start_session(
        self,
        session_id: str | None = None,
        user_id: str | None = None,
        *,
        snapshot: Snapshot | dict[str, Any] | None = None,
        memory_per_user: bool | None = None,
    ) -> Session:
        """Start a conversation: renders and freezes its snapshot.

        With a ``user_id`` the session reads and writes that user's own ``USER.md`` and ``MEMORY.md``
        (``users/<folder>/``), never another user's; ``memory_per_user=False`` (default: the manager's setting)
        opts in to agent notes shared by all users (the home's ``MEMORY.md``). Without a user id the session uses
        Hermes's files in the home, exactly as Hermes does. See ``docs/storage.md``.

        To resume a conversation in another process (a thread restored from a checkpoint), pass the
        ``snapshot`` it was started with (``session.snapshot.to_dict()``): the session then keeps those exact
        bytes, and its live delta covers every write made since, by anyone.
        """
        if self._closed:
            raise ClosedError("this MemoryManager is closed; create a new one")
        for label, value in (("session_id", session_id), ("user_id", user_id)):
            if value is None:
                continue
            if not isinstance(value, str):
                raise ArgumentTypeError(f"{label} must be a string (or None), got {type(value).__name__} {value!r}")
            if not value.strip():
                raise InvalidArgumentError(
                    f"{label} is empty; pass a non-empty string, or None "
                    + ("for a fresh random id" if label == "session_id" else "for a session without a user")
                )
        if isinstance(snapshot, dict):
            snapshot = Snapshot.from_dict(snapshot)
        per_user = self.memory_per_user if memory_per_user is None else bool(memory_per_user)
        scopes = self.builtin.scopes_for(user_id, memory_per_user=per_user)
        return Session(self, session_id or uuid.uuid4().hex, user_id, scopes=scopes, snapshot=snapshot)

    def scopes_for(self, user_id: str | None = None, *, memory_per_user: bool | None = None) -> dict[str, str]:
        """The scope of each target for ``user_id`` (``{"memory": "", "user": "ada"}``); see ``docs/storage.md``."""
        per_user = self.memory_per_user if memory_per_user is None else bool(memory_per_user)
        return self.builtin.scopes_for(user_id, memory_per_user=per_user)

    def render_snapshot(
        self, user_id: str | None = None, *, memory_per_user: bool | None = None, scopes: dict[str, str] | None = None
    ) -> Snapshot:
        """What a session of ``user_id`` starting now would show in its system prompt."""
        scopes = scopes or self.scopes_for(user_id, memory_per_user=memory_per_user)
        states = {target: self.builtin.state(target, scopes[target]) for target in ("memory", "user")}
        blocks: list[str] = []
        if self.guarded is not None:
            block = self.guarded.call("system_prompt_block", default="", fast=True)
            block = block if isinstance(block, str) else ""
            verdict = scan(block)
            if verdict.blocked:
                log.warning("system prompt block of %r dropped: %s", self.guarded.name, verdict.reason)
            elif block.strip():
                blocks.append(sanitize(block))
        provenance = self.builtin.entry_provenance(states, scopes)
        return render_snapshot(states, self.builtin.limits, blocks, enabled=self.builtin.enabled,
                               provenance=provenance, policy=self.builtin.policy)

    # -- writes from the built-in layer, mirrored out -------------------------------------------
    def _mirror_write(self, action: str, target: str, content: str) -> None:
        if self.guarded is not None:
            self.guarded.submit("on_memory_write", action, target, content)

    # -- status ---------------------------------------------------------------------------------
    def _start_embeddings(self, embeddings: Any, *, read_only: bool) -> None:
        """Hybrid recall per ``embeddings`` (see the class docstring); status()["recall"] says what was chosen."""
        from .builtin.vectors import EmbeddingsUnavailable, embeddings_missing

        auto = embeddings is None or (isinstance(embeddings, str) and embeddings == "auto")
        index: Any = self.builtin.index  # a SearchIndex (files + SQLite) has vectors; PostgreSQL has not
        enable = getattr(index, "enable_vectors", None)
        if embeddings is False or (not auto and not embeddings):
            if enable is not None:
                index.vectors_reason = "off (embeddings=False)"
            return
        if read_only:
            if enable is not None:
                index.vectors_reason = "off in a read-only manager (its vectors would be written)"
            if not auto:
                log.info("hybrid recall is off in a read-only manager (its vectors would be written); recall is lexical")
            return
        if enable is None:  # status()["recall"] says so; an explicit request also logs it
            if not auto:
                log.warning("hybrid recall needs the files + SQLite storage; this storage recalls lexically")
            return
        local = "default" if auto or embeddings is True else embeddings if embeddings in ("e5", "minilm") else None
        if local is not None:
            missing = embeddings_missing(local)
            if missing and auto:
                index.vectors_reason = f"the embedding model is not installed ({missing})"
                return
            if missing:
                raise EmbeddingsUnavailable(
                    f"embeddings={embeddings!r} asks for hybrid recall, which cannot run here: {missing}. "
                    "Leave embeddings unset ('auto') to recall lexically where the model is missing, or pass False"
                )
        if not enable(local if local is not None else embeddings) and local is not None and not auto:
            raise EmbeddingsUnavailable(f"embeddings={embeddings!r}: hybrid recall cannot start: {index.vectors_reason}")

    def _recall_status(self) -> dict[str, Any]:
        status = getattr(self.builtin.index, "recall_status", None)
        if status is None:
            return {"mode": "lexical", "reason": "this storage has no dense vectors yet (hybrid recall runs on the "
                    "files + SQLite storage only; docs/storage-postgres.md)"}
        return dict(status())

    def remove_entry(
        self, target: str, number: int, *, user_id: str | None = None, backup: bool = True,
        expected: str | None = None,
    ) -> tuple[str, Path | None]:
        """Remove entry ``number`` (1-based, in stored order, as ``ironmem show`` lists it) of ``target``
        (``memory`` or ``user``) in the scope of ``user_id`` (default: the shared files). Works on every storage.

        With ``backup``, the entries as they were are saved first: beside the file (``FILE.<time>.<pid>.bak``)
        for file storage, in ``<home>/.ironmem/backups/`` for a database. ``expected`` is the entry the caller
        showed the user: when the entry at ``number`` is no longer that text (another writer changed the list),
        nothing is removed.

        Returns the removed text and the backup's path. Raises :class:`OperationError` for a bad target, number
        or a changed entry, :class:`MemoryFileError` for a file that cannot be read, :class:`ReadOnlyError` when
        the manager was opened read-only; nothing is written then.
        """
        from .builtin.store import render_entries
        from .builtin.tools import Operation
        from .errors import MemoryFileError, OperationError, ReadOnlyError

        if target not in self.builtin.files:
            raise OperationError(f"unknown target {target!r}; use memory or user")
        if self.builtin.read_only:
            raise ReadOnlyError(f"this manager opened {self.home} read-only; nothing was removed")
        scopes = self.scopes_for(user_id)
        entry_file = self.builtin.file(target, scopes[target])
        state = entry_file.read()
        name = FILE_NAMES[target]
        if state.corrupt:
            raise MemoryFileError(f"{state.corrupt} ({entry_file.path}); fix or delete the file first")
        if not 1 <= number <= len(state.entries):
            raise OperationError(
                f"{name} has {len(state.entries)} entries; pick a number between 1 and "
                f"{len(state.entries)} (as `ironmem show` lists them)"
            )
        entry = state.entries[number - 1]
        if expected is not None and entry != expected:
            raise OperationError(
                f"entry {number} of {name} changed since it was shown (another writer); nothing was removed. "
                "List the entries again and retry"
            )
        copy = self._save_copy(entry_file, name, scopes[target], render_entries(state.entries)) if backup else None
        self.builtin.apply([Operation("remove", target, old_text=entry)], scopes=scopes)
        return entry, copy

    def _save_copy(self, entry_file: Any, name: str, scope: str, text: str) -> Path | None:
        """A copy of one (scope, target) before a change: the file itself beside it, or its entries rendered in
        the Hermes format under ``<home>/.ironmem/backups/`` for a database."""
        import shutil
        import time

        from .errors import MemoryFileError

        stamp = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.{os.getpid()}"
        path = entry_file.path
        try:
            if isinstance(path, Path):
                if not path.exists():
                    return None
                copy = path.with_name(f"{path.name}.{stamp}.bak")
                shutil.copy2(path, copy)
                return copy
            folder = self.home / ".ironmem" / "backups"
            folder.mkdir(parents=True, exist_ok=True)
            label = f"{scope_folder(scope)}." if scope else ""
            copy = folder / f"{name}.{label}{stamp}.bak"
            copy.write_text(text, encoding="utf-8")
            return copy
        except OSError as exc:
            raise MemoryFileError(
                f"could not save a copy of {name} before removing ({exc.strerror or exc}); nothing was removed. "
                "Make the memory home writable, or skip the copy (backup=False, `ironmem remove --no-backup`)"
            ) from exc

    def status(self, user_id: str | None = None) -> dict[str, Any]:
        """Providers and their health, file usage, the snapshot hash a new session would get.

        Each file says whether it is ``over_limit``; its ``usage`` text is capped at 100% and names the excess
        instead of printing a percentage in the thousands. ``users`` lists the user scopes that have files.
        """
        scopes = self.scopes_for(user_id)
        files: dict[str, Any] = {}
        for target in ("memory", "user"):
            memory_file = self.builtin.file(target, scopes[target])
            state = memory_file.read()
            limit = self.builtin.limits[target]
            info: dict[str, Any] = {
                "path": str(memory_file.path),
                "scope": scopes[target],
                "enabled": self.builtin.enabled[target],
                "entries": len(state.entries),
                "chars": state.chars,
                "limit": limit,
                "usage": format_usage(state.chars, limit),
                "over_limit": state.chars > limit,
            }
            if state.chars > limit:
                info["snapshot_note"] = (
                    f"over the limit by {state.chars - limit:,} chars; the snapshot shows at most "
                    f"{render_cap(limit):,} chars of it, with a marker. Remove or shorten entries"
                )
            if state.corrupt:
                info["error"] = state.corrupt
                if state.backup is not None:  # none when opened read-only: the file is the only copy
                    info["backup"] = str(state.backup)
            files[target] = info
        providers = []
        for provider in self.providers:
            entry = self.health(provider.name).to_dict()
            entry["tools"] = [s.name for s in self.tool_schemas() if s.provider == provider.name]
            describe = getattr(provider, "status_info", None)  # optional: {"config": ..., "service": ...}
            if callable(describe):
                try:
                    entry.update({k: v for k, v in describe().items() if k not in entry})
                except Exception as exc:  # status must work even when a provider's report does not
                    entry["status_info_error"] = f"{type(exc).__name__}: {exc}"
            details = getattr(provider, "status", None) if provider is self.external else None
            if callable(details):  # optional, no network: what the provider is configured to talk to
                try:
                    info = details()
                    if isinstance(info, dict):
                        entry["details"] = info
                except Exception as exc:  # a status page must not fail because of a provider
                    entry["details"] = {"error": f"{type(exc).__name__}: {exc}"}
            providers.append(entry)
        return {
            "home": str(self.home),
            "storage": self.builtin.storage.describe(),
            "providers": providers,
            "files": files,
            "users": self.builtin.known_scopes(),
            "turns_indexed": self.builtin.index.turn_count(),
            "recall": {"budget_items": self.recall_budget.items, "budget_tokens": self.recall_budget.tokens,
                       **self._recall_status()},
            "snapshot_hash": self.render_snapshot(scopes=scopes).hash,
            "tool_budget": self.tool_budget_status(),
        }

    def tool_budget_status(self) -> dict[str, Any]:
        """The external tool budget: the limit, and what the external provider's exposed tools use of it."""
        if self.tool_budget_report is not None:
            return self.tool_budget_report.to_dict()
        return {"limit": self.tool_budget, "used": 0, "fits": True, "tools": {}}

    def health(self, name: str) -> ProviderHealth:
        """The health of provider ``name`` (``"builtin"`` or the external provider's name)."""
        if name == "builtin":
            return self.builtin_health
        if self.guarded is not None and self.guarded.name == name:
            return self.guarded.health
        raise KeyError(f"no provider named {name!r} in this manager")

    def check_external(self) -> ProviderHealth | None:
        """Let the external provider contact its backend now (its optional ``probe()``) and record the outcome.

        Returns the provider's health (None without an external provider). Used by ``ironmem status``.
        """
        if self.guarded is None:
            return None
        self.guarded.call("probe")
        return self.guarded.health

    # -- lifecycle ------------------------------------------------------------------------------
    def drain(self, timeout: float | None = None) -> bool:
        """Wait for queued background work (syncs to the external provider)."""
        if self.guarded is None:
            return True
        return self.guarded.drain(self.sync_drain_timeout if timeout is None else timeout)

    def close(self) -> None:
        """Drain background work, shut the external provider down, close the index."""
        if self._closed:
            return
        self._closed = True
        if self.guarded is not None:
            self.guarded.close(self.sync_drain_timeout)
        self.builtin.shutdown()

    def __enter__(self) -> MemoryManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ext = self.external.name if self.external else None
        return f"<MemoryManager home={str(self.home)!r} external={ext!r}>"
