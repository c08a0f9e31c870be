# %% [markdown]
# # LlamaIndex: ironmem as chat memory
#
# `IronMemory` is a `llama_index.core.memory.BaseMemory`: pass it as `memory=` to an agent or a chat engine.
#
# ```python
# memory = IronMemory.from_defaults(manager=MemoryManager(home="~/.ironmem"), session_id="chat-1", user_id="ada")
# agent = FunctionAgent(tools=memory.tools() + my_tools, llm=llm, system_prompt="...")
# await agent.run("Hi!", memory=memory)
# ```
#
# `get()` returns the frozen snapshot as a system message (identical on every call of the session), then the
# chat history from a stock `Memory`, with the fenced recall placed before a **copy** of the latest user message.
# Recall is computed once per user message, however many times the agent calls `get()`.
#
# The LLM here is `ironmem.testing.ScriptedFunctionCallingLLM`: a function-calling LLM that plays a script and
# records every request - no API key, no network.

# %%
import tempfile

import matplotlib.pyplot as plt
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.tools import FunctionTool

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.llama_index import IronMemory, SnapshotMemoryBlock
from ironmem.analysis.tokens import TokenCounter
from ironmem.testing.llama_index import ScriptedFunctionCallingLLM, ScriptedToolCall

counter = TokenCounter()
print("token counts:", counter.method)  # offline without the encoding file: labelled estimates
manager = MemoryManager(home=tempfile.mkdtemp(prefix="ironmem-llamaindex-"))


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"Sunny, 24 C in {city}"


weather = FunctionTool.from_defaults(fn=get_weather, description="Current weather for a city.")

# %% [markdown]
# ## A FunctionAgent with ironmem memory
#
# On the first turn the scripted model saves a fact with the `memory` tool, then answers.

# %%
llm = ScriptedFunctionCallingLLM(
    [
        ScriptedToolCall(
            "memory",
            {"action": "add", "target": "user", "content": "Name: Ada; vegetarian; lives in Lisbon"},
            "call_1",
        ),
        "Nice to meet you, Ada. Noted.",
        ScriptedToolCall("get_weather", {"city": "Lisbon"}, "call_2"),
        "It's sunny in Lisbon - a good day for a walk to a vegetarian lunch place.",
        "Enjoy!",
    ]
)
memory = IronMemory.from_defaults(manager=manager, session_id="chat-1", user_id="ada")
agent = FunctionAgent(
    tools=memory.tools() + [weather], llm=llm, system_prompt="You are a helpful local guide."
)

for text in (
    "Hi, I'm Ada. I'm vegetarian and live in Lisbon.",
    "What's the weather like today, and where should I eat?",
    "Thanks!",
):
    response = await agent.run(text, memory=memory)  # noqa: F704 - top-level await in a notebook cell
    print(f"user: {text}\nassistant: {response}\n")

# %% [markdown]
# ## What the LLM received
#
# Every request: the same system messages (the agent's prompt and the snapshot), the memory tools with the core's
# exact schemas, and from turn 2 on the fenced recall holding the fact saved in turn 1.

# %%
import hashlib


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


for i, request in enumerate(llm.requests, start=1):
    system = "\n".join(request.texts("system"))
    users = request.texts("user")
    print(
        f"request {i}: system sha256 {sha(system)}, {len(request.messages)} messages, tools {request.tool_names}, "
        f"fence in latest user message: {FENCE_OPEN in users[-1]}"
    )
print("\nlatest user message of request 3:\n" + llm.requests[2].texts("user")[-1])
session = memory.session
print(
    f"\nuser turns: 3, model requests: {len(llm.requests)}, prefetches (recall computations): {session.prefetch_count}"
)

# %% [markdown]
# ## What was stored
#
# `get_all()` is the stored chat history: exactly what was put, no snapshot, no fence.

# %%
stored = memory.get_all()
print([m.role.value for m in stored])
print("any fence in the stored history:", any(FENCE_OPEN in (m.content or "") for m in stored))
print("turns synced to memory:", session.turns_synced)

# %% [markdown]
# ## Where the tokens of each request go
#
# Snapshot (constant within the session), fenced recall (one per turn that had something to recall; replayed in
# later requests so each request extends the previous one), and everything else.

# %%
snap_tokens, fence_tokens, other_tokens = [], [], []
for request in llm.requests:
    texts = [m.content or "" for m in request.messages]
    snapshot = counter.count(memory.snapshot)
    fences = 0
    for t in texts:
        if FENCE_OPEN in t:
            fences += counter.count(
                t[t.index(FENCE_OPEN) : t.index("</memory-context>") + len("</memory-context>")]
            )
    total = sum(counter.count(t) for t in texts)
    snap_tokens.append(snapshot)
    fence_tokens.append(fences)
    other_tokens.append(total - snapshot - fences)
xs = range(1, len(llm.requests) + 1)
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.bar(xs, snap_tokens, label="frozen snapshot", color="tab:cyan")
ax.bar(xs, fence_tokens, bottom=snap_tokens, label="fenced recall", color="tab:purple")
ax.bar(
    xs,
    other_tokens,
    bottom=[a + b for a, b in zip(snap_tokens, fence_tokens)],
    label="prompt + history",
    color="tab:gray",
)
ax.set_xlabel("LLM request")
ax.set_ylabel("tokens (messages only)")
ax.legend(fontsize=8)
ax.set_title("One FunctionAgent session: what each request carries")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The next session, and a chat engine
#
# A new session renders the snapshot from the files, which now hold the saved fact. `IronMemory` works as the
# memory of a chat engine too.

# %%
memory.close()
chat_llm = ScriptedFunctionCallingLLM(["Since you're vegetarian: try the mushroom bifana at the market."])
chat_memory = IronMemory.from_defaults(manager=manager, session_id="chat-2", user_id="ada")
engine = SimpleChatEngine.from_defaults(llm=chat_llm, memory=chat_memory)
print("assistant:", engine.chat("Where should I eat near the river?"))
request = chat_llm.requests[0]
print("\nsystem messages of the chat engine's request:")
for text in request.texts("system"):
    print("---\n" + text)
print("\nlatest user message as sent (recall from the past session, fenced):\n" + request.texts("user")[-1])
chat_memory.close()

# %% [markdown]
# ## Keep your own `Memory`: `SnapshotMemoryBlock`
#
# Users with their own `Memory` setup (fact extraction, vector blocks) can add just the frozen snapshot as a
# memory block. It renders the same text on every call of the session.

# %%
session3 = manager.start_session("chat-3", user_id="ada")
own = Memory.from_defaults(session_id="chat-3", memory_blocks=[SnapshotMemoryBlock(session=session3)])
own.put(ChatMessage(role="user", content="hello"))
first, second = own.get(), own.get()
print(first[0].role.value, "message holds the snapshot:", session3.system_prompt_block() in first[0].content)
print("identical across calls:", first[0].content == second[0].content)
session3.end()
manager.close()
