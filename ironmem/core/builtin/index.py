"""SQLite FTS5 search over memory entries and every synced turn.

What a turn matches and how it scores is decided by :mod:`ironmem.core.builtin.ranking`, shared with the
PostgreSQL backend: the FTS5 table indexes the tokens that module makes (stemmed words, CJK bigrams) with a
tokenizer that only splits on spaces, and this module supplies the candidate lists and the corpus statistics
that the shared ranking scores. Memory entries (a few dozen per scope) are scored by the same module from
their text.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from .archive import asks_about_present
from .private import create_private_file, make_private_dirs, not_writable
from .ranking import (
    CANDIDATE_CAP,
    PROBE_ROWS,
    Candidates,
    LengthWindow,
    Term,
    TurnRow,
    bm25_idf,
    filter_rows,
    index_terms,
    query_terms,
    rank_entries,
    rank_turns,
)

log = logging.getLogger("ironmem.index")

__all__ = [
    "CANDIDATE_CAP",
    "SearchHit",
    "SearchIndex",
    "bm25_idf",
    "build_match_query",
    "fts5_clause",
    "index_terms",
    "query_terms",
]

#: Candidate lists kept between searches, in turn ids (about 60 bytes each; new turns are added incrementally).
#: Words repeat from turn to turn, so recall on every turn mostly reads the few turns added since the last search.
CANDIDATE_CACHE_IDS = 200_000
#: Hybrid fusion: a convex combination of normalized scores (Bruch et al. 2023, "An Analysis of Fusion
#: Functions for Hybrid Retrieval": it beats reciprocal rank fusion when one retriever is often weak).
#: BM25 is divided by the query's IDF mass (the share of the query's words a turn holds: a turn missing them
#: scores low even when it tops the lexical list). A turn's cosine similarity is judged against the query's
#: similarity to EVERY turn (mean and deviation from the vectors' moments, ``TurnMoments``): its z-score, in
#: units of ``DENSE_SCALE`` times the highest z-score that the best of N unrelated turns reaches by chance
#: (``sqrt(2 ln N)``). A turn standing out that much counts like a turn holding every query word; the nearest
#: of many look-alikes (a question whose answer the model does not see) counts little, so a weak dense model
#: cannot push lexical hits out. Without the moments (fewer than two turns) the similarity is divided by the
#: query's best one. How deep each list is read:
LEXICAL_WEIGHT = 0.5
#: Chosen on the development draw (``recall_quality.py --seed 7``), among 1 and 2; see docs/recall.md.
DENSE_SCALE = 2.0
#: Only the part of the z-score above ``DENSE_FLOOR`` times the chance maximum counts (full credit is still
#: reached at ``DENSE_SCALE`` times it): the dozens of turns that are merely above the mean for a model that does
#: not see the answer earn nothing, so a dense model near chance cannot push lexical hits out. Chosen on the
#: development draw with the dense model degraded from none to chance (``--dense-noise`` 0 to 0.3); see
#: docs/recall.md.
DENSE_FLOOR = 0.5
FUSION_DEPTH = 50
#: The format of the FTS5 tables; an index in another format is rebuilt when opened.
INDEX_FORMAT = "2"

_PROBE_SQL = (
    "SELECT count(*), min(rowid) FROM (SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
)
_IDS_SQL = (
    "SELECT group_concat(rowid) FROM (SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
)
_NEWER_IDS_SQL = (
    "SELECT group_concat(rowid) FROM (SELECT rowid FROM turns_fts WHERE turns_fts MATCH ? AND rowid > ? "
    "ORDER BY rowid DESC LIMIT ?)"
)


@dataclass
class _Cached:
    """The newest turns matching one term: ``ids`` up to turn ``upto``; ``complete`` if that is all of them."""

    ids: set[int]
    upto: int
    complete: bool
    oldest: int


def fts5_clause(term: Term) -> str:
    """A :class:`~ironmem.core.builtin.ranking.Term` as an FTS5 MATCH expression (quoted: user text is never
    FTS5 syntax)."""
    return '"' + " ".join(term.tokens).replace('"', '""') + '"' + ("*" if term.prefix else "")


def build_match_query(text: str, *, drop_stopwords: bool = True, max_terms: int = 24) -> str:
    """An FTS5 MATCH expression that ORs the terms of ``text`` ("" when none); ``drop_stopwords`` is accepted
    for compatibility and ignored (one stop-word policy for the tool and for recall)."""
    return " OR ".join(fts5_clause(t) for t in query_terms(text, max_terms=max_terms))


@dataclass(frozen=True)
class SearchHit:
    """One search result: a memory entry or a past turn."""

    kind: str  # "memory" | "user" | "turn"
    text: str
    score: float
    session_id: str | None = None
    user_id: str | None = None
    ts: float | None = None
    turn_id: int | None = None

    @property
    def date(self) -> str | None:
        """The turn's date, ``YYYY-MM-DD`` (UTC), or None for a memory entry."""
        if self.ts is None:
            return None
        return time.strftime("%Y-%m-%d", time.gmtime(self.ts))

    def to_dict(self) -> dict[str, object]:
        # fields() and getattr, not asdict(): asdict deep-copies every value
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}


_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    user_id TEXT,
    ts REAL NOT NULL,
    user TEXT NOT NULL,
    assistant TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_session ON turns(session_id);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
#: The tokens come from ranking.index_terms (already folded and stemmed): FTS5 only splits them on spaces.
_FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS turns_fts USING fts5(
    terms, content='', tokenize='unicode61 remove_diacritics 0'
);
"""


def merge_hits(entries: list[SearchHit], turns: list[SearchHit], limit: int) -> list[SearchHit]:
    """Entry hits (best first) and turn hits (in the shared ranking's order, which puts turns holding a content
    word of the query before those holding only its function words) merged by score, each list keeping its own
    order; entries first on equal scores."""
    return list(heapq.merge(entries, turns, key=lambda h: -h.score))[:limit]


def hit_of(row: TurnRow, score: float) -> SearchHit:
    rowid, session_id, turn_user, ts, user, assistant, _ = row
    return SearchHit("turn", f"User: {user}\nAssistant: {assistant}", round(score, 4), session_id=session_id,
                     user_id=turn_user, ts=ts, turn_id=rowid)


#: Read-only opening: the entry tables live in the connection's TEMP schema (in memory), which SQLite searches
#: before ``main``, so entries are indexed fresh from the files while the turns are read from the file untouched.
_READ_ONLY_ENTRIES = """
CREATE TEMP TABLE entries (id INTEGER PRIMARY KEY, target TEXT NOT NULL, text TEXT NOT NULL);
CREATE VIRTUAL TABLE temp.entries_fts USING fts5(
    terms, content='', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TEMP TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _in_memory() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.executescript(_SCHEMA)
    return conn


def _is_write_refusal(exc: sqlite3.OperationalError) -> bool:
    """SQLite's ways of saying the database or its folder cannot be written by this process."""
    text = str(exc).lower()
    return any(s in text for s in ("readonly", "read-only", "unable to open", "permission", "disk i/o"))


def enable_wal(conn: Any, *, timeout: float = 30.0) -> None:
    """Switch ``conn``'s database to WAL mode. Processes opening a new database at the same moment race for
    this switch, and SQLite answers "database is locked" at once (its busy timeout does not cover it): retried
    with a short back-off for up to ``timeout`` seconds. ``conn``: a connection of :mod:`sqlite3` or of a
    compatible driver (``sqlean``, whose errors are its own classes of the same names)."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as exc:
            locked = type(exc).__name__ == "OperationalError" and "locked" in str(exc).lower()
            if not locked or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


def _connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """The index's connection. Writable: the file (created with its folder), WAL mode, the schema.

    ``read_only`` (inspecting a home this user may not write): nothing on disk is created or changed. An
    existing index is opened with SQLite's ``mode=ro``, or ``immutable=1`` when no writer has it open (no
    ``-wal`` file) or ``mode=ro`` cannot open it (a WAL database in a folder this user cannot write); its turns
    are searched as they are, and the entry tables are replaced by empty in-memory ones. Without an index file
    the whole index is in memory (no turns).
    """
    if not read_only:
        try:
            make_private_dirs(path.parent)
            create_private_file(path)  # 0600 before SQLite opens it: its -wal and -shm files get the same mode
            conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0, isolation_level=None)
            try:
                enable_wal(conn)
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA busy_timeout=30000")
                conn.executescript(_SCHEMA)
            except BaseException:
                conn.close()
                raise
        except (OSError, sqlite3.OperationalError) as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _is_write_refusal(exc):
                raise
            raise not_writable(path, exc) from exc
        return conn
    if not path.is_file():
        return _in_memory()
    uri = path.resolve().as_uri()
    # With a -wal file a writer may have it open: read through SQLite's shared memory (mode=ro). Without one, or
    # when mode=ro cannot read a WAL database in a folder this user cannot write, read the file as it stands.
    modes = (["mode=ro"] if path.with_name(path.name + "-wal").exists() else []) + ["mode=ro&immutable=1"]
    for n, mode in enumerate(modes, 1):
        conn = sqlite3.connect(f"{uri}?{mode}", uri=True, check_same_thread=False, timeout=30.0, isolation_level=None)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            break
        except sqlite3.Error:
            conn.close()
            if n == len(modes):
                raise
    conn.execute("PRAGMA temp_store=MEMORY")
    conn.execute("PRAGMA busy_timeout=30000")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"turns", "turns_fts"} <= tables:  # not an index of ours (yet): no turns to search
        conn.close()
        return _in_memory()
    conn.executescript(_READ_ONLY_ENTRIES)
    return conn


class SearchIndex:
    """The search database. One connection, serialized by a lock, usable from any thread.

    Example:
        >>> import tempfile, pathlib
        >>> idx = SearchIndex(pathlib.Path(tempfile.mkdtemp()) / "search.db")
        >>> _ = idx.add_turn("s1", "我们周末去爬山吧", "好的", user_id=None)
        >>> [h.kind for h in idx.search("爬山")]
        ['turn']
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        #: Opened for inspection (:func:`_connect`): nothing on disk is written; entries are indexed in memory.
        self.read_only = read_only
        self._lock = threading.RLock()
        self._candidates: OrderedDict[str, _Cached] = OrderedDict()
        self._cached_ids = 0  # total size of the lists in self._candidates
        self._sessions: OrderedDict[str, tuple[set[int], int]] = OrderedDict()
        self._lengths = LengthWindow()
        self.vectors: Any = None  # a VectorIndex once enable_vectors() succeeded
        self.vectors_reason = "off (enable with SearchIndex.enable_vectors() / MemoryManager(embeddings=True))"
        self._conn = _connect(self.path, read_only=read_only)
        if not read_only:
            try:
                self._check_consistency()
            except sqlite3.OperationalError as exc:
                self._conn.close()
                if not _is_write_refusal(exc):
                    raise
                raise not_writable(self.path, exc) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction taken up front (BEGIN IMMEDIATE), so two processes never deadlock on upgrade."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            else:
                self._conn.execute("COMMIT")

    # -- turns ------------------------------------------------------------------------------
    def add_turn(self, session_id: str, user: str, assistant: str, *, user_id: str | None, ts: float | None = None) -> int:
        """Store one exchange and index it, in one transaction (both land or neither does)."""
        ts = time.time() if ts is None else ts
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO turns(session_id, user_id, ts, user, assistant) VALUES (?,?,?,?,?)",
                (session_id, user_id, ts, user, assistant),
            )
            rowid = int(cur.lastrowid or 0)
            conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (rowid, index_terms(f"{user}\n{assistant}")))
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(rowid),),
            )
        if self.vectors is not None:
            self.vectors.wake()
        return rowid

    def add_turns(self, rows: Iterable[tuple[str, str | None, float, str, str]]) -> None:
        """Bulk insert ``(session_id, user_id, ts, user, assistant)`` rows (benchmarks, imports)."""
        with self._write() as conn:
            last = 0
            for session_id, user_id, ts, user, assistant in rows:
                cur = conn.execute(
                    "INSERT INTO turns(session_id, user_id, ts, user, assistant) VALUES (?,?,?,?,?)",
                    (session_id, user_id, ts, user, assistant),
                )
                last = int(cur.lastrowid or 0)
                conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (last, index_terms(f"{user}\n{assistant}")))
            if last:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (str(last),),
                )
        if self.vectors is not None:
            self.vectors.wake()

    def all_turns(self) -> list[tuple[str, str | None, float, str, str]]:
        """Every stored turn as ``(session_id, user_id, ts, user, assistant)``, in the order they were stored
        (the rows :meth:`add_turns` takes; used by export)."""
        with self._lock:
            rows = self._conn.execute("SELECT session_id, user_id, ts, user, assistant FROM turns ORDER BY id").fetchall()
        return [(str(a), b, float(c), str(d), str(e)) for a, b, c, d, e in rows]

    def turn_count(self, session_id: str | None = None) -> int:
        with self._lock:
            if session_id is None:
                row = self._conn.execute("SELECT count(*) FROM turns").fetchone()
            else:
                row = self._conn.execute("SELECT count(*) FROM turns WHERE session_id = ?", (session_id,)).fetchone()
        return int(row[0])

    def _check_consistency(self) -> None:
        """Rebuild the turn index if it is in an older format or does not cover every stored turn (e.g. an
        index from an older run)."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'index_format'").fetchone()
            if row is None or row[0] != INDEX_FORMAT:
                with self._write() as conn:
                    row = conn.execute("SELECT value FROM meta WHERE key = 'index_format'").fetchone()
                    if row is None or row[0] != INDEX_FORMAT:  # not done by another process meanwhile
                        # The FTS tables of an older format: made anew below, and filled by rebuild().
                        conn.execute("DROP TABLE IF EXISTS turns_fts")
                        conn.execute("DROP TABLE IF EXISTS entries_fts")
                        conn.execute("UPDATE meta SET value = '-1' WHERE key = 'turns_indexed'")
                        conn.execute("INSERT INTO meta(key, value) VALUES ('index_format', ?) "
                                     "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (INDEX_FORMAT,))
            self._conn.executescript(_FTS_SCHEMA)
            max_id = self._conn.execute("SELECT coalesce(max(id), 0) FROM turns").fetchone()[0]
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'turns_indexed'").fetchone()
        indexed = int(row[0]) if row else 0
        if indexed != max_id:
            self.rebuild()

    def rebuild(self) -> None:
        """Re-create the turn index from the stored turns."""
        self.clear_caches()
        with self._write() as conn:
            conn.execute("INSERT INTO turns_fts(turns_fts) VALUES ('delete-all')")
            last = 0
            for rowid, user, assistant in conn.execute("SELECT id, user, assistant FROM turns ORDER BY id"):
                conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (rowid, index_terms(f"{user}\n{assistant}")))
                last = rowid
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(last),),
            )

    # -- memory entries -----------------------------------------------------------------------
    def sync_entries(self, target: str, entries: Iterable[str]) -> None:
        """Make the entry index for ``target`` match ``entries`` (cheap: a file holds a few KB).

        The entry index is derived from the files, so a failure here (disk full, read-only database) is logged
        and retried on the next call instead of failing the write or the session start that triggered it.
        """
        entries = list(entries)
        try:
            changed = self._sync_entries(target, entries)
        except sqlite3.Error as exc:
            log.warning("could not update the search index of %s entries (%s); it is refreshed on a later call",
                        target, exc)
            return
        if changed and self.vectors is not None:
            self.vectors.wake(entries=True)

    def _sync_entries(self, target: str, entries: list[str]) -> bool:
        """Update the entry index of ``target``; False when it was up to date already."""
        key = f"entries:{target}"
        fingerprint = hashlib.sha256("\x1e".join(entries).encode("utf-8")).hexdigest()
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row and row[0] == fingerprint:
                return False
        with self._write() as conn:
            # Only the entries that changed are touched (a write changes one or two of them).
            wanted = Counter(entries)
            for rowid, text in conn.execute("SELECT id, text FROM entries WHERE target = ?", (target,)).fetchall():
                if wanted[text] > 0:
                    wanted[text] -= 1
                    continue
                conn.execute("DELETE FROM entries WHERE id = ?", (rowid,))
            for text, missing in wanted.items():
                for _ in range(missing):
                    conn.execute("INSERT INTO entries(target, text) VALUES (?, ?)", (target, text))
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, fingerprint),
            )
        return True

    # -- vectors (optional, hybrid recall) --------------------------------------------------------
    def enable_vectors(self, embedder: Any = True, *, path: Path | None = None) -> bool:
        """Add dense vectors beside this index (``vectors.db`` next to it) and fuse them into search.

        ``embedder`` True (or ``"default"``) means the best local model that runs here (``ironmem[embeddings]``:
        e5, else MiniLM, one instance per process: :func:`~.vectors.shared_embedder`), ``"e5"`` or ``"minilm"`` one of them; otherwise any
        embedder that :func:`ironmem.core.embedding.as_embedder` accepts. Turns and entries are embedded by a background
        worker, never on the caller's path. Returns False, and stays lexical-only, when the model or sqlite-vec
        cannot be used here; ``vectors_reason`` says why (and :meth:`recall_status` reports it).
        """
        from .vectors import (
            E5Embedder,
            EmbeddingsUnavailable,
            MiniLMEmbedder,
            VectorIndex,
            embeddings_missing,
            shared_embedder,
        )

        if self.vectors is not None:
            return True
        try:
            local = {True: "default", "default": "default", "e5": "e5", E5Embedder.model_id: "e5", "minilm": "minilm",
                     MiniLMEmbedder.model_id: "minilm"}.get(embedder) if isinstance(embedder, (bool, str)) else None
            if local is not None:
                missing = embeddings_missing(local)
                if missing:
                    raise EmbeddingsUnavailable(missing)
                embedder = shared_embedder(local)  # one model per process, whatever the number of indexes
            self.vectors = VectorIndex(
                path or self.path.with_name("vectors.db"), embedder, turns=self._turns_after, entries=self._all_entries
            )
        except Exception as exc:
            self.vectors_reason = f"lexical only: {exc}"
            log.warning("hybrid recall is off, search is lexical only: %s", exc)
            return False
        self.vectors_reason = ""
        return True

    def _turns_after(self, after: int, limit: int) -> list[tuple[int, str, str]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, user, assistant FROM turns WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
            ).fetchall()
        return [(int(rowid), user, assistant) for rowid, user, assistant in rows]

    def _waits_for_vectors(self, kinds: tuple[str, ...], exclude_session: str | None) -> bool:
        """Whether something this search can return still waits for its vectors. A prefetch leaves out its own
        session, whose newest turns are usually the only ones waiting: it then pays for the query's vector alone."""
        if exclude_session is None or any(kind != "turn" for kind in kinds):
            return True
        assert self.vectors is not None
        upto = self.vectors.embedded_upto()  # not under self._lock: the two locks are never held together
        with self._lock:
            return self._conn.execute("SELECT 1 FROM turns WHERE id > ? AND session_id != ? LIMIT 1",
                                      (upto, exclude_session)).fetchone() is not None

    def _all_entries(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(t, x) for t, x in self._conn.execute("SELECT target, text FROM entries ORDER BY id")]

    def recall_status(self) -> dict[str, Any]:
        """How search ranks now: ``{"mode": "hybrid" | "lexical", ...}`` with the reason when lexical."""
        if self.vectors is None:
            return {"mode": "lexical", "ranking": "bm25", "reason": self.vectors_reason}
        info = {"mode": "hybrid", "ranking": "bm25 + dense, convex combination of normalized scores (dense: z-score "
                "against every turn)"}
        info.update(self.vectors.status(self.turn_count()))
        return info

    # -- search -------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        kinds: tuple[str, ...] = ("memory", "user", "turn"),
        user_id: str | None = None,
        exclude_session: str | None = None,
        drop_stopwords: bool = True,
    ) -> list[SearchHit]:
        """Best matches for ``query`` among entries and turns, best first.

        Stop words are dropped whatever ``drop_stopwords`` says (kept for compatibility): the tool and
        automatic recall rank with one policy. Turn hits carry ``turn_id`` and ``ts`` (see ``SearchHit.date``).
        """
        terms = query_terms(query)
        if not terms:
            return []
        hits: list[SearchHit] = []
        targets = [kind for kind in kinds if kind != "turn"]  # "memory", "user", or scoped "user@<folder>"
        if self.vectors is not None and self._waits_for_vectors(kinds, exclude_session):
            try:  # before the lock: the worker reads turns under it while it embeds
                self.vectors.catch_up()
            except Exception as exc:
                log.warning("embedding the newest turns failed, they rank lexically: %s", exc)
        with self._lock:
            if targets:
                rows = self._conn.execute(
                    f"SELECT target, text FROM entries WHERE target IN ({','.join('?' * len(targets))})", targets
                ).fetchall()
                hits.extend(SearchHit(t, text, round(score, 4)) for t, text, score in rank_entries(terms, rows))
            if self.vectors is not None:
                return self._hybrid(query, terms, hits, limit, kinds, user_id=user_id,
                                    exclude_session=exclude_session)
            turns: list[SearchHit] = []
            if "turn" in kinds:
                ranked, _ = rank_turns(self, terms, limit, user_id=user_id, exclude_session=exclude_session)
                turns = [hit_of(r.row, r.score) for r in ranked]
        return merge_hits(hits, turns, limit)

    def _hybrid(
        self, query: str, terms: list[Term], entry_hits: list[SearchHit], limit: int, kinds: tuple[str, ...],
        *, user_id: str | None, exclude_session: str | None,
    ) -> list[SearchHit]:
        """Lexical and dense rankings fused: ``LEXICAL_WEIGHT * bm25 / idf_mass + (1 - LEXICAL_WEIGHT) * dense``,
        ``dense = max(0, z - DENSE_FLOOR * c) / ((DENSE_SCALE - DENSE_FLOOR) * c)``, ``c = sqrt(2 ln N)``, for turns
        (``z``: the similarity's z-score over all N turn windows, padded with everyday chat lines to
        ``BACKGROUND_UNTIL`` in a short history), for turns and memory entries alike (entries are too few for a
        distribution of their own; ``cos / max_cos`` gave the nearest entry full credit however unrelated). A
        candidate that scores nothing in any list is dropped (dense neighbours always exist).

        Entries and turns are fused separately (two lexical and two dense lists). The few turns the worker has not
        embedded yet are embedded first (``VectorIndex.catch_up``); a turn of a longer backlog ranks by its lexical
        rank until the worker reaches it. Falls back to lexical-only when the query cannot be
        embedded. Caller holds ``self._lock``.
        """
        depth = max(FUSION_DEPTH, 4 * limit)
        try:
            blob = self.vectors.embed_query(query)
            dense_turns = self.vectors.search_turns(blob, depth * 2) if "turn" in kinds else []
            dense_entries = (self.vectors.search_entries(blob, depth) if any(k != "turn" for k in kinds) else [])
            stats = self.vectors.similarity_stats(blob, padded=True) if dense_turns or dense_entries else None
        except Exception as exc:
            log.warning("dense search failed, using lexical ranking only: %s", exc)
            dense_turns, dense_entries, stats = [], [], None
        fused: dict[tuple[str, object], float] = {}
        found: dict[tuple[str, object], SearchHit] = {}
        relevant: set[tuple[str, object]] = set()  # turns the dense model finds relevant beyond chance

        def add(ranked: list[SearchHit], weight: float, scale: float) -> None:
            for hit in ranked:
                key: tuple[str, object] = ("turn", hit.turn_id) if hit.turn_id is not None else (hit.kind, hit.text)
                fused[key] = fused.get(key, 0.0) + weight * max(0.0, hit.score) / scale
                found.setdefault(key, hit)

        floor = unit = 0.0  # the chance level of the query's similarity, and the unit above it (see the docstring)
        if stats is not None and stats[1] > 1e-9:
            mean, std, n = stats
            chance = math.sqrt(2.0 * math.log(n)) * std
            floor, unit = mean + DENSE_FLOOR * chance, (DENSE_SCALE - DENSE_FLOOR) * chance

        def add_dense(ranked: list[SearchHit]) -> list[SearchHit]:
            """Dense hits scored above chance (their score is the cosine), or by the best one's without stats."""
            if unit:
                ranked = [replace(h, score=round(max(0.0, h.score - floor), 6)) for h in ranked]
            add(ranked, 1.0 - LEXICAL_WEIGHT, unit or max(max(h.score for h in ranked), 1e-9))
            return ranked

        if entry_hits:
            entry_hits.sort(key=lambda h: h.score, reverse=True)
            add(entry_hits[:depth], LEXICAL_WEIGHT, max(entry_hits[0].score, 1e-9))
        dense_e = [SearchHit(t, x, sim) for t, x, sim in dense_entries if t in kinds]
        if dense_e:
            add_dense(dense_e)
        if "turn" in kinds:
            ranked, mass = rank_turns(self, terms, depth, user_id=user_id, exclude_session=exclude_session)
            add([hit_of(r.row, r.score) for r in ranked], LEXICAL_WEIGHT, max(mass, 1e-9))
            sims = dict(dense_turns)
            rows = self.load([rowid for rowid, _ in dense_turns], user_id=user_id, exclude_session=exclude_session,
                             head=None)
            dense = [hit_of(row, sims[row[0]]) for row in rows[:depth]]
            if dense:
                relevant.update(("turn", h.turn_id) for h in add_dense(dense) if h.score > 0 and unit)
        order = sorted((k for k in fused if fused[k] > 0), key=lambda k: (fused[k], found[k].score), reverse=True)
        if asks_about_present(query):
            order = self._prefer_current(order, found, relevant, limit)
        return [SearchHit(found[k].kind, found[k].text, round(fused[k], 6), session_id=found[k].session_id,
                          user_id=found[k].user_id, ts=found[k].ts, turn_id=found[k].turn_id) for k in order[:limit]]

    def _prefer_current(self, order: list[tuple[str, object]], found: dict[tuple[str, object], SearchHit],
                        relevant: set[tuple[str, object]], limit: int) -> list[tuple[str, object]]:
        """Recall prefers current facts (issue 37): for a question about the present, a turn among the first
        ``limit`` yields its place to a LATER turn of the candidates that the dense model also finds relevant to
        the question (``relevant``: its dense score passes the fusion's own floor, ``DENSE_FLOOR`` times the chance
        maximum over all N turns; a stricter bar, the chance maximum itself, was tried and recalled no update), the
        best-ranked such turn. The earlier turn stays, one place down; each turn moves at most once."""
        out = list(order)
        moved: set[tuple[str, object]] = set()
        for key in [k for k in out[:limit] if k[0] == "turn"]:
            if key in moved or found[key].ts is None:
                continue
            position = out.index(key)
            successor = next((k for k in out[position + 1:] if k[0] == "turn" and k in relevant and k not in moved
                              and (found[k].ts or 0.0) > (found[key].ts or 0.0)), None)
            if successor is not None:
                out.remove(successor)
                out.insert(out.index(key), successor)
                moved.update((successor, key))
        return out

    # -- the candidate lists and statistics the shared ranking scores (ranking.TurnSource) ----------------------
    # Callers hold self._lock. FTS5's bm25() is not used: it counts every match of every term to get its IDF
    # (~35 ms for a common word at 1M turns); the lists below stop after CANDIDATE_CAP matches.
    def newest(self) -> int:
        return int(self._conn.execute("SELECT coalesce(max(id), 0) FROM turns").fetchone()[0])

    def probe(self, terms: list[Term], newest: int) -> list[tuple[int, int]]:
        out = []
        for term in terms:
            found, oldest = self._conn.execute(_PROBE_SQL, (fts5_clause(term), PROBE_ROWS)).fetchone()
            out.append((int(found), int(oldest or 0)))
        return out

    def candidates(self, terms: list[Term], newest: int) -> list[Candidates]:
        out = []
        for term in terms:
            found = self._matching(fts5_clause(term), newest)
            out.append(Candidates.newest_of(found.ids, found.complete))
        return out

    def conjunction(self, terms: list[Term], newest: int) -> set[int]:
        found = self._matching(" AND ".join(fts5_clause(t) for t in terms), newest)
        return set(Candidates.newest_of(found.ids, found.complete).ids)

    def length_stats(self, newest: int) -> tuple[int, int]:
        return self._lengths.get(newest, self._length_range)

    def _length_range(self, lo: int, hi: int) -> tuple[int, int]:
        row = self._conn.execute(
            "SELECT coalesce(sum(length(user) + length(assistant) + 1), 0), count(*) FROM turns "
            "WHERE id > ? AND id <= ?",
            (lo, hi),
        ).fetchone()
        return int(row[0]), int(row[1])

    def session_ids(self, session_id: str, newest: int) -> set[int]:
        """The ids of one session's turns (cached; the session's new turns are added incrementally)."""
        cached = self._sessions.get(session_id)
        if cached is not None and cached[1] <= newest:
            ids, upto = cached
            if upto < newest:
                rows = self._conn.execute(
                    "SELECT id FROM turns WHERE session_id = ? AND id > ?", (session_id, upto)
                ).fetchall()
                if rows:
                    ids = ids | {r[0] for r in rows}
        else:
            ids = {r[0] for r in self._conn.execute("SELECT id FROM turns WHERE session_id = ?", (session_id,))}
        self._sessions[session_id] = (ids, newest)
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > 8:
            self._sessions.popitem(last=False)
        return ids

    def _matching(self, expr: str, newest: int) -> _Cached:
        """The newest turns matching ``expr`` (at most about ``CANDIDATE_CAP``), from the cache when possible.

        Turns are only ever appended (ids grow), so a cached list is brought up to date by reading the turns
        added since it was made. The returned ``ids`` must not be mutated.
        """
        cached = self._candidates.pop(expr, None)
        if cached is not None:
            self._cached_ids -= len(cached.ids)
        if cached is not None and cached.upto <= newest:
            if cached.upto < newest:
                fresh = self._conn.execute(_NEWER_IDS_SQL, (expr, cached.upto, CANDIDATE_CAP)).fetchone()[0]
                new_ids = set(map(int, fresh.split(","))) if fresh else set()
                if len(new_ids) >= CANDIDATE_CAP:  # many turns landed since: the new ones alone fill the list
                    cached = _Cached(new_ids, newest, False, min(new_ids))
                elif new_ids:
                    ids = cached.ids | new_ids
                    complete, oldest = cached.complete, cached.oldest if cached.ids else min(new_ids)
                    if len(ids) > 2 * CANDIDATE_CAP:  # keep the newest CANDIDATE_CAP
                        ids = set(heapq.nlargest(CANDIDATE_CAP, ids))
                        complete, oldest = False, min(ids)
                    cached = _Cached(ids, newest, complete, oldest)
                else:
                    cached = _Cached(cached.ids, newest, cached.complete, cached.oldest)
            found = cached
        else:
            raw = self._conn.execute(_IDS_SQL, (expr, CANDIDATE_CAP)).fetchone()[0]
            ids = set(map(int, raw.split(","))) if raw else set()
            found = _Cached(ids, newest, len(ids) < CANDIDATE_CAP, min(ids) if ids else 0)
        self._candidates[expr] = found
        self._cached_ids += len(found.ids)
        while self._cached_ids > CANDIDATE_CACHE_IDS and len(self._candidates) > 1:
            _, evicted = self._candidates.popitem(last=False)
            self._cached_ids -= len(evicted.ids)
        return found

    def load(
        self, ids: list[int], *, user_id: str | None, exclude_session: str | None, head: int | None = None
    ) -> list[TurnRow]:
        """The rows of ``ids`` (in that order) that pass the filters: ``(id, session_id, user_id, ts, user,
        assistant, length)``; with ``head``, only the first ``head`` characters of each side are read."""
        if not ids:
            return []
        cols = "user, assistant" if head is None else f"substr(user, 1, {int(head)}), substr(assistant, 1, {int(head)})"
        rows = self._conn.execute(
            f"SELECT id, session_id, user_id, ts, {cols}, length(user) + length(assistant) + 1 FROM turns "
            f"WHERE id IN ({','.join('?' * len(ids))})",
            ids,
        ).fetchall()
        return filter_rows(rows, ids, user_id=user_id, exclude_session=exclude_session)

    def clear_caches(self) -> None:
        """Forget the in-memory candidate lists (they refill on the next searches). For benchmarks of cold
        searches; never needed for correctness (turns are only appended, and lists catch up on their own)."""
        with self._lock:
            self._candidates.clear()
            self._cached_ids = 0
            self._sessions.clear()

    def close(self) -> None:
        if self.vectors is not None:
            self.vectors.close()
            self.vectors = None
        with self._lock:
            self._conn.close()
