"""The one ranking of turns and entries, shared by both storage backends (SQLite FTS5 and PostgreSQL).

Parity by construction: everything that decides which turns match and how they score is computed here, in
Python, the same way for both backends.

- **Index terms** (:func:`index_terms`): the text a backend indexes is a list of tokens made here: words
  case-folded, Latin diacritics removed, stemmed (Snowball English, the algorithm of PostgreSQL's ``english``
  configuration and of Lucene, via PyStemmer; common irregular verbs mapped to their base form: "went" ->
  "go"); each run of CJK characters written as its overlapping bigrams plus its last character (FTS5 and
  PostgreSQL split no Chinese words, so 爬山 inside 昨天计划去爬山 would never match otherwise). SQLite stores
  them in an FTS5 table with a tokenizer that only splits on spaces; PostgreSQL as a ``tsvector`` literal with
  the same positions. Neither engine stems or folds anything of its own, so "a turn matches a term" means the
  same thing on both: the turn holds the term's token (a word), its tokens in a row (a CJK phrase), or a token
  starting with it (one CJK character).
- **Query terms** (:func:`query_terms`): the same tokenizer and stemmer, minus stop words ("what / did /
  have / when" say nothing about which turn answers a question). The ``session_search`` tool and automatic
  recall use this one policy. A query made only of stop words ("ok thanks") has no terms: recall stays
  empty rather than filling the fence with noise.
- **Candidates**: each backend returns, per term, its ``CANDIDATE_CAP`` newest matching turns (all of them for
  a rarer term) and the newest turns holding all of the rarest capped terms at once; the document frequency
  is estimated from how far back a capped list reaches (:func:`estimate_df`); N is the newest turn id.
- **Scoring** (:class:`Scorer`, :func:`rank_turns`): candidates are ordered by the summed IDF of the terms
  they hold (among equal sums, by the function words they hold); the best ``RERANK_MIN`` (at least
  ``RERANK_FACTOR * limit``) are scored with BM25 (k1 = 1.2, b = 0.75, lengths in characters against the
  average of the newest ``AVGDL_SAMPLE`` turns) from their text, plus a small bonus for two query terms
  standing next to each other ("guinea pig"). Every query term scores, also those of a long query that find
  no candidates (its function words, its commonest words beyond the ``MAX_RANKED_TERMS`` rarest: their df
  from a short probe). When the content words find fewer turns than asked for, up to ``EXACT_MAX`` candidates
  are scored, not just the window. Scoring stops early once no candidate left can enter the best (an upper
  bound of BM25 from the first-pass sum). Ties are broken by the score's components (terms matched, their
  summed IDF, shorter text), and only for turns equal in all of them by turn id.

A backend only supplies the candidate lists and the corpus statistics (:class:`TurnSource`); the same code
scores and orders, so both backends return the same hits with the same scores.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import Stemmer  # PyStemmer: the Snowball stemmers in C

__all__ = [
    "CANDIDATE_CAP",
    "Candidates",
    "LengthWindow",
    "Scorer",
    "Term",
    "TurnRow",
    "TurnSource",
    "bm25_idf",
    "common",
    "estimate_df",
    "filter_rows",
    "index_terms",
    "query_terms",
    "rank_entries",
    "rank_turns",
    "stem",
    "tokens",
]

_CJK = (
    r"\u3040-\u30ff"  # hiragana, katakana
    r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    r"\uac00-\ud7af"  # hangul syllables
    r"\U00020000-\U0002ebef"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_PLAIN = re.compile(r"[^\W_]+")
#: A CJK run, or a run of other letters and digits (CJK characters are word characters too: keep them apart).
_CJK_OR_OTHER = re.compile(f"[{_CJK}]+|[^{_CJK}]+")
_LATIN_MARKS = re.compile("[\u0300-\u036f]+")

#: Dropped from queries: the English stop set of Lucene (and Elasticsearch's ``_english_`` analyzer, and
#: ``bm25s``): articles, conjunctions, prepositions, forms of "be" and a few pronouns.
STOPWORDS = frozenset(
    ['a', 'an', 'and', 'are', 'as', 'at', 'be', 'but', 'by', 'for', 'if', 'in', 'into', 'is', 'it', 'no', 'not', 'of', 'on', 'or', 'such', 'that', 'the', 'their', 'then', 'there', 'these', 'they', 'this', 'to', 'was', 'will', 'with']
)
#: Weak query words: pronouns, question words, auxiliaries and chat filler ("my", "when", "did", "thanks").
#: They count in a turn's BM25 score with their own (low) IDF, like any word, but never make a turn a
#: candidate on their own, and a query made only of them has no terms: recall for "ok thanks, are you
#: there?" stays empty instead of filling the fence with noise.
FUNCTION_WORDS = frozenset(
    ['about', 'above', 'after', 'again', 'against', 'all', 'am', 'any', 'because', 'been', 'before', 'being', 'below', 'between', 'both', 'can', 'could', 'did', 'do', 'does', 'doing', 'down', 'during', 'each', 'few', 'from', 'further', 'had', 'has', 'have', 'having', 'he', 'her', 'here', 'hers', 'herself', 'him', 'himself', 'his', 'how', 'i', 'its', 'itself', 'just', 'let', 'me', 'more', 'most', 'my', 'myself', 'nor', 'now', 'off', 'once', 'only', 'other', 'our', 'ours', 'ourselves', 'out', 'over', 'own', 'same', 'she', 'should', 'so', 'some', 'than', 'theirs', 'them', 'themselves', 'those', 'through', 'too', 'under', 'until', 'up', 'very', 'we', 'were', 'what', 'when', 'where', 'which', 'while', 'who', 'whom', 'why', 'would', 'you', 'your', 'yours', 'yourself', 'yourselves', 'tell', 'know', 'remember', 'please', 'thanks', 'thank', 'hi', 'hello', 'hey', 'ok', 'okay', 'yes', 'also', 'still', 'like', 'want', 'need', 'get', 'got']
)

# English irregular verbs: a question asks in the present ("When did she go / see / buy ..."), a conversation
# tells in the past ("I went", "we saw", "I bought"); no suffix stemmer joins these, so every form is indexed
# and searched as its base. Forms that are mostly other words ("left" aside, "bit", "lit", "rose", "bore",
# "born", "drunk") are left out.
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
#: form -> base ("went" -> "go"), and base -> its forms.
_IRREGULAR_BASE: dict[str, str] = {}
_IRREGULAR_FORMS: dict[str, list[str]] = {}
for _group in _IRREGULAR_TEXT.replace("\n", "").split("|"):
    _words = _group.split()
    for _form in _words:
        _IRREGULAR_BASE.setdefault(_form, _words[0])
        _IRREGULAR_FORMS.setdefault(_IRREGULAR_BASE[_form], []).append(_form)
del _group, _words, _form

#: How many of the newest matching turns each query term contributes to the ranking. Bounds search time when
#: a term is very common; all the matches of a rarer term are considered.
CANDIDATE_CAP = 500
#: How many of a term's newest matches are read to estimate how common it is (long queries only).
PROBE_ROWS = 128
#: How many of the rarest capped terms the extra "all of them" candidate list combines.
AND_TERMS = 3
#: Only the rarest terms of a long query find candidates (the others carry little weight and would cost the most;
#: they still score the candidates found).
MAX_RANKED_TERMS = 8
#: Candidates (in summed-IDF order) re-scored with full BM25 from their text: at least this many ...
RERANK_MIN = 48
#: ... and at least this many times the number of results asked for.
RERANK_FACTOR = 4
#: When the query's content words find fewer turns than asked for, up to this many candidates are scored with
#: BM25 (not just the window above), in first-pass order, until the best are known exactly (see
#: :func:`rank_turns`).
EXACT_MAX = 512
#: Candidates loaded and scored at a time, between checks whether the best are known.
SCORE_BATCH = 32
#: BM25 parameters: the usual values (Robertson and Zaragoza; Lucene's and FTS5's defaults), not tuned here.
K1 = 1.2
B = 0.75
#: Bonus, as a fraction of the smaller IDF of the two, for two query terms standing next to each other in a
#: turn ("guinea pig", "New York"): plain BM25 scores a bag of words and cannot tell these apart.
PROXIMITY_WEIGHT = 0.3
#: Characters of each side of a candidate turn read to count query terms (length uses the whole turn).
SCORED_CHARS = 1000
#: Newest turns whose lengths give the average turn length (read exactly, by id range, on every search).
AVGDL_SAMPLE = 2000
#: A CJK run up to this many characters is matched as a phrase (a word or compound); a longer one by bigrams.
CJK_PHRASE_MAX = 4
#: At most this many bigrams of one CJK sentence are searched (each costs a candidate list).
CJK_SENTENCE_GRAMS = 6
#: Function characters: a bigram holding one says little about the topic (的 in 去杭州的机票).
_CJK_STOPCHARS = frozenset("的了是在我你他她它们吗吧呢啊和也都就要有这那个不很么什怎哪一")

_stemmers = threading.local()  # PyStemmer objects are not thread-safe: one per thread
_stemmers.english = Stemmer.Stemmer("english")  # the importing thread's, made now (forked workers inherit it)


@functools.lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The index form of one case-folded word: its irregular-verb base or its Snowball English stem.

    ``stem("hiking") == stem("hike") == "hike"``; ``stem("went") == "go"``. Words holding digits or non-ASCII
    letters are kept as they are (the English stemmer would only damage them).
    """
    base = _IRREGULAR_BASE.get(word)
    if base is not None:
        return base
    if len(word) <= 2 or not (word.isascii() and word.isalpha()):
        return word
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english")
    return str(stemmer.stemWord(word))


def fold(text: str) -> str:
    """Case-folded, Latin diacritics removed (café -> cafe), as the index and the queries see text."""
    text = text.casefold()
    if not text.isascii():
        text = unicodedata.normalize("NFC", _LATIN_MARKS.sub("", unicodedata.normalize("NFD", text)))
    return text


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]


def _split_words(text: str) -> Iterator[tuple[str, bool]]:
    """The words of folded ``text``: ``(word, is_cjk)``, a CJK run kept apart from the letters around it."""
    for word in _PLAIN.findall(text):
        if word.isascii():
            yield word, False
        else:
            for part in _CJK_OR_OTHER.findall(word):
                yield part, _CJK_RUN.match(part) is not None


def tokens(text: str) -> list[str]:
    """The index tokens of ``text``, in order (see the module docstring)."""
    folded = fold(text)
    if folded.isascii():  # the common case, in one pass
        return list(map(stem, _PLAIN.findall(folded)))
    out: list[str] = []
    for word, cjk in _split_words(folded):
        if cjk:
            out.extend(_bigrams(word))
        else:
            out.append(stem(word))
    return out


def index_terms(text: str) -> str:
    """The tokens of ``text`` joined by spaces: what the SQLite FTS5 table indexes."""
    return " ".join(tokens(text))


@dataclass(frozen=True)
class Term:
    """One query term: a token, a phrase of tokens (a CJK word), or a prefix (one CJK character)."""

    tokens: tuple[str, ...]
    prefix: bool = False
    weak: bool = False  # a function word: scores, but never makes a turn a candidate alone

    @property
    def key(self) -> str:
        return " ".join(self.tokens) + ("*" if self.prefix else "")

    def count(self, toks: Sequence[str | None], counts: Counter[str] | Counter[str | None]) -> int:
        """Occurrences of this term in a token list (``counts`` is its Counter)."""
        if self.prefix:
            first = self.tokens[0]
            return sum(n for tok, n in counts.items() if tok is not None and tok.startswith(first))
        if len(self.tokens) == 1:
            return counts.get(self.tokens[0], 0)
        head, n = self.tokens[0], len(self.tokens)
        if not counts.get(head):
            return 0
        return sum(1 for i, tok in enumerate(toks) if tok == head and tuple(toks[i : i + n]) == self.tokens)


def query_terms(text: str, *, max_terms: int = 24) -> list[Term]:
    """The distinct meaningful terms of a query, in order (stop words and one-letter words dropped)."""
    kept: list[Term] = []
    seen: set[str] = set()
    for word, cjk in _split_words(fold(text)):
        if cjk:
            if len(word) == 1:
                found = [Term((word,), prefix=True)]
            elif len(word) <= CJK_PHRASE_MAX:
                found = [Term(tuple(_bigrams(word)[:-1]))]
            else:
                # A longer run is a sentence, not a word (Chinese and Japanese put no spaces between words):
                # each bigram counts on its own, and the ranking rewards turns that share more of them.
                grams = [g for g in dict.fromkeys(_bigrams(word)[:-1]) if not _CJK_STOPCHARS.intersection(g)]
                found = [Term((g,)) for g in grams[:CJK_SENTENCE_GRAMS]]
        else:
            if (len(word) < 2 and not word.isdigit()) or word in STOPWORDS:
                continue
            found = [Term((stem(word),), weak=word in FUNCTION_WORDS)]
        for term in found:
            if term.key not in seen:
                seen.add(term.key)
                kept.append(term)
    if all(t.weak for t in kept):
        return []
    return kept[:max_terms]


def estimate_df(found: int, oldest: int, capped: bool, newest: int) -> float:
    """How many turns hold a term, from its ``found`` newest matches reaching back to turn ``oldest``.

    When the list is not capped it holds every match; otherwise the density of matches over the turns it spans
    is extrapolated to the whole history.
    """
    if not capped:
        return float(found)
    return min(float(newest), found * newest / max(1, newest - oldest + 1))


def common(df: float, n: float) -> bool:
    """A term held by more than half of the ``n`` turns: its Robertson/Sparck Jones relevance weight
    ``log((n - df + 0.5) / (df + 0.5))`` is negative, i.e. holding it is no evidence that a turn answers the
    query (a speaker's name in a chat where every turn starts with it). Such a term ranks like a function word:
    it adds its (small) BM25 weight but never makes a turn a candidate ahead of turns holding rarer query words,
    and never ties every turn of the history together."""
    return df > n / 2


def bm25_idf(n: float, df: float) -> float:
    """BM25's IDF (the non-negative Lucene form): ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class Scorer:
    """BM25 of one query over texts.

    ``score = sum_t idf_t * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len / avglen))``
    ``      + PROXIMITY_WEIGHT * sum_{adjacent pairs of query terms} min(idf_a, idf_b)``

    ``tf`` counts the term in the text's tokens (at least 1 when the backend matched the turn beyond the part
    read); lengths are in characters. :meth:`score` returns ``(score, terms matched, summed idf)``.
    """

    def __init__(self, terms: Sequence[tuple[float, Term]], avgdl: float) -> None:
        self.terms = list(terms)
        self.avgdl = max(avgdl, 1.0)
        self.single = {t.tokens[0]: i for i, (_, t) in enumerate(self.terms) if len(t.tokens) == 1 and not t.prefix}
        # Latin terms only: stem just the words that can stem to a term (those starting like it; Snowball keeps
        # a word's first letters but for y/i: cry -> cri, dying -> die), not every word of the text.
        self.finder: re.Pattern[str] | None = None
        if self.single and len(self.single) == len(self.terms) and all(t.isascii() for t in self.single):
            starts: set[str] = set()
            for tok in self.single:
                for form in [tok, *_IRREGULAR_FORMS.get(tok, ())]:
                    starts.add(form[:3])
                    if len(form) >= 3 and form[2] in "iy":
                        starts.add(form[:2] + ("y" if form[2] == "i" else "i"))
                    if form[1:3] == "ie":
                        starts.add(form[0] + "y")
            alternatives = "|".join(sorted(map(re.escape, starts), key=len, reverse=True))
            self.finder = re.compile(rf"(?<![^\W_])(?:{alternatives})[^\W_]*")

    def _tokens(self, text: str) -> list[str | None]:
        """The tokens of ``text`` that can be query terms, in order; ``None`` stands for any other words."""
        if self.finder is None:
            return list(tokens(text))
        folded = fold(text)
        out: list[str | None] = []
        end = 0
        for m in self.finder.finditer(folded):
            if out and _PLAIN.search(folded, end, m.start()) is not None:
                out.append(None)  # other words in between: not adjacent
            out.append(stem(m.group()))
            end = m.end()
        return out

    def score(self, text: str, length: int, matched_ids: Sequence[bool] = ()) -> tuple[float, int, float]:
        toks = self._tokens(text)
        counts: Counter[str | None] = Counter(toks)
        norm = K1 * (1.0 - B + B * length / self.avgdl)
        total = 0.0
        matched = 0
        idf_sum = 0.0
        for i, (idf, term) in enumerate(self.terms):
            tf = term.count(toks, counts)
            if tf == 0 and i < len(matched_ids) and matched_ids[i]:
                tf = 1  # the backend matched it beyond the characters read
            if tf:
                matched += 1
                idf_sum += idf
                total += idf * tf * (K1 + 1.0) / (tf + norm)
        if len(self.single) >= 2:
            pairs: set[tuple[int, int]] = set()
            previous: int | None = None
            for tok in toks:
                j = self.single.get(tok) if tok is not None else None
                if j is not None and previous is not None and previous != j:
                    pairs.add((min(j, previous), max(j, previous)))
                previous = j
            for a, b in sorted(pairs):
                total += PROXIMITY_WEIGHT * min(self.terms[a][0], self.terms[b][0])
        return total, matched, idf_sum


def _ranked(sets: list[set[int]], weights: list[float], exclude: set[int],
            also: Sequence[tuple[float, set[int]]] = ()) -> Iterator[tuple[float, int]]:
    """Every id of ``sets`` except ``exclude``, best first: an id scores the summed weight of the sets holding it.

    ``also``: ``(weight, set)`` of terms that order ids of equal score (the function words of the query: they
    never make an id a candidate but count in its BM25 score); the yielded score is still that of ``sets``.

    Term combinations are visited from the heaviest down; the ids first found in the intersection of a
    combination hold exactly those terms (an id holding more was found at a heavier combination), so the
    order is exact; equal scores come newest (highest id) first. Intersections are computed lazily and
    incrementally, in C, so only the combinations needed for the first results cost anything.
    """
    n = len(sets)
    # Two terms that share no turn cannot both be in one: only combinations whose terms pairwise share turns
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
    for mask in sorted(totals, key=lambda m: (-totals[m], m)):
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
        if also and len(fresh) > 1:
            order = sorted(fresh, key=lambda i: (-sum(w for w, held in also if i in held), -i))
        else:
            order = sorted(fresh, reverse=True)
        for rowid in order:
            yield score, rowid


@dataclass(frozen=True)
class Candidates:
    """The newest turns matching one term: ``ids``; ``complete`` if that is all of them; ``oldest`` id."""

    ids: frozenset[int] | set[int]
    complete: bool
    oldest: int

    @classmethod
    def newest_of(cls, ids: set[int], complete: bool) -> Candidates:
        """The ``CANDIDATE_CAP`` newest of ``ids``, all the matches of a term from some turn on (a backend's
        cached list may hold more): exactly what a search without the cache finds, so cached and fresh lists
        rank alike. ``complete``: ``ids`` are all of the term's matches."""
        if len(ids) > CANDIDATE_CAP:
            top = heapq.nlargest(CANDIDATE_CAP, ids)
            return cls(set(top), False, top[-1])
        return cls(ids, complete and len(ids) < CANDIDATE_CAP, min(ids) if ids else 0)


#: ``(id, session_id, user_id, ts, user, assistant, length)``; ``length`` is the whole turn's in characters.
TurnRow = tuple[int, str, "str | None", float, str, str, int]


class TurnSource(Protocol):
    """What a backend supplies to :func:`rank_turns`: candidate lists and corpus statistics, nothing ranked."""

    def newest(self) -> int:
        """The newest turn id (N of the IDF)."""

    def probe(self, terms: list[Term], newest: int) -> list[tuple[int, int]]:
        """Per term, ``(count, oldest id)`` of its ``PROBE_ROWS`` newest matches."""

    def candidates(self, terms: list[Term], newest: int) -> list[Candidates]:
        """Per term, its ``CANDIDATE_CAP`` newest matches among the turns up to ``newest``."""

    def conjunction(self, terms: list[Term], newest: int) -> set[int]:
        """The ``CANDIDATE_CAP`` newest turns holding every one of ``terms``."""

    def session_ids(self, session_id: str, newest: int) -> set[int]:
        """The ids of one session's turns."""

    def load(self, ids: list[int], *, user_id: str | None, exclude_session: str | None,
             head: int | None) -> list[TurnRow]:
        """The rows of ``ids`` in that order that pass the filters (``head``: characters read of each side);
        see :func:`filter_rows`."""

    def length_stats(self, newest: int) -> tuple[int, int]:
        """``(sum of lengths, count)`` of the turns with id above ``newest - AVGDL_SAMPLE`` (see
        :class:`LengthWindow`)."""


class LengthWindow:
    """``(sum of lengths, count)`` of the turns in ``(newest - AVGDL_SAMPLE, newest]``, exact, kept up to date
    by reading only the turns that entered and left the window since the last search (turn ids only grow and
    are handed out in commit order on both backends). ``lengths(lo, hi)`` gives the stats of ``(lo, hi]``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = (0, 0, 0)  # newest, total, count

    def get(self, newest: int, lengths: Callable[[int, int], tuple[int, int]]) -> tuple[int, int]:
        with self._lock:
            old, total, count = self._state
            if old == newest:
                return total, count
            if 0 < old < newest and newest - old < AVGDL_SAMPLE:
                added, removed = lengths(old, newest), lengths(old - AVGDL_SAMPLE, newest - AVGDL_SAMPLE)
                total, count = total + added[0] - removed[0], count + added[1] - removed[1]
            else:
                total, count = lengths(newest - AVGDL_SAMPLE, newest)
            self._state = (newest, total, count)
            return total, count


def filter_rows(rows: Iterable[TurnRow], ids: list[int], *, user_id: str | None,
                exclude_session: str | None) -> list[TurnRow]:
    """``rows`` in the order of ``ids``, without those of other users or of the excluded session."""
    by_id = {row[0]: row for row in rows}
    out = []
    for rowid in ids:
        row = by_id.get(rowid)
        if row is None or (user_id is not None and row[2] != user_id) or \
                (exclude_session is not None and row[1] == exclude_session):
            continue
        out.append(row)
    return out


@dataclass(frozen=True)
class RankedTurn:
    row: TurnRow
    score: float


def rank_turns(
    source: TurnSource, terms: list[Term], limit: int, *, user_id: str | None = None,
    exclude_session: str | None = None,
) -> tuple[list[RankedTurn], float]:
    """The best ``limit`` turns for ``terms`` and the query's IDF mass (what a turn holding every term once,
    at average length, scores: hybrid fusion divides by it)."""
    if not terms:
        return [], 0.0
    newest = source.newest()
    if not newest:
        return [], 0.0
    scoring = terms  # every term scores a candidate; only the rarest few of a long query find candidates
    probed: dict[int, tuple[int, int]] = {}  # index in ``scoring`` -> (count, oldest) of its PROBE_ROWS newest
    if len(terms) > MAX_RANKED_TERMS:  # a long query: its function words find no candidates, ...
        terms = [t for t in terms if not t.weak]
    if len(terms) > MAX_RANKED_TERMS:  # ... and only its rarest terms do, judged from a short probe
        at = [i for i, t in enumerate(scoring) if not t.weak]
        probed.update(zip(at, source.probe(terms, newest)))
        rare = sorted((estimate_df(found, oldest, found >= PROBE_ROWS, newest), i)
                      for i, (found, oldest) in probed.items() if found)
        terms = [scoring[i] for i in sorted(i for _, i in rare[:MAX_RANKED_TERMS])]
        if not terms:
            return [], 0.0
    kept: list[tuple[float, Term, bool]] = []  # (idf, term, capped)
    sets: list[set[int]] = []
    for term, found in zip(terms, source.candidates(terms, newest)):
        if not found.ids:
            continue
        df = estimate_df(len(found.ids), found.oldest, not found.complete, newest)
        if common(df, newest) and not term.weak:  # this history's function word (a speaker's name in every turn)
            term = replace(term, weak=True)
        kept.append((bm25_idf(newest, df), term, not found.complete))
        sets.append(set(found.ids))
    mass = sum(w for w, _, _ in kept) + (len(terms) - len(kept)) * bm25_idf(newest, 0)
    if not kept:
        return [], mass
    # The other terms of a long query (function words, commoner words) add their BM25 weight to the candidates'
    # scores, with the document frequency of their probe: the score is BM25 over the whole query.
    generating = set(terms)
    rest = [i for i, t in enumerate(scoring) if t not in generating]
    missing = [i for i in rest if i not in probed]
    if missing:
        probed.update(zip(missing, source.probe([scoring[i] for i in missing], newest)))
    extra: list[tuple[float, Term]] = []
    for i in rest:
        count, oldest = probed[i]
        if count:
            idf = bm25_idf(newest, estimate_df(count, oldest, count >= PROBE_ROWS, newest))
            extra.append((idf, replace(scoring[i], weak=True)))
            mass += idf
    # Turns holding several common terms at once, even if older than each term's cap: the rarest few only.
    strong = [i for i, (_, term, _) in enumerate(kept) if not term.weak]
    capped = sorted((i for i in strong if kept[i][2]), key=lambda i: (-kept[i][0], i))[:AND_TERMS]
    if len(capped) >= 2:
        both = source.conjunction([kept[i][1] for i in capped], newest)
        for i in capped:
            sets[i] |= both
    excluded = source.session_ids(exclude_session, newest) if exclude_session is not None else set()
    # Turns holding a content word first; then (when content words are rare or absent: a paraphrase) turns
    # holding only function words, ranked by BM25 like any other. The final order keeps that precedence.
    weak = [i for i in range(len(kept)) if i not in strong]
    found_strong = set().union(*(sets[i] for i in strong))
    ranked = itertools.chain(
        ((score, rowid, True) for score, rowid in
         _ranked([sets[i] for i in strong], [kept[i][0] for i in strong], excluded,
                 [(kept[i][0], sets[i]) for i in weak])),
        ((score, rowid, False) for score, rowid in
         _ranked([sets[i] for i in weak], [kept[i][0] for i in weak], excluded | found_strong)) if weak else (),
    )
    total, count = source.length_stats(newest)
    scorer = Scorer([(w, t) for w, t, _ in kept] + extra, total / count if count else 1.0)
    # An upper bound of the BM25 score of a candidate not scored yet, from its first-pass score (the summed IDF
    # of the terms whose lists hold it): each term adds less than ``idf * (K1 + 1)``; a term it may hold without
    # being in that term's list (a capped list, a function word, a term that looked for no candidates) counts as
    # held; every pair of query words as adjacent.
    extra_mass = sum(w for w, _ in extra)
    capped_mass = sum(kept[i][0] for i in range(len(kept)) if kept[i][2])
    unseen = {True: sum(kept[i][0] for i in weak) + extra_mass + capped_mass, False: extra_mass + capped_mass}
    singles = sorted(scorer.terms[j][0] for j in scorer.single.values()) if len(scorer.single) >= 2 else []
    pairs = PROXIMITY_WEIGHT * sum(w * (len(singles) - 1 - n) for n, w in enumerate(singles))

    def bound(first: float, content: bool) -> float:
        return (K1 + 1.0) * (first + unseen[content]) + pairs

    # Candidates are scored in first-pass order, a batch at a time, until no candidate left can enter the best
    # ``limit`` (exact BM25 order), or ``EXACT_MAX`` (at least the window) have been scored: the first pass
    # then only decides which candidates a very common query looks at.
    window = max(RERANK_MIN, RERANK_FACTOR * limit)
    # Fewer content turns than asked for: the rest come from turns holding only function words (or a name in
    # every turn), which the first pass can hardly tell apart: up to EXACT_MAX of them are scored.
    most = max(window, EXACT_MAX) if len(found_strong - excluded) < limit else window
    scored: list[tuple[tuple[Any, ...], int, float]] = []
    pulled = 0
    while len(scored) < most and pulled < window * 16:
        batch = list(itertools.islice(ranked, min(SCORE_BATCH, most - len(scored))))
        if not batch:
            break
        pulled += len(batch)
        rows = source.load([rowid for _, rowid, _ in batch], user_id=user_id, exclude_session=exclude_session,
                           head=SCORED_CHARS)
        for row in rows:
            value = scorer.score(f"{row[4]}\n{row[5]}", row[6], [row[0] in s for s in sets])
            content = row[0] in found_strong
            scored.append(((not content, -value[0], -value[1], -value[2], row[6], -row[0]), row[0], value[0]))
        if len(scored) >= limit:
            kth = heapq.nsmallest(limit, scored)[-1]
            kth_content, kth_score = not kth[0][0], -kth[0][1]
            first, _, in_strong = batch[-1]
            if kth_content and (not in_strong or bound(first, True) < kth_score):
                break  # the rest are weaker content turns, or turns without a content word
            if not kth_content and not in_strong and bound(first, False) < kth_score:
                break
    if not scored:
        return [], mass
    scored.sort()
    best = scored[:limit]
    full = {r[0]: r for r in source.load([rowid for _, rowid, _ in best], user_id=None, exclude_session=None,
                                         head=None)}
    return [RankedTurn(full[rowid], value) for _, rowid, value in best if rowid in full], mass


def rank_entries(terms: list[Term], entries: Sequence[tuple[str, str]], limit: int | None = None
                 ) -> list[tuple[str, str, float]]:
    """Memory entries ``(target, text)`` ranked by BM25 among themselves (N, document frequencies and the
    average length are those of ``entries``): ``(target, text, score)`` of the entries holding a term, best
    first; equal scores by their components, then by target and text (never by storage order)."""
    if not terms or not entries:
        return []
    toks = [tokens(text) for _, text in entries]
    counts = [Counter(t) for t in toks]
    n = len(entries)
    df = [sum(1 for t, c in zip(toks, counts) if term.count(t, c)) for term in terms]
    weighted = [(bm25_idf(n, d), term) for d, term in zip(df, terms) if d]
    if not weighted:
        return []
    scorer = Scorer(weighted, sum(len(text) for _, text in entries) / n)
    out: list[tuple[Any, str, str, float]] = []
    strong = [term for _, term in weighted if not term.weak]
    for (target, text), tok, count in zip(entries, toks, counts):
        if not any(term.count(tok, count) for term in strong):
            continue
        value = scorer.score(text, len(text))
        if value[1]:
            out.append(((-value[0], -value[1], -value[2], len(text), target, text), target, text, value[0]))
    out.sort()
    return [(target, text, value) for _, target, text, value in out[:limit]]
