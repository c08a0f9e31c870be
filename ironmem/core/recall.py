"""What a prefetch returns: recalled items grouped by source, fenced on demand (rule 2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .fence import fence

__all__ = ["Recall", "RecallItem", "RECALL_TURNS", "RECALL_ITEM_CHARS"]

#: Past-turn hits the built-in layer adds to a recall.
RECALL_TURNS = 3
RECALL_ITEM_CHARS = 600

# --------------------------------------------------------------------------------------------------
# Recall
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecallItem:
    """One recalled piece of memory and where it came from."""

    source: str  # "live" (written this session), "history" (past turns) or an external provider's name
    text: str


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
            lines = [f"- {item.text}" for item in self.items if item.source == source]
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
