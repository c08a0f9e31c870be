"""Every rule of ``rules.yaml`` blocks its ``match`` examples and leaves its ``pass`` examples alone: the examples
next to a rule ARE its test. A new rule needs both kinds; a false positive is fixed by narrowing the rule and adding
the text to its ``pass`` list."""

from __future__ import annotations

import pytest

from ironmem.core.security import scan
from ironmem.core.security.result import CATEGORIES
from ironmem.core.security.rules import RULES, load_rules
from ironmem.core.text import plain

MATCH = [(r.id, text) for r in RULES for text in r.match]
PASS = [(r.id, text) for r in RULES for text in r.passes]


@pytest.mark.parametrize("rule_id,text", MATCH, ids=[f"{i}:{t[:30]}" for i, t in MATCH])
def test_the_rule_blocks_its_match_examples(rule_id: str, text: str) -> None:
    rule = next(r for r in RULES if r.id == rule_id)
    assert rule.search(plain(text)), f"{rule_id} does not match {text!r}"
    verdict = scan(text)
    assert verdict.blocked, text


@pytest.mark.parametrize("rule_id,text", PASS, ids=[f"{i}:{t[:30]}" for i, t in PASS])
def test_the_rule_leaves_its_pass_examples_alone(rule_id: str, text: str) -> None:
    rule = next(r for r in RULES if r.id == rule_id)
    assert not rule.search(plain(text)), f"{rule_id} matches its pass example {text!r}"
    verdict = scan(text)
    assert not verdict.blocked, (text, verdict.findings)


def test_every_rule_has_both_kinds_of_example_and_a_known_category() -> None:
    assert len({r.id for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.match and rule.passes, rule.id
        assert rule.category in CATEGORIES, rule.id


def test_needs_hold_for_every_match_example() -> None:
    """``needs`` is a speed filter: it must never hide a match (each match example holds one of the words)."""
    for rule in RULES:
        for text in rule.match:
            assert not rule.needs or any(w in plain(text) for w in rule.needs), (rule.id, text)


def test_needs_never_hide_a_match_in_the_corpus() -> None:
    """The same check on every text of the security corpus: a pattern that matches is always tried."""
    import json
    from pathlib import Path

    corpus = Path(__file__).resolve().parents[1] / "data" / "security" / "corpus.jsonl"
    for line in corpus.read_text(encoding="utf-8").splitlines():
        view = plain(json.loads(line)["text"])
        hidden = [r.id for r in RULES if r.pattern.search(view) and not r.search(view)]
        assert not hidden, (hidden, view[:200])


def test_a_bad_rules_file_names_the_rule_and_what_to_do() -> None:
    with pytest.raises(ValueError, match="x.bad has category 'nope'"):
        load_rules("- {id: x.bad, category: nope, pattern: a}")
    with pytest.raises(ValueError, match="x.re has a pattern that does not compile"):
        load_rules("- {id: x.re, category: destructive, pattern: '(a'}")
    with pytest.raises(ValueError, match="quote yes, no, true"):
        load_rules("- {id: x.n, category: destructive, pattern: a, needs: [true]}")
