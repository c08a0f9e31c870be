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

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import ahocorasick
import yaml

from ironmem.core.errors import IronMemError

__all__ = ["Rule", "RuleMatch", "RulesError", "load_rules", "match_rules"]

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
    lexicon: dict[str, dict[str, list[str]]] = data.get("lexicon") or {}
    concepts: dict[str, tuple[_Phrase, ...]] = {}
    for name, by_lang in lexicon.items():
        phrases: set[str] = set()
        for lang_phrases in (by_lang or {}).values():
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
                patterns=tuple(compiled),
                requires=tuple(str(r).casefold() for r in raw.get("requires") or ()),
                positive=tuple(ex.get("positive") or ()),
                negative=tuple(ex.get("negative") or ()),
            )
        )
    _CONCEPTS.clear()
    _CONCEPTS.update(concepts)
    literals = {ph.literal for phs in concepts.values() for ph in phs}
    literals.update(lit for rule in rules for lit in rule.requires)
    _AUTOMATON[0] = _automaton(literals)
    _CONCEPT_LITS.clear()
    for name, phs in concepts.items():
        by_lit: dict[str, list[_Phrase]] = {}
        for ph in phs:
            by_lit.setdefault(ph.literal, []).append(ph)
        _CONCEPT_LITS[name] = {lit: tuple(v) for lit, v in by_lit.items()}
    return tuple(rules)


def _automaton(literals: set[str]) -> Any:
    """One Aho-Corasick automaton over every literal of the rules: one pass over a text finds them all."""
    auto = ahocorasick.Automaton()
    for lit in literals:
        if lit:
            auto.add_word(lit, lit)
    if len(auto) == 0:
        return None
    auto.make_automaton()
    return auto


_CONCEPTS: dict[str, tuple[_Phrase, ...]] = {}
_AUTOMATON: list[Any] = [None]  # the automaton of the last compiled rules (with _CONCEPTS)
_CONCEPT_LITS: dict[str, dict[str, tuple[_Phrase, ...]]] = {}  # concept -> literal -> its phrases


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    """The compiled rules shipped with the package (``ironmem/core/security/rules.yaml``)."""
    text = resources.files(__package__).joinpath("rules.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return _compile(yaml.load(text, Loader=loader))


_MAX_HITS = 4000  # per literal; beyond that the text is one phrase repeated (enough to judge)
_PASS_MAX = 20_000  # occurrences of all literals that the one pass collects before it hands over to str.find
_GAP_MAX = {"": 1, "_": 40, "__": 120, "___": 200}
# A sentence ends at . ! ? followed by a space or the end (a dot inside an e-mail address, a host name or
# a version number does not end it), at a newline, or at a CJK full stop.
_TERM_RE = re.compile(r"[.!?](?=\s|$)|[\n。！？]")
_TOKEN_RE = re.compile(r"\w+")


class _Text:
    """One normalized text with the occurrence caches the rules share."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._tokens: set[str] | None = None
        self._prefixes: set[str] | None = None
        self._chars: set[str] | None = None
        self._lit: dict[str, list[int]] = {}
        self._found: dict[str, list[int]] | None = None  # every automaton literal that occurs -> its starts
        self._many = False  # too many occurrences for the one pass: search per literal
        self._con: dict[str, list[tuple[int, int]]] = {}
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
            self._prefixes = {tok[:k] for tok in self._tokens for k in range(2, min(len(tok), 12) + 1)}
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
        ``_MAX_HITS`` per literal; None when the text holds more than ``_PASS_MAX`` occurrences in all (a
        long text or one phrase repeated): then the per-literal search (same result) is the cheaper one."""
        if self._found is None and not self._many:
            found: dict[str, list[int]] = {}
            auto = _AUTOMATON[0]
            if auto is not None and self.text:
                total = 0
                for end, lit in auto.iter(self.text):
                    total += 1
                    if total > _PASS_MAX:
                        self._many = True
                        return None
                    got = found.get(lit)
                    if got is None:
                        found[lit] = [end - len(lit) + 1]
                    elif len(got) < _MAX_HITS:
                        got.append(end - len(lit) + 1)
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
        for ph in phrases:
            for i in self.literal(ph.literal):
                if ph.left and i > 0 and (t[i - 1].isalnum() or t[i - 1] == "_"):
                    continue
                e = i + len(ph.literal)
                if ph.star:
                    while e < n and (t[e].isalnum()) and e - i < 40:
                        e += 1
                elif ph.right and e < n and (t[e].isalnum() or t[e] == "_"):
                    continue
                spans.append((i, e))
        spans.sort()
        self._con[name] = spans
        return spans

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
    starts_of = [[s for s, _ in o] for o in others]
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

    for s, e in first[:_MAX_HITS]:
        got = extend(0, e)
        if got is not None:
            return s, got
    return None


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
    for lo, hi in windows:
        m = rx.search(t, lo, hi)
        if m:
            return m.span()
    return None


def match_rules(text: str, rules: tuple[Rule, ...] | None = None, context: str = "write") -> list[RuleMatch]:
    """Every rule that matches ``text`` (already normalized and casefolded), first match per rule."""
    rules = load_rules() if rules is None else rules
    tx = _Text(text)
    out: list[RuleMatch] = []
    for rule in rules:
        if context not in rule.contexts:
            continue
        span: tuple[int, int] | None = None
        for pat in rule.patterns:
            span = _match_seq(tx, pat) if isinstance(pat, _Seq) else _match_regex(tx, pat, rule.requires)
            if span:
                break
        if span:
            s, e = span
            out.append(RuleMatch(rule, (s, e), text[s:e][:120]))
    return out
