"""Dense vectors of long turns: each turn is embedded in windows of at most WINDOW word pieces, scored by its best."""

from __future__ import annotations

import re
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.builtin.vectors import (
    MAX_WINDOWS,
    SLOTS,
    WINDOW,
    MiniLMEmbedder,
    embeddings_missing,
    split_windows,
    turn_windows,
)
from ironmem.testing.embeddings import HashingEmbedder

needs_minilm = pytest.mark.skipif(bool(embeddings_missing("minilm")), reason="ironmem[embeddings] not installed")

FILLER = [
    "The soil should be kept moist but never soggy, and the pot needs drainage holes at the bottom.",
    "Most herbs like six hours of direct sun, so a south facing window sill works well in winter.",
    "Feed them with a diluted liquid fertiliser every two weeks during the growing season only.",
    "Pinch off the flower buds of basil as soon as they appear so the leaves keep their flavour.",
    "Rosemary and thyme prefer to dry out between waterings, unlike mint, which is always thirsty.",
]


def _words(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def test_a_short_turn_is_one_window_its_whole_text() -> None:
    assert turn_windows("I adopted a guinea pig", "Lovely!") == ["User: I adopted a guinea pig\nAssistant: Lovely!"]


def test_a_long_text_is_cut_at_sentence_ends_into_windows_that_cover_it() -> None:
    text = " ".join(FILLER * 6)  # 30 sentences, about 500 words
    got = split_windows(text, _words(text), 64)
    assert len(got) > 1
    assert all(len(w.split()) <= 64 for w in got)
    assert " ".join(got).split() == text.split()  # nothing lost, nothing repeated, in order
    assert all(w.endswith(".") for w in got[:-1])  # every cut at a sentence end (one falls in each window)


def test_a_sentence_longer_than_a_window_is_cut_mid_sentence() -> None:
    text = " ".join(f"w{i}" for i in range(300))
    got = split_windows(text, _words(text), 128)
    assert [len(w.split()) for w in got] == [128, 128, 44]
    assert " ".join(got) == text


def test_a_long_turn_keeps_the_user_message_apart_from_the_reply() -> None:
    user = "My sister Ingrid moved to Hobart last spring and I want to send her a plant she can keep alive."
    reply = " ".join(FILLER * 6)
    got = turn_windows(user, reply)
    assert got[0] == user
    assert " ".join(got[1:]).split() == reply.split()


def test_hostile_turns_cost_linear_time_and_at_most_max_windows() -> None:
    huge = "word " * 400_000 + "x" * 200_000  # 2.2 MB, a 200,000-character "word" at the end
    t0 = time.process_time()
    got = turn_windows(huge, huge)
    assert time.process_time() - t0 < 5
    assert 1 <= len(got) <= MAX_WINDOWS
    assert turn_windows("", "") == ["User: \nAssistant: "]  # an empty turn still gets its one vector
    assert turn_windows("\n\n\n" * 1000, "") == ["User: " + "\n\n\n" * 1000 + "\nAssistant: "]


def test_windows_are_stored_per_turn_and_replaced_when_embedded_again(tmp_path: Path) -> None:
    embedder = HashingEmbedder(dims=64)
    long_reply = " ".join(FILLER * 8)
    with MemoryManager(home=tmp_path, embeddings=embedder) as manager:
        session = manager.start_session("a")
        session.sync_turn("how do I keep herbs alive?", long_reply)
        session.sync_turn("thanks", "you're welcome")
        vectors = manager.builtin.index.vectors
        assert vectors.wait_idle(60)
        expected = len(turn_windows("how do I keep herbs alive?", long_reply)) + 1
        assert expected > 3
        assert vectors.status()["turn_vectors"] == expected
        stats = vectors.similarity_stats("basil flower buds")
        assert stats is not None and stats[2] == expected
        hits = vectors.search_turns("basil flower buds", 5)
        assert [t for t, _ in hits] == [1, 2]  # one row per turn, its best window's similarity
    db = tmp_path / ".ironmem" / "vectors.db"
    with closing(sqlite3.connect(db)) as conn, conn:
        assert dict(conn.execute("SELECT turn_id, n FROM turn_windows")) == {1: expected - 1, 2: 1}
        conn.execute("UPDATE meta SET value = '0' WHERE key = 'turns_upto'")  # both turns embedded again
    with MemoryManager(home=tmp_path, embeddings=embedder) as manager:
        vectors = manager.builtin.index.vectors
        assert vectors.wait_idle(60) and vectors.status()["turns_embedded_upto"] == 2
        assert vectors.status()["turn_vectors"] == expected  # replaced, not added
        assert vectors.similarity_stats("basil flower buds") == pytest.approx(stats)


def test_vectors_stored_one_per_turn_are_embedded_again_in_windows(tmp_path: Path) -> None:
    embedder = HashingEmbedder(dims=64)
    with MemoryManager(home=tmp_path, embeddings=embedder) as manager:
        manager.start_session("a").sync_turn("how do I keep herbs alive?", " ".join(FILLER * 8))
        assert manager.builtin.index.vectors.wait_idle(60)
    db = tmp_path / ".ironmem" / "vectors.db"
    with closing(sqlite3.connect(db)) as conn, conn:  # what a vectors.db of the one-vector-per-turn layout holds
        conn.execute("DELETE FROM meta WHERE key = 'layout'")
    with MemoryManager(home=tmp_path, embeddings=embedder) as manager:
        vectors = manager.builtin.index.vectors
        assert vectors.wait_idle(60)
        assert vectors.status()["turn_vectors"] > 1 and vectors.status()["turns_embedded_upto"] == 1
    with closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'layout'").fetchone()[0] == f"windows-{WINDOW}"


@needs_minilm
def test_minilm_windows_follow_its_word_pieces() -> None:
    model = MiniLMEmbedder()
    reply = " ".join(FILLER * 10)
    pieces = len(model.spans(reply))
    assert pieces > 2 * WINDOW
    got = turn_windows("any tips for herbs?", reply, model.spans)
    assert got[0] == "any tips for herbs?"
    assert all(len(model.spans(w)) <= WINDOW for w in got)
    assert " ".join(got[1:]).split() == reply.split()
    assert SLOTS > MAX_WINDOWS


@needs_minilm
def test_minilm_finds_a_fact_past_the_first_256_word_pieces_of_a_turn(tmp_path: Path) -> None:
    """One vector per turn would describe only the first 256 word pieces: the fact at the end was invisible."""
    reply = " ".join(FILLER * 4) + " Also, as you asked me to remember: your violin lesson moved to Thursday evenings."
    model = MiniLMEmbedder()
    assert len(model.spans(reply)) > 300
    with MemoryManager(home=tmp_path, embeddings="minilm") as manager:
        session = manager.start_session("a")
        session.sync_turn("how should I care for my herbs?", reply)
        for text in ("The train was late again this morning", "Can you summarize the French Revolution?",
                     "I need a birthday present idea for my dad", "What is a good stretching routine?"):
            session.sync_turn(text, "Sure, here is an overview.")
        vectors = manager.builtin.index.vectors
        assert vectors.wait_idle(120)
        question = "When is my violin lesson now?"
        top = vectors.search_turns(question, 3)
        assert top[0][0] == 1
    # the same turn as one vector (all MiniLM reads of it: its first 256 word pieces) is not nearest
    one, other = model([f"User: how should I care for my herbs?\nAssistant: {reply}",
                        "User: The train was late again this morning\nAssistant: Sure, here is an overview."])
    query = model([question])[0]
    assert float(one @ query) < float(other @ query)


class _SlowHashing(HashingEmbedder):
    """The hashing embedder at the pace of a slow model: 0.3 s a call (e5 on long windows is slower still)."""

    calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        type(self).calls += 1
        time.sleep(0.3)
        return super().embed_documents(texts)


def test_closing_during_a_long_backlog_is_prompt_and_loses_nothing(tmp_path: Path) -> None:
    """The worker checks for a stop between slices of windows: close() does not wait for a whole batch, a batch
    cut short writes nothing, and the next start embeds the rest."""
    reply = " ".join(FILLER * 6)  # long: several windows a turn
    with MemoryManager(home=tmp_path) as manager:
        session = manager.start_session("a")
        for i in range(64):
            session.sync_turn(f"question {i} about my herbs", reply)
    manager = MemoryManager(home=tmp_path, embeddings=_SlowHashing(dims=64))
    vectors = manager.builtin.index.vectors
    assert vectors is not None
    time.sleep(0.5)  # the worker is inside its first batch of 32 turns (many slices of windows)
    start = time.perf_counter()
    manager.close()
    assert time.perf_counter() - start < 5.0  # one slice, not the batch (> 10 s at this pace)
    with closing(sqlite3.connect(tmp_path / ".ironmem" / "vectors.db")) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'turns_upto'").fetchone()
        upto = int(row[0]) if row else 0
        stored = {r[0] for r in conn.execute("SELECT turn_id FROM turn_windows")}
    assert upto < 64 and stored == set(range(1, upto + 1))  # whole batches only
    with MemoryManager(home=tmp_path, embeddings=HashingEmbedder(dims=64)) as again:
        assert again.builtin.index.vectors.wait_idle(120)
        assert again.builtin.index.recall_status()["turns_embedded_upto"] == 64
