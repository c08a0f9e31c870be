"""Rules as data: every rule's own examples, the file's shape, and the engine's errors."""

from __future__ import annotations

import pytest

from ironmem.core.security.engine import RulesError, _compile, load_rules, match_rules
from ironmem.core.security.normalize import normalize
from ironmem.core.security.result import CATEGORIES

RULES = load_rules()


def _ids(text: str, rule) -> set[str]:
    return {m.rule.id for m in match_rules(normalize(text).skel, rules=(rule,))}


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_examples(rule) -> None:
    assert rule.intent and rule.category in CATEGORIES
    assert rule.positive, f"{rule.id} has no positive example"
    for text in rule.positive:
        assert rule.id in _ids(text, rule), f"{rule.id} misses its own example {text!r}"
    for text in rule.negative:
        assert rule.id not in _ids(text, rule), f"{rule.id} fires on its negative example {text!r}"


def test_rule_file_errors_say_what_to_fix() -> None:
    with pytest.raises(RulesError, match="unknown concept"):
        _compile({"lexicon": {}, "rules": [{"id": "x", "intent": "i", "category": "c", "patterns": ["{nope}"]}]})
    with pytest.raises(RulesError, match="needs 'requires'"):
        _compile({"rules": [{"id": "x", "intent": "i", "category": "c", "patterns": ["abc"]}]})
    with pytest.raises(RulesError, match="has no 'intent'"):
        _compile({"rules": [{"id": "x", "category": "c", "patterns": ["abc"]}]})
