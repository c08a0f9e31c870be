# %% [markdown]
# # LangChain: the two-line drop-in
#
# `IronMemoryMiddleware` adds ironmem to any `langchain.agents.create_agent` agent:
#
# ```python
# memory = IronMemoryMiddleware(MemoryManager(home="~/.ironmem"))
# agent = create_agent(model, tools=my_tools, middleware=[memory], checkpointer=InMemorySaver())
# ```
#
# It registers the memory tools, freezes the session's snapshot into the thread's private state on its first
# turn, sends it as its own system content block, prefetches once per user turn and puts the fenced recall before
# the user's text **in the request only** (never in the checkpointed state), and syncs each finished turn.
#
# This notebook runs real `create_agent` loops with `ironmem.testing.ScriptedChatModel`, a tool-calling chat
# model that plays a script and records every request it receives - no API key, no network.

# %%
import hashlib
import tempfile

import matplotlib.pyplot as plt
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.langchain import IronMemoryMiddleware
from ironmem.analysis.tokens import TokenCounter
from ironmem.testing.langchain import ScriptedChatModel

counter = TokenCounter()
print("token counts:", counter.method)  # offline without the encoding file: labelled estimates
manager = MemoryManager(home=tempfile.mkdtemp(prefix="ironmem-langchain-"))


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 24 C in {city}"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# %% [markdown]
# ## An agent with memory
#
# The script: on the first turn the model saves two facts with the `memory` tool; later turns just answer.

# %%
model = ScriptedChatModel(
    [
        ScriptedChatModel.tool_call(
            "memory",
            {
                "operations": [
                    {"action": "add", "target": "user", "content": "Name: Ada; lives in Lisbon"},
                    {"action": "add", "target": "user", "content": "Prefers trains over flights"},
                ]
            },
        ),
        "Nice to meet you, Ada! I'll remember that.",
        "Porto is 3 hours away by train.",
        "Any time!",
        # thread 2
        "Welcome back, Ada. From Lisbon, the train to Porto is the easy option.",
    ]
)
memory = IronMemoryMiddleware(manager)
agent = create_agent(
    model,
    tools=[get_weather],
    system_prompt="You are a helpful travel assistant.",
    middleware=[memory],
    checkpointer=InMemorySaver(),
)

thread1 = {"configurable": {"thread_id": "trip-1", "user_id": "ada"}}
for text in ("Hi, I'm Ada from Lisbon. I always take trains, never planes.", "How far is Porto?", "Thanks!"):
    state = agent.invoke({"messages": [HumanMessage(text)]}, thread1)
    print(f"user: {text}\nassistant: {state['messages'][-1].text}\n")

# %% [markdown]
# ## What the model received
#
# Every request of the thread carries the same system prompt (the user's prompt, then the snapshot in its own
# block), the memory tools next to the agent's own tool, and - from the second turn on - the fenced recall before
# the user's text, holding the facts saved in turn 1 (the live delta).

# %%
for i, request in enumerate(model.requests, start=1):
    system = request.messages[0]
    blocks = [b["text"] if isinstance(b, dict) else b for b in system.content]
    last_user = [m for m in request.messages if isinstance(m, HumanMessage)][-1]
    print(
        f"request {i}: system sha256 {sha(system.text)} ({len(blocks)} blocks), tools {request.tool_names}, "
        f"fence in the latest user message: {FENCE_OPEN in last_user.text}"
    )
print()
print("system block 2 (the frozen snapshot):\n" + blocks[-1])
print()
print(
    "latest user message of request 3, as sent:\n"
    + [m for m in model.requests[2].messages if isinstance(m, HumanMessage)][-1].text
)

# %% [markdown]
# ## What was stored
#
# The checkpointed thread state has the user's words only: no fence, no snapshot.

# %%
stored = agent.get_state(thread1).values["messages"]
print([type(m).__name__ for m in stored])
print("any fence in the stored messages:", any(FENCE_OPEN in m.text for m in stored))
print("stored first user message:", stored[0].text)

# %% [markdown]
# ## The next thread sees the write in its snapshot
#
# A new thread is a new ironmem session: its snapshot is rendered from the files, which now hold the two facts.

# %%
before = len(model.requests)
state = agent.invoke(
    {"messages": [HumanMessage("Where could I go this weekend?")]},
    {"configurable": {"thread_id": "trip-2", "user_id": "ada"}},
)
request = model.requests[before]
print(
    "thread 2 system sha256:",
    sha(request.messages[0].text),
    "(thread 1:",
    sha(model.requests[0].messages[0].text) + ")",
)
print(request.messages[0].content[-1]["text"])
print("\nassistant:", state["messages"][-1].text)

# %% [markdown]
# ## Replay keeps every request a pure extension of the previous one
#
# With `recall="replay"` (the default) each earlier turn's fence is re-sent byte for byte, so each request's
# message list starts with the previous request's - what a provider's prefix cache needs. With
# `recall="ephemeral"` old fences are dropped: fewer tokens, but the prefix breaks at the first user message that
# had a fence. The plot shows, per request, how many tokens it shares with the request before it.


# %%
def run(recall: str) -> list:
    m = MemoryManager(home=tempfile.mkdtemp(prefix=f"ironmem-{recall}-"))
    seed = m.start_session("seed", user_id="ada")
    seed.handle_tool_call(
        "memory", {"action": "add", "target": "user", "content": "Name: Ada; lives in Lisbon"}
    )
    for q, a in [
        ("Trains from Lisbon to Porto?", "About 3 hours, hourly."),
        ("Best time to visit Porto?", "May to September."),
        ("Hotels near Porto's Sao Bento station?", "Several, from 80 EUR a night."),
    ]:
        seed.sync_turn(q, a)
    seed.end()
    model = ScriptedChatModel(["Sure."], repeat_last=True)
    agent = create_agent(
        model,
        system_prompt="You are a helpful travel assistant.",
        middleware=[IronMemoryMiddleware(m, recall=recall)],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "t", "user_id": "ada"}}
    for text in (
        "Trains to Porto again?",
        "When is Porto nicest?",
        "And a hotel near the station?",
        "Thanks!",
    ):
        agent.invoke({"messages": [HumanMessage(text)]}, cfg)
    m.close()
    return model.requests


def flat_tokens(request) -> list[int]:
    ids = []
    for message in request.messages:
        ids += counter.encode(f"<|{message.type}|>") + counter.encode(message.text)
    return ids


fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), sharey=True)
for ax, recall in zip(axes, ("replay", "ephemeral")):
    requests = run(recall)
    totals, shared = [], []
    previous: list[int] = []
    for r in requests:
        ids = flat_tokens(r)
        n = 0
        for a, b in zip(previous, ids):
            if a != b:
                break
            n += 1
        totals.append(len(ids))
        shared.append(n)
        previous = ids
    xs = range(1, len(totals) + 1)
    ax.bar(xs, shared, color="tab:green", label="shared with the previous request")
    ax.bar(xs, [t - s for t, s in zip(totals, shared)], bottom=shared, color="tab:gray", label="new")
    ax.set_title(f'recall="{recall}"')
    ax.set_xlabel("request")
    print(f"{recall:>9}: tokens per request {totals}, shared prefix {shared}")
axes[0].set_ylabel("tokens (system + messages)")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## With Anthropic prompt caching
#
# List `IronMemoryMiddleware` **before** `AnthropicPromptCachingMiddleware`: the cache breakpoint then lands on the
# system block that holds the snapshot. The payload below is built by `ChatAnthropic`'s own request builder; the
# model answers from a script instead of calling the API.

# %%
from langchain_anthropic import ChatAnthropic
from langchain_anthropic.middleware import AnthropicPromptCachingMiddleware
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr


class PayloadOnlyAnthropic(ChatAnthropic):
    """Builds the real Anthropic request payload, records it, and replies 'OK' without any network call."""

    _sent: list = PrivateAttr(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self._sent.append(self._get_request_payload(messages, stop=stop, **kwargs))
        return ChatResult(generations=[ChatGeneration(message=AIMessage("OK"))])


claude = PayloadOnlyAnthropic(model="claude-sonnet-4-5", api_key="offline-no-calls", max_retries=0)
cached_agent = create_agent(
    claude,
    system_prompt="You are a helpful travel assistant.",
    middleware=[IronMemoryMiddleware(manager), AnthropicPromptCachingMiddleware(ttl="5m")],
)
cached_agent.invoke(
    {"messages": [HumanMessage("Any night trains from Lisbon?")]},
    {"configurable": {"thread_id": "trip-3", "user_id": "ada"}},
)
payload = claude._sent[0]
for i, block in enumerate(payload["system"]):
    print(f"system block {i}: {len(block['text'])} chars, cache_control={block.get('cache_control')}")
print("tools:", [t["name"] for t in payload["tools"]])

# %% [markdown]
# ## Async works the same way

# %%
amodel = ScriptedChatModel(["Lisbon to Madrid: about 10 hours by night train."])
aagent = create_agent(
    amodel,
    system_prompt="You are a helpful travel assistant.",
    middleware=[IronMemoryMiddleware(manager)],
    checkpointer=InMemorySaver(),
)
run = aagent.ainvoke(
    {"messages": [HumanMessage("Night train to Madrid?")]},
    {"configurable": {"thread_id": "trip-4", "user_id": "ada"}},
)
result = await run  # noqa: F704 - top-level await in a notebook cell
print(result["messages"][-1].text, "| via:", amodel.requests[0].via)
memory.close()
manager.close()
