"""A local vector memory: SQLite + sqlite-vec on disk, any embedder, scoped per user, near-duplicates merged.

Install with ``pip install 'ironmem[vector]'`` (``sqlite-vec``, and ``sqlean.py`` for Pythons whose ``sqlite3``
cannot load extensions, such as pyenv and python.org macOS builds).

Example:
    >>> import tempfile
    >>> from ironmem import MemoryManager
    >>> from ironmem.testing.embeddings import HashingEmbedder
    >>> home = tempfile.mkdtemp()
    >>> with MemoryManager(home=home, external=LocalVectorProvider(HashingEmbedder())) as manager:
    ...     s1 = manager.start_session("s1", user_id="ada")
    ...     s1.sync_turn("I keep my bike in the garage", "Noted.")
    ...     s1.end()
    >>> with MemoryManager(home=home, external=LocalVectorProvider(HashingEmbedder())) as manager:
    ...     recall = manager.start_session("s2", user_id="ada").prefetch("where is my bike?")
    >>> any(item.source == "local_vector" and "garage" in item.text for item in recall.items)
    True
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..core.builtin.index import enable_wal
from ..core.embedding import Embedder, as_embedder, describe_embedder
from ..core.errors import InvalidArgumentError, ProviderUnavailableError
from ..core.provider import ToolSchema
from ._base import ProviderBase, turn_text
from ._tools import err as _err
from ._tools import ok as _ok
from ._tools import run_tool, search_result, search_schema

__all__ = ["LocalVectorProvider", "LocalVectorSettings", "sqlite_driver"]

log = logging.getLogger("ironmem.providers.local_vector")

DB_FILE = "local_vector.db"
DEFAULT_USER = "default"

SEARCH_TOOL = search_schema(
    "vector_memory_search",
    (
        "Search long-term memory by meaning (not just exact words). Returns saved facts and past exchanges "
        "with their ids and similarity scores."
    ),
)
WRITE_TOOL = ToolSchema(
    name="vector_memory_write",
    description=(
        "Save a fact to long-term memory (action=save, with content) or delete one (action=forget, with the id "
        "from a search result). Near-identical facts are merged, not stored twice."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["save", "forget"], "description": "save a new fact or forget one."},
            "content": {"type": "string", "description": "The fact to save (action=save)."},
            "id": {"type": "integer", "description": "Id of the memory to delete (action=forget)."},
        },
        "required": ["action"],
    },
)



# --------------------------------------------------------------------------------------------------
# SQLite driver with extension loading
# --------------------------------------------------------------------------------------------------
_DRIVERS = ("sqlite3", "pysqlite3.dbapi2", "sqlean")


def sqlite_driver() -> ModuleType:
    """The first DB-API SQLite module here that can load extensions: ``sqlite3``, ``pysqlite3``, ``sqlean``.

    Raises ImportError saying what to install when none can (many Python builds compile ``sqlite3`` without
    extension loading: pyenv's default, python.org's macOS installer).
    """
    tried = []
    for name in _DRIVERS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            tried.append(f"{name}: not installed")
            continue
        conn = module.connect(":memory:")
        try:
            if hasattr(conn, "enable_load_extension"):
                return module
            tried.append(f"{name}: built without extension loading")
        finally:
            conn.close()
    raise ImportError(
        "no SQLite driver here can load the sqlite-vec extension (" + "; ".join(tried) + "). "
        "Install one that can: pip install sqlean.py   (or pysqlite3-binary on Linux x86-64), "
        "or use a Python built with --enable-loadable-sqlite-extensions"
    )


def _missing_dependency() -> str:
    try:
        importlib.import_module("sqlite_vec")
    except ImportError:
        return "sqlite-vec is not installed: pip install 'ironmem[vector]'"
    try:
        sqlite_driver()
    except ImportError as exc:
        return str(exc)
    return ""


# --------------------------------------------------------------------------------------------------
# Settings (config.yaml section "local_vector")
# --------------------------------------------------------------------------------------------------
class LocalVectorSettings(BaseModel):
    """The ``local_vector`` section of ``config.yaml``."""

    model_config = ConfigDict(extra="forbid")

    embedder: str = Field(
        ...,
        description=(
            "import path of the embedder, 'package.module:object' (a LangChain Embeddings, a LlamaIndex embedding, "
            "a callable list[str] -> list[list[float]], or a class of one of these, created with embedder_options)"
        ),
    )
    embedder_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for an embedder class")
    path: str | None = Field(None, description=f"database file; default <home>/{DB_FILE}")
    top_k: int = Field(5, ge=1, le=50, description="memories recalled per turn")
    min_score: float = Field(0.3, ge=-1.0, le=1.0, description="minimum cosine similarity for recall")
    dedupe_threshold: float = Field(0.95, gt=0.0, le=1.0, description="cosine similarity above which a write merges")
    sync_turns: bool = Field(True, description="store each finished exchange")
    mirror_builtin: bool = Field(True, description="mirror writes of the built-in memory tool")
    default_user_id: str = Field(DEFAULT_USER, min_length=1, description="user id when a session has none")


# --------------------------------------------------------------------------------------------------
# Provider
# --------------------------------------------------------------------------------------------------
class LocalVectorProvider(ProviderBase):
    """Vector memory in one SQLite file (sqlite-vec), with a pluggable embedder; 2 tools.

    ``embedder`` is a LangChain ``Embeddings``, a LlamaIndex embedding, or a callable
    ``list[str] -> list[list[float]]`` (duck-typed; no framework is imported). Memories are scoped by the
    session's ``user_id``. A write whose cosine similarity to an existing memory of the same user is at least
    ``dedupe_threshold`` is merged into it (its text is updated to the newer wording).

    Example:
        >>> import tempfile, json
        >>> from ironmem.testing.embeddings import HashingEmbedder
        >>> p = LocalVectorProvider(HashingEmbedder(), path=tempfile.mkdtemp() + "/v.db")
        >>> p.initialize("s1", user_id="ada")
        >>> json.loads(p.handle_tool_call("vector_memory_write", {"action": "save", "content": "Ada likes tea"}))["success"]
        True
        >>> p.prefetch("what does Ada like?", session_id="s1")
        ['Ada likes tea']
        >>> p.shutdown()
    """

    name = "local_vector"
    settings_model: ClassVar[type[BaseModel]] = LocalVectorSettings
    env_aliases: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        embedder: Any = None,
        *,
        path: str | Path | None = None,
        top_k: int = 5,
        min_score: float = 0.3,
        dedupe_threshold: float = 0.95,
        sync_turns: bool = True,
        mirror_builtin: bool = True,
        default_user_id: str = DEFAULT_USER,
    ) -> None:
        if not 0.0 < dedupe_threshold <= 1.0:
            raise InvalidArgumentError(f"dedupe_threshold must be in (0, 1], got {dedupe_threshold!r}")
        if top_k < 1:
            raise InvalidArgumentError(f"top_k must be at least 1, got {top_k!r}")
        self._embedder: Embedder | None = as_embedder(embedder) if embedder is not None else None
        self.path = Path(path).expanduser() if path is not None else None
        self.top_k = top_k
        self.min_score = min_score
        self.dedupe_threshold = dedupe_threshold
        self.sync_turns = sync_turns
        self.mirror_builtin = mirror_builtin
        self.default_user_id = default_user_id
        self._conn: Any = None
        self._dims: int | None = None
        self._lock = threading.RLock()
        self._users: dict[str, str] = {}  # session id -> user id
        self._open_outbox(self._send)
        self._current_user = default_user_id
        self._closed = False

    # -- config ---------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, settings: LocalVectorSettings, *, home: Path) -> LocalVectorProvider:
        """Build from the ``local_vector`` config section; the database goes under ``home`` by default."""
        from ..core.config import import_object
        from ..core.errors import ConfigError

        obj = import_object(settings.embedder, key="local_vector.embedder")
        if isinstance(obj, type):
            try:
                obj = obj(**settings.embedder_options)
            except Exception as exc:
                raise ConfigError(
                    f"local_vector.embedder_options: creating {settings.embedder} failed: {type(exc).__name__}: {exc}"
                ) from exc
        elif settings.embedder_options:
            raise ConfigError(
                "local_vector.embedder_options: only used when local_vector.embedder names a class; "
                f"{settings.embedder} is an object. Remove embedder_options or point embedder at the class"
            )
        try:
            embedder = as_embedder(obj)
        except TypeError as exc:
            raise ConfigError(f"local_vector.embedder: {exc}") from exc
        path = Path(settings.path).expanduser() if settings.path else home / DB_FILE
        if not path.is_absolute():
            path = home / path
        return cls(
            embedder,
            path=path,
            top_k=settings.top_k,
            min_score=settings.min_score,
            dedupe_threshold=settings.dedupe_threshold,
            sync_turns=settings.sync_turns,
            mirror_builtin=settings.mirror_builtin,
            default_user_id=settings.default_user_id,
        )

    # -- contract -------------------------------------------------------------------------------
    @property
    def unavailable_reason(self) -> str:
        """Why :meth:`is_available` is False ("" when it is True)."""
        if self._embedder is None:
            return "no embedder: LocalVectorProvider(embedder=...) needs a LangChain, LlamaIndex or callable embedder"
        return _missing_dependency()

    def initialize(self, session_id: str, **ctx: Any) -> None:
        user = str(ctx.get("user_id") or self.default_user_id)
        with self._lock:
            self._users[session_id] = user
            self._current_user = user
            if self.path is None:
                home = ctx.get("home")
                if not home:
                    raise InvalidArgumentError("LocalVectorProvider needs path=... or a home in initialize(..., home=...)")
                self.path = Path(home) / DB_FILE
        self._attach_outbox(ctx)  # first: writes made while the store or the embedder is down are kept
        with self._lock:
            self._open()

    def tool_schemas(self) -> list[ToolSchema]:
        return [SEARCH_TOOL, WRITE_TOOL]

    # -- storage --------------------------------------------------------------------------------
    def open(self) -> LocalVectorProvider:
        """Open (and create) the database now instead of at the first session. Returns self."""
        with self._lock:
            self._open()
        return self

    def _open(self) -> Any:
        if self._conn is not None:
            return self._conn
        if self._embedder is None:
            raise ProviderUnavailableError(self.unavailable_reason)
        if self.path is None:
            raise ProviderUnavailableError("LocalVectorProvider has no database path yet: pass path=... or start a session")
        import sqlite_vec

        driver = sqlite_driver()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = driver.connect(str(self.path), check_same_thread=False, timeout=30)
        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            conn.enable_load_extension(False)
        enable_wal(conn)
        conn.execute("PRAGMA busy_timeout=30000")
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                """CREATE TABLE IF NOT EXISTS memories (
                       id INTEGER PRIMARY KEY AUTOINCREMENT,
                       user_id TEXT NOT NULL,
                       text TEXT NOT NULL,
                       source TEXT NOT NULL,
                       target TEXT,
                       session_id TEXT,
                       created_at REAL NOT NULL,
                       updated_at REAL NOT NULL,
                       merges INTEGER NOT NULL DEFAULT 0)"""
            )
            conn.execute("CREATE INDEX IF NOT EXISTS memories_user ON memories(user_id, source)")
        row = conn.execute("SELECT value FROM meta WHERE key = 'dims'").fetchone()
        stored = int(row[0]) if row else None
        dims = self._embedder.probe_dims()
        if stored is not None and stored != dims:
            conn.close()
            raise InvalidArgumentError(
                f"{self.path} holds {stored}-dimensional vectors but the embedder "
                f"{describe_embedder(self._embedder.source)} gives {dims}: use the embedder the database was built "
                "with, or another path for the new one"
            )
        with conn:
            conn.execute(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS vectors USING vec0("
                f"user_id TEXT PARTITION KEY, embedding FLOAT[{dims}] distance_metric=cosine)"
            )
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('dims', ?)", (str(dims),))
        self._dims = dims
        self._conn = conn
        self._closed = False
        return conn

    def _user(self, session_id: str | None = None) -> str:
        if session_id is not None and session_id in self._users:
            return self._users[session_id]
        return self._current_user

    def _knn(self, conn: Any, vector: list[float], user: str, k: int) -> list[tuple[int, str, float]]:
        import sqlite_vec

        rows = conn.execute(
            "SELECT v.rowid, v.distance, m.text FROM vectors v JOIN memories m ON m.id = v.rowid "
            "WHERE v.embedding MATCH ? AND k = ? AND v.user_id = ? ORDER BY v.distance",
            (sqlite_vec.serialize_float32(vector), k, user),
        ).fetchall()
        return [(int(r[0]), str(r[2]), 1.0 - float(r[1])) for r in rows]

    def add(
        self, text: str, *, user_id: str | None = None, source: str = "tool", target: str | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Store ``text`` for a user; merge into a near-identical memory instead of adding a second copy.

        Returns ``{"id", "merged", "similarity"}``.
        """
        text = (text or "").strip()
        if not text:
            raise InvalidArgumentError("nothing to save: content is empty")
        import sqlite_vec

        assert self._embedder is not None
        vector = self._embedder.embed_documents([text])[0]
        user = user_id or self._user(session_id)
        now = time.time()
        with self._lock:
            conn = self._open()
            nearest = self._knn(conn, vector, user, 1)
            if nearest and nearest[0][2] >= self.dedupe_threshold:
                mem_id, _old, similarity = nearest[0]
                with conn:
                    conn.execute(
                        "UPDATE memories SET text = ?, updated_at = ?, merges = merges + 1 WHERE id = ?",
                        (text, now, mem_id),
                    )
                    conn.execute("DELETE FROM vectors WHERE rowid = ?", (mem_id,))
                    conn.execute(
                        "INSERT INTO vectors(rowid, user_id, embedding) VALUES (?, ?, ?)",
                        (mem_id, user, sqlite_vec.serialize_float32(vector)),
                    )
                return {"id": mem_id, "merged": True, "similarity": round(similarity, 4)}
            with conn:
                cur = conn.execute(
                    "INSERT INTO memories(user_id, text, source, target, session_id, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (user, text, source, target, session_id, now, now),
                )
                mem_id = int(cur.lastrowid)
                conn.execute(
                    "INSERT INTO vectors(rowid, user_id, embedding) VALUES (?, ?, ?)",
                    (mem_id, user, sqlite_vec.serialize_float32(vector)),
                )
            return {"id": mem_id, "merged": False}

    def search(self, query: str, *, user_id: str | None = None, limit: int | None = None,
               min_score: float | None = None) -> list[dict[str, Any]]:
        """Memories of a user closest in meaning to ``query``: ``[{"id", "text", "score"}]``, best first."""
        query = (query or "").strip()
        if not query:
            return []
        assert self._embedder is not None
        vector = self._embedder.embed_query(query)
        user = user_id or self._current_user
        floor = self.min_score if min_score is None else min_score
        with self._lock:
            conn = self._open()
            hits = self._knn(conn, vector, user, limit or self.top_k)
        self.outbox.replay_soon()  # the embedder and the store answer: send what waits for them
        return [{"id": i, "text": t, "score": round(s, 4)} for i, t, s in hits if s >= floor]

    def forget(self, memory_id: int, *, user_id: str | None = None) -> bool:
        """Delete one memory of the user; False when it does not exist (or belongs to another user)."""
        user = user_id or self._current_user
        with self._lock:
            conn = self._open()
            with conn:
                cur = conn.execute("DELETE FROM memories WHERE id = ? AND user_id = ?", (memory_id, user))
                if cur.rowcount:
                    conn.execute("DELETE FROM vectors WHERE rowid = ?", (memory_id,))
            return bool(cur.rowcount)

    def count(self, *, user_id: str | None = None) -> int:
        """How many memories are stored (for one user, or for all when ``user_id`` is None)."""
        with self._lock:
            conn = self._open()
            if user_id is None:
                return int(conn.execute("SELECT COUNT(*) FROM memories").fetchone()[0])
            return int(conn.execute("SELECT COUNT(*) FROM memories WHERE user_id = ?", (user_id,)).fetchone()[0])

    # -- hooks ----------------------------------------------------------------------------------
    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        return [hit["text"] for hit in self.search(query, user_id=self._user(session_id))]

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        text = turn_text(user, assistant, ("User", "Assistant")) if self.sync_turns else ""
        if text:
            self.outbox.write({"op": "add", "user": self._user(session_id), "text": text, "source": "turn",
                               "target": None, "session": session_id})

    def on_memory_write(self, action: str, target: str, content: str) -> None:
        if not self.mirror_builtin or not (content or "").strip() or action not in ("add", "replace", "remove"):
            return
        if action == "remove":
            self.outbox.write({"op": "remove", "user": self._current_user, "target": target, "text": content})
        else:
            self.outbox.write({"op": "add", "user": self._current_user, "text": content, "source": "builtin",
                               "target": target, "session": None})

    def _send(self, record: dict[str, Any]) -> None:
        """Perform one queued write (the outbox's sender): a turn or note to store, or a removed note."""
        op, user = record.get("op"), str(record["user"])
        if op == "add":
            self.add(str(record["text"]), user_id=user, source=str(record["source"]), target=record["target"],
                     session_id=record["session"])
        elif op == "remove":
            with self._lock:
                conn = self._open()
                rows = conn.execute(
                    "SELECT id FROM memories WHERE user_id = ? AND source = 'builtin' AND target = ? AND instr(text, ?) > 0",
                    (user, record["target"], str(record["text"]).strip()),
                ).fetchall()
                with conn:
                    for (mem_id,) in rows:
                        conn.execute("DELETE FROM memories WHERE id = ?", (mem_id,))
                        conn.execute("DELETE FROM vectors WHERE rowid = ?", (mem_id,))
        else:
            log.error("local_vector: skipped a queued write of unknown kind %r", op)

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        return run_tool(name, args, lambda a: self._tool(name, a), log=log, label="local_vector")

    def _tool(self, name: str, args: dict[str, Any]) -> str:
        if name == SEARCH_TOOL.name:
            return search_result(args, self.top_k, lambda q, n: self.search(q, limit=n))
        if name == WRITE_TOOL.name:
            action = args.get("action")
            if action == "save":
                content = args.get("content")
                if not isinstance(content, str) or not content.strip():
                    return _err("'content' is required for action=save: the fact to remember")
                return _ok(**self.add(content, source="tool"))
            if action == "forget":
                mem_id = args.get("id")
                if isinstance(mem_id, bool) or not isinstance(mem_id, int):
                    return _err("'id' (an integer from a search result) is required for action=forget")
                if not self.forget(mem_id):
                    return _err(f"no memory with id {mem_id} for this user; search first to find the id")
                return _ok(forgotten=mem_id)
            return _err(f"'action' must be 'save' or 'forget', got {action!r}")
        return _err(f"unknown tool {name!r}; {self.name} provides {SEARCH_TOOL.name} and {WRITE_TOOL.name}")

    def shutdown(self) -> None:
        self.outbox.close()
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None
            self._closed = True

    def __repr__(self) -> str:
        return f"<LocalVectorProvider path={str(self.path) if self.path else None!r}>"
