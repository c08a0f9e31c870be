"""What a prefetch returns: recalled items grouped by source, fenced on demand (rule 2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .fence import fence

__all__ = ["RECALL_ITEM_CHARS", "RECALL_TURNS", "Recall", "RecallBudget", "RecallItem", "estimate_tokens"]

#: Default recall budget, in items (see :class:`RecallBudget`).
RECALL_TURNS = 5
RECALL_ITEM_CHARS = 600


def estimate_tokens(text: str) -> int:
    """A cheap, tokenizer-free token estimate (UTF-8 bytes / 4: ~4 chars per English token, ~0.75 tokens per
    CJK character), used to keep the fence inside its budget without loading an encoding on every turn."""
    return (len(text.encode("utf-8")) + 3) // 4


@dataclass(frozen=True)
class RecallBudget:
    """How much a prefetch may put in the fence: ONE setting, ``items``.

    The fence's token budget follows from it (``items * ITEM_TOKENS``). Recall fills the budget with the best
    items after de-duplication and the security scan: when the scan drops an item, or an item is a duplicate,
    the next best takes its slot; an item longer than what is left of the token budget is clipped, or skipped
    for a shorter one when too little is left. Entries written during the session (the live delta) always come
    first and count against the budget.

    Example:
        >>> RecallBudget(4).tokens
        480
    """

    items: int = RECALL_TURNS
    #: Tokens each item may use on average (an item alone is clipped to about this much, or 2x when space is left).
    ITEM_TOKENS: ClassVar[int] = 120
    #: An item is not squeezed into less than this many tokens (a shorter candidate is tried instead).
    MIN_ITEM_TOKENS: ClassVar[int] = 24

    def __post_init__(self) -> None:
        if isinstance(self.items, bool) or not isinstance(self.items, int) or not 0 <= self.items <= 50:
            raise ValueError(f"recall_budget must be a number of items from 0 to 50, got {self.items!r}")

    @property
    def tokens(self) -> int:
        """The fence content's token budget."""
        return self.items * self.ITEM_TOKENS

    @classmethod
    def of(cls, value: RecallBudget | int | None) -> RecallBudget:
        """``value`` as a budget: an int is a number of items, None the default."""
        if value is None:
            return cls()
        if isinstance(value, RecallBudget):
            return value
        return cls(value)

# --------------------------------------------------------------------------------------------------
# Recall
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecallItem:
    """One recalled piece of memory and where it came from."""

    source: str  # "live" (written this session), "history" (past turns) or an external provider's name
    text: str
    date: str | None = None  # YYYY-MM-DD of a past turn, shown before it

    @property
    def rendered(self) -> str:
        """The line shown in the fence: ``[2026-05-03] User: ...`` for a dated turn."""
        return f"[{self.date}] {self.text}" if self.date else self.text


_SECTION_TITLES = {"live": "Saved to memory during this session", "history": "From past conversations"}


@dataclass(frozen=True)
class Recall:
    """What a prefetch found for one user message. ``fenced()`` is what goes before the user's text.

    Example:
        >>> Recall(()).fenced()
        ''
    """

    items: tuple[RecallItem, ...]
    query: str = ""
    dropped: tuple[str, ...] = field(default_factory=tuple)  # reasons for items the scanner refused

    def __bool__(self) -> bool:
        return bool(self.items)

    @property
    def text(self) -> str:
        """The recalled content, grouped by source, without the fence."""
        sections: list[str] = []
        order: list[str] = []
        for item in self.items:
            if item.source not in order:
                order.append(item.source)
        for source in order:
            title = _SECTION_TITLES.get(source, f"From {source}")
            lines = [f"- {item.rendered}" for item in self.items if item.source == source]
            sections.append(f"## {title}\n" + "\n".join(lines))
        return "\n\n".join(sections)

    def fenced(self) -> str:
        """The fenced recall text, or "" when nothing was recalled."""
        return fence(self.text) if self.items else ""


def as_items(result: Any) -> list[str]:
    if result is None:
        return []
    if isinstance(result, str):
        return [result] if result.strip() else []
    if isinstance(result, Sequence):
        return [str(x) for x in result if str(x).strip()]
    return [str(result)]


def clip(text: str, limit: int = RECALL_ITEM_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
