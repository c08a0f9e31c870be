"""Rule 1 counts tokens: the external provider's tool schemas fit a token budget, and config picks its tools."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ironmem import ConfigError, MemoryManager, MemoryProvider, ProviderConflictError, ToolSchema
from ironmem.core import budget as budget_module
from ironmem.core.budget import (
    DEFAULT_TOOL_BUDGET,
    ESTIMATE_BYTES_PER_TOKEN,
    measure_tools,
    select_tools,
    tool_tokens,
)
from ironmem.core.config import manager_from_config


def schema(name: str, description: str = "Do a thing.", words: int = 0) -> ToolSchema:
    return ToolSchema(name, description + " detail" * words,
                      {"type": "object", "properties": {"text": {"type": "string", "description": "The text."}}})


class Tools(MemoryProvider):
    name = "kit"

    def __init__(self, schemas: list[ToolSchema]) -> None:
        self.schemas = schemas
        self.calls: list[str] = []

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        pass

    def tool_schemas(self) -> list[ToolSchema]:
        return list(self.schemas)

    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        return ["kit remembers the harbour"]

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        self.calls.append(name)
        return json.dumps({"success": True, "tool": name})


@pytest.fixture
def no_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The encoding is not in tiktoken's cache: the budget must estimate, and say so."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache"))
    budget_module._loaded.clear()
    yield
    budget_module._loaded.clear()


def test_exact_counts_match_tiktoken_on_the_wire_format() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    budget_module._loaded.clear()
    tools = [schema("kit_a"), schema("kit_b", words=30)]
    counts, method, exact = tool_tokens(tools)
    if not exact:
        pytest.skip(f"o200k_base is not cached here: {method}")
    enc = tiktoken.get_encoding("o200k_base")
    wire = [json.dumps(t.to_openai(), ensure_ascii=False, separators=(",", ":")) for t in tools]
    assert counts == [len(enc.encode(w)) for w in wire]
    assert "tiktoken o200k_base" in method


def test_without_the_encoding_the_estimate_is_conservative_and_says_so(no_encoding: None) -> None:
    from ironmem.providers.hindsight import HindsightProvider
    from ironmem.providers.mem0 import Mem0Provider
    from ironmem.providers.openviking import OpenVikingProvider

    cjk = ToolSchema("kit_cjk", "搜索长期记忆中关于用户的事实和过去的对话，例如爬山和旅行。", {"type": "object", "properties": {}})
    groups = [HindsightProvider(reflect=True).tool_schemas(), OpenVikingProvider().tool_schemas(),
              Mem0Provider().tool_schemas(), [cjk]]
    for tools in groups:
        counts, method, exact = tool_tokens(tools)
        assert not exact and f"UTF-8 bytes / {ESTIMATE_BYTES_PER_TOKEN}" in method and "not in the local cache" in method
        wire = [json.dumps(t.to_openai(), ensure_ascii=False, separators=(",", ":")).encode() for t in tools]
        assert counts == [math.ceil(len(w) / ESTIMATE_BYTES_PER_TOKEN) for w in wire]
        # every shipped provider fits the default budget even when estimated
        assert measure_tools(tools, DEFAULT_TOOL_BUDGET).fits
    tiktoken = pytest.importorskip("tiktoken")
    try:
        enc = tiktoken.get_encoding("o200k_base")  # the test's own environment may have it
    except Exception:
        return
    for tools in groups:
        estimated, _, _ = tool_tokens(tools)
        real = [len(enc.encode(json.dumps(t.to_openai(), ensure_ascii=False, separators=(",", ":")))) for t in tools]
        assert all(e >= r for e, r in zip(estimated, real)), (estimated, real)


def test_over_the_budget_is_refused_with_the_costs_and_the_fix(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tools = [schema(f"kit_{i}", words=40) for i in range(6)]
    with MemoryManager(home=tmp_path / "a", tool_budget=300) as manager:
        assert manager.add_provider(Tools(tools)) is False
        assert manager.external is None
    assert "over the tool budget" in caplog.text and "kit_0" in caplog.text and "tools: [...]" in caplog.text
    with MemoryManager(home=tmp_path / "b", tool_budget=300, strict=True) as manager:
        with pytest.raises(ProviderConflictError, match="memory.tool_budget"):
            manager.add_provider(Tools(tools))


def test_choosing_tools_makes_it_fit_and_hidden_tools_are_not_routed(tmp_path: Path) -> None:
    tools = [schema(f"kit_{i}", words=40) for i in range(6)]
    provider = Tools(tools)
    with MemoryManager(home=tmp_path, tool_budget=300) as manager:
        assert manager.add_provider(provider, tools=["kit_2", "kit_0"]) is True
        assert [s.name for s in manager.tool_schemas() if s.provider == "kit"] == ["kit_0", "kit_2"]
        status = manager.status()["tool_budget"]
        assert status["limit"] == 300 and status["fits"] and list(status["tools"]) == ["kit_0", "kit_2"]
        assert status["used"] == sum(status["tools"].values()) and status["hidden"] == ["kit_1", "kit_3", "kit_4", "kit_5"]
        session = manager.start_session("s")
        assert json.loads(session.handle_tool_call("kit_0", {"text": "x"}))["success"] is True
        hidden = json.loads(session.handle_tool_call("kit_1", {"text": "x"}))
        assert hidden["success"] is False and provider.calls == ["kit_0"]
        session.end()


def test_no_tools_keeps_recall(tmp_path: Path) -> None:
    with MemoryManager(home=tmp_path, tool_budget=0) as manager:
        assert manager.add_provider(Tools([schema("kit_a")]), tools=[]) is True
        assert [s.provider for s in manager.tool_schemas()] == ["builtin", "builtin"]
        session = manager.start_session("s")
        assert "harbour" in session.prefetch("where?").fenced()
        session.end()


def test_unknown_tool_names_are_a_config_error(tmp_path: Path) -> None:
    with MemoryManager(home=tmp_path) as manager:
        with pytest.raises(ConfigError, match=r"no tool\(s\) \['kit_zz'\]; its tools are \['kit_a'\]"):
            manager.add_provider(Tools([schema("kit_a")]), tools=["kit_zz"])
        assert manager.external is None
    with pytest.raises(ValueError, match="list of tool names"):
        select_tools([schema("kit_a")], "kit_a", provider="kit")  # type: ignore[arg-type]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="tool_budget"):
            MemoryManager(home=tmp_path, tool_budget=bad)  # type: ignore[arg-type]


def test_config_budget_and_tools_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hindsight_client")
    path = tmp_path / "config.yaml"
    path.write_text("memory:\n  home: mem\n  tool_budget: 150\n  provider: hindsight\n"
                    "hindsight:\n  api_url: http://127.0.0.1:9\n  reflect: true\n")
    with pytest.raises(ConfigError, match="over memory.tool_budget"):
        manager_from_config(path)
    path.write_text("memory:\n  home: mem\n  tool_budget: 150\n  provider: hindsight\n"
                    "hindsight:\n  api_url: http://127.0.0.1:9\n  reflect: true\n  tools: hindsight_recall\n")
    manager = manager_from_config(path)
    try:
        assert [s.name for s in manager.tool_schemas() if s.provider == "hindsight"] == ["hindsight_recall"]
        assert manager.tool_budget == 150
    finally:
        manager.close()
    monkeypatch.setenv("IRONMEM_MEMORY_TOOL_BUDGET", "40")
    with pytest.raises(ConfigError, match="over memory.tool_budget"):
        manager_from_config(path)
    monkeypatch.delenv("IRONMEM_MEMORY_TOOL_BUDGET")
    path.write_text("memory:\n  provider: hindsight\nhindsight:\n  tools: {a: 1}\n")
    with pytest.raises(ConfigError, match=r"hindsight.tools: must be a list"):
        manager_from_config(path)


def test_cli_tokens_shows_the_budget(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("hindsight_client")
    from ironmem.cli import main  # main() restores logging afterwards (the app alone would not)

    monkeypatch.setenv("COLUMNS", "200")
    path = tmp_path / "config.yaml"
    (tmp_path / "mem").mkdir()  # the CLI never creates a home it inspects
    path.write_text("memory:\n  home: mem\n  provider: hindsight\nhindsight:\n  api_url: http://127.0.0.1:9\n"
                    "  tools: [hindsight_recall]\n")

    def run(*args: str) -> str:
        capfd.readouterr()
        try:
            main(["--config", str(path), *args])
        except SystemExit as exc:
            assert not exc.code, capfd.readouterr()
        return capfd.readouterr().out

    budget = json.loads(run("tokens", "--json"))["tool_budget"]
    assert budget["limit"] == DEFAULT_TOOL_BUDGET and list(budget["tools"]) == ["hindsight_recall"]
    assert budget["hidden"] == ["hindsight_retain"] and 0 < budget["used"] < DEFAULT_TOOL_BUDGET
    table = run("tokens")
    assert "external tool budget:" in table and f"of {DEFAULT_TOOL_BUDGET} tokens" in table
    assert "external tool budget:" in run("status")
