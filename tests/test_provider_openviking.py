"""OpenVikingProvider against a real OpenViking 0.5.2 server (local storage, no VLM, MiniLM embeddings on loopback).

The server tests skip with the reason when the server venv is missing (``bash tools/install_servers.sh``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")

from servers import OpenVikingServer, ServerScenarios, name_for

from ironmem import ConfigError, MemoryManager
from ironmem.core.budget import DEFAULT_TOOL_BUDGET, measure_tools
from ironmem.core.config import load_config, manager_from_config
from ironmem.providers.openviking import OpenVikingProvider, OpenVikingSettings
from ironmem.testing.provider_contract import ProviderContract


# --------------------------------------------------------------------------------------------------
# Without a server
# --------------------------------------------------------------------------------------------------
def test_article_keys_map_or_say_why_and_hermes_keys_map() -> None:
    s = OpenVikingSettings.model_validate({"endpoint": "http://127.0.0.1:1933/", "agent": "hermes",
                                           "collection": "notes"})
    assert (s.url, s.actor_peer_id, s.folder) == ("http://127.0.0.1:1933", "hermes", "notes")
    with pytest.raises(ValueError, match=r"'db_path' does not exist in OpenViking 0\.5\.2.*storage\.workspace"):
        OpenVikingSettings.model_validate({"db_path": "~/.ironmem/viking.db"})
    with pytest.raises(ValueError, match=r"'embedding_model' does not exist.*embedding\.dense"):
        OpenVikingSettings.model_validate({"embedding_model": "all-MiniLM-L6-v2"})
    for bad, needle in (({"collection": "../x"}, "plain folder"), ({"url": "1933"}, "http"),
                        ({"memory_root": "/tmp"}, "viking://"), ({"endpoint": "http://a:1", "url": "http://b:1"},
                                                                 "same setting")):
        with pytest.raises(ValueError, match=needle):
            OpenVikingSettings.model_validate(bad)


def test_config_in_the_article_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENVIKING_URL", "http://127.0.0.1:9")
    path = tmp_path / "config.yaml"
    path.write_text("memory:\n  provider: openviking\nopenviking:\n  collection: agent_notes\n"
                    "  tools: [viking_search, viking_remember]\n")
    config = load_config(path)
    assert config.provider_settings.url == "http://127.0.0.1:9" and config.provider_settings.folder == "agent_notes"
    manager = manager_from_config(path)
    try:
        ours = [s.name for s in manager.tool_schemas() if s.provider == "openviking"]
        assert ours == ["viking_search", "viking_remember"]
    finally:
        manager.close()
    path.write_text("memory:\n  provider: openviking\nopenviking:\n  db_path: ./viking.db\n  embedding_model: x\n")
    with pytest.raises(ConfigError, match="openviking.*db_path.*does not exist"):
        load_config(path)


def test_all_five_tools_fit_the_default_budget() -> None:
    tools = OpenVikingProvider().tool_schemas()
    assert [t.name for t in tools] == ["viking_search", "viking_read", "viking_browse", "viking_remember",
                                      "viking_forget"]
    assert measure_tools(tools, DEFAULT_TOOL_BUDGET).fits


# --------------------------------------------------------------------------------------------------
# Against the real server
# --------------------------------------------------------------------------------------------------
class TestOpenVikingContract(ProviderContract):
    @pytest.fixture(autouse=True)
    def _server(self, openviking_server: OpenVikingServer) -> None:
        self.server = openviking_server

    def make_provider(self, tmp_path: Path) -> OpenVikingProvider:
        return OpenVikingProvider(url=self.server.url, folder=name_for(tmp_path))


class TestOpenVikingScenarios(ServerScenarios):
    server_class = OpenVikingServer
    server_fixture = "openviking_server"
    search_tool = "viking_search"
    tools = frozenset({"viking_search", "viking_remember"})
    secret = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2

    def make(self, url: str, tmp_path: Path, **options: Any) -> OpenVikingProvider:
        return OpenVikingProvider(url=url, folder=name_for(tmp_path), **options)

    def stored_texts(self, provider: OpenVikingProvider, query: str) -> list[str]:
        return [hit["text"] for hit in provider.find(query, session_id="s2", limit=10)]


def test_tools_against_the_server(openviking_server: OpenVikingServer, tmp_path: Path) -> None:
    provider = OpenVikingProvider(url=openviking_server.url, folder=name_for(tmp_path))
    with MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=30) as manager:
        session = manager.start_session("s1", user_id="ada")
        stored = json.loads(session.handle_tool_call("viking_remember", {"content": "Ada's sister Grace lives in Lisbon"}))
        assert stored["success"] and stored["uri"].startswith(f"viking://user/ada/memories/{name_for(tmp_path)}/")
        session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Ada is vegetarian"})
        manager.drain()
        found = json.loads(session.handle_tool_call("viking_search", {"query": "Where does Grace live?"}))
        assert found["success"] and found["results"][0]["uri"] == stored["uri"]
        read = json.loads(session.handle_tool_call("viking_read", {"uri": stored["uri"]}))
        assert read["content"] == "Ada's sister Grace lives in Lisbon"
        listing = json.loads(session.handle_tool_call("viking_browse", {}))
        assert {i["uri"].rsplit("/", 1)[-1] for i in listing["items"]} >= {"facts", "profile"}
        assert any("vegetarian" in h["text"] for h in provider.find("What does Ada eat?", session_id="s1"))
        other = json.loads(session.handle_tool_call("viking_read", {"uri": "viking://user/bob/memories/x.md"}))
        assert other["success"] is False and "another user" in other["error"]
        outside = json.loads(session.handle_tool_call("viking_forget", {"uri": "viking://resources/readme.md"}))
        assert outside["success"] is False
        gone = json.loads(session.handle_tool_call("viking_forget", {"uri": stored["uri"]}))
        assert gone == {"success": True, "forgotten": stored["uri"]}
        after = json.loads(session.handle_tool_call("viking_search", {"query": "Where does Grace live?"}))
        assert all(h["uri"] != stored["uri"] for h in after["results"])
        session.end()
        assert manager.health("openviking").state == "active"
        assert provider.health()["ok"] is True


def test_session_commit_sends_the_turns_to_an_openviking_session(openviking_server: OpenVikingServer,
                                                                 tmp_path: Path) -> None:
    provider = OpenVikingProvider(url=openviking_server.url, folder=name_for(tmp_path), session_commit=True)
    provider.initialize("s1", user_id="ivy")
    provider.sync_turn("I am training for the Berlin marathon", "Good luck!", session_id="s1")
    ov_session = provider._sessions["s1"]
    provider.on_session_end("s1")  # commit: archived; extraction itself needs a VLM on the server
    import httpx

    detail = httpx.get(f"{openviking_server.url}/api/v1/sessions/{ov_session}",
                       headers={"X-OpenViking-User": "ivy"}, timeout=30).json()
    assert detail["status"] == "ok"
    provider.shutdown()
