"""IronMemoryMiddleware + AnthropicPromptCachingMiddleware: the cache breakpoint lands on the snapshot block.

The Anthropic request payload is built by ChatAnthropic's own ``_get_request_payload`` (no network call).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

pytest.importorskip("langchain_anthropic")

from langchain.agents import create_agent
from langchain_anthropic import ChatAnthropic
from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import PrivateAttr

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.langchain import IronMemoryMiddleware

SYSTEM_PROMPT = "You are a careful travel assistant."


class OfflineAnthropic(ChatAnthropic):
    """ChatAnthropic that builds the real request payload and answers from a script instead of the API."""

    _payloads: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    _replies: list[AIMessage] = PrivateAttr(default_factory=list)

    def script(self, *replies: AIMessage | str) -> OfflineAnthropic:
        self._replies = [AIMessage(r) if isinstance(r, str) else r for r in replies]
        return self

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return self._payloads

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self._payloads.append(copy.deepcopy(self._get_request_payload(messages, stop=stop, **kwargs)))
        return ChatResult(generations=[ChatGeneration(message=self._replies.pop(0))])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        return self._generate(messages, stop=stop, **kwargs)


def offline_model() -> OfflineAnthropic:
    return OfflineAnthropic(model="claude-sonnet-4-5", api_key="sk-ant-offline-test", max_retries=0)


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_cache_breakpoint_on_the_snapshot_block(manager: MemoryManager, mode: str) -> None:
    manager.start_session("seed").handle_tool_call(
        "memory", {"action": "add", "target": "user", "content": "Prefers night trains over flights"})
    manager.start_session("past").sync_turn("I loved the night train to Vienna.", "Sleeper trains are great.")
    model = offline_model().script(
        AIMessage("", tool_calls=[{"name": "session_search", "args": {"query": "Vienna"}, "id": "toolu_1",
                                   "type": "tool_call"}]),
        "You took the night train to Vienna.",
        "Try the night train to Rome.",
    )
    memory = IronMemoryMiddleware(manager)
    agent = create_agent(model, system_prompt=SYSTEM_PROMPT, checkpointer=InMemorySaver(),
                         middleware=[memory, AnthropicPromptCachingMiddleware(ttl="5m")])
    cfg = {"configurable": {"thread_id": "trip"}}
    for text in ("How did I get to Vienna last time?", "Where should I go next?"):
        payload = {"messages": [("user", text)]}
        if mode == "async":
            await agent.ainvoke(payload, cfg)
        else:
            agent.invoke(payload, cfg)

    payloads = model.payloads
    assert len(payloads) == 3
    snapshot = memory.sessions["trip"].system_prompt_block()
    assert "Prefers night trains" in snapshot
    for payload in payloads:
        system = payload["system"]
        # The user's prompt first, then the snapshot in its own block, which carries the breakpoint.
        assert system[0] == {"type": "text", "text": SYSTEM_PROMPT}
        assert system[-1] == {"type": "text", "text": snapshot, "cache_control": {"type": "ephemeral", "ttl": "5m"}}
        assert len(system) == 2
        # The memory tools are sent in Anthropic format, exactly as the core defines them (last one tagged).
        tools = [{k: v for k, v in t.items() if k != "cache_control"} for t in payload["tools"]]
        assert sorted(tools, key=lambda t: t["name"]) == sorted(
            (s.to_anthropic() for s in manager.tool_schemas()), key=lambda t: t["name"])
    assert payloads[0]["system"] == payloads[1]["system"] == payloads[2]["system"]
    # The fenced recall went into the user turn, not the system prompt.
    first_user = payloads[0]["messages"][0]
    assert first_user["role"] == "user"
    assert FENCE_OPEN in str(first_user["content"]) and "loved the night train" in str(first_user["content"])
    assert all(FENCE_OPEN not in block["text"] for p in payloads for block in p["system"])


def test_order_matters_caching_middleware_listed_first(manager: MemoryManager) -> None:
    """Listed after the caching middleware, ours appends the snapshot after the breakpoint: the reason the
    docs say to list IronMemoryMiddleware first."""
    model = offline_model().script("Hello.")
    agent = create_agent(model, system_prompt=SYSTEM_PROMPT,
                         middleware=[AnthropicPromptCachingMiddleware(), IronMemoryMiddleware(manager)])
    agent.invoke({"messages": [("user", "hi")]})
    system = model.payloads[0]["system"]
    assert "cache_control" in system[0] and "cache_control" not in system[-1]
