"""The session: one conversation with a frozen snapshot (rule 3), fenced recall (rule 2) and tool routing.

Data flows one way: adapter -> Session -> providers -> storage.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .builtin.provenance import PendingWrite
from .custody import Origin, Provenance, TurnCustody
from .errors import ArgumentTypeError
from .provider import ToolSchema
from .recall import Recall, RecallBudget, RecallItem, as_items, clip, clip_bytes, estimate_tokens
from .security import scan_recalled
from .security.policy import Verdict
from .snapshot import Snapshot
from .text import well_formed

if TYPE_CHECKING:
    from .manager import MemoryManager

__all__ = ["Session"]

log = logging.getLogger(__name__)

#: Failed ``memory`` calls in one turn before the breaker tells the model to stop retrying (Hermes: 3). A write
#: refused by policy (the result names who refused it, ``refused_by``) does not count: it is not a failed
#: consolidation, and the model needs its reason.
MAX_MEMORY_FAILURES_PER_TURN = 3

#: What a guarded call returns when the external provider raised or hung.
_FAILED = object()


def json_error(message: str, **extra: Any) -> str:
    return json.dumps({"success": False, "error": message, **extra}, ensure_ascii=False)


def _require_text(label: str, value: object, *, none_ok: bool = False) -> str:
    """``value`` when it is a string (``""`` for an allowed None); else a clear error for the application."""
    if value is None and none_ok:
        return ""
    if not isinstance(value, str):
        allowed = "a string or None" if none_ok else "a string"
        raise ArgumentTypeError(f"{label} must be {allowed}, got {type(value).__name__} {value!r}")
    return value


def _interleave(first: list[RecallItem], second: list[RecallItem]) -> list[RecallItem]:
    """Two ranked lists merged best-first, alternating (neither source can crowd the other out)."""
    out: list[RecallItem] = []
    for i in range(max(len(first), len(second))):
        out.extend(lst[i] for lst in (first, second) if i < len(lst))
    return out


def _dropped_by_scan(item: RecallItem, dropped: list[str]) -> bool:
    """Scan one recalled item; a blocked item is logged, its reason added to ``dropped``, and True returned."""
    verdict = scan_recalled(item.text)
    if not verdict.blocked:
        return False
    reason = f"{item.source}: {verdict.reason}"
    log.warning("recalled item dropped by the security scan (%s)", reason)
    dropped.append(reason)
    return True


_WORD = re.compile(r"\w{3,}")


def _words(text: str) -> set[str]:
    """The casefolded words of 3+ characters (what makes a held write relevant to a query)."""
    return set(_WORD.findall(text.casefold()))


def _unverified_hits(text: str) -> list[Provenance]:
    """The provenance of the unverified hits of a ``session_search`` result (none when it does not parse)."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return []
    hits = data.get("results") if isinstance(data, dict) else None
    out: list[Provenance] = []
    for hit in hits if isinstance(hits, list) else []:
        if isinstance(hit, dict) and hit.get("unverified"):
            origin, _, source = str(hit.get("origin") or "tool").partition(" ")
            try:
                out.append(Provenance(Origin.parse(origin), source))
            except Exception:
                out.append(Provenance(Origin.TOOL, str(hit.get("origin"))))
    return out


#: The note ``session_search`` appends to a clipped hit.
_CLIPPED = re.compile(r" \[\.\.\. [\d,]+ more chars not shown\]$")


def _text_key(text: str) -> str:
    """What makes two recalled texts the same item: their words, case-folded."""
    return " ".join(text.split()).casefold()


def _fill(live: list[RecallItem], candidates: list[RecallItem], budget: RecallBudget) -> tuple[list[RecallItem], list[str]]:
    """The items that go in the fence: live entries, then the best candidates, within ``budget``.

    Each distinct text is scanned once (cached); a duplicate or a blocked item frees its slot for the next
    candidate. The scan sees the item's own words: not the date shown before it, nor the role labels.
    """
    kept: list[RecallItem] = []
    dropped: list[str] = []
    seen: set[str] = set()
    tokens_left = budget.tokens
    for item in live:
        if _dropped_by_scan(item, dropped):
            continue
        seen.add(_text_key(item.text))
        kept.append(item)
        tokens_left -= estimate_tokens(item.rendered)
    slots = budget.items - len(kept)
    for item in candidates:
        if slots <= 0 or tokens_left < RecallBudget.MIN_ITEM_TOKENS:
            break
        key = _text_key(item.text)
        if key in seen:  # the same text from two sources (e.g. a past turn both layers stored) shows once
            continue
        seen.add(key)
        if _dropped_by_scan(item, dropped):
            continue
        # One item may use up to twice its share, but never the share of a slot still open: the budget's
        # number of items is what the caller asked for, so long items are clipped rather than crowd out the rest.
        share = RecallBudget.ITEM_TOKENS
        allowance = min(tokens_left, 2 * share, max(share, tokens_left - (slots - 1) * share))
        cost = estimate_tokens(item.rendered)
        if cost > allowance:  # cut to the allowance in UTF-8 bytes (what estimate_tokens counts), date included
            prefix = len(item.rendered.encode("utf-8")) - len(item.text.encode("utf-8"))
            item = dataclasses.replace(item, text=clip_bytes(item.text, max(4, 4 * allowance - prefix)))
            cost = estimate_tokens(item.rendered)
        kept.append(item)
        tokens_left -= cost
        slots -= 1
    return kept, dropped


# --------------------------------------------------------------------------------------------------
# Session
# --------------------------------------------------------------------------------------------------
class Session:
    """One conversation: a frozen snapshot, per-turn recall, tool routing and turn syncing.

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s1")
        >>> before = session.system_prompt_block()
        >>> _ = session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Likes tea"})
        >>> session.system_prompt_block() == before  # frozen
        True
        >>> "Likes tea" in session.prefetch("what do I drink?").fenced()  # the live delta
        True
    """

    def __init__(
        self,
        manager: MemoryManager,
        session_id: str,
        user_id: str | None,
        *,
        scopes: dict[str, str],
        snapshot: Snapshot | None = None,
    ) -> None:
        # What a session uses of its manager: ``builtin``, ``guarded`` (the external provider behind its guard),
        # ``builtin_health``, ``tool_owner()``, ``tool_schemas()``, ``render_snapshot()``, ``recall_budget``,
        # ``drain()``, ``home``. Start sessions with ``MemoryManager.start_session``.
        self.manager = manager
        self.id = session_id
        self.user_id = user_id or None
        #: The scope of each target (``{"memory": "ada", "user": "ada"}``): whose files this session reads and writes.
        self.scopes: dict[str, str] = scopes
        self._lock = threading.Lock()
        self.prefetch_count = 0
        self.turns_synced = 0
        self.turn_number = 0
        self.last_recall: Recall | None = None
        self._ended = False
        self._memory_failures = 0
        #: The custody of the current turn: the user's words and the untrusted inputs that entered the context.
        self.turn = TurnCustody(session=session_id, user=self.user_id)
        manager.builtin.initialize(session_id, user_id=user_id, home=str(manager.home), scopes=self.scopes)
        if manager.guarded is not None:
            manager.guarded.call("initialize", session_id=session_id, user_id=user_id, home=str(manager.home),
                                 fast=True)
        self._snapshot = snapshot if snapshot is not None else manager.render_snapshot(scopes=self.scopes)
        # Entries already shown (in the snapshot or in an earlier recall), per target.
        self._surfaced: dict[str, set[str]] = {t: set(e) for t, e in self._snapshot.entries.items()}
        self._removed_shown: dict[str, set[str]] = {t: set() for t in self._snapshot.entries}
        # Texts of the recalled items this session has fenced (keys of :func:`_text_key`).
        self._fenced: set[str] = set()

    # -- rule 3 ---------------------------------------------------------------------------------
    def system_prompt_block(self) -> str:
        """The frozen memory block: byte-identical for the whole session."""
        return self._snapshot.text

    @property
    def snapshot_hash(self) -> str:
        return self._snapshot.hash

    @property
    def snapshot(self) -> Snapshot:
        """The frozen snapshot and the entries it was rendered from (``to_dict()`` to save it)."""
        return self._snapshot

    # -- recall (rule 2) ------------------------------------------------------------------------
    def prefetch(self, user_message: str) -> Recall:
        """Recall what is relevant to ``user_message``: entries written since the snapshot (the live delta),
        then the best of the external provider's recall and of the matching past turns (interleaved), all
        de-duplicated and scanned, filling the manager's :class:`RecallBudget`. Never hangs longer than the
        manager's ``prefetch_timeout``, and a failing provider or index only shortens the recall; a
        ``user_message`` that is not a string raises :class:`~ironmem.core.errors.ArgumentTypeError`."""
        manager = self.manager
        budget = manager.recall_budget
        user_message = well_formed(_require_text("prefetch(user_message)", user_message))
        self.begin_turn(user_message)
        with self._lock:
            self.prefetch_count += 1
            live = self._live_delta()
        external_items: list[RecallItem] = []
        guarded = manager.guarded
        if guarded is not None and budget.items:
            found = guarded.call("prefetch", user_message, session_id=self.id, default="", fast=True)
            origin = Provenance(Origin.EXTERNAL, guarded.name)
            external_items = [RecallItem(guarded.name, clip(text), provenance=origin) for text in as_items(found)]
        hits: list[Any] = []
        archived: list[RecallItem] = []
        if budget.items:
            try:
                # Over-fetch: items the scan drops or that repeat another source's are replaced by the next best.
                hits = manager.builtin.index.search(
                    user_message, kinds=("turn",), user_id=self.user_id, exclude_session=self.id,
                    limit=budget.items * 3,
                )
            except Exception as exc:  # the index is local; still, a recall failure must not break the turn
                log.warning("built-in recall failed: %s", exc)
                hits = []
            # entries that left a full file for the archive are still recalled (issue 37), before the turns
            archived = [RecallItem("history", clip(text), date=date) for text, date in
                        manager.builtin.recall_archived(user_message, scopes=self.scopes, limit=budget.items)]
        turns, held = (self._recall_custody([hit.turn_id for hit in hits if hit.turn_id is not None])
                       if budget.items else ({}, []))
        history = archived + [
            RecallItem("history", clip(hit.text), date=hit.date, provenance=turns.get(hit.turn_id or -1))
            for hit in hits
        ]
        candidates = self._held_items(user_message, held) + _interleave(external_items, history)
        kept, dropped = _fill(live, candidates, budget)
        kept = [shown for item in kept if (shown := self._custody_of(item)) is not None]
        with self._lock:
            kept = [self._mark_repeat(item) for item in kept]
        recall = Recall(tuple(kept), query=user_message, dropped=tuple(dropped))
        self.last_recall = recall
        return recall

    # -- custody (issue 34) ----------------------------------------------------------------------
    def _turn_custody(self, turn_ids: list[int]) -> dict[int, Provenance]:
        if not turn_ids:
            return {}
        try:
            return self.manager.builtin.custody.turn_provenance(turn_ids)
        except Exception as exc:  # unknown custody is not trusted: the items are labelled as unverified
            log.warning("could not read the provenance of recalled turns: %s", exc)
            unknown = Provenance(Origin.EXTERNAL, "unknown (custody unavailable)")
            return {i: unknown for i in turn_ids}

    def _recall_custody(self, turn_ids: list[int]) -> tuple[dict[int, Provenance], list[PendingWrite]]:
        """The provenance of recalled turns and the held writes recall may show, in one call to the store."""
        builtin = self.manager.builtin
        held = 0 if builtin.policy.held_recall == "hide" else 200
        if not turn_ids and not held:
            return {}, []
        try:
            return builtin.custody.recall_custody(turn_ids, held=held)
        except Exception as exc:  # unknown custody is not trusted: the turns are labelled as unverified
            log.warning("could not read custody for recall: %s", exc)
            unknown = Provenance(Origin.EXTERNAL, "unknown (custody unavailable)")
            return {i: unknown for i in turn_ids}, []

    def _held_items(self, query: str, held: list[PendingWrite]) -> list[RecallItem]:
        """Held writes of this session's files that concern ``query`` (or were made in this session), as items
        labelled with their origin."""
        words = _words(query)
        out: list[RecallItem] = []
        for pending in reversed(held):  # newest first
            if any(self.scopes.get(t) != scope for t, scope in pending.scopes.items()):
                continue
            for text in pending.texts:
                if pending.provenance.session == self.id or words & _words(text):
                    date = time.strftime("%Y-%m-%d", time.gmtime(pending.created))
                    out.append(RecallItem("held", clip(text), date=date, provenance=pending.provenance))
        return out

    def _custody_of(self, item: RecallItem) -> RecallItem | None:
        """A kept item as the policy shows it (None when not at all); an item of untrusted origin taints the
        turn it enters, like the tool result it came from."""
        prov = item.provenance
        if prov is None:
            return item
        policy = self.manager.builtin.policy
        verdict = policy.held_recall_verdict(prov) if item.source == "held" else policy.recall_verdict(prov)
        if verdict is Verdict.REFUSE:
            return None
        self.turn.observe(provenance=prov, trusted_tools=policy.trusted_tools)
        return item

    def observe(self, text: str = "", *, origin: Origin | str = Origin.TOOL, source: str = "") -> bool:
        """Untrusted content entered this turn's context (a tool's result, a retrieved document, a web page):
        writes made from now on in this turn take its origin and are held for approval (see the custody policy).
        Returns True when it tainted the turn. Adapters call this for every tool result in the model's context;
        the plain API calls it where the application puts such content in front of the model.

        A result of ironmem's own tools is judged by what it holds: ``memory`` results show entries (trusted);
        ``session_search`` results taint only when a hit is unverified; an external provider's tool is external.

        Example:
            >>> import tempfile
            >>> from ironmem import MemoryManager
            >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s")
            >>> _ = session.begin_turn("summarize https://example.com")
            >>> session.observe("<html>...</html>", origin="tool", source="web_fetch")
            True
        """
        policy = self.manager.builtin.policy
        found = Origin.parse(origin)
        owner = self.manager.tool_owner(source) if found is Origin.TOOL else None
        if owner is not None:
            if owner is not self.manager.builtin:
                return self.turn.observe(text, origin=Origin.EXTERNAL, source=owner.name)
            tainted = False
            for prov in _unverified_hits(text):
                tainted = self.turn.observe(provenance=prov) or tainted
            return tainted
        return self.turn.observe(text, origin=found, source=source, trusted_tools=policy.trusted_tools)

    def pending(self) -> list[PendingWrite]:
        """Held writes waiting for approval (all of this memory's, oldest first)."""
        return self.manager.builtin.pending()

    def approve(self, pending_id: str, *, edited: dict[str, Any] | None = None, by: str | None = None) -> PendingWrite:
        """Approve a held write: it is applied as a normal write (``edited``: memory-tool arguments to apply
        instead). Raises :class:`~ironmem.core.errors.PendingWriteError` (unknown or already decided id) or
        :class:`~ironmem.core.errors.OperationError` (it cannot apply; it stays pending)."""
        return self.manager.builtin.approve(pending_id, by=by or self.user_id or "user", edited=edited)

    def reject(self, pending_id: str, *, note: str = "", by: str | None = None) -> PendingWrite:
        """Reject a held write: it is dropped, and the record of it and of the decision kept."""
        return self.manager.builtin.reject(pending_id, by=by or self.user_id or "user", note=note)

    async def aprefetch(self, user_message: str) -> Recall:
        return await asyncio.to_thread(self.prefetch, user_message)

    def _mark_repeat(self, item: RecallItem) -> RecallItem:
        """``item``, marked as a repeat when an earlier prefetch of this session fenced the same text."""
        key = _text_key(item.text)
        if key in self._fenced:
            return dataclasses.replace(item, repeat=True)
        self._fenced.add(key)
        return item

    def restore_shown(self, recalled: Iterable[str]) -> None:
        """A conversation resumed in a new process: ``recalled`` are the recall texts (``Recall.text``, in turn
        order) of its earlier turns, which it keeps replaying. Entries those fences showed, or said were removed,
        count as shown, so the live delta neither repeats them nor misses that one of them was removed since.

        Example:
            >>> import tempfile
            >>> from ironmem import MemoryManager
            >>> session = MemoryManager(home=tempfile.mkdtemp()).start_session("s1")
            >>> session.restore_shown(["## Saved to memory during this session\\n- [user profile] Likes tea"])
            >>> "[user profile, removed - no longer true] Likes tea" in session.prefetch("tea?").fenced()
            True
        """
        labels = {"memory": "memory", "user profile": "user"}
        with self._lock:
            for text in recalled:
                for line in (text or "").splitlines():
                    if not line.startswith("- ["):
                        continue
                    label, _, entry = line[3:].partition("] ")
                    removed = label.endswith(", removed - no longer true")
                    target = labels.get(label.removesuffix(", removed - no longer true"))
                    if target is None or not entry or target not in self._surfaced:
                        continue
                    if removed:
                        self._surfaced[target].discard(entry)
                        self._removed_shown[target].add(entry)
                    else:
                        self._surfaced[target].add(entry)
                        self._removed_shown[target].discard(entry)

    def _live_delta(self) -> list[RecallItem]:
        """Entries added or removed since the snapshot that this session has not been shown yet."""
        out: list[RecallItem] = []
        builtin = self.manager.builtin
        for target in ("memory", "user"):
            if not builtin.enabled[target]:
                continue
            state = builtin.file(target, self.scopes[target]).read()
            if state.corrupt:
                continue
            label = "memory" if target == "memory" else "user profile"
            current = set(state.entries)
            for entry in state.entries:
                if entry not in self._surfaced[target]:
                    self._surfaced[target].add(entry)
                    self._removed_shown[target].discard(entry)
                    # never more of one entry than its file's limit (a hand-pasted megabyte stays on disk)
                    out.append(RecallItem("live", f"[{label}] {clip(entry, builtin.limits[target])}"))
            # Everything the model was shown (the snapshot, and entries an earlier fence of this session showed,
            # which a replayed fence keeps showing byte for byte) and that is gone now gets a note that supersedes it.
            for entry in sorted(self._surfaced[target] - current):
                if entry not in self._removed_shown[target]:
                    self._removed_shown[target].add(entry)
                    self._surfaced[target].discard(entry)
                    out.append(RecallItem("live", f"[{label}, removed - no longer true] {clip(entry, 200)}"))
        return out

    # -- tools ----------------------------------------------------------------------------------
    def tool_schemas(self) -> list[ToolSchema]:
        # the built-in memory tool says whether this session's agent notes are shared between users
        return self.manager.tool_schemas(self.user_id, scopes=self.scopes)

    def handle_tool_call(
        self, name: str, args: dict[str, Any] | str | None, *, provenance: Provenance | None = None,
        call_id: str | None = None,
    ) -> str:
        """Route a tool call to its provider. Always returns JSON text; never raises.

        A ``memory`` write's provenance is ``provenance`` when given (the application vouches for it), else what
        this turn's custody says (:meth:`observe`). ``call_id`` (the framework's tool-call id) makes a held write's
        id stable when the framework runs the same call again."""
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                return json_error(f"arguments for {name!r} are not valid JSON ({exc.msg}); send a JSON object")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return json_error(f"arguments for {name!r} must be a JSON object, got {type(args).__name__}")
        manager = self.manager
        provider = manager.tool_owner(name)
        if provider is None and name == "memory" and not any(manager.builtin.enabled.values()):
            return json_error("Memory is not available: it is disabled in this configuration "
                              "(memory.memory_enabled and memory.user_profile_enabled are false)")
        if provider is None:
            available = ", ".join(s.name for s in manager.tool_schemas())
            return json_error(f"unknown tool {name!r}; available memory tools: {available}")
        if provider is manager.builtin:
            answer: str
            try:
                answer = manager.builtin.handle_tool_call(
                    name, args, user_id=self.user_id, scopes=self.scopes, session_id=self.id,
                    provenance=provenance if provenance is not None else self.turn, call_id=call_id,
                )
                if name != "memory":
                    answer = self._label_hits(answer)
            except Exception as exc:
                log.exception("built-in tool %r failed", name)
                answer = json_error(f"{name} failed: {type(exc).__name__}: {exc}")
            return self._count_memory_failure(name, answer)
        guarded = manager.guarded
        assert guarded is not None and guarded.provider is provider
        result: Any = guarded.call("handle_tool_call", name, args, default=_FAILED, label=f"tool:{name}")
        if result is _FAILED:
            return json_error(f"memory provider {provider.name!r} failed on {name!r}: {guarded.health.reason}")
        if not isinstance(result, str):
            try:
                result = json.dumps(result, ensure_ascii=False)
            except (TypeError, ValueError):
                result = json.dumps({"success": True, "result": str(result)}, ensure_ascii=False)
        # Not observed here: the plain API is told (observe()), adapters observe every tool result the model reads.
        return result

    def _label_hits(self, answer: str) -> str:
        """A ``session_search`` result with each hit's custody (``origin``): a past turn's is ``conversation``, or,
        when its reply was made after untrusted input, that input's (the hit is then marked ``unverified`` and
        taints this turn); an entry's is where it came from (``user``, ``tool web_fetch`` with ``approved_by``,
        ``hand_edit``...)."""
        try:
            data = json.loads(answer)
            hits = data.get("results") if isinstance(data, dict) else None
        except ValueError:
            return answer
        if not isinstance(hits, list) or not hits:
            return answer
        hits = [h for h in hits if isinstance(h, dict)]
        custody = self._turn_custody([h["turn_id"] for h in hits if isinstance(h.get("turn_id"), int)])
        entries = self._entry_custody([h for h in hits if h.get("kind") in ("memory", "user")])
        for hit in hits:
            if isinstance(hit.get("turn_id"), int):
                prov = custody.get(hit["turn_id"])
                if prov is not None and prov.untrusted:
                    hit.update(unverified=True, origin=prov.label)
                    self.turn.observe(provenance=prov)
                else:
                    hit["origin"] = "conversation"
            elif id(hit) in entries:
                prov = entries[id(hit)]
                hit["origin"] = prov.label
                if prov.approved_by:
                    hit["approved_by"] = prov.approved_by
        return json.dumps(data, ensure_ascii=False)

    def _entry_custody(self, hits: list[dict[str, Any]]) -> dict[int, Provenance]:
        """The provenance of entry hits (by ``id`` of the hit); a clipped hit is matched to its entry in the file."""
        from .builtin.provider import MAX_HIT_CHARS

        builtin = self.manager.builtin
        out: dict[int, Provenance] = {}
        for target in ("memory", "user"):
            mine = [h for h in hits if h.get("kind") == target and isinstance(h.get("text"), str)]
            if not mine:
                continue
            scope = self.scopes.get(target, "")
            try:
                full = {e[:MAX_HIT_CHARS]: e for e in builtin.file(target, scope).read().entries}
                texts = {id(h): full.get(_CLIPPED.sub("", h["text"]), h["text"]) for h in mine}
                known = builtin.custody.entry_provenance(scope, target, set(texts.values()))
            except Exception as exc:  # the hits stay as they are; nothing in them claims a custody
                log.warning("could not read the provenance of %s entries: %s", target, exc)
                continue
            out.update({key: known[text] for key, text in texts.items()})
        return out

    async def ahandle_tool_call(
        self, name: str, args: dict[str, Any] | str | None, *, provenance: Provenance | None = None,
        call_id: str | None = None,
    ) -> str:
        return await asyncio.to_thread(
            functools.partial(self.handle_tool_call, name, args, provenance=provenance, call_id=call_id)
        )

    def _count_memory_failure(self, name: str, result: str) -> str:
        """Hermes's breaker: after ``MAX_MEMORY_FAILURES_PER_TURN`` failed ``memory`` calls in one turn, the next
        failure tells the model to stop retrying and answer the user. Writes refused by policy (``refused_by`` in
        the result, e.g. the security scan) are not failed consolidations and keep their own reason, as in Hermes.
        A success or a new turn resets the count."""
        if name != "memory":
            return result
        try:
            answer = json.loads(result)
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        with self._lock:
            if answer.get("success"):
                self._memory_failures = 0
                return result
            if answer.get("refused_by"):  # refused by policy, not a failed consolidation: keeps its reason
                return result
            self._memory_failures += 1
            failures = self._memory_failures
        if failures <= MAX_MEMORY_FAILURES_PER_TURN:
            return result
        return json.dumps({
            "success": False,
            "done": True,
            "error": (
                f"Memory calls failed {failures} times this turn. Stop retrying memory calls: leave memory "
                "unchanged for now and continue with your reply to the user. The fact can be saved in a later turn."
            ),
        }, ensure_ascii=False)

    # -- turns ----------------------------------------------------------------------------------
    def begin_turn(self, user_message: str) -> int:
        """Start a turn (``prefetch`` calls this): resets the memory-failure breaker and tells the external
        provider (``on_turn_start``, in the background). Returns the turn number (1 for the first turn)."""
        with self._lock:
            self.turn_number += 1
            self._memory_failures = 0
            turn = self.turn_number
            self.turn = TurnCustody(session=self.id, user=self.user_id, user_message=user_message or "")
        if self.manager.guarded is not None:
            self.manager.guarded.submit("on_turn_start", turn, user_message or "")
        return turn

    def pre_compress(self, messages: list[dict[str, Any]]) -> str:
        """The framework is about to compact history: ``messages`` (``{"role", "content"}`` dicts) leave the
        context, and with them maybe the fences that showed recalled items (those may be recalled again). Gives
        the external provider its ``on_pre_compress`` chance to extract from them first (secrets
        masked, bounded by ``tool_timeout``). Returns the provider's text for the summary prompt ("" if none).
        """
        if messages:
            with self._lock:  # the fences those messages carried may be gone: recalled items may show again
                self._fenced.clear()
        guarded = self.manager.guarded
        if guarded is None or not messages:
            return ""
        text = guarded.call("on_pre_compress", [dict(m) for m in messages if isinstance(m, dict)], default="")
        if not isinstance(text, str) or not text.strip():
            return ""
        if scan_recalled(text).blocked:
            log.warning("on_pre_compress text of %r dropped by the security scan", guarded.name)
            return ""
        return text

    def delegation(self, task: str, result: str, *, child_session_id: str = "") -> None:
        """A subagent finished ``task`` with ``result``: the external provider observes it (in the background)."""
        if self.manager.guarded is not None:
            self.manager.guarded.submit("on_delegation", task or "", result or "", child_session_id=child_session_id)

    def switch(self, new_session_id: str, *, reset: bool = False, rewound: bool = False) -> None:
        """The conversation continues under ``new_session_id`` (a branch, a resume, a reset): the snapshot stays
        frozen; the external provider is told (``on_session_switch``) so its per-session state follows."""
        if not isinstance(new_session_id, str) or not new_session_id:
            raise ValueError("new_session_id must be a non-empty string")
        old = self.id
        self.id = new_session_id
        if self.manager.guarded is not None:
            self.manager.guarded.call("on_session_switch", new_session_id=new_session_id, parent_session_id=old,
                                      reset=reset, rewound=rewound)

    def sync_turn(self, user: str, assistant: str, *, ts: float | None = None) -> None:
        """Record a finished exchange: indexed locally now, sent to the external provider in the background.

        ``ts`` (seconds since the epoch, default now) is when the exchange happened; recall shows its date.
        """
        user = _require_text("sync_turn(user)", user, none_ok=True)
        assistant = _require_text("sync_turn(assistant)", assistant, none_ok=True)
        if not user.strip() and not assistant.strip():
            return
        # a lone surrogate (half a character, cut from a JSON escape) cannot be stored as UTF-8: it is kept as
        # U+FFFD rather than losing the whole turn
        user, assistant = well_formed(user), well_formed(assistant)
        manager = self.manager
        try:
            inputs = self.turn.inputs
            first = inputs[0] if inputs else None  # the reply was made after untrusted input: it has its origin
            provenance = None if first is None else Provenance(
                first.origin, first.source, self.id, self.user_id, ts or time.time(), tuple(p.label for p in inputs))
            manager.builtin.custody.index_turn(manager.builtin.index, self.id, user, assistant, user_id=self.user_id,
                                               ts=ts, provenance=provenance)
        except Exception as exc:  # a full disk or a locked database must not break the agent's turn
            log.error("could not index the turn of session %s: %s", self.id, exc)
            manager.builtin_health.fail("sync_turn", f"sync_turn could not index the turn: {exc}")
        else:
            manager.builtin_health.ok("sync_turn")
            self.turns_synced += 1
        guarded = manager.guarded
        if guarded is not None:
            guarded.submit("sync_turn", user, assistant, session_id=self.id)
            if user.strip():
                guarded.submit("queue_prefetch", user, session_id=self.id)

    async def async_turn(self, user: str, assistant: str, *, ts: float | None = None) -> None:
        await asyncio.to_thread(functools.partial(self.sync_turn, user, assistant, ts=ts))

    def end(self) -> None:
        """Finish the session: wait for its queued syncs, tell the external provider."""
        if self._ended:
            return
        self._ended = True
        manager = self.manager
        if not manager.drain():
            log.warning("session %s ended before its background syncs finished", self.id)
        if manager.guarded is not None:
            manager.guarded.call("on_session_end", session_id=self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end()

    def __repr__(self) -> str:
        return f"<Session id={self.id!r} user={self.user_id!r} snapshot={self.snapshot_hash[:12]}>"
