"""IronMemoryToolSpec: LlamaIndex tools that carry the core's exact schemas, and route to the session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.react.formatter import ReActChatFormatter
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool

from ironmem import MemoryManager
from ironmem.adapters.llama_index import IronMemory, IronMemoryToolSpec, SchemaToolMetadata, memory_tools
from ironmem.testing.faulty import InjectingProvider, RaisingProvider
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM, tool_call


def test_every_tool_carries_the_core_schema_exactly(manager: MemoryManager) -> None:
    session = manager.start_session("s1")
    tools = IronMemoryToolSpec(session).to_tool_list()
    schemas = session.tool_schemas()
    assert [t.metadata.name for t in tools] == [s.name for s in schemas] == ["memory", "session_search"]
    for tool, schema in zip(tools, schemas, strict=True):
        assert isinstance(tool, FunctionTool)
        assert tool.metadata.description == schema.description  # explicit, not "name(signature) + docstring"
        assert tool.metadata.get_parameters_dict() == schema.parameters
        assert tool.metadata.to_openai_tool() == schema.to_openai()
        # code that reads fn_schema directly (integrations, the ReAct prompt) sees the same parameters
        assert tool.metadata.fn_schema.model_json_schema() == schema.parameters
        assert json.loads(tool.metadata.fn_schema_str) == schema.parameters


def test_the_react_prompt_lists_the_core_schemas(manager: MemoryManager) -> None:
    session = manager.start_session("s1")
    header = (
        ReActChatFormatter().format(IronMemoryToolSpec(session).to_tool_list(), chat_history=[])[0].content
    )
    for schema in session.tool_schemas():
        assert f"Tool Args: {json.dumps(schema.parameters, ensure_ascii=False)}" in header


def test_the_external_providers_tools_are_included_with_their_schema(home: Path) -> None:
    with MemoryManager(home=home, external=InjectingProvider()) as manager:
        session = manager.start_session("s1")
        tools = memory_tools(session)
        assert [t.metadata.name for t in tools] == ["memory", "session_search", "injecting_search"]
        assert [t.metadata.to_openai_tool() for t in tools] == [s.to_openai() for s in session.tool_schemas()]


def test_tools_act_in_the_session(manager: MemoryManager) -> None:
    session = manager.start_session("s1")
    memory, search = IronMemoryToolSpec(session).to_tool_list()
    out = memory.call(action="add", target="user", content="Name: Ada")
    assert json.loads(out.content)["success"] is True
    assert "Name: Ada" in (manager.home / "USER.md").read_text(encoding="utf-8")
    assert "Name: Ada" in session.prefetch("who am I?").fenced()  # the session sees its own write next turn
    session.sync_turn("We talked about Lisbon", "Nice city")
    hits = json.loads(search.call(query="Lisbon").content)["results"]
    assert hits and "Lisbon" in hits[0]["text"]


async def test_async_calls_and_errors_come_back_as_json(manager: MemoryManager) -> None:
    memory, _ = IronMemoryToolSpec(manager.start_session("s1")).to_tool_list()
    ok = await memory.acall(action="add", target="memory", content="Uses tabs")
    assert json.loads(ok.content)["success"] is True
    bad = await memory.acall(action="explode", target="memory")
    result = json.loads(bad.content)
    assert result["success"] is False and "action" in result["error"]
    assert bad.is_error is False  # a result the model can read and fix, not an exception in the loop


def test_a_failing_external_provider_never_raises_into_the_agent(home: Path) -> None:
    with MemoryManager(home=home, external=RaisingProvider(), tool_timeout=2.0) as manager:
        tools = {t.metadata.name: t for t in memory_tools(manager.start_session("s1"))}
        name = next(n for n in tools if n not in ("memory", "session_search"))
        result = json.loads(tools[name].call(query="x").content)
        assert result["success"] is False and "backend down" in result["error"]


def test_accepts_a_session_a_manager_or_an_iron_memory(manager: MemoryManager) -> None:
    mem = IronMemory.from_defaults(manager=manager, session_id="s1")
    assert IronMemoryToolSpec(mem).session is mem.session
    assert IronMemoryToolSpec(manager).session.id  # a new session
    assert [t.metadata.name for t in mem.tools()] == ["memory", "session_search"]
    only = IronMemoryToolSpec(mem).to_tool_list(spec_functions=["session_search"])
    assert [t.metadata.name for t in only] == ["session_search"]
    with pytest.raises(ValueError, match="unknown memory tool"):
        IronMemoryToolSpec(mem).to_tool_list(spec_functions=["nope"])
    with pytest.raises(TypeError, match="Session, a MemoryManager or an IronMemory"):
        IronMemoryToolSpec("s1")


def test_schema_metadata_is_a_tool_metadata() -> None:
    meta = SchemaToolMetadata(
        description="Echo.",
        name="echo",
        parameters={"type": "object", "properties": {"x": {"type": "integer"}}},
    )
    assert meta.to_openai_tool()["function"]["parameters"] == {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
    }
    meta.get_parameters_dict()["properties"].clear()  # callers get a copy
    assert meta.get_parameters_dict()["properties"] == {"x": {"type": "integer"}}


async def test_tool_schemas_sent_to_the_llm_equal_the_cores(manager: MemoryManager) -> None:
    mem = IronMemory.from_defaults(manager=manager, session_id="s1")
    llm = ScriptedFunctionCallingLLM(
        [
            tool_call("memory", {"action": "add", "target": "user", "content": "Likes jazz"}),
            "Saved.",
        ]
    )
    agent = FunctionAgent(tools=mem.tools(), llm=llm, streaming=False)
    await agent.run("Remember I like jazz", memory=mem)
    expected = [schema.to_openai() for schema in mem.session.tool_schemas()]
    assert [request.tools for request in llm.requests] == [expected, expected]
