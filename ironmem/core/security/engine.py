"""A small rule engine: rules are data (``rules.yaml``), compiled once at import.

The file has two parts:

``lexicon``
    Concepts (``ignore``, ``prior``, ``secret``, ``send``, ...), each a list of literal phrases per language.
    ``*`` at the end of a phrase means "any word ending" (``ignor*`` matches ignore, ignoring, ignored).
``rules``
    Each rule: ``id``, ``intent`` (one sentence, why it exists), ``category``, ``languages``, ``weight``
    (2 blocks on its own; 1 is a signal that needs a second one of the same category, or the learned
    model's agreement), ``patterns`` (regular expressions over the normalized, casefolded text, where
    ``{concept}`` expands to the concept's phrases and ``{_}``/``{__}`` are a short/long gap that stays
    inside one sentence), and ``examples`` (``positive`` texts the rule must flag, ``negative`` texts it
    must not: the test suite checks both).

Linear time: a pattern that starts with ``{concept}`` is only tried where one of the concept's phrases
occurs (every phrase found in one Aho-Corasick pass over the text, or with ``str.find`` per phrase when
the text holds very many occurrences), anchored there; other patterns must begin with a literal character
class cheap for the regex engine (``!``, ``<``, ``[``), and every gap is bounded.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import ahocorasick_rs
import numpy as np
import yaml

from ironmem.core.errors import IronMemError

__all__ = ["Rule", "RuleMatch", "RulesError", "load_rules", "match_rules", "match_rules_views"]

_GAPS = {
    "_": r"[^.!?\n。！？]{0,40}?",
    "__": r"[^.!?\n。！？]{0,120}?",
    "___": r"[^\n]{0,200}?",
}
_CONCEPT_RE = re.compile(r"\{([a-z_][a-z_0-9]*)\}")
# scripts where a phrase may be glued to its neighbours (no spaces, or attached prefixes/particles as in Arabic)
_SPACELESS = re.compile("[\u0600-\u06ff\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")


class RulesError(IronMemError):
    """The rule file is malformed (a missing field, an unknown concept, a pattern that does not compile)."""


@dataclass(frozen=True)
class Rule:
    """One rule of ``rules.yaml`` after compilation."""

    id: str
    intent: str
    category: str
    languages: tuple[str, ...]
    weight: int
    contexts: tuple[str, ...]
    model_support: bool  # a weight-1 signal the learned model's score may confirm (False: only a second rule)
    patterns: tuple[Any, ...]  # compiled regexes and concept sequences
    requires: tuple[str, ...]  # literal anchors of the regex patterns
    positive: tuple[str, ...]
    negative: tuple[str, ...]


@dataclass(frozen=True)
class RuleMatch:
    """A rule that matched at ``span`` of the normalized text."""

    rule: Rule
    span: tuple[int, int]
    excerpt: str


_BOUNDARY_FREE = re.compile(r"[^\w]")


@dataclass(frozen=True)
class _Phrase:
    literal: str  # what str.find looks for
    star: bool  # any word ending may follow
    left: bool  # needs a word boundary before it
    right: bool  # needs a word boundary after it (when not star)


def _norm_phrase(p: str) -> str:
    from .normalize import normalize

    star = p.endswith("*")
    core = normalize(p[:-1] if star else p).skel
    return core + ("*" if star else "")


def _phrase(p: str) -> _Phrase:
    star = p.endswith("*")
    core = p[:-1] if star else p
    latin = bool(core) and not _SPACELESS.search(core)
    return _Phrase(core, star, latin and core[:1].isalnum(), latin and core[-1:].isalnum())


@dataclass(frozen=True)
class _Seq:
    """A pattern made only of concepts and gaps: ``{a}{_}{b}{__}{c}``."""

    concepts: tuple[str, ...]
    gaps: tuple[str, ...]  # gap kind between consecutive concepts


_SEQ_RE = re.compile(r"^(?:\{[a-z_][a-z_0-9]*\})+$")


def _compile(data: dict[str, Any]) -> tuple[Rule, ...]:
    lexicon: dict[str, dict[str, Any]] = data.get("lexicon") or {}
    concepts: dict[str, tuple[_Phrase, ...]] = {}
    vetoes: dict[str, re.Pattern[str]] = {}
    vetoes_before: dict[str, re.Pattern[str]] = {}
    lifts: dict[str, re.Pattern[str]] = {}
    for name, by_lang in lexicon.items():
        by_lang = dict(by_lang or {})
        veto = by_lang.pop("unless_followed_by", None)
        if veto is not None:
            try:
                vetoes[name] = re.compile(str(veto))
            except re.error as exc:
                raise RulesError(f"concept {name!r}: unless_followed_by does not compile: {exc}") from exc
        veto = by_lang.pop("unless_preceded_by", None)
        if veto is not None:
            try:
                vetoes_before[name] = re.compile(rf"(?:{veto})\Z")
            except re.error as exc:
                raise RulesError(f"concept {name!r}: unless_preceded_by does not compile: {exc}") from exc
        lift = by_lang.pop("veto_lifted_by", None)
        if lift is not None:
            if veto is None:
                raise RulesError(f"concept {name!r}: veto_lifted_by needs unless_preceded_by")
            try:  # searched in the rest of the sentence, at most _LIFT_REACH characters
                lifts[name] = re.compile(rf"(?:(?![.!?](?:\s|$)|[\n。！？]).)*?(?:{lift})")
            except re.error as exc:
                raise RulesError(f"concept {name!r}: veto_lifted_by does not compile: {exc}") from exc
        phrases: set[str] = set()
        for lang_phrases in by_lang.values():
            # phrases are read through the same normalization as the text (casefold, look-alike skeleton)
            phrases.update(_norm_phrase(str(p)) for p in lang_phrases if str(p).strip("* "))
        if not phrases:
            raise RulesError(f"concept {name!r} has no phrases; add at least one under a language code")
        concepts[name] = tuple(_phrase(p) for p in sorted(phrases))
    rules: list[Rule] = []
    seen: set[str] = set()
    for raw in data.get("rules") or []:
        for key in ("id", "intent", "category", "patterns"):
            if key not in raw:
                raise RulesError(
                    f"rule {raw.get('id', raw)!r} has no {key!r}; every rule needs id, intent, category, patterns"
                )
        rid = str(raw["id"])
        if rid in seen:
            raise RulesError(f"duplicate rule id {rid!r}")
        seen.add(rid)
        compiled: list[re.Pattern[str] | _Seq] = []
        for pat in raw["patterns"]:
            if _SEQ_RE.match(pat):
                names = _CONCEPT_RE.findall(pat)
                cs: list[str] = []
                gaps: list[str] = []
                for name in names:
                    if name in _GAPS:
                        if not cs or len(gaps) == len(cs):
                            raise RulesError(f"rule {rid!r}: pattern {pat!r} puts a gap where a concept belongs")
                        gaps.append(name)
                        continue
                    if name not in concepts:
                        raise RulesError(f"rule {rid!r} uses unknown concept {{{name}}}; define it under lexicon")
                    if len(gaps) < len(cs):
                        gaps.append("")  # adjacent concepts
                    cs.append(name)
                compiled.append(_Seq(tuple(cs), tuple(gaps[: len(cs) - 1])))
                continue
            if any(n not in _GAPS for n in _CONCEPT_RE.findall(pat)):
                raise RulesError(
                    f"rule {rid!r}: pattern {pat!r} mixes concepts with regex; write concepts and gaps only, "
                    "or a plain regex"
                )
            if not raw.get("requires"):
                raise RulesError(f"rule {rid!r}: a regex pattern needs 'requires' (literal anchors)")
            try:
                compiled.append(re.compile(_CONCEPT_RE.sub(lambda m: _GAPS[m.group(1)], pat), re.DOTALL))
            except re.error as exc:
                raise RulesError(f"rule {rid!r}: pattern {pat!r} does not compile: {exc}") from exc
        ex = raw.get("examples") or {}
        rules.append(
            Rule(
                id=rid,
                intent=str(raw["intent"]),
                category=str(raw["category"]),
                languages=tuple(raw.get("languages") or ("en",)),
                weight=int(raw.get("weight", 2)),
                contexts=tuple(raw.get("contexts") or ("write", "recall")),
                model_support=bool(raw.get("model_support", True)),
                patterns=tuple(compiled),
                requires=tuple(str(r).casefold() for r in raw.get("requires") or ()),
                positive=tuple(ex.get("positive") or ()),
                negative=tuple(ex.get("negative") or ()),
            )
        )
    _CONCEPTS.clear()
    _CONCEPTS.update(concepts)
    _CONCEPT_VETO.clear()
    _CONCEPT_VETO.update(vetoes)
    _CONCEPT_VETO_BEFORE.clear()
    _CONCEPT_VETO_BEFORE.update(vetoes_before)
    _CONCEPT_VETO_LIFT.clear()
    _CONCEPT_VETO_LIFT.update(lifts)
    literals = {ph.literal for phs in concepts.values() for ph in phs}
    literals.update(lit for rule in rules for lit in rule.requires)
    _PREFILTERS.clear()
    _HEADS.clear()
    for rule in rules:
        for pat in rule.patterns:
            if isinstance(pat, re.Pattern) and (pre := _prefilter(pat)) is not None:
                _PREFILTERS[pat] = pre
                literals.update(lit for lits in pre.sets for lit in lits)
            if isinstance(pat, re.Pattern) and (heads := _match_heads(pat)) is not None:
                _HEADS[pat] = heads
                literals.update(heads)
    _AUTOMATON[0] = _automaton(literals)
    _LIT_MAX[0] = max((len(lit) for lit in literals), default=1)
    _RULE_LITS.clear()
    _LIT_REACH.clear()
    _RX_BEHIND.clear()
    # How far around an occurrence of each literal a rule may read (see match_rules_views): an anchor of a
    # regex rule opens its search window (400 before, 700 after, plus what the regex's lookbehinds and \b
    # read before the window), a phrase of a concept is read with one character before it and up to
    # _SEQ_REACH after it, a literal of a regex prefilter only by its own occurrence list.
    def reach(lit: str, before: int, after: int) -> None:
        b, a = _LIT_REACH.get(lit, (0, 0))
        _LIT_REACH[lit] = (max(b, before), max(a, after))

    for rule in rules:
        lits: set[str] = set(rule.requires)
        for pat in rule.patterns:
            if isinstance(pat, _Seq):
                for c in pat.concepts:
                    for ph in concepts[c]:
                        lits.add(ph.literal)
                        reach(ph.literal, 2 + (_VETO_REACH if c in vetoes_before else 0), _SEQ_REACH)
                continue
            for lit in _HEADS.get(pat, ()):
                lits.add(lit)
                reach(lit, 0, 0)
            if (pre := _PREFILTERS.get(pat)) is not None:
                for ls in pre.sets:
                    for lit in ls:
                        lits.add(lit)
                        reach(lit, 0, 0)
            from re import _parser  # type: ignore[attr-defined]

            lb = _lookbehind_width(list(_parser.parse(pat.pattern, pat.flags)))
            _RX_BEHIND[pat] = None if lb is None else lb + 1  # (+1: \b reads the character before)
            if lb is None:
                lits.add("")  # reads without bound before its window: always tried again
            for lit in rule.requires:
                reach(lit, 400 + (lb or 0) + 3, 702)
        if all(lits):  # an empty literal is looked for outside the automaton: such a rule always runs
            _RULE_LITS[rule.id] = frozenset(lits)
    _CONCEPT_LITS.clear()
    for name, phs in concepts.items():
        by_lit: dict[str, list[_Phrase]] = {}
        for ph in phs:
            by_lit.setdefault(ph.literal, []).append(ph)
        _CONCEPT_LITS[name] = {lit: tuple(v) for lit, v in by_lit.items()}
    return tuple(rules)


def _lit_id(lit: str) -> int:
    """A number for ``lit`` (the automaton's value for it: the hits of one pass are grouped with numpy)."""
    got = _LIT_IDS.get(lit)
    if got is None:
        got = _LIT_IDS[lit] = len(_LITS)
        _LITS.append(lit)
        _LIT_LENS.append(len(lit))
    return got


_LIT_IDS: dict[str, int] = {}
_LITS: list[str] = []
_LIT_LENS: list[int] = []


class _Automaton:
    """One Aho-Corasick automaton (``ahocorasick_rs``) over a set of literals, reporting every occurrence
    (overlapping ones too) as ``(end index, literal id)`` with the end inclusive."""

    def __init__(self, literals: list[str]) -> None:
        self.literals = literals
        self.ids = np.array([_lit_id(lit) for lit in literals], dtype=np.int64)
        self._members = frozenset(literals)
        self._ac = ahocorasick_rs.AhoCorasick(literals)

    def __contains__(self, lit: str) -> bool:
        return lit in self._members

    def hits(self, text: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(inclusive ends, literal ids) of the occurrences inside ``text[lo:hi]``, in order of their ends
        (a literal's occurrences are in increasing order)."""
        got = self._ac.find_matches_as_indexes(text[lo:hi] if lo or hi < len(text) else text, overlapping=True)
        if not got:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        # (fromiter over the flattened tuples: about twice as fast as np.array on a list of tuples)
        arr = np.fromiter(itertools.chain.from_iterable(got), dtype=np.int64, count=3 * len(got)).reshape(-1, 3)
        return arr[:, 2] + (lo - 1), self.ids[arr[:, 0]]

    def iter(self, text: str, lo: int, hi: int) -> list[tuple[int, int]]:
        """:meth:`hits` as a list of ``(end, literal id)`` pairs."""
        ends, ids = self.hits(text, lo, hi)
        return list(zip(ends.tolist(), ids.tolist(), strict=True))


def _automaton(literals: set[str]) -> _Automaton | None:
    """One Aho-Corasick automaton over every literal of the rules: one pass over a text finds them all."""
    lits = sorted(lit for lit in literals if lit)
    return _Automaton(lits) if lits else None


# ------------------------------------------------------------------ regex prefilter (required literals)
# A regex rule is searched only around its anchors (``requires``), in merged windows. On a long ordinary
# text those windows cover most of it (anchors are common words), so each regex is also read for the
# literals that every match must contain ("required factors"): a window without one of them holds no
# match, and when the pattern's match width is bounded, only the starts that can reach one of them are
# tried. The search itself is unchanged, so the first match (and its span) is the one the plain search
# finds.

_FACTORS_MAX = 64  # strings one factor set may hold
_LIT_MIN = 3  # shorter literals are too common to filter anything (except punctuation like ``//``)


@dataclass(frozen=True)
class _Prefilter:
    sets: tuple[tuple[str, ...], ...]  # every match contains one string of each set
    width: int | None  # the longest match plus what lookarounds may read past it; None when unbounded


def _factors(items: Any) -> tuple[frozenset[str] | None, list[frozenset[str]]]:
    """(every string the sub-pattern can match, if few; sets of which each match contains one string)."""
    from re import _constants as C  # type: ignore[attr-defined]

    exact: frozenset[str] | None = frozenset([""])
    cur: frozenset[str] | None = exact
    need: list[frozenset[str]] = []

    def flush() -> None:
        nonlocal cur
        if cur and "" not in cur:
            need.append(cur)
        cur = frozenset([""])

    for op, av in items:
        ex: frozenset[str] | None
        sub_need: list[frozenset[str]] = []
        if op is C.LITERAL:
            ex = frozenset([chr(av)])
        elif op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            ex = frozenset([""])  # reads, consumes nothing
        elif op is C.IN:
            chars = [chr(a) for o, a in av if o is C.LITERAL]
            ex = frozenset(chars) if len(chars) == len(av) and len(chars) <= 8 else None
        elif op is C.SUBPATTERN:
            _group, add_flags, _del, p = av
            if add_flags & C.SRE_FLAG_IGNORECASE:
                ex = None
            else:
                ex, sub_need = _factors(p)
        elif op is C.ATOMIC_GROUP:
            ex, sub_need = _factors(av)
        elif op is C.BRANCH:
            alts = [_factors(a) for a in av[1]]
            if all(e is not None for e, _ in alts):
                union = frozenset[str]().union(*(e for e, _ in alts if e is not None))
                ex = union if len(union) <= _FACTORS_MAX else None
                if ex is None and "" not in union:
                    sub_need = [union]
            else:
                ex = None
                picks: list[frozenset[str]] = []
                for e, ns in alts:
                    cands = ([e] if e is not None and "" not in e else []) + ns
                    if not cands:
                        picks = []
                        break
                    picks.append(max(cands, key=_set_score))
                if picks:
                    sub_need = [frozenset().union(*picks)]
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            lo, hi, p = av
            e, ns = _factors(p)
            if lo == hi == 1:
                ex, sub_need = e, ns
            elif lo == 0 and hi == 1 and e is not None:
                ex = e | {""}
            else:
                ex = None
                if lo >= 1:
                    sub_need = ([e] if e is not None and "" not in e else []) + ns
        else:
            ex = None
        need.extend(sub_need)
        if ex is None:
            flush()
            exact = None
            continue
        assert cur is not None
        prod = frozenset(a + b for a in cur for b in ex)
        if len(prod) > _FACTORS_MAX:
            flush()
            exact = None
            prod = ex
        cur = prod
    if exact is not None:
        return cur, need
    flush()
    return None, need


def _set_score(s: frozenset[str]) -> tuple[int, int]:
    """Rarer first: the shortest string of the set (longer is rarer), then fewer strings."""
    return (min(len(x) for x in s), -len(s))


def _lookahead_width(items: Any) -> int | None:
    """How far past a position the lookaheads of the pattern may read (None: unbounded)."""
    from re import _constants as C  # type: ignore[attr-defined]

    most = 0
    for op, av in items:
        if op in (C.ASSERT, C.ASSERT_NOT) and av[0] == 1:
            hi = av[1].getwidth()[1]
            if hi >= C.MAXREPEAT:
                return None
            most = max(most, hi)
        subs: list[Any] = []
        if op in (C.SUBPATTERN,):
            subs = [av[3]]
        elif op in (C.ASSERT, C.ASSERT_NOT, C.ATOMIC_GROUP):
            subs = [av[1] if op is not C.ATOMIC_GROUP else av]
        elif op is C.BRANCH:
            subs = list(av[1])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            subs = [av[2]]
        elif op in (C.GROUPREF, C.GROUPREF_EXISTS):
            return None
        for s in subs:
            w = _lookahead_width(s)
            if w is None:
                return None
            most = max(most, w)
    return most


def _lookbehind_width(items: Any) -> int | None:
    """How far before a position the lookbehinds of the pattern may read, summed over all of them (an upper
    bound; None: unbounded)."""
    from re import _constants as C  # type: ignore[attr-defined]

    total = 0
    for op, av in items:
        subs: list[Any] = []
        if op in (C.ASSERT, C.ASSERT_NOT):
            if av[0] == -1:
                hi = av[1].getwidth()[1]
                if hi >= C.MAXREPEAT:
                    return None
                total += hi
            subs = [av[1]]
        elif op is C.SUBPATTERN:
            subs = [av[3]]
        elif op is C.ATOMIC_GROUP:
            subs = [av]
        elif op is C.BRANCH:
            subs = list(av[1])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            subs = [av[2]]
        elif op is C.GROUPREF_EXISTS:
            subs = [x for x in av[1:] if x is not None]
        for sub in subs:
            w = _lookbehind_width(sub)
            if w is None:
                return None
            # a lookbehind inside a repeat may be entered at many positions, each within the match
            total += w
    return total


def _match_heads(rx: re.Pattern[str]) -> tuple[str, ...] | None:
    """Strings one of which every match of ``rx`` starts with (read from its leading literals, after
    zero-width assertions), when they are few and long enough to be rare; else None.

    A search then tries only the positions where one of them occurs (``rx.match`` there, in order): the
    leftmost match is the one ``rx.search`` finds, since a match can start nowhere else."""
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    if rx.flags & re.IGNORECASE:
        return None
    cur = frozenset([""])
    for op, av in _parser.parse(rx.pattern, rx.flags):
        if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            continue  # reads, consumes nothing
        ex, _need = _factors([(op, av)])
        if ex is None:
            return None
        cur = frozenset(a + b for a in cur for b in ex)
        if len(cur) > _FACTORS_MAX:
            return None
        if "" not in cur:
            break
    # (two characters are enough here: a head is tried only where it occurs, and a head too common for its
    # list to be complete, capped, sends the search back to ``rx.search``)
    if "" in cur or not all(len(x) >= 2 and not x.isspace() for x in cur):
        return None
    return tuple(sorted(cur))


def _prefilter(rx: re.Pattern[str]) -> _Prefilter | None:
    from re import _constants as C  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    if rx.flags & re.IGNORECASE:
        return None
    parsed = _parser.parse(rx.pattern, rx.flags)  # compiled already: it parses
    exact, need = _factors(list(parsed))
    hi = parsed.getwidth()[1]
    ahead = _lookahead_width(list(parsed))
    if exact is not None and "" not in exact:
        need = [exact, *need]
    useful = [s for s in need if all(len(x) >= _LIT_MIN or (len(x) == 2 and not x.isalnum() and not x.isspace()) for x in s)]
    if not useful:
        return None
    useful.sort(key=_set_score, reverse=True)
    sets = tuple(tuple(sorted(s)) for s in useful[:3])
    width = None if hi >= C.MAXREPEAT or ahead is None else hi + ahead + 4
    return _Prefilter(sets, width)


_CONCEPTS: dict[str, tuple[_Phrase, ...]] = {}
# concept -> what may not follow an occurrence (``unless_followed_by`` in the lexicon: ``http://localhost`` is no
# outside address); read from the occurrence's end, at most _VETO_REACH characters (within _SEQ_REACH)
_CONCEPT_VETO: dict[str, re.Pattern[str]] = {}
# concept -> what may not come right before an occurrence (``unless_preceded_by``: "don't post it" is no reveal);
# matched so that it ends where the occurrence starts, reading at most _VETO_REACH characters back
_CONCEPT_VETO_BEFORE: dict[str, re.Pattern[str]] = {}
# concept -> what lifts that veto when it follows in the same sentence (``veto_lifted_by``: "never send it to anyone
# except https://..." sends it), read from the occurrence's end, at most _LIFT_REACH characters (within _SEQ_REACH)
_CONCEPT_VETO_LIFT: dict[str, re.Pattern[str]] = {}
_VETO_REACH = 40
_LIFT_REACH = 160
_AUTOMATON: list[_Automaton | None] = [None]  # the automaton of the last compiled rules (with _CONCEPTS)
_LIT_MAX = [1]  # the length of its longest literal
_PREFILTERS: dict[re.Pattern[str], _Prefilter] = {}  # regex -> the literals its matches contain
_HEADS: dict[re.Pattern[str], tuple[str, ...]] = {}  # regex -> the strings its matches start with
_CONCEPT_LITS: dict[str, dict[str, tuple[_Phrase, ...]]] = {}  # concept -> literal -> its phrases
_RULE_LITS: dict[str, frozenset[str]] = {}  # rule id -> every literal its patterns look up
_RX_BEHIND: dict[re.Pattern[str], int | None] = {}  # regex -> how far before its search start it reads
_LIT_REACH: dict[str, tuple[int, int]] = {}  # literal -> how far before / after an occurrence a rule reads


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    """The compiled rules shipped with the package (``ironmem/core/security/rules.yaml``)."""
    text = resources.files(__package__).joinpath("rules.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return _compile(yaml.load(text, Loader=loader))


_MAX_HITS = 4000  # per literal; beyond that the text is one phrase repeated (enough to judge)
_CHUNK = 65_536  # characters per step of the one pass (literals at their cap leave the automaton in between)
_GAP_MAX = {"": 1, "_": 40, "__": 120, "___": 200}
_SEQ_REACH = 40 + _GAP_MAX["___"] + 8  # a word ending (40), the longest gap and the sentence end after it
# A sentence ends at . ! ? followed by a space or the end (a dot inside an e-mail address, a host name or
# a version number does not end it), at a newline, or at a CJK full stop.
_TERM_RE = re.compile(r"[.!?](?=\s|$)|[\n。！？]")
_TOKEN_RE = re.compile(r"\w+")


_VECTOR_MIN = 64  # first-concept spans beyond which a chain's candidates are picked with numpy


class _Prefixes:
    """The set of the first 2..12 characters of every token, as a sorted token list: ``x in prefixes`` is one
    bisection (the smallest token at or after ``x`` starts with ``x`` when any token does), and building it
    costs one sort, not a dozen slices per token."""

    def __init__(self, tokens: set[str]) -> None:
        self._sorted = sorted(tokens)

    def __contains__(self, x: object) -> bool:
        if not isinstance(x, str) or not 2 <= len(x) <= 12:
            return False
        k = bisect_left(self._sorted, x)
        return k < len(self._sorted) and self._sorted[k].startswith(x)

    def __bool__(self) -> bool:
        return bool(self._sorted)


class _Text:
    """One normalized text with the occurrence caches the rules share."""

    restricted = False  # (a _SecondView: try only the places near a change)

    def __init__(self, text: str) -> None:
        self.text = text
        self._tokens: set[str] | None = None
        self._prefixes: _Prefixes | None = None
        self._chars: set[str] | None = None
        self._lit: dict[str, list[int]] = {}
        self._found: dict[str, list[int]] | None = None  # every automaton literal that occurs -> its starts
        self._con: dict[str, list[tuple[int, int]]] = {}
        self._con_starts: dict[str, list[int]] = {}
        self._con_arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._terms: list[int] | None = None
        self._nl: list[int] | None = None

    def _may_contain(self, lit: str) -> bool:
        """Cheap filter before ``lit in text``: a full scan per absent literal would make the engine cost
        (number of phrases) x (text length). Words must occur as tokens (or token prefixes), spaceless-script
        phrases must have all their characters in the text."""
        if _SPACELESS.search(lit) or not lit[:1].isalnum():
            if self._chars is None:
                self._chars = set(self.text)
            return all(c in self._chars for c in set(lit))
        if self._tokens is None:
            self._tokens = set(_TOKEN_RE.findall(self.text))
            self._prefixes = _Prefixes(self._tokens)
        first = _TOKEN_RE.match(lit)
        if first is None:
            return True
        word = first.group(0)
        if first.end() == len(lit) or not lit[first.end()].isspace():
            # the literal may end inside a token ("ignor" of ignore) or continue with punctuation
            # prefixes are kept up to 12 characters: a longer stem is checked by its first 12, then found
            return word[:12] in self._prefixes or word in self._tokens  # type: ignore[operator]
        return word in self._tokens

    def _occurrences(self) -> dict[str, list[int]] | None:
        """Starts of every automaton literal in the text, in one pass (overlapping ones too), the first
        ``_MAX_HITS`` per literal (what the per-literal ``str.find`` search finds).

        The pass runs over chunks of ``_CHUNK`` characters, its hits grouped by literal with numpy; after a
        chunk made mostly of hits of literals at their cap, those leave the automaton (rebuilt without
        them), so a text made of one phrase repeated costs one pass, not one Python step per occurrence."""
        if self._found is None:
            found: dict[str, list[int]] = {}
            auto = _AUTOMATON[0]
            t = self.text
            n = len(t)
            if auto is None or not n:
                self._found = found
                return found
            lens = np.array(_LIT_LENS, dtype=np.int64)
            pos = 0
            done: set[str] = set()  # literals at their cap, no longer searched
            while pos < n:
                stop = min(n, pos + _CHUNK)
                ends, ids = auto.hits(t, max(0, pos - _LIT_MAX[0] + 1), stop)
                if ends.size:
                    # the hits of the chunk grouped by literal with numpy (no Python step per hit), each
                    # literal's in increasing order
                    keep = ends >= pos  # the others were found in the previous chunk already
                    ends, ids = ends[keep], ids[keep]
                    order = np.lexsort((ends, ids))
                    ids = ids[order]
                    starts = (ends[order] - lens[ids] + 1).tolist()
                    cuts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(starts)]
                    id_list = ids[cuts[:-1]].tolist() if len(starts) else []
                    wasted = 0  # hits of literals at their cap
                    for g, lit_id in enumerate(id_list):
                        lit = _LITS[lit_id]
                        got = found.get(lit)
                        if got is None:
                            found[lit] = starts[cuts[g] : min(cuts[g + 1], cuts[g] + _MAX_HITS)]
                        elif len(got) < _MAX_HITS:
                            got.extend(starts[cuts[g] : min(cuts[g + 1], cuts[g] + _MAX_HITS - len(got))])
                        else:
                            wasted += cuts[g + 1] - cuts[g]
                    if pos + _CHUNK < n and wasted > max(10_000, len(starts) // 2):
                        # mostly literals at their cap (a phrase repeated): they leave the automaton (a
                        # rebuild costs tens of milliseconds, worth it only then)
                        done |= {lit for lit, got in found.items() if len(got) >= _MAX_HITS}
                        auto = _automaton(set(auto.literals) - done)
                        if auto is None:
                            break
                pos = stop
            self._found = found
        return self._found

    def literal(self, lit: str) -> list[int]:
        got = self._lit.get(lit)
        if got is None:
            auto = _AUTOMATON[0]
            found = self._occurrences() if auto is not None and lit in auto else None
            if found is not None:
                occ = found.get(lit)
                # the filter stays the gate it was (a literal is looked for only where it may start a word)
                got = occ if occ and self._may_contain(lit) else []
                self._lit[lit] = got
                return got
            got = []
            t = self.text
            if self._may_contain(lit) and lit in t:
                i = t.find(lit)
                while i >= 0 and len(got) < _MAX_HITS:
                    got.append(i)
                    i = t.find(lit, i + 1)
            self._lit[lit] = got
        return got

    def concept(self, name: str) -> list[tuple[int, int]]:
        got = self._con.get(name)
        if got is not None:
            return got
        t = self.text
        n = len(t)
        spans: list[tuple[int, int]] = []
        by_lit = _CONCEPT_LITS[name]
        found = None if _AUTOMATON[0] is None or "" in by_lit else self._occurrences()
        if found is None:
            phrases: Any = _CONCEPTS[name]
        else:
            # only the phrases whose literal occurs (found in the one pass); the order does not matter (sorted)
            lits = [lit for lit in found if lit in by_lit] if len(found) < len(by_lit) else [
                lit for lit in by_lit if lit in found
            ]
            phrases = [ph for lit in lits for ph in by_lit[lit]]
        veto = _CONCEPT_VETO.get(name)
        veto_before = _CONCEPT_VETO_BEFORE.get(name)
        lift = _CONCEPT_VETO_LIFT.get(name)
        for ph in phrases:
            for i in self.literal(ph.literal):
                if ph.left and i > 0 and (t[i - 1].isalnum() or t[i - 1] == "_"):
                    continue
                if veto_before is not None and veto_before.search(t, max(0, i - _VETO_REACH), i):
                    after = i + len(ph.literal)
                    if lift is None or not lift.match(t, after, min(n, after + _LIFT_REACH)):
                        continue
                e = i + len(ph.literal)
                if ph.star:
                    while e < n and (t[e].isalnum()) and e - i < 40:
                        e += 1
                elif ph.right and e < n and (t[e].isalnum() or t[e] == "_"):
                    continue
                if veto is not None and veto.match(t[e : e + _VETO_REACH]):
                    continue
                spans.append((i, e))
        spans.sort()
        self._con[name] = spans
        return spans

    def concept_starts(self, name: str) -> list[int]:
        """The starts of :meth:`concept`'s spans (sorted), computed once."""
        got = self._con_starts.get(name)
        if got is None:
            got = self._con_starts[name] = [s for s, _ in self.concept(name)]
        return got

    def concept_arrays(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`concept`'s spans as two numpy arrays (starts, ends), computed once."""
        got = self._con_arrays.get(name)
        if got is None:
            spans = self.concept(name)
            arr = np.array(spans, dtype=np.int64).reshape(len(spans), 2)
            got = self._con_arrays[name] = (arr[:, 0], arr[:, 1])
        return got

    def _boundaries(self, kind: str) -> list[int]:
        if kind == "___":
            if self._nl is None:
                self._nl = [m.start() for m in re.finditer("\n", self.text)]
            return self._nl
        if self._terms is None:
            self._terms = [m.start() for m in _TERM_RE.finditer(self.text)]
        return self._terms

    def gap_ok(self, kind: str, a: int, b: int) -> bool:
        """May the text between a and b be a gap of ``kind`` (bounded length, one sentence/line)?"""
        if b < a or b - a > _GAP_MAX[kind]:
            return False
        if kind == "" or b == a:
            return b - a <= 1
        bounds = self._boundaries(kind)
        k = bisect_left(bounds, a)
        return k >= len(bounds) or bounds[k] >= b


def _match_seq(tx: _Text, seq: _Seq) -> tuple[int, int] | None:
    first = tx.concept(seq.concepts[0])
    if not first:
        return None
    others = [tx.concept(c) for c in seq.concepts[1:]]
    if any(not o for o in others):
        return None
    starts_of = [tx.concept_starts(c) for c in seq.concepts[1:]]
    memo: dict[tuple[int, int], int | None] = {}

    def extend(k: int, end: int) -> int | None:
        if k == len(others):
            return end
        key = (k, end)
        if key in memo:
            return memo[key]
        memo[key] = got = _extend(k, end)
        return got

    def _extend(k: int, end: int) -> int | None:
        occ, starts = others[k], starts_of[k]
        gap = seq.gaps[k]
        lo = bisect_left(starts, end - 1 if gap == "" else end)
        hi = bisect_right(starts, end + _GAP_MAX[gap])
        for j in range(lo, min(hi, lo + 12)):
            s, e = occ[j]
            if s >= end - (1 if gap == "" else 0) and tx.gap_ok(gap, end, max(s, end)):
                got = extend(k + 1, e)
                if got is not None:
                    return got
        return None

    reach = len(seq.concepts) * (max(_LIT_MAX[0], 40) + _GAP_MAX["___"] + 3) + 2
    for k0 in _seq_candidates(tx, seq):
        s, e = first[k0]
        if tx.restricted and not tx.near(s - 2, s + reach):  # type: ignore[attr-defined]
            continue  # (match_rules_views) reads no change from here: no match, as in the first view
        got = extend(0, e)
        if got is not None:
            return s, got
    return None


def _seq_candidates(tx: _Text, seq: _Seq) -> list[int] | range:
    """Indexes, in order, of the first concept's spans (the first ``_MAX_HITS``) that have a span of the second
    concept within the first gap's reach: the only ones from which ``_extend(0, end)`` gets past its first
    bisection (numpy does the bisections for all of them at once)."""
    first = tx.concept(seq.concepts[0])
    n = min(len(first), _MAX_HITS)
    if len(seq.concepts) < 2 or n < _VECTOR_MIN:
        return range(n)
    gap = seq.gaps[0]
    ends = tx.concept_arrays(seq.concepts[0])[1][:n]
    starts = tx.concept_arrays(seq.concepts[1])[0]
    lo = np.searchsorted(starts, ends - 1 if gap == "" else ends, side="left")
    hi = np.searchsorted(starts, ends + _GAP_MAX[gap], side="right")
    return np.flatnonzero(hi > lo).tolist()  # type: ignore[no-any-return]


def _match_regex(tx: _Text, rx: re.Pattern[str], requires: tuple[str, ...]) -> tuple[int, int] | None:
    """Search only around the anchors, in merged windows: each character is searched a bounded number of times."""
    t = tx.text
    positions: list[int] = []
    for lit in requires:
        positions.extend(tx.literal(lit))
    if not positions:
        return None
    positions.sort()
    windows: list[list[int]] = []
    for p in positions:
        lo, hi = max(0, p - 400), min(len(t), p + 700)
        if windows and lo <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], hi)
        else:
            windows.append([lo, hi])
    if tx.restricted:
        # (match_rules_views) a window whose reads, and whose merging with other windows, cannot involve a
        # change finds what it found in the first view: nothing
        assert isinstance(tx, _SecondView)
        behind = 700 + _LIT_MAX[0] + (_RX_BEHIND.get(rx) or 0) + 2
        ahead = 400 + _LIT_MAX[0] + 2
        windows = [w for w in windows if tx.near(w[0] - behind, w[1] + ahead)]
    pre = _PREFILTERS.get(rx) if _AUTOMATON[0] is not None else None  # (without: the reference path)
    for lo, hi in windows:
        if pre is None:
            got = _search(tx, rx, lo, hi)
            if got:
                return got
            continue
        got = _search_filtered(tx, rx, pre, lo, hi)
        if got:
            return got
    return None


def _search_filtered(tx: _Text, rx: re.Pattern[str], pre: _Prefilter, lo: int, hi: int) -> tuple[int, int] | None:
    """``rx.search(text, lo, hi).span()``, trying only the starts from which a match can contain one string of
    each of the prefilter's sets (found in the one pass; a set whose string hit its cap filters nothing).

    With a bounded match width ``w`` (lookarounds included), a match that contains an occurrence at ``q``
    starts in ``[q + len - w, q]``; a search from ``a`` with its end cut at ``c + w`` tries each start below
    ``c`` exactly as the search over the whole window does (it reads nothing past ``c + w``), so a match it
    returns before ``c`` is the window's first match, and none before ``c`` means there is none there."""
    found = tx._occurrences() or {}
    w = pre.width
    starts: list[tuple[int, int]] | None = None
    for lits in pre.sets:
        ivs: list[tuple[int, int]] = []
        usable = True
        for lit in lits:
            occ = found.get(lit)
            if not occ:
                continue
            if len(occ) >= _MAX_HITS:
                usable = False  # capped: the list is not every occurrence
                break
            k = len(lit)
            i, j = bisect_left(occ, lo), bisect_right(occ, hi - k)
            if w is None:
                if j > i:
                    ivs.append((lo, hi))
                    break
                continue
            ivs.extend((max(lo, q + k - w), q + 1) for q in occ[i:j])
        if not usable:
            continue
        if not ivs:
            return None  # no string of this set in the window: no match there
        if w is None:
            continue
        ivs.sort()
        merged = [list(ivs[0])]
        for a, c in ivs[1:]:
            if a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], c)
            else:
                merged.append([a, c])
        starts = [(a, c) for a, c in merged] if starts is None else _intersect(starts, merged)
        if not starts:
            return None
    if starts is None or w is None:
        return _search(tx, rx, lo, hi)
    for a, c in starts:
        m = rx.search(tx.text, a, min(hi, c + w))
        if m and m.start() < c:
            return m.span()
    return None


def _search(tx: _Text, rx: re.Pattern[str], lo: int, hi: int) -> tuple[int, int] | None:
    """``rx.search(text, lo, hi).span()``: tried only at the occurrences of the strings its matches start
    with (``_match_heads``) when the regex has them and their lists are complete (not capped). ``rx.match``
    at a position reads what ``rx.search`` reads when it tries that position (lookbehinds see the text
    before it in both), so the first position that matches gives the same span."""
    heads = _HEADS.get(rx) if _AUTOMATON[0] is not None else None
    if heads is not None:
        found = tx._occurrences() or {}
        qs: list[int] = []
        for head in heads:
            occ = found.get(head)
            if not occ:
                continue
            if len(occ) >= _MAX_HITS:
                break  # capped: not every occurrence is known
            qs.extend(occ[bisect_left(occ, lo) : bisect_left(occ, hi)])
        else:
            for q in sorted(set(qs)) if len(heads) > 1 else qs:
                m = rx.match(tx.text, q, hi)
                if m:
                    return m.span()
            return None
    m = rx.search(tx.text, lo, hi)
    return m.span() if m else None


def _intersect(xs: list[tuple[int, int]], ys: list[list[int]]) -> list[tuple[int, int]]:
    """Intersection of two sorted lists of disjoint half-open intervals."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        a, c = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if a < c:
            out.append((a, c))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def _match_rule(tx: _Text, rule: Rule) -> RuleMatch | None:
    span: tuple[int, int] | None = None
    for pat in rule.patterns:
        span = _match_seq(tx, pat) if isinstance(pat, _Seq) else _match_regex(tx, pat, rule.requires)
        if span:
            break
    if not span:
        return None
    s, e = span
    return RuleMatch(rule, (s, e), tx.text[s:e][:120])


def concept_occurs(name: str, text: str) -> bool:
    """Whether a phrase of the lexicon concept ``name`` occurs in ``text`` (normalized and casefolded, as the rules
    read it)."""
    load_rules()
    if name not in _CONCEPTS:
        raise KeyError(f"no concept {name!r} in rules.yaml's lexicon")
    return bool(_Text(text).concept(name))


def match_rules(
    text: str, rules: tuple[Rule, ...] | None = None, context: str = "write", skip: frozenset[str] = frozenset()
) -> list[RuleMatch]:
    """Every rule that matches ``text`` (already normalized and casefolded), first match per rule; the rules
    whose id is in ``skip`` (matched in another view already) are not tried."""
    rules = load_rules() if rules is None else rules
    tx = _Text(text)
    out: list[RuleMatch] = []
    for rule in rules:
        if context not in rule.contexts or rule.id in skip:
            continue
        m = _match_rule(tx, rule)
        if m is not None:
            out.append(m)
    return out


def match_rules_views(first: str, second: str, context: str = "write") -> list[RuleMatch]:
    """``match_rules(first) + match_rules(second, skip=<the rules matched in first>)`` for the shipped rules:
    the same list, computed faster when the two views differ in few places.

    The second view (the casefolded text, when the look-alike skeleton ``first`` rewrote some words) differs
    from the first only at the rewritten characters, the set ``D`` (both views have the same length, else
    the second view is matched whole). What the engine computes for a rule at one place depends only on the
    occurrence lists of the rule's literals, on :meth:`_Text._may_contain` for them, and on the characters
    near that place (:func:`_reach_literals` says how near). So, for a rule that did not match the first view:

    * where it reads no character of ``D``, it gets the same answer in the second view: no match;
    * so its first match in the second view, if any, is at a place near ``D``: only those places are tried
      (a regex window or a first phrase of a concept sequence near ``D``, :class:`_SecondView`), in the
      same order as the whole search, which makes the match the one the whole search returns;
    * a rule none of whose literals occurs near ``D`` has no such place and is not tried at all.

    The occurrence lists of the second view are the first view's with the occurrences that overlap ``D``
    replaced by the second view's (found by Aho-Corasick in windows around ``D``). When
    ``_may_contain`` answers differently in the two views for a literal of a rule (a token that only a
    change creates or removes), the lists differ away from ``D`` too and that rule is matched whole.
    ``tests/test_security_equivalence.py`` compares this with the two plain calls."""
    rules = load_rules()
    tx = _Text(first)
    out = [m for rule in rules if context in rule.contexts and (m := _match_rule(tx, rule)) is not None]
    if second == first:
        return out
    done = {m.rule.id for m in out}
    tx2 = _second_view(tx, second)
    for rule in rules:
        if context not in rule.contexts or rule.id in done:
            continue
        lits = _RULE_LITS.get(rule.id)
        restrict = isinstance(tx2, _SecondView) and lits is not None and not (lits & tx2.flipped)
        if restrict:
            assert isinstance(tx2, _SecondView)
            if not (lits & tx2.dirty):  # type: ignore[operator]
                continue  # no literal of the rule near a change: nothing to try
        tx2.restricted = restrict
        m = _match_rule(tx2, rule)
        if m is not None:
            out.append(m)
    return out


_DIRTY_MAX = 50_000  # changed characters beyond which the second view is simply matched whole


def _changed_positions(a: str, b: str) -> list[int]:
    """Sorted positions where two texts of the same length differ."""
    import numpy as np

    xa = np.frombuffer(a.encode("utf-32-le"), dtype=np.uint32)
    xb = np.frombuffer(b.encode("utf-32-le"), dtype=np.uint32)
    return np.flatnonzero(xa != xb).tolist()  # type: ignore[no-any-return]


def _merged(points: list[int], before: int, after: int, n: int) -> list[tuple[int, int]]:
    """The union of ``[p - before, p + after)`` over sorted ``points``, clipped to ``[0, n)``, as sorted intervals."""
    out: list[list[int]] = []
    for p in points:
        lo, hi = max(0, p - before), min(n, p + after)
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


class _SecondView(_Text):
    """The second view of a text, built from the first (:func:`_second_view`); with ``restricted`` set, the
    rules try only the places near a change (``_match_regex``, ``_match_seq``)."""

    def __init__(self, text: str, base: _Text, changed: list[int], found: dict[str, list[int]]) -> None:
        super().__init__(text)
        self.base = base
        self.changed = changed
        self._found = found
        self.dirty: set[str] = set()
        self.flipped: set[str] = set()
        self.touch: tuple[tuple[set[str], ...], tuple[set[str], ...]] = ((), ())
        self._direct = 0  # token questions answered by a search of their own (_may_contain)
        self._searched: dict[tuple[Any, str], bool] = {}

    def near(self, lo: int, hi: int) -> bool:
        """Is a changed position in ``[lo, hi)``?"""
        k = bisect_left(self.changed, lo)
        return k < len(self.changed) and self.changed[k] < hi

    def _may_contain(self, lit: str) -> bool:
        got = _second_view_filter(self.base, lit, self.touch[0], self.touch[1])
        if got is not None:
            return got
        if _SPACELESS.search(lit) or not lit[:1].isalnum():
            if self._chars is None:
                # what the character set would answer, without building it: a ``c in text`` per character
                # stops at the first occurrence (the characters left undecided are common ones: a space, a quote)
                return all(c in self.text for c in set(lit))
        elif self._tokens is None and self._direct < _DIRECT_MAX:
            # what the token sets would answer, from a search for the one token (a few of them: then the sets
            # are built, as the first view's were)
            first = _TOKEN_RE.match(lit)
            if first is None:
                return True
            word = first.group(0)
            if first.end() == len(lit) or not lit[first.end()].isspace():
                return self._search_once(_has_token_prefix, word[:12]) or self._search_once(_has_token, word)
            return self._search_once(_has_token, word)
        return super()._may_contain(lit)

    def _search_once(self, search: Any, x: str) -> bool:
        key = (search, x)
        got = self._searched.get(key)
        if got is None:
            self._direct += 1
            got = self._searched[key] = search(self.text, x)
        return got


_DIRECT_MAX = 16  # searches a second view runs for its own token questions before it builds its token sets


def _has_token(text: str, word: str) -> bool:
    """Is ``word`` (a ``\\w+`` run) one of the tokens of ``text`` (a whole ``\\w+`` run there)? The regex
    starts with the word (found by the regex engine's literal search), then looks at its neighbours."""
    w = re.escape(word)
    return re.search(rf"{w}(?<!\w{w})(?!\w)", text) is not None


def _has_token_prefix(text: str, x: str) -> bool:
    """``x in _Prefixes(tokens of text)``: does a token of ``text`` start with ``x`` (2 to 12 characters)?"""
    if not 2 <= len(x) <= 12:
        return False
    w = re.escape(x)
    return re.search(rf"{w}(?<!\w{w})", text) is not None


def _second_view(tx: _Text, second: str) -> _Text:
    """A :class:`_SecondView` of ``second`` next to the first view ``tx``, or a plain ``_Text`` when it
    cannot be derived (different lengths, too many changes, an empty literal, a capped list that changes)."""
    first = tx.text
    n = len(first)
    auto = _AUTOMATON[0]
    if auto is None or len(second) != n or not _LIT_REACH:
        return _Text(second)
    changed = _changed_positions(first, second)
    if len(changed) > _DIRTY_MAX:
        return _Text(second)
    base = tx._occurrences() or {}
    lit_max = _LIT_MAX[0]
    # occurrences that overlap a change, in each view: they lie in these windows
    over: list[dict[str, list[int]]] = []
    for t in (first, second):
        got: dict[str, list[int]] = {}
        for lo, hi in _merged(changed, lit_max - 1, lit_max, n):
            for end, lit_id in auto.iter(t, lo, hi):
                lit = _LITS[lit_id]
                q = end - len(lit) + 1
                k = bisect_left(changed, q)
                if k < len(changed) and changed[k] <= end:
                    got.setdefault(lit, []).append(q)
        over.append(got)
    found = dict(base)
    for lit in set(over[0]) | set(over[1]):
        old = base.get(lit, [])
        if len(old) >= _MAX_HITS:
            return _Text(second)  # capped: the occurrences past the cap are not known
        drop = set(over[0].get(lit, ()))
        new = sorted([q for q in old if q not in drop] + over[1].get(lit, []))
        if new:
            found[lit] = new[:_MAX_HITS]
        else:
            found.pop(lit, None)
    view = _SecondView(second, tx, changed, found)
    view.touch = (_touching(first, changed), _touching(second, changed))
    view.dirty = _reach_literals(first, second, changed)
    # (a literal found in only one view occurs only near a change: its lists agree away from the changes)
    for lit in set(base) & set(found):
        if view._may_contain(lit) is not tx._may_contain(lit):
            view.flipped.add(lit)
    return view


def _reach_literals(first: str, second: str, changed: list[int]) -> set[str]:
    """Literals with an occurrence, in either view, from which a rule reads a changed character.

    How far around an occurrence a rule reads (``_LIT_REACH``, per literal): an anchor of a regex rule opens
    its search window (400 characters before, 700 after, plus what the regex's lookbehinds and ``\\b`` read
    before the window); a phrase of a concept is read with one character before it and up to ``_SEQ_REACH``
    after it (a word ending, a gap, the sentence end after it); a literal of a regex prefilter only by its
    own occurrence list."""
    auto = _AUTOMATON[0]
    assert auto is not None  # (_second_view checked)
    n = len(first)
    before = max(b for b, _ in _LIT_REACH.values())
    after = max(a for _, a in _LIT_REACH.values())
    lit_max = _LIT_MAX[0]
    dirty: set[str] = set()
    for lo, hi in _merged(changed, lit_max + after, before + lit_max + 1, n):
        for t in (first, second):
            for end, lit_id in auto.iter(t, lo, hi):
                lit = _LITS[lit_id]
                if lit in dirty:
                    continue
                b, a = _LIT_REACH.get(lit, (before, after))
                k = bisect_left(changed, end - len(lit) + 1 - b)
                if k < len(changed) and changed[k] < end + 1 + a:
                    dirty.add(lit)
    return dirty


def _touching(t: str, changed: list[int]) -> tuple[set[str], set[str], set[str]]:
    """(tokens, their first 2..12 characters, characters) of ``t`` that touch a changed position: all that
    the token and character sets ``_may_contain`` reads can differ by between the views. A token that
    starts more than ``k`` before the change is longer than any literal word, and its first 12 characters
    are either unchanged (the same in both views) or hold a change of their own, collected there."""
    k = max(_LIT_MAX[0], 12) + 1
    n = len(t)
    toks: set[str] = set()
    prefixes: set[str] = set()
    chars: set[str] = set()
    for p in changed:
        chars.add(t[p])
        lo = max(0, p - k - 1)
        for m in _TOKEN_RE.finditer(t, lo, min(n, p + k + 2)):
            if m.end() < p or m.start() > p + 1:
                continue
            if m.start() == lo and lo > 0 and _TOKEN_RE.match(t[lo - 1]):
                continue
            tok = m.group(0)
            prefixes.update(tok[:j] for j in range(2, min(len(tok), 12) + 1))
            if len(tok) <= k:  # (clipped at the right: longer than any literal word)
                toks.add(tok)
    return toks, prefixes, chars


def _member(x: str, whole: set[str] | _Prefixes, touch_first: set[str], touch_second: set[str]) -> bool | None:
    """Is ``x`` in the second view's set, given the first view's set (``whole``) and the parts of both sets
    that come from tokens or characters touching a change? None when it cannot be told."""
    if x in touch_second:
        return True
    if x not in whole:
        return False  # (all that the second view has beyond the first touches a change)
    if x not in touch_first:
        return True  # in the first view away from any change: there in the second view too
    return None


def _second_view_filter(
    tx: _Text, lit: str, first: tuple[set[str], ...], second: tuple[set[str], ...]
) -> bool | None:
    """``_may_contain(lit)`` for the second view of ``tx`` (None when it cannot be told from the first view)."""
    tx._may_contain(lit)  # the first view's sets are built
    if _SPACELESS.search(lit) or not lit[:1].isalnum():
        for c in set(lit):
            has = _member(c, tx._chars or set(), first[2], second[2])
            if not has:
                return has
        return True
    head = _TOKEN_RE.match(lit)
    if head is None:
        return True
    word = head.group(0)
    in_tokens = _member(word, tx._tokens or set(), first[0], second[0])
    if head.end() == len(lit) or not lit[head.end()].isspace():
        in_prefixes = _member(word[:12], tx._prefixes or _Prefixes(set()), first[1], second[1])
        if in_prefixes or in_tokens:
            return True
        return None if in_prefixes is None or in_tokens is None else False
    return in_tokens
