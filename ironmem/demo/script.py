"""The demo's conversation, framework-neutral: what the user says and what the scripted model does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import IronMemError
from ..core.fence import FENCE_OPEN


class DemoError(IronMemError, ValueError):
    """Bad demo or simulation input (unknown framework, model, policy, missing key): the message says what to do."""


# --------------------------------------------------------------------------------------------------
# The script (framework-neutral)
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class View:
    """What a scripted answer can look at: the system prompt and the latest user message, as sent."""

    system: str
    user: str


@dataclass(frozen=True)
class ToolStep:
    """The scripted model calls tool ``name`` with ``args``."""

    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class AnswerStep:
    """The scripted model answers; ``reply(view)`` may depend on what the request carried."""

    reply: Callable[[View], str]


@dataclass(frozen=True)
class ScriptTurn:
    session: int
    user: str
    steps: tuple[ToolStep | AnswerStep, ...]


def _answer(text: str) -> AnswerStep:
    return AnswerStep(lambda view: text)


def _ci_answer(view: View) -> str:
    if "Python 3.12" in view.user and FENCE_OPEN in view.user:
        return "Use Python 3.12 for the CI image: tidepool targets 3.12 (it came back in this turn's recalled memory)."
    if "Python 3.12" in view.system:
        return "Use Python 3.12 for the CI image: tidepool targets 3.12 (it is in my memory snapshot)."
    return "Which Python version does tidepool target? I don't have that yet."


def _deploy_answer(view: View) -> str:
    if "Fly.io" in view.system:
        return "tidepool deploys on Fly.io - it is in my memory from our last session."
    return "I don't know where tidepool deploys."


def _search_answer(view: View) -> str:
    if "3.12" in view.user or "3.12" in view.system:
        return "Last time we settled on Python 3.12 for the CI image, matching what tidepool targets."
    return "I couldn't find that in our past conversations."


#: The demo conversation: session 1 saves two facts and uses them in the next turn (live delta); session 2
#: finds them in its frozen snapshot and searches the past session.
SCRIPT: tuple[ScriptTurn, ...] = (
    ScriptTurn(
        1,
        "Hi, I'm Ada. I maintain tidepool, our ocean-data API. It targets Python 3.12 and we deploy on "
        "Fly.io.",
        (
            ToolStep(
                "memory",
                {
                    "operations": [
                        {
                            "action": "add",
                            "target": "user",
                            "content": "Name: Ada; maintains tidepool, an ocean-data API",
                        },
                        {
                            "action": "add",
                            "target": "memory",
                            "content": "tidepool targets Python 3.12 and deploys on Fly.io",
                        },
                    ]
                },
            ),
            _answer(
                "Nice to meet you, Ada. Saved: you maintain tidepool, which targets Python 3.12 on Fly.io."
            ),
        ),
    ),
    ScriptTurn(1, "Which Python version should the new CI image use?", (AnswerStep(_ci_answer),)),
    ScriptTurn(1, "Great, that's all for today.", (_answer("See you next time, Ada."),)),
    ScriptTurn(2, "I'm back. Remind me where tidepool deploys?", (AnswerStep(_deploy_answer),)),
    ScriptTurn(
        2,
        "What did we decide about the CI image last time?",
        (
            ToolStep("session_search", {"query": "CI image Python version"}),
            AnswerStep(_search_answer),
        ),
    ),
)

