"""ironmem blocks a superset of what the Hermes agent's memory scanner blocks, straight through ``scan``.

Hermes's own cases live once, in ``tests/conformance/hermes_cases.py`` (the conformance port runs them
through a ``memory`` tool call); this file runs them through ``scan`` directly and adds the false
positives issue #14 lists and ordinary conversation at recall time.
"""

from __future__ import annotations

import pytest
from conformance import hermes_cases

from ironmem.core.security import scan

ISSUE_FALSE_POSITIVES = [
    "Don't tell me the ending of Dune, I'm still reading it.",
    "Ignore the vendored folder when summarising the repo.",
    "You are now working on project Y; its tracker is at https://tracker.example.com/y",
    "fetch(url, {headers: {Authorization: `Bearer ${token}`}})",
    "Security note: prompt injections tell the model to ignore previous instructions or hide things from "
    "the user; we scan memory writes for them.",
    # an ordinary note the scanner once blocked (ironmem.analysis.replay's script)
    "Save this: the team agreed every endpoint must declare response_model and we enforce it in CI.",
]


@pytest.mark.parametrize("text", [*hermes_cases.BLOCKED, hermes_cases.BRAINWORM])
def test_hermes_payloads_are_blocked(text: str) -> None:
    assert scan(text).blocked, text


@pytest.mark.parametrize("text", [*hermes_cases.CLEAN, *ISSUE_FALSE_POSITIVES])
def test_hermes_and_issue_false_positives_pass(text: str) -> None:
    r = scan(text)
    assert not r.blocked, (text, r.reason, [f.excerpt for f in r.findings])


@pytest.mark.parametrize(
    "text",
    ["I can't refuse an invitation from my grandmother.", "[laughs] okay, the 7pm table then.",
     "[1] Smith et al. is the paper I meant.", "Ignore my last message, I found the file."],
)
def test_ordinary_conversation_passes_at_recall(text: str) -> None:
    assert not scan(text, context="recall").blocked
