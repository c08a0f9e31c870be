"""HindsightProvider against a real Hindsight server (embedded PostgreSQL, no LLM, MiniLM embeddings on loopback).

The server tests skip with the reason when the server venv is missing (``bash tools/install_servers.sh``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hindsight_client")

from servers import HindsightServer, ServerScenarios, name_for

from ironmem import ConfigError, MemoryManager
from ironmem.core.budget import DEFAULT_TOOL_BUDGET, measure_tools
from ironmem.core.config import load_config, manager_from_config
from ironmem.providers.hindsight import HindsightProvider, HindsightSettings
from ironmem.testing.provider_contract import ProviderContract


# --------------------------------------------------------------------------------------------------
# Without a server: settings, config, tools
# --------------------------------------------------------------------------------------------------
def test_hermes_keys_map_and_unsupported_ones_say_why(caplog: pytest.LogCaptureFixture) -> None:
    s = HindsightSettings.model_validate({"recall_types": "world, observation", "recall_tags": "a,b",
                                          "bank_id_template": "hermes-{user}", "recall_prefetch_method": "recall"})
    assert s.recall_types == ["world", "observation"] and s.recall_tags == ["a", "b"]
    with caplog.at_level(logging.WARNING):
        HindsightSettings.model_validate({"recall_indicator": False})
    assert "recall_indicator is ignored" in caplog.text
    for bad, needle in (({"llm_provider": "openai"}, "HINDSIGHT_API_LLM_PROVIDER"),
                        ({"mode": "local_embedded"}, "local_external"),
                        ({"recall_prefetch_method": "reflect"}, "needs an LLM"),
                        ({"recall_types": "facts"}, "recall_types"),
                        ({"bank_id_template": "{profile}"}, "bank_id_template"),
                        ({"api_url": "localhost:8888"}, r"http\(s\) URL")):
        with pytest.raises(ValueError, match=needle):
            HindsightSettings.model_validate(bad)


def test_bank_per_user_and_empty_placeholders_collapse() -> None:
    p = HindsightProvider()
    assert p.bank_for("alice") == "ironmem-alice"
    assert p.bank_for("") == "ironmem"
    assert p.bank_for("a/b") != p.bank_for("a_b")  # odd ids keep a hash, so they stay distinct
    assert HindsightProvider(bank_id_template="{bank_id}-{session}").bank_for("u", "s1") == "ironmem-s1"


def test_tools_fit_the_budget_and_memory_mode_controls_them() -> None:
    assert [t.name for t in HindsightProvider().tool_schemas()] == ["hindsight_retain", "hindsight_recall"]
    with_reflect = HindsightProvider(reflect=True).tool_schemas()
    assert measure_tools(with_reflect, DEFAULT_TOOL_BUDGET).fits
    assert HindsightProvider(memory_mode="context").tool_schemas() == []


def test_config_section_in_the_article_and_hermes_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HINDSIGHT_API_KEY", "hs-secret-key")
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory:\n  home: mem\n  provider: hindsight\n"
        "hindsight:\n  api_url: http://127.0.0.1:9\n  bank_id: team\n  recall_types: world,experience\n"
        "  tools: [hindsight_recall]\n"
    )
    config = load_config(path)
    assert config.provider == "hindsight" and config.provider_tools == ["hindsight_recall"]
    assert config.provider_settings.api_key.get_secret_value() == "hs-secret-key"
    manager = manager_from_config(path)  # no request is made: the server may be down
    try:
        assert [s.name for s in manager.tool_schemas() if s.provider == "hindsight"] == ["hindsight_recall"]
        assert manager.status()["tool_budget"]["hidden"] == ["hindsight_retain"]
    finally:
        manager.close()
    path.write_text("memory:\n  provider: hindsight\nhindsight:\n  tools: [hindsight_forget]\n")
    with pytest.raises(ConfigError, match="no tool"):
        manager_from_config(path).close()


# --------------------------------------------------------------------------------------------------
# Against the real server
# --------------------------------------------------------------------------------------------------
class TestHindsightContract(ProviderContract):
    @pytest.fixture(autouse=True)
    def _server(self, hindsight_server: HindsightServer) -> None:
        self.server = hindsight_server

    def make_provider(self, tmp_path: Path) -> HindsightProvider:
        return HindsightProvider(api_url=self.server.url, bank_id=name_for(tmp_path))


class TestHindsightScenarios(ServerScenarios):
    server_class = HindsightServer
    server_fixture = "hindsight_server"
    search_tool = "hindsight_recall"
    tools = frozenset({"hindsight_recall", "hindsight_retain"})
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2

    def make(self, url: str, tmp_path: Path, **options: Any) -> HindsightProvider:
        return HindsightProvider(api_url=url, bank_id=name_for(tmp_path), **options)

    def stored_texts(self, provider: HindsightProvider, query: str) -> list[str]:
        return [fact["text"] for fact in provider.recall(query, session_id="s2", limit=10)]


def test_retain_recall_tools_and_mirrored_writes(hindsight_server: HindsightServer, tmp_path: Path) -> None:
    provider = HindsightProvider(api_url=hindsight_server.url, bank_id=name_for(tmp_path))
    with MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=30) as manager:
        session = manager.start_session("s1", user_id="ada")
        stored = json.loads(session.handle_tool_call(
            "hindsight_retain", {"content": "Ada's sister Grace lives in Lisbon", "tags": ["family"]}))
        assert stored == {"success": True, "retained": True, "bank_id": f"{name_for(tmp_path)}-ada"}
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Ada is vegetarian"})
        manager.drain()
        found = json.loads(session.handle_tool_call("hindsight_recall", {"query": "Where does Grace live?"}))
        assert found["success"] and any("Lisbon" in r["text"] for r in found["results"])
        assert "family" in next(r for r in found["results"] if "Lisbon" in r["text"])["tags"]
        mirrored = provider.recall("What does Ada eat?", session_id="s1")
        assert any("vegetarian" in f["text"] for f in mirrored)
        bad = json.loads(session.handle_tool_call("hindsight_retain", {"content": "  "}))
        assert bad["success"] is False and "content" in bad["error"]
        session.end()
        assert manager.health("hindsight").state == "active"
        assert provider.health()["ok"] is True


def test_every_n_turns_buffers_and_session_end_flushes(hindsight_server: HindsightServer, tmp_path: Path) -> None:
    provider = HindsightProvider(api_url=hindsight_server.url, bank_id=name_for(tmp_path), retain_every_n_turns=3)
    provider.initialize("s1", user_id="bo")
    provider.sync_turn("My boat is called Petrel", "Nice name.", session_id="s1")
    assert provider.recall("What is my boat called?", session_id="s1") == []
    provider.on_session_end("s1")
    provider.initialize("s2", user_id="bo")
    assert any("Petrel" in f["text"] for f in provider.recall("What is my boat called?", session_id="s2"))
    provider.shutdown()
    provider.shutdown()


async def test_async_twins_run_on_the_callers_loop(hindsight_server: HindsightServer, tmp_path: Path) -> None:
    provider = HindsightProvider(api_url=hindsight_server.url, bank_id=name_for(tmp_path))
    provider.initialize("s1", user_id="cy")
    await provider.async_turn("I keep bees in my garden in Ghent", "Lovely.", session_id="s1")
    recalled = await provider.aprefetch("Where do I keep bees?", session_id="s1")
    assert any("bees" in text for text in recalled)
    assert json.loads(await provider.ahandle_tool_call("hindsight_recall", {"query": "bees"}))["success"]
    provider.shutdown()
