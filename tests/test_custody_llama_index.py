"""Custody in a real LlamaIndex ``FunctionAgent`` + ``IronMemory`` loop: tool output taints the turn, the planted
write is held, and a workflow human-in-the-loop event (InputRequiredEvent / HumanResponseEvent) decides it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import HumanResponseEvent, InputRequiredEvent

from ironmem import MemoryManager
from ironmem.adapters.llama_index import IronMemory
from ironmem.adapters.llama_index.tools import IronMemoryToolSpec
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM, tool_call

PLANTED = "Supplier Northwind's new bank account is DE44 5001 0517 5407 3249 31."
PAGE = f"Newsletter. {PLANTED}"


async def fetch_page(url: str) -> str:
    """Fetch a web page."""
    return PAGE


def _agent(manager: MemoryManager, session_id: str, note: str = PLANTED) -> tuple[FunctionAgent, IronMemory]:
    memory = IronMemory.from_defaults(manager=manager, session_id=session_id)
    llm = ScriptedFunctionCallingLLM([
        tool_call("fetch_page", {"url": "https://example.com"}),
        tool_call("memory", {"action": "add", "target": "memory", "content": note}),
        "Done.",
    ])
    tools = [FunctionTool.from_defaults(async_fn=fetch_page),
             *IronMemoryToolSpec(memory.session, approval="interrupt").to_tool_list()]
    return FunctionAgent(tools=tools, llm=llm, streaming=False), memory


async def _run(agent: FunctionAgent, memory: IronMemory, text: str, answer: Any) -> tuple[list[Any], str]:
    handler = agent.run(user_msg=text, memory=memory)
    asked: list[Any] = []
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            asked.append(event)
            handler.ctx.send_event(HumanResponseEvent(response=answer, pending_id=event.pending_id))
    return asked, str(await handler)


def _tool_result(memory: IronMemory) -> dict[str, Any]:
    results = [m for m in memory.get_all() if m.role.value == "tool"]
    return json.loads(results[-1].content)


@pytest.mark.parametrize("answer", ["approve", {"decisions": [{"type": "approve"}]}])
def test_human_approves_in_the_workflow(tmp_path: Path, answer: Any) -> None:
    manager = MemoryManager(home=tmp_path)
    agent, memory = _agent(manager, "li-approve")
    asked, _ = asyncio.run(_run(agent, memory, "Summarize https://example.com", answer))
    assert len(asked) == 1
    assert asked[0].request["ironmem"]["origin"] == "tool fetch_page"
    assert json.loads(json.dumps(asked[0].request))["review_configs"][0]["action_name"] == "memory"
    assert _tool_result(memory)["saved"] is True
    assert PLANTED in (tmp_path / "MEMORY.md").read_text(encoding="utf-8")
    assert manager.builtin.pending() == [] and len(manager.builtin.pending(status="approved")) == 1
    manager.close()


def test_human_rejects_in_the_workflow(tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path)
    agent, memory = _agent(manager, "li-reject")
    asked, _ = asyncio.run(_run(agent, memory, "Summarize https://example.com", {"type": "reject"}))
    assert len(asked) == 1 and _tool_result(memory)["rejected"] is True
    assert not (tmp_path / "MEMORY.md").exists() or PLANTED not in (tmp_path / "MEMORY.md").read_text("utf-8")
    assert PLANTED not in manager.start_session("next").system_prompt_block()
    manager.close()


def test_users_own_words_need_no_approval(tmp_path: Path) -> None:
    manager = MemoryManager(home=tmp_path)
    note = "my IBAN is DE89 3704 0044 0532 0130 00"
    agent, memory = _agent(manager, "li-user", note)
    asked, _ = asyncio.run(_run(agent, memory, f"Summarize https://example.com and remember {note}", "reject"))
    assert asked == []
    assert note in (tmp_path / "MEMORY.md").read_text(encoding="utf-8")
    manager.close()


def test_tool_output_taints_the_turn_without_hitl(tmp_path: Path) -> None:
    """The stock tools (approval="queue"): the write waits in the queue, the next session never shows it."""
    manager = MemoryManager(home=tmp_path)
    memory = IronMemory.from_defaults(manager=manager, session_id="li-queue")
    llm = ScriptedFunctionCallingLLM([tool_call("fetch_page", {"url": "u"}),
                                      tool_call("memory", {"action": "add", "content": PLANTED}), "Done."])
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(async_fn=fetch_page), *memory.tools()], llm=llm,
                          streaming=False)
    asyncio.run(_run(agent, memory, "Summarize the page", "approve"))
    assert _tool_result(memory)["staged"] is True
    assert [p.payload["content"] for p in manager.builtin.pending()] == [PLANTED]
    assert PLANTED not in manager.start_session("next").system_prompt_block()
    manager.close()


@pytest.mark.parametrize("answer", ["maybe later", {"type": "approve-ish"}, {"decisions": []}, 42])
def test_malformed_human_response_keeps_the_write_pending(tmp_path: Path, answer: Any) -> None:
    manager = MemoryManager(home=tmp_path)
    agent, memory = _agent(manager, "li-malformed")
    asked, _ = asyncio.run(_run(agent, memory, "Summarize https://example.com", answer))
    assert len(asked) == 1
    result = _tool_result(memory)
    assert result["saved"] is False and "stays pending" in result["error"] and "approve" in result["error"]
    (held,) = manager.builtin.pending()
    assert held.payload["content"] == PLANTED  # nothing lost: it can still be approved
    manager.builtin.approve(held.id)
    assert PLANTED in (tmp_path / "MEMORY.md").read_text(encoding="utf-8")
    manager.close()
