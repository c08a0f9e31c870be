"""Rule 1 counts tokens: the external provider's tool schemas fit a token budget, and config picks its tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ironmem import ConfigError, MemoryManager, MemoryProvider, ProviderConflictError, ToolSchema
from ironmem.core.budget import (
    DEFAULT_TOOL_BUDGET,
    exact_tool_tokens,
    measure_tools,
    select_tools,
    tool_tokens,
)
from ironmem.core.config import manager_from_config
from ironmem.core.token_estimate import estimate_tokens

REPO = Path(__file__).resolve().parent.parent


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


SHARED_CACHE = Path(__file__).resolve().parents[2] / "shared" / "tiktoken-cache"


def _encoding_dir() -> Path | None:
    """A folder holding o200k_base (this process's TIKTOKEN_CACHE_DIR or ../shared/tiktoken-cache), else None."""
    from ironmem.analysis.tokens import tiktoken_cache_filename

    for folder in (os.environ.get("TIKTOKEN_CACHE_DIR"), str(SHARED_CACHE)):
        if folder and (Path(folder) / tiktoken_cache_filename("o200k_base")).is_file():
            return Path(folder)
    return None


def test_exact_figures_match_tiktoken_on_the_wire_format() -> None:
    tiktoken = pytest.importorskip("tiktoken")
    tools = [schema("kit_a"), schema("kit_b", words=30)]
    exact, why = exact_tool_tokens(tools)
    if exact is None:
        pytest.skip(f"o200k_base is not cached here: {why}")
    enc = tiktoken.get_encoding("o200k_base")
    wire = [json.dumps(t.to_openai(), ensure_ascii=False, separators=(",", ":")) for t in tools]
    assert exact == [len(enc.encode(w)) for w in wire]
    budget = measure_tools(tools, 1000)
    assert budget.exact_used == sum(exact) and [t.exact for t in budget.tools] == exact
    # the decision's count is the offline estimate of the same bytes, whatever the cache holds
    assert tool_tokens(tools) == [estimate_tokens(w) for w in wire] == [t.tokens for t in budget.tools]


# What the decision sees, printed as JSON by a fresh interpreter: shipped providers' tools, CJK and Cyrillic tools,
# and generated tools whose cost lands on both sides of the budget.
_DECIDE = """
import json
from ironmem.core.budget import DEFAULT_TOOL_BUDGET, measure_tools
from ironmem.core.provider import ToolSchema
from ironmem.providers.hindsight import HindsightProvider
from ironmem.providers.mem0 import Mem0Provider
from ironmem.providers.openviking import OpenVikingProvider
groups = {"hindsight": HindsightProvider(reflect=True).tool_schemas(), "openviking": OpenVikingProvider().tool_schemas(),
          "mem0": Mem0Provider().tool_schemas(),
          "cjk": [ToolSchema("kit_cjk", "搜索长期记忆中关于用户的事实和过去的对话，例如爬山和旅行。")],
          "ru": [ToolSchema("kit_ru", "Поиск в долговременной памяти фактов о пользователе и прошлых разговоров.")]}
for n in range(1, 9):
    groups[f"kit{n}"] = [ToolSchema(f"kit_{i}", "Search the notes for a fact. " * 4) for i in range(n)]
out = {}
for name, tools in groups.items():
    for limit in (150, 300, DEFAULT_TOOL_BUDGET):
        b = measure_tools(tools, limit)
        out[f"{name}/{limit}"] = [b.used, b.fits, b.exact_used]
print(json.dumps(out))
"""


def _decide(cache_dir: Path) -> dict[str, list[Any]]:
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(REPO),
           # and no way out: a download would fail fast instead of reaching the network
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-c", _DECIDE], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_decision_is_the_same_with_and_without_the_encoding_file(tmp_path: Path) -> None:
    """Rule 1 does not depend on the network: a provider accepted online is accepted air-gapped, and back."""
    pytest.importorskip("hindsight_client")
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    offline = _decide(empty)
    assert all(exact is None for _, _, exact in offline.values())  # no exact figure without the file
    verdicts = {key: fits for key, (_, fits, _) in offline.items()}
    assert set(verdicts.values()) == {True, False}  # the cases fall on both sides of the limits
    assert all(verdicts[f"{name}/{DEFAULT_TOOL_BUDGET}"] for name in ("hindsight", "openviking", "mem0"))
    cache = _encoding_dir()
    if cache is None:
        pytest.skip("o200k_base is not cached here: the online half needs TIKTOKEN_CACHE_DIR")
    online = _decide(cache)
    assert {k: v[:2] for k, v in online.items()} == {k: v[:2] for k, v in offline.items()}
    # the exact figure is reported beside it, and the estimate stays near it (a band, not today's values)
    for key, (used, _, exact) in online.items():
        assert exact is not None and 0.8 * exact <= used <= 1.5 * exact, (key, used, exact)


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
