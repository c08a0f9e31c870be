"""What a prefetch returns: recalled items grouped by source, fenced on demand (rule 2)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .custody import Provenance
from .errors import InvalidArgumentError
from .fence import FENCE_CLOSE, FENCE_OPEN, SYSTEM_NOTE, fence, frame_record

if TYPE_CHECKING:
    from .session import Session

__all__ = [
    "Recall",
    "RecallBudget",
    "estimate_tokens",
    "RecallItem",
    "FenceHistory",
    "RecallPolicy",
    "prepend_fence",
    "recall_text",
    "split_fence",
    "RECALL_TURNS",
    "RECALL_ITEM_CHARS",
]

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
    #: Tokens each item may use on average (an item is clipped to about this much, or up to 2x when that leaves each
    #: slot still open its share).
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
    """One recalled piece of memory and where it came from.

    Example:
        >>> from ironmem.core.custody import Origin, Provenance
        >>> print(RecallItem("history", "User: hi\\nAssistant: hello", date="2026-05-03").rendered)
        [2026-05-03] User: hi
          ~ Assistant: hello
        >>> RecallItem("held", "Pay to X", provenance=Provenance(Origin.TOOL, "web_fetch")).rendered
        '[unverified, from tool web_fetch; held for approval] Pay to X'
    """

    source: str  # "live" (written this session), "history" (past turns), "held" or an external provider's name
    text: str
    date: str | None = None  # YYYY-MM-DD of a past turn, shown before it
    #: True when an earlier prefetch of the same session already fenced this text: a conversation that replays
    #: its earlier fences (:class:`FenceHistory` ``"replay"``) has it in context and leaves it out (:meth:`Recall.fresh`).
    repeat: bool = False
    #: Where the item came from, when custody knows (a held write, a past turn made after untrusted input, an
    #: external provider's result); None for trusted items (entries, clean past turns).
    provenance: Provenance | None = None

    @property
    def custody(self) -> str:
        """The custody label shown in the record's header ("" for a trusted item)."""
        prov = self.provenance
        if self.source == "held" and prov is not None:
            return f"unverified, from {prov.label}; held for approval"
        if prov is None or not prov.untrusted:
            return ""
        if self.source == "history":
            return f"reply unverified, made after {prov.label}"
        return "unverified"

    @property
    def rendered(self) -> str:
        """The record shown in the fence: a header with its date and custody, then the text, every line after the
        first marked (``  ~ ``) so no recalled line stands at a line start (:func:`~ironmem.core.fence.frame_record`)."""
        return frame_record(self.text, self.date, self.custody)


_SECTION_TITLES = {
    "live": "Saved to memory during this session",
    "history": "From past conversations",
    "held": "Held for the user's approval (NOT saved, unverified)",
}


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

    def fresh(self) -> Recall:
        """This recall without the items an earlier recall of the session already fenced.

        What a conversation that replays its earlier fences should send: the repeated items are still in its
        context, each in the fence of the turn that first recalled it, so sending them again would only cost
        tokens. They keep their places in the budget (the selection is the same either way).

        Example:
            >>> recall = Recall((RecallItem("history", "a", repeat=True), RecallItem("history", "b")))
            >>> [item.text for item in recall.fresh().items]
            ['b']
        """
        kept = tuple(item for item in self.items if not item.repeat)
        return self if len(kept) == len(self.items) else Recall(kept, query=self.query, dropped=self.dropped)


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


def clip_bytes(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` bytes of UTF-8, "…" included, never inside a character: the measure
    :func:`estimate_tokens` counts, so a clipped item fits its token allowance in any script.

    Example:
        >>> clip_bytes("déjà vu", 6)
        'dé…'
    """
    text = text.strip()
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: max(0, limit - 3)].decode("utf-8", "ignore") + "…"


# --------------------------------------------------------------------------------------------------
# Rule 2 applied to a conversation: one recall per user message, and which fence goes where
# --------------------------------------------------------------------------------------------------
RecallPolicy = Literal["replay", "ephemeral"]
RECALL_POLICIES: tuple[str, ...] = ("replay", "ephemeral")


def check_policy(policy: str, setting: str = "recall policy") -> RecallPolicy:
    """``policy`` if it is ``replay`` or ``ephemeral``; else an error that names the setting and both values."""
    if policy not in RECALL_POLICIES:
        raise InvalidArgumentError(f"{setting} must be 'replay' or 'ephemeral', got {policy!r}")
    return policy  # type: ignore[return-value]


def recall_text(recall: Recall | None, policy: str) -> str:
    """The unfenced text a conversation keeps for ``recall`` under ``policy``: under ``replay`` only the items no
    earlier fence of the session showed (:meth:`Recall.fresh`), under ``ephemeral`` all of them."""
    if not recall:
        return ""
    return (recall.fresh() if check_policy(policy) == "replay" else recall).text


class FenceHistory:
    """The fenced recall of one conversation, shared by every adapter (the adapters only translate messages).

    Keys are opaque user-message identities chosen by the adapter (a message id, or a position plus a hash).
    Recall runs at most once per key, however often a framework reads memory in a turn; the recalled text is
    kept unfenced and fenced again on demand, which gives the same bytes every time (the fence is
    deterministic), so replayed requests stay byte-identical prefixes of the next ones.

    ``replay`` (default) puts every earlier user message's own fence back before it, so a recalled item already
    fenced earlier in the conversation is not sent again (:meth:`Recall.fresh`); ``ephemeral`` keeps and shows only
    the current message's fence, whole (fewer tokens, shorter cache hits).

    Example:
        >>> history = FenceHistory("replay")
        >>> history.record("m1", "Likes tea")
        >>> history.fenced_for("m1", current="m2").startswith("<memory-context>")
        True
        >>> FenceHistory("ephemeral", {"m1": "Likes tea"}).fenced_for("m1", current="m2")
        ''
    """

    def __init__(self, policy: str = "replay", recalls: Mapping[str, str] | None = None) -> None:
        self.policy: RecallPolicy = check_policy(policy)
        self._recalls: dict[str, str] = dict(recalls or {})
        self._lock = threading.RLock()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._recalls

    def record(self, key: str, text: str) -> None:
        """Keep ``text`` (unfenced; "" when nothing was recalled) as the recall of user message ``key``."""
        with self._lock:
            if self.policy == "ephemeral":
                self._recalls.clear()
            self._recalls[key] = text

    def recall_once(self, session: Session, key: str, user_text: str) -> str:
        """The recall of ``key``: prefetched through ``session`` the first time, then reused. Returns the
        unfenced text."""
        with self._lock:
            if key in self._recalls:
                return self._recalls[key]
            recall = session.prefetch(user_text) if user_text.strip() else None
            text = recall_text(recall, self.policy)
            self.record(key, text)
            return text

    async def arecall_once(self, session: Session, key: str, user_text: str) -> str:
        """:meth:`recall_once` for async callers (the prefetch runs on a worker thread)."""
        with self._lock:
            if key in self._recalls:
                return self._recalls[key]
        recall = await session.aprefetch(user_text) if user_text.strip() else None
        text = recall_text(recall, self.policy)
        with self._lock:
            if key not in self._recalls:
                self.record(key, text)
            return self._recalls[key]

    def text_for(self, key: str) -> str:
        with self._lock:
            return self._recalls.get(key, "")

    def fenced_for(self, key: str, current: str | None) -> str:
        """The exact fenced bytes to place before user message ``key`` in a request whose newest user message
        is ``current``: "" when nothing was recalled, or when ``key`` is an old message under ``ephemeral``."""
        if self.policy == "ephemeral" and key != current:
            return ""
        text = self.text_for(key)
        return fence(text) if text else ""

    def to_dict(self) -> dict[str, str]:
        """The recalls by key (unfenced), for checkpoints and serialized memories."""
        with self._lock:
            return dict(self._recalls)


def prepend_fence(fenced: str, user_text: str) -> str:
    """The user's text with the fenced recall before it (how every adapter places it)."""
    return f"{fenced}\n\n{user_text}" if fenced else user_text


def split_fence(text: str) -> tuple[str, str]:
    """``(fenced, rest)`` for a text that starts with a fence :func:`prepend_fence` put there, else
    ``("", text)``. Used to keep fences out of stored history.

    Example:
        >>> split_fence(prepend_fence(fence("Likes tea"), "hi"))[1]
        'hi'
    """
    if not text.startswith(FENCE_OPEN) or SYSTEM_NOTE not in text:
        return "", text
    end = text.find(FENCE_CLOSE)
    if end < 0:
        return "", text
    cut = end + len(FENCE_CLOSE)
    rest = text[cut:]
    rest = rest[2:] if rest.startswith("\n\n") else rest.lstrip("\n")
    return text[:cut], rest
