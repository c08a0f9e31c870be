"""Mem0Provider with the real mem0 library: local Qdrant store on disk, offline embedders, infer=False, no network."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mem0")

from ironmem import ConfigError, MemoryManager
from ironmem.providers.mem0 import Mem0Provider, Mem0Settings
from ironmem.testing.embeddings import HashingEmbedder, HashingEmbeddings


@pytest.fixture(autouse=True)
def no_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # Proves that local mode with infer=False needs no OpenAI key at all.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.delenv("MEM0_API_KEY", raising=False)


def make(tmp_path: Path, embedder: Any = None, **kwargs: Any) -> Mem0Provider:
    return Mem0Provider(embedder=embedder or HashingEmbeddings(dims=64), path=tmp_path / "mem0", **kwargs)


def mem0_items(recall: Any) -> list[str]:
    return [item.text for item in recall.items if item.source == "mem0"]


def test_write_in_session_one_recall_in_session_two_through_prefetch(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with MemoryManager(home=home, external=make(tmp_path).open()) as manager:
        s1 = manager.start_session("s1", user_id="ada")
        s1.sync_turn("My dog is called Biscuit and he is a beagle", "What a lovely name!")
        added = json.loads(s1.handle_tool_call("mem0_add", {"content": "Ada is training for the Berlin marathon"}))
        assert added["success"] is True and added["results"][0]["event"] == "ADD"
        s1.end()
        assert manager.status()["providers"][1] == {
            "name": "mem0", "kind": "external", "state": "active", "tools": ["mem0_search", "mem0_add", "mem0_forget"],
            "writes": {"pending": 0},
        }
    # The store is on disk: Qdrant's local folder and mem0's history database.
    assert (tmp_path / "mem0" / "qdrant").is_dir() and (tmp_path / "mem0" / "history.db").is_file()
    with MemoryManager(home=home, external=make(tmp_path).open()) as manager:
        s2 = manager.start_session("s2", user_id="ada")
        recall = s2.prefetch("What is my dog called?")
        assert any("Biscuit" in text for text in mem0_items(recall)), recall.items
        assert "Biscuit" in recall.fenced()
        marathon = mem0_items(s2.prefetch("which marathon am I training for?"))
        assert marathon and "Berlin" in marathon[0]
        s2.end()


_NETWORK_EVENTS: list[tuple[str, Any]] = []
_WATCHING = {"on": False}


def _audit(event: str, args: Any) -> None:
    if _WATCHING["on"] and event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
        _NETWORK_EVENTS.append((event, args))


sys.addaudithook(_audit)  # audit hooks cannot be removed; this one only records while a test watches


def test_local_mode_makes_no_network_call(tmp_path: Path) -> None:
    _NETWORK_EVENTS.clear()
    _WATCHING["on"] = True
    try:
        with MemoryManager(home=tmp_path / "home", external=make(tmp_path).open()) as manager:
            s = manager.start_session("s1", user_id="ada")
            s.sync_turn("I grow tomatoes on the balcony", "Lovely.")
            s.handle_tool_call("mem0_add", {"content": "Ada grows basil too"})
            manager.drain()
            s.prefetch("what do I grow on the balcony?")
            s.handle_tool_call("mem0_search", {"query": "basil"})
            s.end()
    finally:
        _WATCHING["on"] = False
    assert _NETWORK_EVENTS == []


def test_infer_false_needs_no_llm_and_the_stub_refuses_loudly(tmp_path: Path) -> None:
    provider = make(tmp_path).open()
    memory = provider._backend.memory  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="infer=False and no llm configured"):
        memory.llm.generate_response(messages=[{"role": "user", "content": "hi"}])
    # The client mem0's constructor insisted on was never used: the stub replaced it.
    assert type(memory.llm).__name__ == "_InferDisabledLLM"
    provider.shutdown()


def test_telemetry_is_off(tmp_path: Path) -> None:
    import mem0.memory.main as mem0_main
    import mem0.memory.telemetry as mem0_telemetry

    provider = make(tmp_path).open()
    assert mem0_telemetry.MEM0_TELEMETRY is False and mem0_main.MEM0_TELEMETRY is False
    assert os.environ.get("MEM0_TELEMETRY", "").lower() in ("false", "0", "no")
    provider.shutdown()


def test_langchain_embeddings_go_through_mem0s_langchain_embedder(tmp_path: Path) -> None:
    from langchain_core.embeddings import Embeddings

    lc = HashingEmbeddings(dims=64)
    assert isinstance(lc, Embeddings)
    provider = make(tmp_path, lc).open()
    assert type(provider._backend.memory.embedding_model).__module__ == "mem0.embeddings.langchain"  # type: ignore[union-attr]
    provider.shutdown()


def test_callable_embedder_goes_through_ironmems_adapter(tmp_path: Path) -> None:
    embedder = HashingEmbedder(dims=48)
    home = tmp_path / "home"
    with MemoryManager(home=home, external=make(tmp_path, embedder).open()) as manager:
        memory = manager.external._backend.memory  # type: ignore[union-attr]
        assert type(memory.embedding_model).__name__ == "_Mem0Embedding"
        s1 = manager.start_session("s1", user_id="ada")
        s1.sync_turn("I keep the spare key under the blue flowerpot", "Noted.")
        s1.end()
    assert embedder.calls > 0
    with MemoryManager(home=home, external=make(tmp_path, embedder).open()) as manager:
        recall = manager.start_session("s2", user_id="ada").prefetch("where is the spare key?")
        assert any("flowerpot" in t for t in mem0_items(recall)), recall.items


def test_user_scoping_search_and_forget(tmp_path: Path) -> None:
    provider = make(tmp_path).open()
    provider.initialize("a1", user_id="ada")
    out = json.loads(provider.handle_tool_call("mem0_add", {"content": "Ada's locker code is 4711"}))
    mem_id = out["results"][0]["id"]
    hits = json.loads(provider.handle_tool_call("mem0_search", {"query": "locker code"}))
    assert hits["count"] == 1 and hits["results"][0]["id"] == mem_id
    provider.initialize("b1", user_id="bob")
    assert json.loads(provider.handle_tool_call("mem0_search", {"query": "locker code"}))["results"] == []
    assert provider.prefetch("what is my locker code?", session_id="b1") == []
    refused = json.loads(provider.handle_tool_call("mem0_forget", {"memory_id": mem_id}))
    assert refused["success"] is False  # Bob cannot delete Ada's memory
    assert provider.prefetch("what is my locker code?", session_id="a1") == ["Ada's locker code is 4711"]
    provider.initialize("a2", user_id="ada")
    assert json.loads(provider.handle_tool_call("mem0_forget", {"memory_id": mem_id})) == {"success": True, "forgotten": mem_id}
    assert provider.prefetch("what is my locker code?", session_id="a2") == []
    for name, args, fragment in [
        ("mem0_search", {}, "'query' is required"),
        ("mem0_search", {"query": "x", "limit": 99}, "'limit' must be"),
        ("mem0_add", {"content": "  "}, "'content' is required"),
        ("mem0_forget", {}, "'memory_id' is required"),
        ("mem0_nope", {}, "unknown tool"),
    ]:
        result = json.loads(provider.handle_tool_call(name, args))
        assert result["success"] is False and fragment in result["error"], (name, result)
    provider.shutdown()
    provider.shutdown()  # idempotent


def test_builtin_writes_are_mirrored_and_removals_follow(tmp_path: Path) -> None:
    provider = make(tmp_path).open()
    with MemoryManager(home=tmp_path / "home", external=provider) as manager:
        s = manager.start_session("s1", user_id="ada")
        s.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Ada works as a glassblower"})
        manager.drain()
        assert [h["memory"] for h in provider.search("glassblower job", user_id="ada")] == ["Ada works as a glassblower"]
        s.handle_tool_call("memory", {"action": "remove", "target": "user", "old_text": "glassblower"})
        manager.drain()
        assert provider.search("glassblower job", user_id="ada") == []
        s.end()


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="mem0.llm is required when mem0.infer is true"):
        Mem0Settings(infer=True)
    with pytest.raises(ValueError, match="mem0.api_key is required"):
        Mem0Settings(mode="hosted")
    assert Mem0Settings(api_key="k").hosted is True
    assert Mem0Settings(api_key="k", mode="local").hosted is False
    with pytest.raises(ValueError, match="infer=True needs llm"):
        Mem0Provider(infer=True)


def test_constructor_is_cheap_and_reports_what_is_missing() -> None:
    provider = Mem0Provider()  # e.g. what TokenReport does to read the tool schemas
    assert [t.name for t in provider.tool_schemas()] == ["mem0_search", "mem0_add", "mem0_forget"]
    assert provider.is_available() is False
    assert "OPENAI_API_KEY" in provider.unavailable_reason and "embedder" in provider.unavailable_reason


def test_from_config_opens_the_store_under_home(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(textwrap.dedent("""
        memory:
          home: mem
          provider: mem0
        mem0:
          embedder: ironmem.testing.embeddings:HashingEmbedder
          embedder_options: {dims: 32}
          top_k: 2
    """))
    with MemoryManager.from_config(config) as manager:
        provider = manager.external
        assert isinstance(provider, Mem0Provider) and provider._backend is not None  # opened eagerly
        assert provider.path == tmp_path / "mem" / "mem0" and provider.top_k == 2
        s = manager.start_session("s1", user_id="ada")
        s.sync_turn("My favourite mountain is the Matterhorn", "Great choice.")
        s.end()
    with MemoryManager.from_config(config) as manager:
        recall = manager.start_session("s2", user_id="ada").prefetch("what is my favourite mountain?")
        assert any("Matterhorn" in t for t in mem0_items(recall))


def test_from_config_bad_embedder_dict(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mem0: {embedder: {config: {model: x}}}\n")
    with pytest.raises(ConfigError, match="mem0.embedder: mem0's embedder config needs a 'provider' key"):
        MemoryManager.from_config(config)


@pytest.mark.skipif(not os.environ.get("IRONMEM_TEST_MEM0_API_KEY"),
                    reason="hosted Mem0 needs the network and IRONMEM_TEST_MEM0_API_KEY")
def test_hosted_client_round_trip(tmp_path: Path) -> None:  # pragma: no cover - needs the Mem0 platform
    provider = Mem0Provider(api_key=os.environ["IRONMEM_TEST_MEM0_API_KEY"]).open()
    provider.initialize("hosted-s1", user_id="ironmem-test-user")
    added = json.loads(provider.handle_tool_call("mem0_add", {"content": "ironmem hosted test fact: teal"}))
    assert added["success"] is True
    provider.shutdown()


def test_open_without_a_path_uses_the_memory_home(tmp_path: Path, monkeypatch) -> None:
    """``Mem0Provider(embedder=...).open()``, as the docs write it, works: the store goes under the home."""
    monkeypatch.setenv("IRONMEM_HOME", str(tmp_path / "home"))
    provider = Mem0Provider(embedder=HashingEmbeddings(dims=64)).open()
    try:
        assert provider.path == tmp_path / "home" / "mem0" and provider.path.is_dir()
    finally:
        provider.shutdown()
    explicit = Mem0Provider(embedder=HashingEmbeddings(dims=64)).open(home=tmp_path / "other")
    try:
        assert explicit.path == tmp_path / "other" / "mem0"
    finally:
        explicit.shutdown()


def test_a_process_that_never_closes_mem0_exits_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "from ironmem import MemoryManager\n"
        "from ironmem.providers.mem0 import Mem0Provider\n"
        "from ironmem.testing.embeddings import HashingEmbeddings\n"
        f"m = MemoryManager(home={str(tmp_path / 'home')!r}, external=Mem0Provider(embedder=HashingEmbeddings(dims=64), "
        f"path={str(tmp_path / 'mem0')!r}).open())\n"
        "s = m.start_session('s1')\n"
        "s.handle_tool_call('mem0_add', {'content': 'Ada likes tea'})\n"
        "print('done')\n"  # no close(), no end(): exit with everything open
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env={**__import__("os").environ, "MEM0_TELEMETRY": "False"})
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
