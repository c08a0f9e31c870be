"""SQLite FTS5 search over memory entries and every synced turn.

FTS5's default tokenizer keeps a run of Chinese characters as one token, so a two-character word such as 爬山
inside 昨天计划去爬山 would never match. Before indexing, each run of CJK characters is rewritten as its
overlapping bigrams (plus the run's last character), and queries get the same treatment, so any substring of
two or more characters matches as a phrase and a single character matches as a prefix.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import itertools
import logging
import math
import re
import sqlite3
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("ironmem.index")

__all__ = [
    "CANDIDATE_CAP",
    "SearchHit",
    "SearchIndex",
    "bm25_idf",
    "build_match_query",
    "cjk_terms",
    "light_stem",
    "query_clauses",
]

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
    ["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "let", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself", "yourselves", "tell", "know", "remember", "please", "thanks", "thank", "hi", "hello", "hey", "ok", "okay", "yes", "also", "still", "just", "like", "want", "need", "get", "got"]
)

# English irregular verbs: a question asks in the present ("When did she go / see / buy ..."), a conversation
# tells in the past ("I went", "we saw", "I bought"); no suffix stemmer (porter included) joins these. A query
# word is searched in all its forms. Forms that are mostly other words ("left" aside, "bit", "lit", "rose",
# "bore", "born", "drunk") are left out.
_IRREGULAR_TEXT = """
go went gone goes|see saw seen|buy bought|run ran|take took taken|make made|meet met|find found|give gave given|
come came|eat ate eaten|write wrote written|begin began begun|bring brought|think thought|teach taught|
catch caught|fly flew flown|drive drove driven|ride rode ridden|swim swam swum|sing sang sung|win won|lose lost|
leave left|feel felt|keep kept|sleep slept|spend spent|send sent|build built|sell sold|tell told|hear heard|
hold held|stand stood|understand understood|speak spoke spoken|break broke broken|choose chose chosen|
forget forgot forgotten|grow grew grown|know knew known|throw threw thrown|draw drew drawn|wear wore worn|
fall fell fallen|pay paid|say said|lead led|feed fed|fight fought|seek sought|sit sat|shoot shot|hang hung|
hide hid hidden|steal stole stolen|wake woke woken|freeze froze frozen|become became|lend lent|dig dug|
stick stuck|strike struck|swing swung|mean meant|deal dealt|shake shook shaken|forgive forgave forgiven|
tear tore torn|blow blew blown|sink sank sunk|ring rang rung|bend bent|weep wept|sweep swept|creep crept|
bleed bled|breed bred|flee fled|slide slid|spin spun|sting stung|wind wound|arise arose arisen|
drink drank|beat beaten|bite bitten|forbid forbade forbidden|undo undid undone|overcome overcame
"""
#: form -> base ("went" -> "go"), and base -> every form (base included).
_IRREGULAR_BASE: dict[str, str] = {}
_IRREGULAR_FORMS: dict[str, tuple[str, ...]] = {}
for _group in _IRREGULAR_TEXT.replace("\n", "").split("|"):
    _words = _group.split()
    if _words:
        _IRREGULAR_FORMS[_words[0]] = tuple(_words)
        for _form in _words:
            _IRREGULAR_BASE.setdefault(_form, _words[0])
del _group, _words

#: How many of the newest matching turns each query word contributes to the ranking. Bounds search time when a
#: word is very common; all the matches of a rarer word are considered.
CANDIDATE_CAP = 500
#: How many of a word's newest matches are read to estimate how common it is (long queries only).
PROBE_ROWS = 128
#: How many of the rarest capped words the extra "all of them" candidate list combines.
AND_TERMS = 3
#: Only the rarest words of a long query rank (the others carry little weight and would cost the most).
MAX_RANKED_TERMS = 8
#: Candidate lists kept between searches, in turn ids (about 60 bytes each; new turns are added incrementally).
#: Words repeat from turn to turn, so recall on every turn mostly reads the few turns added since the last search.
CANDIDATE_CACHE_IDS = 200_000

#: Candidates (in summed-IDF order) re-scored with full BM25 from their text: at least this many ...
RERANK_MIN = 48
#: ... and at least this many times the number of results asked for.
RERANK_FACTOR = 4
#: BM25 parameters (the usual values: Robertson et al.; Lucene's defaults).
K1 = 1.2
B = 0.75
#: Bonus, as a fraction of the smaller IDF of the two, for two query words standing next to each other in a
#: turn ("guinea pig", "New York"): plain BM25 scores a bag of words and cannot tell these apart.
PROXIMITY_WEIGHT = 0.3
#: Hybrid fusion: a convex combination of normalized scores (Bruch et al. 2023, "An Analysis of Fusion
#: Functions for Hybrid Retrieval": it beats reciprocal rank fusion when one retriever is often weak).
#: BM25 is divided by the query's IDF mass (so a turn missing the query's words scores low even when it tops
#: the lexical list); cosine similarity by the best similarity of the query. How deep each list is read:
LEXICAL_WEIGHT = 0.5
FUSION_DEPTH = 50
#: Characters of each side of a candidate turn read to count query words (length uses the whole turn).
SCORED_CHARS = 1000
#: Newest turns sampled to estimate the average turn length.
AVGDL_SAMPLE = 2000

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
class _Candidates:
    """The newest turns matching one query word: ``ids`` up to turn ``upto``; ``complete`` if that is all of them."""

    ids: set[int]
    upto: int
    complete: bool
    oldest: int


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


#: A CJK run up to this many characters is matched as a phrase (a word or compound); a longer one by its bigrams.
CJK_PHRASE_MAX = 4
#: At most this many bigrams of one CJK sentence are searched (each costs a candidate list).
CJK_SENTENCE_GRAMS = 6
#: Function characters: a bigram holding one says little about the topic (的 in 去杭州的机票).
_CJK_STOPCHARS = frozenset("的了是在我你他她它们吗吧呢啊和也都就要有这那个不很么什怎哪一")


def _quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


@dataclass(frozen=True)
class _Term:
    """One query word: its FTS5 clause, and the key used to count it in a turn's text when ranking."""

    clause: str
    key: str  # light stem of a Latin/Cyrillic/... word, or the CJK string itself
    cjk: bool
    forms: tuple[str, ...] = ()  # the other spellings searched (irregular verb forms)


def _query_terms(text: str, *, max_terms: int = 24) -> list[_Term]:
    """The distinct meaningful words of ``text`` as :class:`_Term` s (see :func:`query_clauses`).

    Stop words are always dropped (the ``session_search`` tool and automatic recall share this one policy):
    "what / did / have / when" say nothing about which turn answers a question, and kept in, they let long
    turns outrank the one holding the rare word. A query made only of stop words has no terms.
    """
    terms: list[_Term] = []
    seen: set[str] = set()
    for word in _WORD.findall(text):
        key = word.casefold()
        if key in seen:
            continue
        seen.add(key)
        if _CJK_RUN.fullmatch(word):
            grams = [word[i : i + 2] for i in range(len(word) - 1)]
            if len(word) == 1:
                terms.append(_Term(_quote(word) + "*", word, True))
            elif len(word) <= CJK_PHRASE_MAX:
                terms.append(_Term(_quote(" ".join(grams)), word, True))
            else:
                # A longer run is a sentence, not a word (Chinese and Japanese put no spaces between words):
                # each bigram counts on its own, and the ranking rewards turns that share more of them.
                useful = [g for g in dict.fromkeys(grams) if not _CJK_STOPCHARS.intersection(g)]
                for gram in useful[:CJK_SENTENCE_GRAMS]:
                    if gram not in seen:
                        seen.add(gram)
                        terms.append(_Term(_quote(gram), gram, True))
        else:
            if key in _STOPWORDS or len(key) < 2:
                continue
            base = _IRREGULAR_BASE.get(key)
            if base is not None:
                forms = _IRREGULAR_FORMS[base]
                seen.update(forms)
                clause = "(" + " OR ".join(_quote(f) for f in forms) + ")"
                terms.append(_Term(clause, light_stem(base), False, forms))
            else:
                terms.append(_Term(_quote(word), light_stem(key), False))
        if len(terms) >= max_terms:
            break
    return terms[:max_terms]


def query_clauses(text: str, *, drop_stopwords: bool = True, max_terms: int = 24) -> list[str]:
    """The FTS5 clauses of ``text``, one per distinct word, each safe to use alone as a MATCH expression.

    A short CJK run becomes a phrase of its bigrams, a longer one (a sentence) its separate bigrams, a single
    character a prefix query; other words are quoted so FTS5 syntax in user text is never interpreted. Stop
    words are always dropped (``drop_stopwords`` is accepted for compatibility and ignored: one policy for
    the tool and for recall).
    """
    return [t.clause for t in _query_terms(text, max_terms=max_terms)]


_SUFFIXES = ("ational", "ization", "fulness", "iveness", "ations", "nesses", "ation", "ments", "ingly", "ement",
             "ness", "ment", "ings", "edly", "ies", "ied", "ing", "ers", "est", "ed", "er", "es", "ly", "s")


@functools.lru_cache(maxsize=65536)
def light_stem(word: str) -> str:
    """A cheap suffix-stripping stem, used only to count a query word's occurrences in a candidate turn
    (FTS5's porter stemmer already decided that the turn matches). ``light_stem("hiking") == "hik"``."""
    word = word.casefold()
    base = _IRREGULAR_BASE.get(word)
    if base is not None:
        return base
    if len(word) <= 3 or not word.isascii():
        return word
    word = word.removesuffix("'s")
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                continue
            word = word[: -len(suffix)]
            break
    if word.endswith("e") and len(word) >= 4:
        word = word[:-1]
    return word


def build_match_query(text: str, *, drop_stopwords: bool = True, max_terms: int = 24) -> str:
    """An FTS5 MATCH expression that ORs the meaningful words of ``text`` ("" when none).

    A CJK run becomes a phrase of its bigrams (a single character becomes a prefix query); other words are
    quoted so FTS5 syntax in user text is never interpreted.
    """
    return " OR ".join(query_clauses(text, drop_stopwords=drop_stopwords, max_terms=max_terms))


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


def _estimate_df(found: int, oldest: int, capped: bool, newest: int) -> float:
    """How many turns hold a word, from its ``found`` newest matches reaching back to turn ``oldest``.

    When the list is not capped it holds every match; otherwise the density of matches over the turns it spans
    is extrapolated to the whole history.
    """
    if not capped:
        return float(found)
    return min(float(newest), found * newest / max(1, newest - oldest + 1))



def bm25_idf(turns: int, df: float) -> float:
    """BM25's IDF (the non-negative Lucene form): ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
    return math.log(1.0 + (turns - df + 0.5) / (df + 0.5))


class _Scorer:
    """BM25 of one query over candidate turns, from their text.

    ``score = sum_t idf_t * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len / avglen))``
    ``      + PROXIMITY_WEIGHT * sum_{adjacent query-word pairs} min(idf_a, idf_b)``

    ``tf`` counts the word's occurrences (by :func:`light_stem`; CJK by substring), at least 1 when FTS5 put
    the turn in the word's candidate list; lengths are in characters. Returned as ``(score, words matched,
    summed idf)`` so that equal scores are ordered by their components, and only then by turn id.
    """

    def __init__(self, terms: list[tuple[float, _Term]], sets: list[set[int]], avgdl: float) -> None:
        self.terms = terms
        self.sets = sets
        self.avgdl = max(avgdl, 1.0)
        self.latin = {t.key: i for i, (_, t) in enumerate(terms) if not t.cjk}
        # Only the words that start like a query word are looked at (one C-level scan of the text).
        starts = sorted({key[:3] for key in self.latin}
                        | {f[:3] for _, t in terms if not t.cjk for f in t.forms}, key=len, reverse=True)
        self.finder = (re.compile(r"\b(?:" + "|".join(map(re.escape, starts)) + r")\w*", re.IGNORECASE)
                       if starts else None)

    def score(self, rowid: int, text: str, length: int) -> tuple[float, int, float]:
        n = len(self.terms)
        tf = [0] * n
        last: tuple[int, int] | None = None  # (term, end offset) of the previous query word found
        pairs: set[tuple[int, int]] = set()
        if self.finder is not None:
            for m in self.finder.finditer(text):
                i = self.latin.get(light_stem(m.group()))
                if i is None:
                    last = None
                    continue
                tf[i] += 1
                if last is not None and last[0] != i and m.start() - last[1] <= 2 \
                        and not text[last[1] : m.start()].strip(" -'"):
                    pairs.add((min(i, last[0]), max(i, last[0])))
                last = (i, m.end())
        norm = K1 * (1.0 - B + B * length / self.avgdl)
        total = 0.0
        matched = 0
        idf_sum = 0.0
        for i, (idf, term) in enumerate(self.terms):
            count = text.count(term.key) if term.cjk else tf[i]
            if count == 0 and rowid in self.sets[i]:
                count = 1  # FTS5 (porter stemming) matched a form the light stem does not know
            if count:
                matched += 1
                idf_sum += idf
                total += idf * count * (K1 + 1.0) / (count + norm)
        for a, b in pairs:
            total += PROXIMITY_WEIGHT * min(self.terms[a][0], self.terms[b][0])
        return total, matched, idf_sum


def _ranked(sets: list[set[int]], weights: list[float], exclude: set[int]) -> Iterator[tuple[float, int]]:
    """Every id of ``sets`` except ``exclude``, best first: an id scores the summed weight of the sets holding it.

    Word combinations are visited from the heaviest down; the ids first found in the intersection of a
    combination hold exactly those words (an id holding more was found at a heavier combination), so the
    order is exact; equal scores come newest (highest id) first. Intersections are computed lazily and
    incrementally, in C, so only the combinations needed for the first results cost anything.
    """
    n = len(sets)
    # Two words that share no turn cannot both be in one: only combinations whose words pairwise share turns
    # (cliques of this graph) can hold anything, which prunes most of the 2^n combinations cheaply.
    shares = [sum(1 << j for j in range(n) if j != i and not sets[i].isdisjoint(sets[j])) for i in range(n)]
    totals: dict[int, float] = {0: 0.0}
    clique = {0: True}
    for mask in range(1, 1 << n):
        low = mask & -mask
        rest = mask ^ low
        bit = low.bit_length() - 1
        totals[mask] = totals[rest] + weights[bit]
        clique[mask] = clique[rest] and rest & ~shares[bit] == 0
    del totals[0]
    inter: dict[int, set[int]] = {}

    def holding(mask: int) -> set[int]:
        found = inter.get(mask)
        if found is None:
            low = mask & -mask
            rest = mask ^ low
            own = sets[low.bit_length() - 1]
            found = own if not rest else holding(rest) & own
            inter[mask] = found
        return found

    seen: set[int] = set(exclude)
    for mask in sorted(totals, key=totals.__getitem__, reverse=True):
        if not clique[mask]:
            continue
        ids = holding(mask)
        if not ids:
            continue
        fresh = ids - seen
        if not fresh:
            continue
        seen |= fresh
        score = totals[mask]
        for rowid in sorted(fresh, reverse=True):
            yield score, rowid


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


def _connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """The index's connection. Writable: the file (created with its folder), WAL mode, the schema.

    ``read_only`` (inspecting a home this user may not write): nothing on disk is created or changed. An
    existing index is opened with SQLite's ``mode=ro``, or ``immutable=1`` when no writer has it open (no
    ``-wal`` file) or ``mode=ro`` cannot open it (a WAL database in a folder this user cannot write); its turns
    are searched as they are, and the entry tables are replaced by empty in-memory ones. Without an index file
    the whole index is in memory (no turns).
    """
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        conn.executescript(_SCHEMA)
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
        self._candidates: OrderedDict[str, _Candidates] = OrderedDict()
        self._cached_ids = 0  # total size of the lists in self._candidates
        self._sessions: OrderedDict[str, tuple[set[int], int]] = OrderedDict()
        self._avgdl: tuple[float, int] | None = None
        self._idf_mass = 0.0
        self.vectors: Any = None  # a VectorIndex once enable_vectors() succeeded
        self.vectors_reason = "off (enable with SearchIndex.enable_vectors() / MemoryManager(embeddings=True))"
        self._conn = _connect(self.path, read_only=read_only)
        if not read_only:
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
                conn.execute("INSERT INTO turns_fts(rowid, terms) VALUES (?, ?)", (last, cjk_terms(f"{user}\n{assistant}")))
            if last:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('turns_indexed', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (str(last),),
                )
        if self.vectors is not None:
            self.vectors.wake()

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
        self.clear_caches()
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
        """Make the entry index for ``target`` match ``entries`` (cheap: a file holds a few KB).

        The entry index is derived from the files, so a failure here (disk full, read-only database) is logged
        and retried on the next call instead of failing the write or the session start that triggered it.
        """
        entries = list(entries)
        try:
            self._sync_entries(target, entries)
        except sqlite3.Error as exc:
            log.warning("could not update the search index of %s entries (%s); it is refreshed on a later call",
                        target, exc)
        if self.vectors is not None:
            self.vectors.wake()

    def _sync_entries(self, target: str, entries: list[str]) -> None:
        key = f"entries:{target}"
        fingerprint = hashlib.sha256("\x1e".join(entries).encode("utf-8")).hexdigest()
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            if row and row[0] == fingerprint:
                return
        with self._write() as conn:
            # Only the entries that changed are touched (a write changes one or two of them).
            wanted = Counter(entries)
            for rowid, text in conn.execute("SELECT id, text FROM entries WHERE target = ?", (target,)).fetchall():
                if wanted[text] > 0:
                    wanted[text] -= 1
                    continue
                conn.execute("INSERT INTO entries_fts(entries_fts, rowid, terms) VALUES('delete', ?, ?)", (rowid, cjk_terms(text)))
                conn.execute("DELETE FROM entries WHERE id = ?", (rowid,))
            for text, missing in wanted.items():
                for _ in range(missing):
                    cur = conn.execute("INSERT INTO entries(target, text) VALUES (?, ?)", (target, text))
                    conn.execute("INSERT INTO entries_fts(rowid, terms) VALUES (?, ?)", (cur.lastrowid, cjk_terms(text)))
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, fingerprint),
            )

    # -- vectors (optional, hybrid recall) --------------------------------------------------------
    def enable_vectors(self, embedder: Any = True, *, path: Path | None = None) -> bool:
        """Add dense vectors beside this index (``vectors.db`` next to it) and fuse them into search.

        ``embedder`` True means the local MiniLM model (``ironmem[embeddings]``); otherwise any embedder that
        :func:`ironmem.providers._embedding.as_embedder` accepts. Turns and entries are embedded by a background
        worker, never on the caller's path. Returns False, and stays lexical-only, when the model or sqlite-vec
        cannot be used here; ``vectors_reason`` says why (and :meth:`recall_status` reports it).
        """
        from .vectors import EmbeddingsUnavailable, MiniLMEmbedder, VectorIndex, embeddings_missing

        if self.vectors is not None:
            return True
        try:
            if embedder is True or embedder in ("minilm", MiniLMEmbedder.model_id):
                missing = embeddings_missing()
                if missing:
                    raise EmbeddingsUnavailable(missing)
                embedder = MiniLMEmbedder()
            self.vectors = VectorIndex(
                path or self.path.with_name("vectors.db"), embedder, turns=self._turns_after, entries=self._all_entries
            )
        except Exception as exc:
            self.vectors_reason = f"lexical only: {exc}"
            log.warning("hybrid recall is off, search is lexical only: %s", exc)
            return False
        self.vectors_reason = ""
        return True

    def _turns_after(self, after: int, limit: int) -> list[tuple[int, str]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, user, assistant FROM turns WHERE id > ? ORDER BY id LIMIT ?", (after, limit)
            ).fetchall()
        return [(rowid, f"User: {user}\nAssistant: {assistant}") for rowid, user, assistant in rows]

    def _all_entries(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(t, x) for t, x in self._conn.execute("SELECT target, text FROM entries ORDER BY id")]

    def recall_status(self) -> dict[str, Any]:
        """How search ranks now: ``{"mode": "hybrid" | "lexical", ...}`` with the reason when lexical."""
        if self.vectors is None:
            return {"mode": "lexical", "ranking": "bm25", "reason": self.vectors_reason}
        info = {"mode": "hybrid", "ranking": "bm25 + dense, convex combination of normalized scores"}
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
        terms = _query_terms(query)
        if not terms:
            return []
        match = " OR ".join(t.clause for t in terms)
        hits: list[SearchHit] = []
        with self._lock:
            if any(kind != "turn" for kind in kinds):  # entry kinds: "memory", "user", or scoped "user@<folder>"
                rows = self._conn.execute(
                    "SELECT e.target, e.text, bm25(entries_fts) FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid "
                    "WHERE entries_fts MATCH ?",
                    (match,),
                ).fetchall()
                hits.extend(SearchHit(t, text, round(-score, 4)) for t, text, score in rows if t in kinds)
            if "turn" in kinds:
                if self.vectors is None:
                    hits.extend(self._search_turns(terms, limit, user_id=user_id, exclude_session=exclude_session))
        if self.vectors is not None:
            return self._hybrid(query, terms, hits, limit, kinds, user_id=user_id, exclude_session=exclude_session)
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits[:limit]

    def _hybrid(
        self, query: str, terms: list[_Term], entry_hits: list[SearchHit], limit: int, kinds: tuple[str, ...],
        *, user_id: str | None, exclude_session: str | None,
    ) -> list[SearchHit]:
        """Lexical and dense rankings fused: ``LEXICAL_WEIGHT * bm25 / idf_mass + (1 - LEXICAL_WEIGHT) * cos / max_cos``.

        Entries and turns are fused separately (two lexical and two dense lists). A turn the worker has not
        embedded yet still ranks by its lexical rank. Falls back to lexical-only when the query cannot be
        embedded.
        """
        depth = max(FUSION_DEPTH, 4 * limit)
        try:
            blob = self.vectors.embed_query(query)
            dense_turns = self.vectors.search_turns(blob, depth * 2) if "turn" in kinds else []
            dense_entries = (self.vectors.search_entries(blob, depth) if ("memory" in kinds or "user" in kinds)
                             else [])
        except Exception as exc:
            log.warning("dense search failed, using lexical ranking only: %s", exc)
            dense_turns, dense_entries = [], []
        fused: dict[tuple[str, object], float] = {}
        found: dict[tuple[str, object], SearchHit] = {}

        def add(ranked: list[SearchHit], weight: float, scale: float) -> None:
            for hit in ranked:
                key: tuple[str, object] = ("turn", hit.turn_id) if hit.turn_id is not None else (hit.kind, hit.text)
                fused[key] = fused.get(key, 0.0) + weight * max(0.0, hit.score) / scale
                found.setdefault(key, hit)

        if entry_hits:
            entry_hits.sort(key=lambda h: h.score, reverse=True)
            add(entry_hits[:depth], LEXICAL_WEIGHT, max(entry_hits[0].score, 1e-9))
        dense_e = [SearchHit(t, x, round(sim, 4)) for t, x, sim in dense_entries if t in kinds]
        if dense_e:
            add(dense_e, 1.0 - LEXICAL_WEIGHT, max(max(h.score for h in dense_e), 1e-9))
        if "turn" in kinds:
            with self._lock:
                lexical = self._search_turns(terms, depth, user_id=user_id, exclude_session=exclude_session)
                mass = self._idf_mass
                rows = self._load_turns([rowid for rowid, _ in dense_turns], user_id=user_id,
                                        exclude_session=exclude_session)
            add(lexical, LEXICAL_WEIGHT, max(mass, 1e-9))
            sims = dict(dense_turns)
            dense = [
                SearchHit("turn", f"User: {user}\nAssistant: {assistant}", round(sims[rowid], 4),
                          session_id=session_id, user_id=turn_user, ts=ts, turn_id=rowid)
                for rowid, session_id, turn_user, ts, user, assistant, _ in rows[:depth]
            ]
            if dense:
                add(dense, 1.0 - LEXICAL_WEIGHT, max(max(h.score for h in dense), 1e-9))
        order = sorted(fused, key=lambda k: (fused[k], found[k].score), reverse=True)[:limit]
        return [SearchHit(found[k].kind, found[k].text, round(fused[k], 6), session_id=found[k].session_id,
                          user_id=found[k].user_id, ts=found[k].ts, turn_id=found[k].turn_id) for k in order]

    def _search_turns(
        self, terms: list[_Term], limit: int, *, user_id: str | None, exclude_session: str | None
    ) -> list[SearchHit]:
        """Rank past turns by BM25 over bounded candidate lists (see :func:`bm25_score` for the formula).

        The work is bounded whatever the history size: each word contributes at most its ``CANDIDATE_CAP``
        newest matching turns (plus the newest turns holding all of the rarest capped words at once), its
        document frequency is estimated from how far back those reach, and only the ``MAX_RANKED_TERMS``
        rarest words of a long query rank. Candidates are first ordered by the summed IDF of the words they
        hold (exact, lazily, see :func:`_ranked`); the best ``RERANK_MIN`` (at least ``RERANK_FACTOR * limit``)
        of them are then scored with BM25 from their text: term frequency, length normalization and a bonus
        for query words that stand next to each other. FTS5's ``bm25()`` is not used: it counts every match
        of every word to get its IDF (~35 ms for "the" at 1M turns). Caller holds ``self._lock``.
        """
        self._idf_mass = 0.0
        if not terms:
            return []
        conn = self._conn
        newest = int(conn.execute("SELECT coalesce(max(id), 0) FROM turns").fetchone()[0])
        if not newest:
            return []
        if len(terms) > MAX_RANKED_TERMS:  # a long query: keep the rarest words, judged from a short probe
            probed: list[tuple[float, int, _Term]] = []
            for i, term in enumerate(terms):
                found, oldest = conn.execute(_PROBE_SQL, (term.clause, PROBE_ROWS)).fetchone()
                if found:
                    probed.append((_estimate_df(found, oldest, found >= PROBE_ROWS, newest), i, term))
            probed.sort(key=lambda p: (p[0], p[1]))
            terms = [term for _, _, term in sorted(probed[:MAX_RANKED_TERMS], key=lambda p: p[1])]
        excluded = self._session_ids(exclude_session, newest) if exclude_session is not None else set()
        settled = newest  # every turn after this one belongs to the excluded session (recall: its own turns)
        while settled in excluded and newest - settled < 1024:
            settled -= 1
        kept: list[tuple[float, _Term, bool]] = []  # (idf weight, term, capped)
        sets: list[set[int]] = []  # per ranked word: the ids of its candidate turns
        for term in terms:
            found = self._matching(term.clause, newest, settled)
            if not found.ids:
                continue
            df = _estimate_df(len(found.ids), found.oldest, not found.complete, newest)
            kept.append((bm25_idf(newest, df), term, not found.complete))
            sets.append(found.ids)
        # The query's whole IDF mass, words found nowhere included (at df = 0): what a turn holding every
        # word once, at average length, scores. Hybrid fusion divides by it (lexical confidence in [0, ~1]).
        self._idf_mass = sum(w for w, _, _ in kept) + (len(terms) - len(kept)) * bm25_idf(newest, 0)
        if not kept:
            return []
        # Turns holding several common words at once, even if older than each word's cap: the rarest few only,
        # since FTS5 walks the shortest list to the end when few turns hold them all (~50 ms for 8 words at 1M).
        capped = sorted((i for i, t in enumerate(kept) if t[2]), key=lambda i: -kept[i][0])[:AND_TERMS]
        if len(capped) >= 2:
            both = self._matching(" AND ".join(f"({kept[i][1].clause})" for i in capped), newest, settled).ids
            for i in capped:
                sets[i] = sets[i] | both
        weights = [t[0] for t in kept]
        ranked = _ranked(sets, weights, excluded)
        window = max(RERANK_MIN, RERANK_FACTOR * limit)
        rows: list[tuple[int, str, str | None, float, str, str, int]] = []
        pulled = 0
        step = window
        while len(rows) < window and pulled < window * 16:
            batch = [rowid for _, rowid in itertools.islice(ranked, step)]
            if not batch:
                break
            pulled += len(batch)
            rows.extend(self._load_turns(batch, user_id=user_id, exclude_session=exclude_session,
                                         head=SCORED_CHARS))
            step = window
        if not rows:
            return []
        avgdl = self._avg_length(newest)
        scorer = _Scorer([(w, t) for w, t, _ in kept], sets, avgdl)
        scored = [(scorer.score(row[0], f"{row[4]}\n{row[5]}", row[6]), row[0]) for row in rows]
        scored.sort(reverse=True)
        best = scored[:limit]
        full = {r[0]: r for r in self._load_turns([rowid for _, rowid in best], user_id=None, exclude_session=None)}
        out: list[SearchHit] = []
        for (value, _, _), rowid in best:
            _, session_id, turn_user, ts, user, assistant, _ = full[rowid]
            text = f"User: {user}\nAssistant: {assistant}"
            out.append(SearchHit("turn", text, round(value, 4), session_id=session_id, user_id=turn_user, ts=ts,
                                 turn_id=rowid))
        return out

    def _avg_length(self, newest: int) -> float:
        """Average turn length in characters, from the newest ``AVGDL_SAMPLE`` turns (cached, refreshed as
        the history grows by a tenth)."""
        cached = self._avgdl
        if cached is not None and newest <= cached[1] * 1.1 + 64:
            return cached[0]
        row = self._conn.execute(
            "SELECT avg(length(user) + length(assistant) + 1) FROM "
            "(SELECT user, assistant FROM turns ORDER BY id DESC LIMIT ?)",
            (AVGDL_SAMPLE,),
        ).fetchone()
        value = float(row[0] or 1.0)
        self._avgdl = (value, newest)
        return value

    def _session_ids(self, session_id: str, newest: int) -> set[int]:
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

    def _matching(self, expr: str, newest: int, settled: int | None = None) -> _Candidates:
        """The newest turns matching ``expr`` (at most about ``CANDIDATE_CAP``), from the cache when possible.

        Turns are only ever appended (ids grow), so a cached list is brought up to date by reading the turns
        added since it was made, unless they all come after ``settled`` (turns the caller filters out anyway:
        recall skips its own session, whose turns are the newest), in which case the list is used as it is
        and caught up later. The returned ``ids`` must not be mutated.
        """
        cached = self._candidates.pop(expr, None)
        if cached is not None:
            self._cached_ids -= len(cached.ids)
        if cached is not None and cached.upto <= newest:
            if cached.upto < newest and (settled is None or cached.upto < settled):
                fresh = self._conn.execute(_NEWER_IDS_SQL, (expr, cached.upto, CANDIDATE_CAP)).fetchone()[0]
                new_ids = set(map(int, fresh.split(","))) if fresh else set()
                if len(new_ids) >= CANDIDATE_CAP:  # many turns landed since: the new ones alone fill the list
                    cached = _Candidates(new_ids, newest, False, min(new_ids))
                elif new_ids:
                    ids = cached.ids | new_ids
                    complete, oldest = cached.complete, cached.oldest if cached.ids else min(new_ids)
                    if len(ids) > 2 * CANDIDATE_CAP:  # keep the newest CANDIDATE_CAP
                        ids = set(heapq.nlargest(CANDIDATE_CAP, ids))
                        complete, oldest = False, min(ids)
                    cached = _Candidates(ids, newest, complete, oldest)
                else:
                    cached = _Candidates(cached.ids, newest, cached.complete, cached.oldest)
            found = cached
        else:
            raw = self._conn.execute(_IDS_SQL, (expr, CANDIDATE_CAP)).fetchone()[0]
            ids = set(map(int, raw.split(","))) if raw else set()
            found = _Candidates(ids, newest, len(ids) < CANDIDATE_CAP, min(ids) if ids else 0)
        self._candidates[expr] = found
        self._cached_ids += len(found.ids)
        while self._cached_ids > CANDIDATE_CACHE_IDS and len(self._candidates) > 1:
            _, evicted = self._candidates.popitem(last=False)
            self._cached_ids -= len(evicted.ids)
        return found

    def _load_turns(
        self, ids: list[int], *, user_id: str | None, exclude_session: str | None, head: int | None = None
    ) -> list[tuple[int, str, str | None, float, str, str, int]]:
        """The rows of ``ids`` (in that order) that pass the filters: ``(id, session_id, user_id, ts, user,
        assistant, length)``; with ``head``, only the first ``head`` characters of each side are read."""
        if not ids:
            return []
        cols = "user, assistant" if head is None else f"substr(user, 1, {int(head)}), substr(assistant, 1, {int(head)})"
        rows = {
            r[0]: r
            for r in self._conn.execute(
                f"SELECT id, session_id, user_id, ts, {cols}, length(user) + length(assistant) + 1 FROM turns "
                f"WHERE id IN ({','.join('?' * len(ids))})",
                ids,
            )
        }
        out = []
        for rowid in ids:
            row = rows.get(rowid)
            if row is None:
                continue
            if user_id is not None and row[2] != user_id:
                continue
            if exclude_session is not None and row[1] == exclude_session:
                continue
            out.append(row)
        return out

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
