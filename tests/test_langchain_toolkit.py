"""IronMemoryToolkit: exact core schemas, LangChain's standard tool tests, routing by thread and user."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_tests.integration_tests import ToolsIntegrationTests
from langchain_tests.unit_tests import ToolsUnitTests
from langgraph.checkpoint.memory import InMemorySaver

from ironmem import MemoryManager, MemoryProvider, ToolSchema
from ironmem.adapters.langchain import IronMemoryToolkit
from ironmem.testing.langchain import ScriptedChatModel


# ------------------------------------------------------------------------------------------------------
# langchain-tests standard suites, one subclass per tool
# ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def standard_toolkit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IronMemoryToolkit]:
    manager = MemoryManager(home=tmp_path_factory.mktemp("standard-tools"))
    yield IronMemoryToolkit(manager)
    manager.close()


class _ToolkitTool:
    tool_name = ""

    @pytest.fixture(autouse=True)
    def _bind(self, standard_toolkit: IronMemoryToolkit) -> None:
        self._toolkit = standard_toolkit

    @property
    def tool_constructor(self) -> BaseTool:
        return next(t for t in self._toolkit.get_tools() if t.name == self.tool_name)


class TestMemoryToolStandard(_ToolkitTool, ToolsUnitTests):
    tool_name = "memory"

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"action": "add", "target": "memory", "content": "Standard tests ran here"}


class TestMemoryToolIntegration(_ToolkitTool, ToolsIntegrationTests):
    tool_name = "memory"

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"action": "add", "target": "memory", "content": "Standard tests ran here"}


class TestSessionSearchToolStandard(_ToolkitTool, ToolsUnitTests):
    tool_name = "session_search"

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "standard tests", "limit": 3}


class TestSessionSearchToolIntegration(_ToolkitTool, ToolsIntegrationTests):
    tool_name = "session_search"

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"query": "standard tests", "limit": 3}


# ------------------------------------------------------------------------------------------------------
# Schemas as sent
# ------------------------------------------------------------------------------------------------------
class Notes(MemoryProvider):
    """A tiny real external provider with one tool, to check external schemas pass through untouched."""

    name = "notes"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        pass

    def tool_schemas(self) -> list[ToolSchema]:
        return [ToolSchema("notes_lookup", "Look up a note by topic.", {
            "type": "object",
            "properties": {"topic": {"type": "string", "description": "Topic"},
                           "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["topic"],
            "additionalProperties": False,
        })]

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        self.calls.append(args)
        return json.dumps({"success": True, "topic": args.get("topic")})


def test_tools_carry_the_exact_core_schemas(home: Path) -> None:
    with MemoryManager(home=home, external=Notes()) as manager:
        tools = IronMemoryToolkit(manager).get_tools()
        schemas = manager.tool_schemas()
        assert [t.name for t in tools] == ["memory", "session_search", "notes_lookup"]
        for tool, schema in zip(tools, schemas, strict=True):
            assert isinstance(tool, StructuredTool)
            assert convert_to_openai_tool(tool) == schema.to_openai()
            assert tool.metadata == {"ironmem_provider": schema.provider}
        # The injected runtime / config parameters never reach the model.
        assert "runtime" not in json.dumps(convert_to_openai_tool(tools[0]))
        # The toolkit holds copies: editing a tool's schema cannot change the core's.
        tools[0].args_schema["properties"]["action"]["enum"].append("oops")  # type: ignore[index]
        assert "oops" not in json.dumps(manager.tool_schemas()[0].to_openai())


def test_external_tool_calls_reach_the_provider(home: Path) -> None:
    notes = Notes()
    with MemoryManager(home=home, external=notes) as manager:
        tool = IronMemoryToolkit(manager).get_tools()[2]
        assert json.loads(tool.invoke({"topic": "deploys", "tags": ["ops"]})) == {"success": True, "topic": "deploys"}
        assert notes.calls == [{"topic": "deploys", "tags": ["ops"]}]


def test_bad_toolkit_source_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="Session or MemoryManager"):
        IronMemoryToolkit("~/.ironmem")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------------
# Routing: pinned session, thread id and user id from ToolRuntime / config
# ------------------------------------------------------------------------------------------------------
def test_pinned_session_gets_every_call(manager: MemoryManager) -> None:
    session = manager.start_session("pinned", user_id="ada")
    memory, search = IronMemoryToolkit(session).get_tools()
    memory.invoke({"action": "add", "target": "user", "content": "Speaks Portuguese"},
                  config={"configurable": {"thread_id": "elsewhere"}})
    session.sync_turn("Olá, tudo bem?", "Tudo ótimo!")
    assert "Speaks Portuguese" in manager.builtin.state("user", "ada").entries  # Ada's own USER.md
    result = json.loads(search.invoke({"query": "tudo"}))
    assert "Tudo" in json.dumps(result, ensure_ascii=False)


def test_manager_toolkit_routes_by_thread_and_user(manager: MemoryManager) -> None:
    toolkit = IronMemoryToolkit(manager, user_id="fallback-user")
    model = ScriptedChatModel([
        ScriptedChatModel.tool_call("memory", {"action": "add", "target": "memory", "content": "Thread one note"}),
        "ok",
        ScriptedChatModel.tool_call("memory", {"action": "add", "target": "memory", "content": "Thread two note"}),
        "ok",
    ])
    agent = create_agent(model, tools=toolkit.get_tools(), checkpointer=InMemorySaver())
    agent.invoke({"messages": [("user", "one")]}, {"configurable": {"thread_id": "t-1"}})
    agent.invoke({"messages": [("user", "two")]}, {"configurable": {"thread_id": "t-2"}},
                 context={"user_id": "carol"})
    sessions = toolkit._registry.sessions  # type: ignore[union-attr]
    assert sorted(sessions) == ["t-1", "t-2"]
    assert sessions["t-1"].user_id == "fallback-user" and sessions["t-2"].user_id == "carol"
    # each user's agent notes land in that user's own MEMORY.md (private by default)
    assert manager.builtin.state("memory", sessions["t-1"].scopes["memory"]).entries == ("Thread one note",)
    assert manager.builtin.state("memory", sessions["t-2"].scopes["memory"]).entries == ("Thread two note",)
    assert manager.builtin.state("memory").entries == ()
    # Outside a graph the config passed to invoke picks the session; without one, the toolkit's own.
    toolkit.get_tools()[1].invoke({"query": "x"}, config={"configurable": {"thread_id": "t-3"}})
    toolkit.get_tools()[1].invoke({"query": "x"})
    assert len(toolkit._registry.sessions) == 4  # type: ignore[union-attr]
    toolkit.end()


async def test_bad_arguments_return_an_error_and_the_loop_continues(manager: MemoryManager) -> None:
    model = ScriptedChatModel([
        ScriptedChatModel.tool_call("memory", {"action": "replace", "target": "user"}),  # no old_text/content
        ScriptedChatModel.tool_call("session_search", {"limit": "many"}),  # no query
        lambda messages: f"Both failed: {sum(isinstance(m, ToolMessage) for m in messages)} errors seen.",
    ])
    agent = create_agent(model, tools=IronMemoryToolkit(manager).get_tools())
    result = await agent.ainvoke({"messages": [("user", "Do the thing.")]})
    errors = [json.loads(m.content) for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [e["success"] for e in errors] == [False, False]
    assert "needs old_text" in errors[0]["error"]
    assert "needs a non-empty 'query'" in errors[1]["error"]
    assert result["messages"][-1].content == "Both failed: 2 errors seen."
    assert manager.builtin.state("user").entries == ()
