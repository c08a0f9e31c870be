"""LocalVectorProvider: real SQLite + sqlite-vec on disk, three kinds of embedder, dedupe, user scoping."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ironmem import MemoryManager
from ironmem.providers.local_vector import LocalVectorProvider, sqlite_driver
from ironmem.testing.embeddings import HashingEmbedder, HashingEmbeddings, hashing_vector

pytest.importorskip("sqlite_vec")


def provider(tmp_path: Path, embedder: Any = None, **kwargs: Any) -> LocalVectorProvider:
    return LocalVectorProvider(embedder or HashingEmbedder(dims=128), path=tmp_path / "vec.db", **kwargs)


def test_write_in_session_one_recall_in_session_two_on_disk(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with MemoryManager(home=home, external=provider(tmp_path)) as manager:
        s1 = manager.start_session("s1", user_id="ada")
        s1.sync_turn("My sister Noor lives in Rotterdam", "Nice, I'll remember that.")
        s1.handle_tool_call("vector_memory_write", {"action": "save", "content": "Ada is allergic to peanuts"})
        s1.end()
    assert (tmp_path / "vec.db").is_file()
    # A new provider and a new manager: only what is on disk can answer.
    with MemoryManager(home=home, external=provider(tmp_path)) as manager:
        s2 = manager.start_session("s2", user_id="ada")
        recall = s2.prefetch("Which city does my sister live in?")
        mine = [item.text for item in recall.items if item.source == "local_vector"]
        assert any("Rotterdam" in text for text in mine), recall.items
        assert "Rotterdam" in recall.fenced()
        allergy = [item.text for item in s2.prefetch("any food allergies, peanuts?").items if item.source == "local_vector"]
        assert allergy and "peanuts" in allergy[0]
        assert manager.status()["providers"][1]["state"] == "active"
        s2.end()


def test_database_is_plain_sqlite_with_a_vec0_table(tmp_path: Path) -> None:
    p = provider(tmp_path)
    p.initialize("s1", user_id="ada")
    p.add("Ada plays the cello")
    p.shutdown()
    conn = sqlite_driver().connect(str(tmp_path / "vec.db"))
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"memories", "meta", "vectors"} <= tables
    assert conn.execute("SELECT user_id, text, source FROM memories").fetchall() == [("ada", "Ada plays the cello", "tool")]
    assert conn.execute("SELECT value FROM meta WHERE key = 'dims'").fetchone() == ("128",)
    conn.close()


def test_near_duplicates_are_merged_distinct_facts_are_not(tmp_path: Path) -> None:
    p = provider(tmp_path, dedupe_threshold=0.9)
    p.initialize("s1", user_id="ada")
    first = p.add("Ada prefers green tea in the morning")
    again = p.add("ada prefers green tea in the morning!")  # same words, different case and punctuation
    plural = p.add("Ada prefers green teas in the morning")  # the embedder folds plurals
    other = p.add("Ada's train leaves at nine")
    assert first["merged"] is False
    assert again["merged"] is True and again["id"] == first["id"] and again["similarity"] >= 0.9
    assert plural["merged"] is True and plural["id"] == first["id"]
    assert other["merged"] is False
    assert p.count(user_id="ada") == 2
    # The merged memory keeps the newest wording.
    assert p.search("green tea", user_id="ada")[0]["text"] == "Ada prefers green teas in the morning"
    p.shutdown()


def test_dedupe_threshold_one_keeps_paraphrases(tmp_path: Path) -> None:
    p = provider(tmp_path, dedupe_threshold=1.0)
    p.initialize("s1", user_id="ada")
    p.add("Ada prefers green tea")
    p.add("Ada prefers green tea and biscuits")
    assert p.count() == 2
    p.shutdown()


def test_memories_are_scoped_by_user(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with MemoryManager(home=home, external=provider(tmp_path)) as manager:
        ada = manager.start_session("a1", user_id="ada")
        ada.handle_tool_call("vector_memory_write", {"action": "save", "content": "My locker code is 4711"})
        ada.end()
        bob = manager.start_session("b1", user_id="bob")
        leaked = [i.text for i in bob.prefetch("what is my locker code?").items if i.source == "local_vector"]
        assert leaked == []
        found = json.loads(bob.handle_tool_call("vector_memory_search", {"query": "locker code"}))
        assert found["success"] is True and found["results"] == []
        bob.end()
        ada2 = manager.start_session("a2", user_id="ada")
        assert any("4711" in i.text for i in ada2.prefetch("what is my locker code?").items if i.source == "local_vector")
        ada2.end()


def test_same_database_dedupes_per_user_only(tmp_path: Path) -> None:
    p = provider(tmp_path)
    p.initialize("s1", user_id="ada")
    p.add("I like jazz")
    p.initialize("s2", user_id="bob")
    assert p.add("I like jazz")["merged"] is False  # Bob's copy is his own
    assert p.count(user_id="ada") == 1 and p.count(user_id="bob") == 1
    p.shutdown()


def test_tools_save_search_forget(tmp_path: Path) -> None:
    p = provider(tmp_path)
    p.initialize("s1", user_id="ada")
    assert [t.name for t in p.tool_schemas()] == ["vector_memory_search", "vector_memory_write"]
    saved = json.loads(p.handle_tool_call("vector_memory_write", {"action": "save", "content": "Ada's bike is red"}))
    assert saved["success"] and isinstance(saved["id"], int)
    hits = json.loads(p.handle_tool_call("vector_memory_search", {"query": "red bike", "limit": 3}))["results"]
    assert hits[0]["id"] == saved["id"] and hits[0]["score"] > 0.3
    gone = json.loads(p.handle_tool_call("vector_memory_write", {"action": "forget", "id": saved["id"]}))
    assert gone == {"success": True, "forgotten": saved["id"]}
    assert json.loads(p.handle_tool_call("vector_memory_search", {"query": "red bike"}))["results"] == []
    again = json.loads(p.handle_tool_call("vector_memory_write", {"action": "forget", "id": saved["id"]}))
    assert again["success"] is False and "search first" in again["error"]
    for args, fragment in [
        ({"action": "save"}, "'content' is required"),
        ({"action": "forget", "id": "7"}, "'id' (an integer"),
        ({"action": "shout"}, "'action' must be"),
        ({"query": "x", "limit": 0}, None),
    ]:
        tool = "vector_memory_search" if "query" in args else "vector_memory_write"
        out = json.loads(p.handle_tool_call(tool, args))
        assert out["success"] is False
        if fragment:
            assert fragment in out["error"]
    p.shutdown()


def test_a_user_cannot_forget_another_users_memory(tmp_path: Path) -> None:
    p = provider(tmp_path)
    p.initialize("s1", user_id="ada")
    mem_id = p.add("Ada's secret recipe uses cardamom")["id"]
    p.initialize("s2", user_id="bob")
    out = json.loads(p.handle_tool_call("vector_memory_write", {"action": "forget", "id": mem_id}))
    assert out["success"] is False
    assert p.count(user_id="ada") == 1
    p.shutdown()


def test_builtin_memory_writes_are_mirrored(tmp_path: Path) -> None:
    p = provider(tmp_path)
    with MemoryManager(home=tmp_path / "home", external=p) as manager:
        s = manager.start_session("s1", user_id="ada")
        s.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Ada works as a glassblower"})
        manager.drain()
        hits = p.search("glassblower job", user_id="ada")
        assert hits and hits[0]["text"] == "Ada works as a glassblower"
        s.handle_tool_call("memory", {"action": "remove", "target": "user", "old_text": "glassblower"})
        manager.drain()
        assert p.search("glassblower job", user_id="ada") == []
        s.end()


class LlamaIndexHashing:
    """Built below as a real llama_index BaseEmbedding subclass."""


def _llama_index_embedding() -> Any:
    base = pytest.importorskip("llama_index.core.base.embeddings.base")

    class HashingLlamaEmbedding(base.BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return hashing_vector(query, 96)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return hashing_vector(query, 96)

        def _get_text_embedding(self, text: str) -> list[float]:
            return hashing_vector(text, 96)

    return HashingLlamaEmbedding(model_name="hashing-96")


@pytest.mark.parametrize("kind", ["callable", "langchain", "llama_index", "numpy"])
def test_every_kind_of_embedder(tmp_path: Path, kind: str) -> None:
    if kind == "callable":
        embedder: Any = lambda texts: [hashing_vector(t, 64) for t in texts]  # noqa: E731
    elif kind == "langchain":
        embedder = HashingEmbeddings(dims=64)
        from langchain_core.embeddings import Embeddings

        assert isinstance(embedder, Embeddings)
    elif kind == "llama_index":
        embedder = _llama_index_embedding()
    else:
        np = pytest.importorskip("numpy")
        embedder = lambda texts: np.array([hashing_vector(t, 64) for t in texts], dtype=np.float32)  # noqa: E731
    with MemoryManager(home=tmp_path / "home", external=LocalVectorProvider(embedder, path=tmp_path / "v.db")) as manager:
        s1 = manager.start_session("s1", user_id="ada")
        s1.sync_turn("I parked the car on level four", "Got it.")
        s1.end()
    with MemoryManager(home=tmp_path / "home", external=LocalVectorProvider(embedder, path=tmp_path / "v.db")) as manager:
        recall = manager.start_session("s2", user_id="ada").prefetch("where did I park the car?")
        assert any("level four" in i.text for i in recall.items if i.source == "local_vector"), recall.items


def test_changing_the_embedder_size_is_a_clear_error(tmp_path: Path) -> None:
    p = provider(tmp_path, HashingEmbedder(dims=64))
    p.initialize("s1", user_id="ada")
    p.add("something")
    p.shutdown()
    other = provider(tmp_path, HashingEmbedder(dims=32))
    with pytest.raises(ValueError, match="holds 64-dimensional vectors but the embedder .* gives 32"):
        other.initialize("s2", user_id="ada")


def test_bad_embedders_are_rejected_with_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="is not an embedder: pass a LangChain Embeddings"):
        LocalVectorProvider(object())
    p = LocalVectorProvider(lambda texts: [[1.0, float("nan")] for _ in texts], path=tmp_path / "v.db")
    with pytest.raises(ValueError, match="NaN"):
        p.initialize("s1")
    unconfigured = LocalVectorProvider()
    assert unconfigured.is_available() is False and "no embedder" in unconfigured.unavailable_reason
    assert [t.name for t in unconfigured.tool_schemas()] == ["vector_memory_search", "vector_memory_write"]


def test_database_goes_under_the_manager_home_by_default(tmp_path: Path) -> None:
    with MemoryManager(home=tmp_path / "home", external=LocalVectorProvider(HashingEmbedder())) as manager:
        manager.start_session("s1").sync_turn("hello there", "hi")
    assert (tmp_path / "home" / "local_vector.db").is_file()


def _parallel(call: Any, n: int = 12) -> list[str]:
    errors: list[str] = []

    def work(i: int) -> None:
        try:
            out = json.loads(call("vector_memory_write", {"action": "save", "content": f"fact number {i} about topic{i}"}))
            if not out.get("success"):
                errors.append(out.get("error", "?"))
        except Exception as exc:  # pragma: no cover - reported by the assertion
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return errors


def test_provider_is_safe_under_parallel_tool_calls(tmp_path: Path) -> None:
    p = provider(tmp_path)
    p.initialize("s1", user_id="ada")
    assert _parallel(p.handle_tool_call) == []
    assert p.count(user_id="ada") == 12
    p.shutdown()


def test_parallel_tool_calls_through_a_session(tmp_path: Path) -> None:
    p = provider(tmp_path)
    with MemoryManager(home=tmp_path / "home", external=p) as manager:
        session = manager.start_session("s1", user_id="ada")
        assert _parallel(session.handle_tool_call) == []
        assert p.count(user_id="ada") == 12


def test_driver_selection_explains_itself() -> None:
    driver = sqlite_driver()
    conn = driver.connect(":memory:")
    assert hasattr(conn, "enable_load_extension")
    conn.close()
    if not hasattr(sqlite3.connect(":memory:"), "enable_load_extension"):
        assert driver.__name__ != "sqlite3"  # this Python's sqlite3 cannot load extensions; a fallback was used


def test_an_embedding_service_outage_queues_writes_and_they_land_when_it_answers(
        embedding_server: Any, tmp_path: Path) -> None:
    """The embedder is a real service on loopback (MiniLM); while it cannot be reached, turns and mirrored notes
    wait in the outbox, and the first recall that works again sends them."""
    import httpx
    from servers import DelayProxy, free_port

    port = free_port()

    def embed(texts: list[str]) -> list[list[float]]:
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"input": texts}, timeout=10)
        answer.raise_for_status()
        return [item["embedding"] for item in answer.json()["data"]]

    provider = LocalVectorProvider(embed, min_score=0.2)
    with MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=20) as manager:
        session = manager.start_session("s1", user_id="ida")
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Ida grows tomatoes"})
        session.sync_turn("My sister lives in Porto", "Nice city.")
        assert manager.drain(20)
        entry = next(p for p in manager.status()["providers"] if p["name"] == "local_vector")
        assert entry["state"] == "degraded" and entry["writes"]["pending"] == 2
        with DelayProxy(embedding_server.port, delay=0.0, port=port):  # the service answers again
            session.prefetch("Where does my sister live?")
            entry = next(p for p in manager.status()["providers"] if p["name"] == "local_vector")
            assert entry["state"] == "active"
            session.end()  # sends whatever the background replay has not sent yet
            assert provider.count(user_id="ida") == 2
            assert any("Porto" in hit["text"] for hit in provider.search("Where does my sister live?", user_id="ida"))
