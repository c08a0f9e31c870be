"""PostgreSQL storage: one memory shared by agents on many machines (``storage: postgresql://...``).

Needs ``pip install 'ironmem[postgres]'`` (psycopg 3 and psycopg_pool). Tables live in their own schema
(``ironmem`` by default; ``?ironmem_schema=name`` in the URL or ``schema=`` picks another, so several memories
can share one database).

Writes: row locks, not advisory locks
-------------------------------------
Every (scope, target) has one row in ``docs``. A write runs in one transaction (READ COMMITTED):

1. ``INSERT ... ON CONFLICT DO NOTHING`` creates the rows it needs, then ``SELECT ... FOR UPDATE`` locks them,
   always in target order (a batch over ``memory`` and ``user`` locks ``memory`` first), so two batches cannot
   deadlock;
2. it reads the entries after the lock is granted (in READ COMMITTED every statement sees what was committed
   before it started, so the read includes the write that held the lock before us), applies the operations and
   checks the character limits (under the lock), rewrites that target's entry rows, bumps ``docs.version``;
3. it appends one row to ``writes`` (the write log: a sequence number drawn after the locks, the
   transaction id, the operations) and commits.

Writes to one (scope, target) are thus serialized, and the order of ``writes.seq`` is a valid serial order
(two writes that share a row get their numbers in lock order; writes that share no row commute). Row locks
were chosen over ``pg_advisory_xact_lock`` because (a) the lock lives on the data it protects, so anything that
edits the rows by hand with ``UPDATE`` also waits; (b) there is no hashing of (scope, target) into a 64-bit
key, so no collisions between unrelated users and no key space to coordinate with other applications that use
advisory locks in the same database; (c) it costs nothing extra: the write updates the row anyway. Both kinds
are released when the transaction ends or the backend dies, so a killed connection never leaves a lock behind.

Lost connections: a write is retried (new connection, same write id) until ``retry_for`` seconds have passed.
The retry takes the locks first and then looks for its write id in the write log, so a write whose COMMIT
reached the server just before the connection broke is never applied twice. Turns carry a unique key for the
same reason. When the server stays unreachable the caller gets a :class:`~ironmem.core.errors.StorageError`
saying so; nothing is half-applied (one transaction per write).

Search: the same ranking as the SQLite index, by construction
--------------------------------------------------------------
:mod:`~ironmem.core.builtin.ranking` decides for both backends what a turn matches and how it scores. A turn
is indexed as a ``tsvector`` built in Python from that module's tokens (stemmed words, CJK bigrams) with their
positions, so the server stems and folds nothing of its own; a query term becomes a ``tsquery`` of the same
tokens (a word, a phrase ``a <-> b``, a prefix ``a:*``). The SQLite index holds the same tokens in FTS5, so a
term matches the same turns on both backends.

This class only supplies what the shared ranking needs (:class:`~ironmem.core.builtin.ranking.TurnSource`):
each term's ``CANDIDATE_CAP`` newest matches (one statement for all terms; per term the planner picks a
backward scan of the primary key, which stops early for a common word, or the GIN index for a rare one), the
newest turns holding all of the rarest capped terms, the newest turn id, the lengths of the newest turns, and
the texts of the candidates. The shared code scores them with BM25 and orders them, so ``session_search`` and
recall give the same hits with the same scores on both backends. Entries (a few dozen per scope) are read and
scored by the same module from their text.

Turn ids are handed out in commit order (each turn insert takes a transaction-level advisory lock before its id
is drawn), so a process that has seen turn N has seen every turn below N. Candidate lists are therefore cached per
process, like the SQLite index does, and caught up by reading only the matches above the turn they reached.

Example (needs a server)::

    storage = PostgresStorage("postgresql://app@db.internal/agents")
    manager = MemoryManager(home="~/.ironmem", storage=storage)   # or storage="postgresql://..."
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import logging
import math
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import StorageError
from .archive import ArchiveState, Record
from .index import SearchHit, hit_of, merge_hits
from .ranking import (
    CANDIDATE_CAP,
    PROBE_ROWS,
    Candidates,
    LengthWindow,
    Term,
    TurnRow,
    filter_rows,
    query_terms,
    rank_entries,
    rank_turns,
    tokens,
)
from .storage import ArchiveRecords, Change, MemoryStorage
from .store import FileState, render_entries

if TYPE_CHECKING:  # pragma: no cover
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStorage", "PostgresIndex", "MIGRATIONS", "SCHEMA_VERSION"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Only this many characters of a turn are indexed (a tsvector holds at most 1 MB); the whole turn is stored.
MAX_INDEXED_CHARS = 200_000
#: Advisory lock class for migrations (the second key is the schema name's hash).
_MIGRATION_LOCK_CLASS = 0x1E3E
#: Advisory lock class that hands out turn ids in commit order (see PostgresIndex._order_lock).
_TURN_ORDER_LOCK_CLASS = 0x1E3F
#: Candidate lists kept per process between searches, in turn ids (as the SQLite index does).
CANDIDATE_CACHE_IDS = 200_000

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


# -- migrations ----------------------------------------------------------------------------------
#: (version, name, SQL). Append only; ``{s}`` is the schema, ``{cfg}`` the text-search configuration.
MIGRATIONS: list[tuple[int, str, str]] = [
    (
        1,
        "entries, write log, turns, text search",
        """
        CREATE TEXT SEARCH DICTIONARY {s}.english_stem (TEMPLATE = pg_catalog.snowball, Language = english);
        CREATE TEXT SEARCH CONFIGURATION {cfg} (COPY = pg_catalog.english);
        ALTER TEXT SEARCH CONFIGURATION {cfg}
            ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part WITH {s}.english_stem;
        CREATE TABLE {s}.docs (
            scope text NOT NULL,
            target text NOT NULL,
            version bigint NOT NULL DEFAULT 0,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (scope, target)
        );
        CREATE TABLE {s}.entries (
            scope text NOT NULL,
            target text NOT NULL,
            pos integer NOT NULL,
            text text NOT NULL,
            nterms integer NOT NULL,
            terms tsvector NOT NULL,
            PRIMARY KEY (scope, target, pos)
        );
        CREATE TABLE {s}.writes (
            seq bigserial PRIMARY KEY,
            write_id uuid NOT NULL UNIQUE,
            scope text NOT NULL,
            targets text[] NOT NULL,
            versions bigint[] NOT NULL,
            ops jsonb,
            xact xid8 NOT NULL DEFAULT pg_current_xact_id(),
            at timestamptz NOT NULL DEFAULT clock_timestamp()
        );
        CREATE TABLE {s}.turns (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            turn_key uuid UNIQUE,
            session_id text NOT NULL,
            user_id text,
            ts double precision NOT NULL,
            user_text text NOT NULL,
            assistant_text text NOT NULL,
            terms tsvector NOT NULL
        );
        CREATE INDEX turns_terms ON {s}.turns USING gin (terms);
        CREATE INDEX turns_session ON {s}.turns (session_id);
        """,
    ),
]
MIGRATIONS.append((
    2,
    "turns and entries indexed with ironmem's own tokens (ranking.tokens), no server-side stemming",
    "SELECT 1",  # the data change is done in Python: see PostgresStorage._reindex
))
MIGRATIONS.append((
    3,
    "the archive log (issue 37): archived, superseded, written, restored and recalled records per (scope, target)",
    """
    CREATE TABLE IF NOT EXISTS {s}.archive (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        scope text NOT NULL,
        target text NOT NULL,
        record jsonb NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE INDEX IF NOT EXISTS archive_scope_target ON {s}.archive (scope, target, seq);
    """,
))
SCHEMA_VERSION = MIGRATIONS[-1][0]
#: Migrations after which every indexed text is re-tokenized (the tokens changed).
_REINDEX_AT = {2}


def tsvector_literal(text: str) -> str:
    """``text`` as a ``tsvector`` literal of :func:`~ironmem.core.builtin.ranking.tokens` with their positions
    (what the SQLite index holds in FTS5; positions make CJK phrases match as phrases)."""
    positions: dict[str, list[str]] = {}
    for i, tok in enumerate(tokens(text[:MAX_INDEXED_CHARS]), start=1):
        positions.setdefault(tok, []).append(str(min(i, 16383)))
    return " ".join("'" + tok.replace("\\", "\\\\").replace("'", "''") + "':" + ",".join(pos[:256])
                    for tok, pos in positions.items())


def tsquery_of(term: Term) -> str:
    """A ranking term as a ``tsquery`` literal: a token, a phrase of tokens, or a prefix."""
    quoted = ["'" + tok.replace("\\", "\\\\").replace("'", "''") + "'" for tok in term.tokens]
    return " <-> ".join(quoted) + (":*" if term.prefix else "")


def _token_count(text: str) -> int:
    return len(tokens(text))


def _split_url(url: str) -> tuple[str, str | None]:
    """The URL without ironmem's own query parameter, and that parameter (the schema) if given."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = None
    kept = []
    for key, value in query:
        if key == "ironmem_schema":
            schema = value
        else:
            kept.append((key, value))
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(kept), parts.fragment)), schema


def _require_psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise StorageError(
            "PostgreSQL storage needs psycopg 3 and psycopg_pool: pip install 'ironmem[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class PostgresStorage(MemoryStorage):
    """Entries, write log and turn index in PostgreSQL, shared by every process that opens the same URL.

    ``retry_for`` is how long a call keeps retrying after a lost connection (a server restart, a killed
    backend) before it raises :class:`~ironmem.core.errors.StorageError`. ``pool_size`` bounds the connections
    one process keeps.

    Example (needs a server)::

        >>> storage = PostgresStorage("postgresql://postgres@127.0.0.1:5432/postgres")  # doctest: +SKIP
        >>> storage.read("", "memory").entries  # doctest: +SKIP
        ()
    """

    kind = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 4,
        retry_for: float = 15.0,
        connect_timeout: float = 5.0,
        migrate: bool = True,
    ) -> None:
        psycopg, psycopg_pool = _require_psycopg()
        self._psycopg = psycopg
        conninfo, url_schema = _split_url(url)
        schema = schema or url_schema or "ironmem"
        if not _SCHEMA_NAME.match(schema):
            raise StorageError(
                f"invalid PostgreSQL schema name {schema!r} for ironmem: use lowercase letters, digits and _ "
                "(at most 63 characters, not starting with a digit)"
            )
        self.schema = schema
        self._cfg = f"{schema}.english"
        self.retry_for = float(retry_for)
        self.connect_timeout = float(connect_timeout)
        self._conninfo = conninfo
        try:
            params = psycopg.conninfo.conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise StorageError(f"invalid PostgreSQL URL: {exc}") from None
        self._where = (
            f"postgresql://{params.get('user') or ''}{'@' if params.get('user') else ''}"
            f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}/{params.get('dbname') or ''}"
        )
        self._kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": None,  # custom plans: the best plan depends on how common a search word is
            "connect_timeout": max(1, int(math.ceil(self.connect_timeout))),
            "application_name": "ironmem",
        }
        if migrate:
            self.migrate()
        self._pool_size = max(1, int(pool_size))
        self._lock = threading.Lock()
        self._closed = False
        #: (scope, target) -> (folded archive log, the last ``seq`` folded in)
        self._archive_cache: dict[tuple[str, str], tuple[ArchiveState, int]] = {}
        #: The connection of the write transaction this thread is in (``change`` reads the archive through it, so a
        #: write never needs a second pooled connection).
        self._tx = threading.local()
        self._pool: ConnectionPool = self._new_pool()
        self._index = PostgresIndex(self)
        if not migrate:
            self._require_current_schema()

    def _new_pool(self) -> ConnectionPool:
        _, psycopg_pool = _require_psycopg()
        pool = psycopg_pool.ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._pool_size,
            kwargs=self._kwargs,
            open=False,
            name=f"ironmem-{self.schema}",
            timeout=max(0.5, min(self.connect_timeout, self.retry_for)),
            reconnect_timeout=max(60.0, self.retry_for),
        )
        pool.open(wait=False)
        return pool

    def _revive(self, exc: BaseException) -> None:
        """After a lost connection: drop broken pooled connections; when the pool could not connect at all
        (its reconnection attempts back off to several seconds while the server is down) and the server answers
        again, replace the pool so the next call does not wait for its next attempt."""
        pool = self._pool
        try:
            pool.check()
        except Exception:  # pragma: no cover - best effort
            pass
        _, psycopg_pool = _require_psycopg()
        if not isinstance(exc, psycopg_pool.PoolTimeout):
            return
        try:
            probe = self._psycopg.connect(self._conninfo, **self._kwargs)
        except self._psycopg.Error:
            return  # still down
        probe.close()
        with self._lock:
            if self._closed or self._pool is not pool:
                return
            self._pool = self._new_pool()
        threading.Thread(target=pool.close, kwargs={"timeout": 5.0}, daemon=True).start()

    # -- connections ------------------------------------------------------------------------------
    def describe(self) -> str:
        return f"{self._where} (schema {self.schema})"

    def __repr__(self) -> str:
        return f"<PostgresStorage {self.describe()}>"

    def _unavailable(self, exc: BaseException, what: str, *, written: str) -> StorageError:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StorageError(
            f"PostgreSQL at {self._where} is unreachable ({detail}); {what} gave up after {self.retry_for:g} s of "
            f"retries.{' ' + written if written else ''} Check that the server is running and reachable, then retry"
        )

    def run(self, what: str, fn: Callable[[psycopg.Connection[Any]], T], *, written: str = "Nothing was written.") -> T:
        """Call ``fn(connection)``, retrying on a lost connection until ``retry_for`` seconds have passed.

        ``fn`` must be safe to repeat: one transaction (or one autocommit statement) that either committed or
        did nothing, and that checks for its own earlier commit when that matters (writes do).
        """
        psycopg = self._psycopg
        if self._closed:
            raise StorageError("this PostgreSQL storage is closed; open a new MemoryManager")
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        while True:
            try:
                with self._pool.connection() as conn:
                    return fn(conn)
            except psycopg.OperationalError as exc:
                if time.monotonic() + delay > deadline:
                    raise self._unavailable(exc, what, written=written) from exc
                log.warning("PostgreSQL connection lost during %s (%s); retrying", what, exc)
                self._revive(exc)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except psycopg.Error as exc:
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StorageError(f"PostgreSQL at {self._where} refused {what}: {detail}.{' ' + written if written else ''}") from exc

    def migrate(self) -> None:
        """Create or upgrade ironmem's tables (idempotent; safe from many processes at once).

        A process that finds the schema current does nothing; otherwise it takes a transaction-level advisory
        lock (so concurrent starters wait for one another), re-reads the applied version, and applies the
        missing migrations in the same transaction: all of them land, or none.
        """
        psycopg = self._psycopg
        s = self.schema
        try:
            conn = psycopg.connect(self._conninfo, **self._kwargs)
        except psycopg.OperationalError as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageError(
                f"cannot connect to PostgreSQL at {self._where}: {detail}. Check the URL, that the server runs, "
                "and the user's password"
            ) from exc
        try:
            if self._applied(conn) == SCHEMA_VERSION:
                return
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_MIGRATION_LOCK_CLASS, s))
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {s}.migrations (version integer PRIMARY KEY, name text NOT NULL, "
                    "applied_at timestamptz NOT NULL DEFAULT now())"
                )
                current = self._applied(conn)
                if current > SCHEMA_VERSION:
                    raise self._newer_schema(current)
                for version, name, sql in MIGRATIONS:
                    if version <= current:
                        continue
                    conn.execute(sql.format(s=s, cfg=self._cfg).encode())
                    if version in _REINDEX_AT and current:  # a fresh schema has nothing to re-index
                        self._reindex(conn)
                    conn.execute(f"INSERT INTO {s}.migrations(version, name) VALUES (%s, %s)", (version, name))
                    log.info("ironmem schema %s migrated to version %d (%s)", s, version, name)
        except psycopg.Error as exc:
            raise StorageError(f"could not create the ironmem tables in {self.describe()}: {exc}") from exc
        finally:
            conn.close()

    def _reindex(self, conn: psycopg.Connection[Any], batch: int = 5000) -> None:
        """Re-tokenize every turn and entry (in the migration's transaction: all of it lands, or none)."""
        s = self.schema
        last = 0
        while True:
            rows = conn.execute(
                f"SELECT id, user_text, assistant_text FROM {s}.turns WHERE id > %s ORDER BY id LIMIT %s", (last, batch)
            ).fetchall()
            if not rows:
                break
            conn.execute(
                f"UPDATE {s}.turns t SET terms = u.terms::tsvector FROM unnest(%s::bigint[], %s::text[]) AS u(id, terms) "
                "WHERE t.id = u.id",
                ([r[0] for r in rows], [tsvector_literal(f"{r[1]}\n{r[2]}") for r in rows]),
            )
            last = int(rows[-1][0])
        for scope, target, pos, text in conn.execute(f"SELECT scope, target, pos, text FROM {s}.entries").fetchall():
            conn.execute(
                f"UPDATE {s}.entries SET terms = %s::tsvector, nterms = %s WHERE scope = %s AND target = %s AND pos = %s",
                (tsvector_literal(text), _token_count(text), scope, target, pos),
            )

    def _applied(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.migrations",)).fetchone()
        if row is None or row[0] is None:
            return 0
        row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {self.schema}.migrations").fetchone()
        return int(row[0]) if row else 0

    def schema_version(self) -> int:
        return self.run("reading the schema version", self._applied, written="")

    def _require_current_schema(self) -> None:
        """Opened without migrating (read-only inspection): stop with what to do when the tables are missing, older
        or newer than this ironmem, instead of a database error on the first read."""
        try:
            version = self.schema_version()
        except StorageError:
            self.close()
            raise
        if version == SCHEMA_VERSION:
            return
        self.close()
        where = self.describe()
        if version == 0:
            raise StorageError(
                f"no ironmem tables in {where}: nothing has been written there yet. Check the URL and the schema "
                "name; ironmem creates the tables the first time the memory is opened for writing (not read-only)"
            )
        if version < SCHEMA_VERSION:
            raise StorageError(
                f"the ironmem tables in {where} are at version {version}, older than this ironmem ({SCHEMA_VERSION}), "
                "and a read-only open does not upgrade them: open the memory once for writing (not read-only), "
                "then inspect it"
            )
        raise self._newer_schema(version)

    def _newer_schema(self, version: int) -> StorageError:
        return StorageError(
            f"the ironmem tables in {self.describe()} are at version {version}, newer than this ironmem knows "
            f"({SCHEMA_VERSION}); upgrade ironmem on this machine"
        )

    # -- entries ----------------------------------------------------------------------------------
    @property
    def index(self) -> PostgresIndex:
        return self._index

    def entry_file(self, scope: str, target: str, *, limit: int) -> PostgresEntryFile:
        return PostgresEntryFile(self, scope, target, limit)

    def _read_many(self, conn: psycopg.Connection[Any], scope: str, targets: Sequence[str]) -> dict[str, FileState]:
        found: dict[str, list[str]] = {t: [] for t in targets}
        rows = conn.execute(
            f"SELECT target, text FROM {self.schema}.entries WHERE scope = %s AND target = ANY(%s) "
            "ORDER BY target, pos",
            (scope, list(targets)),
        ).fetchall()
        for target, text in rows:
            found[target].append(text)
        return {t: FileState(tuple(e), render_entries(e)) for t, e in found.items()}

    def read(self, scope: str, target: str) -> FileState:
        return self.run(
            f"reading {target} entries", lambda conn: self._read_many(conn, scope, [target])[target], written=""
        )

    def read_all(self, scope: str) -> dict[str, FileState]:
        """Both targets of ``scope`` in one statement (one consistent view)."""
        return self.run("reading entries", lambda conn: self._read_many(conn, scope, ["memory", "user"]), written="")

    def transact(self, scope: str, targets: Sequence[str], change: Change, *, record: Any = None) -> dict[str, FileState]:
        return self.transact_scoped({t: scope for t in targets}, change, record=record)

    def archive_state(self, scope: str, target: str) -> ArchiveState:
        """The folded archive log of (scope, target), brought up to date by reading only the newer rows (the log
        is append-only; rows are written under the (scope, target) row lock, in ``seq`` order of commit for one
        pair)."""
        key = (scope, target)
        with self._lock:
            cached = self._archive_cache.get(key)
        state, last = cached if cached is not None else (ArchiveState(), 0)

        def query(conn: psycopg.Connection[Any]) -> list[tuple[int, Any]]:
            return conn.execute(
                f"SELECT seq, record FROM {self.schema}.archive WHERE scope = %s AND target = %s AND seq > %s "
                "ORDER BY seq", (scope, target, last)).fetchall()

        conn = getattr(self._tx, "conn", None)
        rows = query(conn) if conn is not None else self.run("reading the archive", query, written="")
        if rows:
            fresh = ArchiveState()
            fresh.info = {k: dataclasses.replace(v) for k, v in state.info.items()}
            fresh.archived = dict(state.archived)
            fresh.superseded = list(state.superseded)
            fresh.records = state.records
            fresh.apply(r for _, data in rows if (r := Record.from_json(data)) is not None)
            state, last = fresh, int(rows[-1][0])
            with self._lock:
                self._archive_cache[key] = (state, last)
        return state

    def archive_records(self, scope: str, target: str) -> list[Record]:
        rows = self.run("reading the archive", lambda conn: conn.execute(
            f"SELECT record FROM {self.schema}.archive WHERE scope = %s AND target = %s ORDER BY seq",
            (scope, target)).fetchall(), written="")
        return [r for (data,) in rows if (r := Record.from_json(data)) is not None]

    def transact_scoped(
        self, scopes: Mapping[str, str], change: Change, *, record: Any = None, archive: ArchiveRecords | None = None
    ) -> dict[str, FileState]:
        """One transaction over ``{target: scope}``: row locks on every (scope, target) in a fixed order, the
        current entries read under them, ``change`` applied, the archive records of ``archive`` appended, the
        result stored (or nothing when it raises)."""
        ordered = sorted(set(scopes))
        for target in ordered:
            if target not in ("memory", "user"):
                raise StorageError(f"unknown memory target {target!r}; use 'memory' or 'user'")
        keys = sorted((scopes[t], t) for t in ordered)  # lock order: (scope, target)
        write_id = uuid.uuid4()
        s = self.schema
        record_json = json.dumps(record, ensure_ascii=False) if record is not None else None
        by_scope: dict[str, list[str]] = {}
        for scope, target in keys:
            by_scope.setdefault(scope, []).append(target)

        def read_all(conn: psycopg.Connection[Any]) -> dict[str, FileState]:
            out: dict[str, FileState] = {}
            for scope, targets in by_scope.items():
                out.update(self._read_many(conn, scope, targets))
            return out

        def attempt(conn: psycopg.Connection[Any]) -> dict[str, FileState]:
            with conn.transaction():
                versions: dict[tuple[str, str], int] = {}
                for scope, target in keys:
                    conn.execute(
                        f"INSERT INTO {s}.docs(scope, target) VALUES (%s, %s) ON CONFLICT DO NOTHING", (scope, target)
                    )
                    row = conn.execute(
                        f"SELECT version FROM {s}.docs WHERE scope = %s AND target = %s FOR UPDATE", (scope, target)
                    ).fetchone()
                    versions[(scope, target)] = int(row[0]) if row else 0
                # After the locks: if an earlier attempt of this write committed before its connection broke,
                # it is in the log now (it held these locks until it committed).
                if conn.execute(f"SELECT 1 FROM {s}.writes WHERE write_id = %s", (write_id,)).fetchone():
                    return read_all(conn)
                current = read_all(conn)
                self._tx.conn = conn
                try:
                    wanted = change(dict(current))
                finally:
                    self._tx.conn = None
                for target, records in (archive() if archive is not None else {}).items():
                    if records:
                        conn.execute(
                            f"INSERT INTO {s}.archive(scope, target, record) "
                            "SELECT %s, %s, r::jsonb FROM unnest(%s::text[]) AS r",
                            (scopes[target], target, [json.dumps(r.to_json(), ensure_ascii=False) for r in records]),
                        )
                out: dict[str, FileState] = {}
                changed: dict[str, list[str]] = {}
                for target in ordered:
                    scope = scopes[target]
                    entries = [str(e) for e in wanted.get(target, current[target].entries)]
                    if entries == list(current[target].entries):
                        out[target] = current[target]
                        continue
                    if any("\x00" in e for e in entries):
                        raise StorageError("a memory entry cannot contain NUL characters; nothing was written")
                    changed.setdefault(scope, []).append(target)
                    terms = [tsvector_literal(e) for e in entries]
                    conn.execute(f"DELETE FROM {s}.entries WHERE scope = %s AND target = %s", (scope, target))
                    conn.execute(
                        f"INSERT INTO {s}.entries(scope, target, pos, text, nterms, terms) "
                        "SELECT %s, %s, u.pos, u.text, u.n, u.terms::tsvector "
                        "FROM unnest(%s::text[], %s::text[], %s::int[]) WITH ORDINALITY AS u(text, terms, n, pos)",
                        (scope, target, entries, terms, [_token_count(e) for e in entries]),
                    )
                    conn.execute(
                        f"UPDATE {s}.docs SET version = version + 1, updated_at = now() "
                        "WHERE scope = %s AND target = %s",
                        (scope, target),
                    )
                    out[target] = FileState(tuple(entries), render_entries(entries))
                if changed:
                    first = True
                    for scope in by_scope:
                        if scope not in changed:
                            continue
                        # one write-log row per scope; the first carries ``write_id`` (the retry marker)
                        wid = write_id if first else uuid.uuid5(write_id, scope)
                        first = False
                        conn.execute(
                            f"INSERT INTO {s}.writes(write_id, scope, targets, versions, ops) "
                            "VALUES (%s, %s, %s, %s, %s::jsonb)",
                            (wid, scope, changed[scope], [versions[(scope, t)] + 1 for t in changed[scope]],
                             record_json),
                        )
                return out

        return self.run("a memory write", attempt, written="Nothing was written.")

    def scopes(self) -> list[str]:
        """Every user scope that has entries or a write (the default scope ``""`` is not listed)."""
        return self.run(
            "listing scopes",
            lambda conn: [str(r[0]) for r in conn.execute(
                f"SELECT DISTINCT scope FROM {self.schema}.docs WHERE scope <> '' ORDER BY scope").fetchall()],
            written="",
        )

    def history(self, scope: str | None = None) -> list[dict[str, Any]]:
        """The write log, oldest first: ``seq``, ``scope``, ``targets``, ``versions``, ``ops``, ``xact``, ``at``."""

        def query(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            sql = (f"SELECT seq, write_id, scope, targets, versions, ops, xact::text, at FROM {self.schema}.writes "
                   + ("WHERE scope = %s " if scope is not None else "") + "ORDER BY seq")
            rows = conn.execute(sql, (scope,) if scope is not None else ()).fetchall()
            keys = ("seq", "write_id", "scope", "targets", "versions", "ops", "xact", "at")
            return [dict(zip(keys, row)) for row in rows]

        return self.run("reading the write log", query, written="")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()


class PostgresEntryFile:
    """``provider.files[target]`` for PostgreSQL: reads one (scope, target)."""

    def __init__(self, storage: PostgresStorage, scope: str, target: str, limit: int) -> None:
        self.storage, self.scope, self.target, self.limit = storage, scope, target, limit

    @property
    def path(self) -> str:
        return f"{self.storage.describe()} scope={self.scope!r} target={self.target}"

    def read(self) -> FileState:
        return self.storage.read(self.scope, self.target)


class PostgresIndex:
    """The turn index and entry search in PostgreSQL, with the interface of the SQLite ``SearchIndex``."""

    def __init__(self, storage: PostgresStorage, *, scope: str = "") -> None:
        self.storage = storage
        self.scope = scope
        self._s = storage.schema
        self._cfg = storage._cfg
        self._cache_lock = threading.Lock()
        # tsquery -> (ids, upto, complete): its newest matching turns among the turns up to id ``upto``.
        self._cache: OrderedDict[str, tuple[set[int], int, bool]] = OrderedDict()
        self._cached_ids = 0
        self._lengths = LengthWindow()

    # -- turns ------------------------------------------------------------------------------------
    def add_turn(self, session_id: str, user: str, assistant: str, *, user_id: str | None,
                 ts: float | None = None, custody: tuple[str, str, str] | None = None) -> int:
        """Store and index one exchange (one statement; a retry after a lost connection never duplicates it).

        ``custody`` (origin, source, provenance JSON) is the turn's provenance, written by the same statement into
        the custody table (:meth:`PostgresProvenance.index_turn <ironmem.core.builtin.provenance.PostgresProvenance.index_turn>`)."""
        ts = time.time() if ts is None else ts
        key = uuid.uuid4()
        user, assistant = user.replace("\x00", "\ufffd"), assistant.replace("\x00", "\ufffd")
        terms = tsvector_literal(f"{user}\n{assistant}")
        s = self._s
        sql = (f"INSERT INTO {s}.turns(turn_key, session_id, user_id, ts, user_text, assistant_text, terms) "
               "VALUES (%s, %s, %s, %s, %s, %s, %s::tsvector) ON CONFLICT (turn_key) DO NOTHING RETURNING id")
        params: tuple[Any, ...] = (key, session_id, user_id, ts, user, assistant, terms)
        if custody is not None:
            sql = (f"WITH t AS ({sql}), c AS (INSERT INTO {s}.custody_turns SELECT id, %s, %s, %s::jsonb FROM t "
                   "ON CONFLICT (turn_id) DO UPDATE SET origin = EXCLUDED.origin, source = EXCLUDED.source, "
                   "data = EXCLUDED.data) SELECT id FROM t")
            params = (*params, *custody)

        def insert(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction():
                self._order_lock(conn)
                row = conn.execute(sql, params).fetchone()
                if row is None:  # an earlier attempt landed before its connection broke
                    row = conn.execute(f"SELECT id FROM {s}.turns WHERE turn_key = %s", (key,)).fetchone()
                assert row is not None
                return int(row[0])

        return self.storage.run("indexing a turn", insert, written="The turn was not stored.")

    def add_turns(self, rows: Iterable[tuple[str, str | None, float, str, str]], *, batch: int = 50_000) -> None:
        """Bulk insert ``(session_id, user_id, ts, user, assistant)`` rows with COPY (benchmarks, imports).

        Each batch of ``batch`` rows is one transaction.
        """
        s = self._s
        pending: list[tuple[str, str | None, float, str, str, str]] = []

        def flush(chunk: list[tuple[str, str | None, float, str, str, str]]) -> None:
            def load(conn: psycopg.Connection[Any]) -> None:
                with conn.transaction():
                    conn.execute(
                        "CREATE TEMP TABLE IF NOT EXISTS ironmem_load (n bigint GENERATED ALWAYS AS IDENTITY, "
                        "session_id text, user_id text, ts double precision, user_text text, assistant_text text, "
                        "terms text) ON COMMIT DELETE ROWS"
                    )
                    with conn.cursor().copy(
                        "COPY ironmem_load (session_id, user_id, ts, user_text, assistant_text, terms) FROM STDIN"
                    ) as copy:
                        for row in chunk:
                            copy.write_row(row)
                    self._order_lock(conn)
                    conn.execute(
                        f"INSERT INTO {s}.turns(session_id, user_id, ts, user_text, assistant_text, terms) "
                        f"SELECT session_id, user_id, ts, user_text, assistant_text, "
                        "terms::tsvector FROM ironmem_load ORDER BY n"
                    )

            self.storage.run("a bulk load of turns", load, written="This batch was not stored.")

        for session_id, user_id, ts, user, assistant in rows:
            user, assistant = user.replace("\x00", "\ufffd"), assistant.replace("\x00", "\ufffd")
            terms = tsvector_literal(f"{user}\n{assistant}")
            pending.append((session_id, user_id, ts, user, assistant, terms))
            if len(pending) >= batch:
                flush(pending)
                pending = []
        if pending:
            flush(pending)
        self.storage.run("analyzing turns", lambda conn: conn.execute(f"ANALYZE {s}.turns"), written="")

    def _order_lock(self, conn: psycopg.Connection[Any]) -> None:
        """Take the turn-order lock (held to commit): turn ids are then handed out in commit order, so a reader
        that has seen turn N has seen every turn below N, and its cached candidate lists stay exact when it
        only reads the turns above N later. Costs one round trip; inserts of turns are serialized (each holds
        the lock for about a millisecond), which is far above the rate at which agents finish turns."""
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_TURN_ORDER_LOCK_CLASS, self._s))

    def all_turns(self) -> list[tuple[str, str | None, float, str, str]]:
        """Every stored turn as ``(session_id, user_id, ts, user, assistant)``, in commit order (for export)."""
        s = self._s

        def read(conn: psycopg.Connection[Any]) -> list[tuple[str, str | None, float, str, str]]:
            rows = conn.execute(
                f"SELECT session_id, user_id, ts, user_text, assistant_text FROM {s}.turns ORDER BY id").fetchall()
            return [(str(a), b, float(c), str(d), str(e)) for a, b, c, d, e in rows]

        return self.storage.run("reading turns", read, written="")

    def turn_count(self, session_id: str | None = None) -> int:
        s = self._s

        def count(conn: psycopg.Connection[Any]) -> int:
            if session_id is None:
                row = conn.execute(f"SELECT count(*) FROM {s}.turns").fetchone()
            else:
                row = conn.execute(f"SELECT count(*) FROM {s}.turns WHERE session_id = %s", (session_id,)).fetchone()
            return int(row[0]) if row else 0

        return self.storage.run("counting turns", count, written="")

    def sync_entries(self, target: str, entries: Iterable[str]) -> None:
        """Nothing to do: entries are indexed in the same transaction that writes them."""

    def clear_caches(self) -> None:
        """Forget the candidate lists kept between searches (benchmarks of cold searches; never needed for
        correctness: turn ids are handed out in commit order, so a list only has to read the turns above it)."""
        with self._cache_lock:
            self._cache.clear()
            self._cached_ids = 0

    def close(self) -> None:
        self.storage.close()

    # -- search -----------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        kinds: tuple[str, ...] = ("memory", "user", "turn"),
        user_id: str | None = None,
        exclude_session: str | None = None,
        drop_stopwords: bool = True,
        entry_scopes: Mapping[str, str] | None = None,
    ) -> list[SearchHit]:
        """Best matches for ``query`` among entries and turns, best first (the SQLite index's ranking:
        :mod:`~ironmem.core.builtin.ranking`). ``drop_stopwords`` is ignored (one policy for tool and recall).

        ``entry_scopes`` (``{target: scope}``) says whose entries to search; by default this index's scope.
        """
        wanted: dict[str, str] = {t: (entry_scopes or {}).get(t, self.scope) for t in ("memory", "user") if t in kinds}
        terms = query_terms(query)
        if not terms:
            return []

        def run(conn: psycopg.Connection[Any]) -> list[SearchHit]:
            hits: list[SearchHit] = []
            if wanted:
                # Only those (scope, target) pairs are read: another user's entries never come back.
                targets = list(wanted)
                rows = conn.execute(
                    f"SELECT e.target, e.text FROM {self._s}.entries e JOIN unnest(%s::text[], %s::text[]) "
                    "AS w(scope, target) ON e.scope = w.scope AND e.target = w.target ORDER BY e.target, e.pos",
                    ([wanted[t] for t in targets], targets),
                ).fetchall()
                hits.extend(SearchHit(t, text, round(score, 4)) for t, text, score in rank_entries(terms, rows))
            turns: list[SearchHit] = []
            if "turn" in kinds:
                ranked, _ = rank_turns(_TurnSource(self, conn), terms, limit, user_id=user_id,
                                       exclude_session=exclude_session)
                turns = [hit_of(r.row, r.score) for r in ranked]
            return merge_hits(hits, turns, limit)

        return self.storage.run("a search", run, written="")

    def _candidates(
        self, conn: psycopg.Connection[Any], tsqueries: list[str], newest: int
    ) -> list[Candidates]:
        """Per tsquery, its newest matching turns (``CANDIDATE_CAP``), from the per-process cache when
        possible: a cached list is brought up to date by reading only the matches above the turn it reached."""
        with self._cache_lock:
            known = {q: self._cache.get(q) for q in tsqueries}
        fresh_q = [q for q in tsqueries if known[q] is None or known[q][1] > newest]  # type: ignore[index]
        stale_q = [q for q in tsqueries if q not in fresh_q and known[q][1] < newest]  # type: ignore[index]
        fetched = self._lists(conn, fresh_q + stale_q, CANDIDATE_CAP, summary=False,
                              above=[0] * len(fresh_q) + [known[q][1] for q in stale_q])  # type: ignore[index]
        got = dict(zip(fresh_q + stale_q, fetched))
        out: list[Candidates] = []
        with self._cache_lock:
            for q in tsqueries:
                if q in fresh_q:
                    ids = set(got[q])
                    entry = (ids, newest, len(ids) < CANDIDATE_CAP)
                elif q in stale_q:
                    old_ids, _, complete = known[q]  # type: ignore[misc]
                    new_ids = set(got[q])
                    if len(new_ids) >= CANDIDATE_CAP:  # the new turns alone fill the list
                        entry = (new_ids, newest, False)
                    else:
                        ids = old_ids | new_ids
                        if len(ids) > 2 * CANDIDATE_CAP:
                            ids, complete = set(heapq.nlargest(CANDIDATE_CAP, ids)), False
                        entry = (ids, newest, complete)
                else:
                    entry = known[q]  # type: ignore[assignment]
                previous = self._cache.pop(q, None)
                if previous is not None:
                    self._cached_ids -= len(previous[0])
                self._cache[q] = entry
                self._cached_ids += len(entry[0])
                out.append(Candidates.newest_of(entry[0], entry[2]))
            while self._cached_ids > CANDIDATE_CACHE_IDS and len(self._cache) > 1:
                _, evicted = self._cache.popitem(last=False)
                self._cached_ids -= len(evicted[0])
        return out

    def _lists(self, conn: psycopg.Connection[Any], tsqueries: list[str], cap: int, *, summary: bool,
               above: list[int] | None = None) -> list[Any]:
        """Per tsquery, its ``cap`` newest matching turn ids (or ``(count, oldest id)`` with ``summary``).

        One statement; each branch has its tsquery as a constant, so the planner picks per word between a
        backward scan of the primary key (a common word: stops after ``cap`` matches) and the GIN index.
        """
        s = self._s
        branches = []
        params: list[Any] = []
        if not tsqueries:
            return []
        for i, q in enumerate(tsqueries):
            floor = above[i] if above else 0
            branches.append(
                f"(SELECT {i} AS i, id FROM {s}.turns WHERE terms @@ %s::tsquery"
                + (f" AND id > {int(floor)}" if floor else "")
                + f" ORDER BY id DESC LIMIT {int(cap)})"
            )
            params.append(q)
        agg = "count(*), min(id)" if summary else "array_agg(id)"
        rows = conn.execute(
            f"SELECT i, {agg} FROM ({' UNION ALL '.join(branches)}) AS c GROUP BY i", params, binary=True
        ).fetchall()
        found = {int(r[0]): (r[1:] if summary else r[1]) for r in rows}
        if summary:
            return [(int(found[i][0]), int(found[i][1])) if i in found else (0, 0) for i in range(len(tsqueries))]
        return [list(found.get(i) or []) for i in range(len(tsqueries))]


class _TurnSource:
    """The shared ranking's view of a :class:`PostgresIndex` on one connection (ranking.TurnSource)."""

    def __init__(self, index: PostgresIndex, conn: psycopg.Connection[Any]) -> None:
        self.index, self.conn, self.s = index, conn, index._s

    def newest(self) -> int:
        row = self.conn.execute(f"SELECT coalesce(max(id), 0) FROM {self.s}.turns").fetchone()
        return int(row[0]) if row else 0

    def probe(self, terms: list[Term], newest: int) -> list[tuple[int, int]]:
        return list(self.index._lists(self.conn, [tsquery_of(t) for t in terms], PROBE_ROWS, summary=True))

    def candidates(self, terms: list[Term], newest: int) -> list[Candidates]:
        return self.index._candidates(self.conn, [tsquery_of(t) for t in terms], newest)

    def conjunction(self, terms: list[Term], newest: int) -> set[int]:
        query = " & ".join(f"({tsquery_of(t)})" for t in terms)
        return set(self.index._candidates(self.conn, [query], newest)[0].ids)

    def session_ids(self, session_id: str, newest: int) -> set[int]:
        rows = self.conn.execute(
            f"SELECT id FROM {self.s}.turns WHERE session_id = %s AND id <= %s", (session_id, newest)
        ).fetchall()
        return {int(r[0]) for r in rows}

    def load(self, ids: list[int], *, user_id: str | None, exclude_session: str | None,
             head: int | None) -> list[TurnRow]:
        if not ids:
            return []
        cols = ("t.user_text, t.assistant_text" if head is None
                else f"substr(t.user_text, 1, {int(head)}), substr(t.assistant_text, 1, {int(head)})")
        rows = self.conn.execute(
            f"SELECT t.id, t.session_id, t.user_id, t.ts, {cols}, "
            f"length(t.user_text) + length(t.assistant_text) + 1 FROM {self.s}.turns t WHERE t.id = ANY(%s)",
            (ids,),
        ).fetchall()
        return filter_rows(rows, ids, user_id=user_id, exclude_session=exclude_session)

    def length_stats(self, newest: int) -> tuple[int, int]:
        return self.index._lengths.get(newest, self._length_range)

    def _length_range(self, lo: int, hi: int) -> tuple[int, int]:
        row = self.conn.execute(
            f"SELECT coalesce(sum(length(user_text) + length(assistant_text) + 1), 0), count(*) FROM {self.s}.turns "
            "WHERE id > %s AND id <= %s",
            (lo, hi),
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)
