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
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from recall_data import Conversation, Question, Turn

DATA = HERE / "data" / "longmemeval_s_smoke"

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


def main() -> int:
    from collections import Counter

    (conv,) = load()
    print(f"{conv.name}: {len(conv.turns)} turns in {len({t.session for t in conv.turns})} sessions, "
          f"{len(conv.questions)} questions, {sum(len(q.evidence) for q in conv.questions)} evidence turns")
    print(dict(Counter(q.qtype for q in conv.questions)))
    for q in conv.questions[:3]:
        print(f"  [{q.qtype}] {q.text} -> {conv.turns[q.evidence[0]].user[:100]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
