"""SQLite FTS5 search over memory entries and every synced turn.

FTS5's default tokenizer keeps a run of Chinese characters as one token, so a two-character word such as 爬山
inside 昨天计划去爬山 would never match. Before indexing, each run of CJK characters is rewritten as its
overlapping bigrams (plus the run's last character), and queries get the same treatment, so any substring of
two or more characters matches as a phrase and a single character matches as a prefix.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["SearchIndex", "SearchHit", "cjk_terms", "build_match_query"]

_CJK = (
    r"\u3040-\u30ff"  # hiragana, katakana
    r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    r"\uac00-\ud7af"  # hangul syllables
    r"\U00020000-\U0002ebef"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(rf"[{_CJK}]+|[^\W_]+", re.UNICODE)

# Words too common to be worth matching in an automatic recall query.
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just let me more most my myself no nor not now
    of off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves tell know remember
    please thanks thank hi hello hey ok okay yes also still just like want need get got""".split()
)

#: How many of the newest matching rows are ranked. Bounds search time when a term is very common.
CANDIDATE_CAP = 2000


def cjk_terms(text: str) -> str:
    """Rewrite CJK runs as overlapping bigrams plus the final character; other text is unchanged."""

    def expand(match: re.Match[str]) -> str:
        run = match.group(0)
        if len(run) == 1:
            return f" {run} "
        grams = [run[i : i + 2] for i in range(len(run) - 1)]
        grams.append(run[-1])
        return " " + " ".join(grams) + " "

    return _CJK_RUN.sub(expand, text)


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


def build_match_query(text: str, *, drop_stopwords: bool = True, max_terms: int = 24) -> str:
    """An FTS5 MATCH expression that ORs the meaningful words of ``text`` ("" when none).

    A CJK run becomes a phrase of its bigrams (a single character becomes a prefix query); other words are
    quoted so FTS5 syntax in user text is never interpreted.
    """
    clauses: list[str] = []
    seen: set[str] = set()
    for word in _WORD.findall(text):
        key = word.casefold()
        if key in seen:
            continue
        seen.add(key)
        if _CJK_RUN.fullmatch(word):
            if len(word) == 1:
                clauses.append(_quote(word) + "*")
            else:
                grams = [word[i : i + 2] for i in range(len(word) - 1)]
                clauses.append(_quote(" ".join(grams)))
        else:
            if drop_stopwords and (key in _STOPWORDS or len(key) < 2):
                continue
            clauses.append(_quote(word))
        if len(clauses) >= max_terms:
            break
    return " OR ".join(clauses)


@dataclass(frozen=True)
class SearchHit:
    """One search result: a memory entry or a past turn."""

    kind: str  # "memory" | "user" | "turn"
    text: str
    score: float
    session_id: str | None = None
    user_id: str | None = None
    ts: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


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
CREATE VIRTUAL TABLE IF NOT EXISTS turns_fts USING fts5(
    terms, content='', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
    terms, content='', tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class SearchIndex:
    """The search database. One connection, serialized by a lock, usable from any thread.

    Example:
        >>> import tempfile, pathlib
        >>> idx = SearchIndex(pathlib.Path(tempfile.mkdtemp()) / "search.db")
        >>> _ = idx.add_turn("s1", "我们周末去爬山吧", "好的", user_id=None)
        >>> [h.kind for h in idx.search("爬山")]
        ['turn']
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._conn.executescript(_SCHEMA)
        self._check_consistency()

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
            conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (rowid, cjk_terms(f"{user}\n{assistant}")))
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(rowid),),
            )
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
                conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (last, cjk_terms(f"{user}\n{assistant}")))
            if last:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (str(last),),
                )

    def turn_count(self, session_id: str | None = None) -> int:
        with self._lock:
            if session_id is None:
                row = self._conn.execute("SELECT count(*) FROM turns").fetchone()
            else:
                row = self._conn.execute("SELECT count(*) FROM turns WHERE session_id = ?", (session_id,)).fetchone()
        return int(row[0])

    def _check_consistency(self) -> None:
        """Rebuild the turn index if it does not cover every stored turn (e.g. an index from an older run)."""
        with self._lock:
            max_id = self._conn.execute("SELECT coalesce(max(id), 0) FROM turns").fetchone()[0]
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'turns_indexed'").fetchone()
        indexed = int(row[0]) if row else 0
        if indexed != max_id:
            self.rebuild()

    def rebuild(self) -> None:
        """Re-create the turn index from the stored turns."""
        with self._write() as conn:
            conn.execute("INSERT INTO turns_fts(turns_fts) VALUES ('delete-all')")
            last = 0
            for rowid, user, assistant in conn.execute("SELECT id, user, assistant FROM turns ORDER BY id"):
                conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (rowid, cjk_terms(f"{user}\n{assistant}")))
                last = rowid
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(last),),
            )

    # -- memory entries -----------------------------------------------------------------------
    def sync_entries(self, target: str, entries: Iterable[str]) -> None:
        """Make the entry index for ``target`` match ``entries`` (cheap: a file holds a few KB)."""
        entries = list(entries)
        key = f"entries:{target}"
        fingerprint = hashlib.sha256("\x1e".join(entries).encode("utf-8")).hexdigest()
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row and row[0] == fingerprint:
                return
        with self._write() as conn:
            old = conn.execute("SELECT id, text FROM entries WHERE target = ?", (target,)).fetchall()
            for rowid, text in old:
                conn.execute("INSERT INTO entries_fts(entries_fts, rowid, terms) VALUES('delete', ?, ?)", (rowid, cjk_terms(text)))
            conn.execute("DELETE FROM entries WHERE target = ?", (target,))
            for text in entries:
                cur = conn.execute("INSERT INTO entries(target, text) VALUES (?, ?)", (target, text))
                conn.execute("INSERT INTO entries_fts(rowid, terms) VALUES (?, ?)", (cur.lastrowid, cjk_terms(text)))
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, fingerprint),
            )

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
        """Best matches for ``query`` among entries and turns, best first."""
        match = build_match_query(query, drop_stopwords=drop_stopwords)
        if not match:
            return []
        hits: list[SearchHit] = []
        with self._lock:
            if "memory" in kinds or "user" in kinds:
                rows = self._conn.execute(
                    "SELECT e.target, e.text, bm25(entries_fts) FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid "
                    "WHERE entries_fts MATCH ?",
                    (match,),
                ).fetchall()
                hits.extend(SearchHit(t, text, -score) for t, text, score in rows if t in kinds)
            if "turn" in kinds:
                # Rank only the newest CANDIDATE_CAP matches, so a very common word cannot make search slow.
                rows = self._conn.execute(
                    "SELECT rowid, bm25(turns_fts) FROM turns_fts WHERE turns_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
                    (match, CANDIDATE_CAP),
                ).fetchall()
                rows.sort(key=lambda r: r[1])
                wanted: list[SearchHit] = []
                for rowid, score in rows:
                    turn = self._conn.execute(
                        "SELECT session_id, user_id, ts, user, assistant FROM turns WHERE id = ?", (rowid,)
                    ).fetchone()
                    if turn is None:
                        continue
                    session_id, turn_user, ts, user, assistant = turn
                    if user_id is not None and turn_user != user_id:
                        continue
                    if exclude_session is not None and session_id == exclude_session:
                        continue
                    text = f"User: {user}\nAssistant: {assistant}"
                    wanted.append(SearchHit("turn", text, -score, session_id=session_id, user_id=turn_user, ts=ts))
                    if len(wanted) >= limit:
                        break
                hits.extend(wanted)
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits[:limit]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
