"""IronClassicMemory with a legacy ``AgentExecutor`` (langchain-classic) and the ScriptedChatModel."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from typing import Any

import pytest

pytest.importorskip("langchain_classic")

from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
from langchain_core.messages import ToolMessage
from langchain_core.prompts import ChatPromptTemplate

from ironmem import FENCE_OPEN, MemoryManager
from ironmem.adapters.langchain import IronClassicMemory
from ironmem.testing.langchain import ScriptedChatModel

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "You are a helpful assistant.\n\n{memory_snapshot}"),
    ("human", "{memory_context}{input}"),
    ("placeholder", "{agent_scratchpad}"),
])


def executor(model: ScriptedChatModel, memory: IronClassicMemory) -> AgentExecutor:
    tools = memory.get_tools()
    agent = create_tool_calling_agent(model, tools, PROMPT)
    return AgentExecutor(agent=agent, tools=tools, memory=memory)


def human_text(request: Any) -> str:
    return [m for m in request.messages if m.type == "human"][-1].text


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_agent_executor_with_classic_memory(manager: MemoryManager, mode: str) -> None:
    manager.start_session("earlier", user_id="ada").sync_turn("My favourite editor is Helix.", "Nice choice.")
    model = ScriptedChatModel([
        ScriptedChatModel.tool_call("memory", {"action": "add", "target": "user", "content": "Uses Helix"}),
        "Saved that you use Helix.",
        ScriptedChatModel.tool_call("memory", {"target": "user"}),  # bad arguments: no action
        "Could not save that, sorry.",
        "You use Helix.",
    ])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation noise from building the adapter
        memory = IronClassicMemory(manager, session_id="classic", user_id="ada")
    agent = executor(model, memory)
    turns = ["Which editor do I like? Remember it.", "Also remember something odd.", "Which editor again?"]
    results = []
    for text in turns:
        if mode == "async":
            results.append(await agent.ainvoke({"input": text}))
        else:
            results.append(agent.invoke({"input": text}))
    assert [r["output"] for r in results] == [
        "Saved that you use Helix.", "Could not save that, sorry.", "You use Helix."]
    requests = model.requests
    assert len(requests) == 5 and {r.via for r in requests} == {mode}

    # Tools as the core defines them.
    assert all(r.tools == [s.to_openai() for s in memory.session.tool_schemas()] for r in requests)
    # Frozen snapshot on every request of the session.
    assert len({r.system_text for r in requests}) == 1
    assert memory.session.system_prompt_block() in requests[0].system_text
    assert "Uses Helix" not in requests[-1].system_text
    # Turn 1 recalled the earlier conversation, fenced, before the user's text.
    first = human_text(requests[0])
    assert first.startswith(FENCE_OPEN) and "Helix" in first and first.endswith("\n\n" + turns[0])
    # The write from turn 1 came back in turn 2's fence (live delta), computed once for that turn.
    second = human_text(requests[2])
    assert second.startswith(FENCE_OPEN) and "Uses Helix" in second
    assert human_text(requests[3]) == second
    # Bad arguments: the error went back to the model and the executor went on.
    error = [m for m in requests[3].messages if isinstance(m, ToolMessage)][-1]
    assert json.loads(error.content)["success"] is False
    # Every turn synced under the session.
    assert manager.builtin.index.turn_count("classic") == 3
    assert memory.session.user_id == "ada"

    # clear() starts a new conversation: the new snapshot shows the write; the files keep it.
    memory.clear()
    assert memory.session.id != "classic"
    assert "Uses Helix" in memory.session.system_prompt_block()
    assert "Uses Helix" in manager.builtin.state("user", "ada").entries  # Ada's own USER.md (users/<ada>/)


def test_memory_variables_and_keys(manager: MemoryManager) -> None:
    memory = IronClassicMemory(manager, memory_key="recall", snapshot_key="snap", history_key="past",
                               input_key="question", output_key="answer")
    assert memory.memory_variables == ["recall", "snap", "past"]
    values = memory.load_memory_variables({"question": "anything?", "other": 1})
    assert values == {"recall": "", "snap": memory.session.system_prompt_block(), "past": ""}
    memory.save_context({"question": "I moved to Oslo."}, {"answer": "Welcome to Oslo!", "extra": 1})
    assert manager.builtin.index.turn_count(memory.session.id) == 1
    with pytest.raises(ValueError, match="input_key"):
        IronClassicMemory(manager).load_memory_variables({"a": "1", "b": "2"})
    with pytest.raises(ValueError, match="must differ"):
        IronClassicMemory(manager, memory_key="x", snapshot_key="x")
    with pytest.raises(ValueError, match="must differ"):
        IronClassicMemory(manager, history_key="memory_context")
    with pytest.raises(TypeError, match="Session or MemoryManager"):
        IronClassicMemory(object())  # type: ignore[arg-type]


def test_missing_extra_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['langchain_classic'] = None\n"
        "from ironmem.adapters import langchain as lc\n"
        "lc.IronMemoryMiddleware  # the modern adapter still imports\n"
        "try:\n"
        "    lc.IronClassicMemory\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert 'pip install "ironmem[langchain-classic]"' in out.stdout


# -- the conversation so far, as a ConversationBufferMemory gives it ------------------------------------------
def sent_text(request: Any) -> str:
    return "\n".join(m.text for m in request.messages)


def test_conversation_chain_gets_the_current_conversation(manager: MemoryManager) -> None:
    from langchain_classic.chains import ConversationChain
    from langchain_core.prompts import MessagesPlaceholder

    manager.start_session("past").sync_turn("My glider is an ASK 21.", "A fine two-seater.")
    prompt = ChatPromptTemplate.from_messages([
        ("system", "Be brief.\n\n{memory_snapshot}"),
        MessagesPlaceholder("history"),
        ("human", "{memory_context}{input}"),
    ])
    model = ScriptedChatModel(["Hello Ada.", "You fly an ASK 21.", "Your name is Ada."])
    memory = IronClassicMemory(manager, return_messages=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConversationChain itself is deprecated upstream
        chain = ConversationChain(llm=model, prompt=prompt, memory=memory)
    chain.invoke({"input": "Hi, I am Ada."})
    chain.invoke({"input": "Which glider do I fly?"})
    chain.invoke({"input": "And what is my name?"})
    third = model.requests[2]
    # The whole conversation so far, in order, as a stock ConversationBufferMemory would give it.
    assert [m.type for m in third.messages] == ["system", "human", "ai", "human", "ai", "human"]
    assert third.messages[1].text == "Hi, I am Ada." and third.messages[2].text == "Hello Ada."
    assert third.messages[4].text == "You fly an ASK 21."
    # Turn 2's fence is replayed byte for byte in its own message: each request extends the previous one.
    second = model.requests[1]
    assert second.messages[-1].text.startswith(FENCE_OPEN) and "ASK 21" in second.messages[-1].text
    shape = [(m.type, m.text) for m in third.messages]
    assert shape[: len(second.messages)] == [(m.type, m.text) for m in second.messages]
    # Nothing but the user's words and the answers is stored.
    assert [m.text for m in memory.chat_memory.messages] == [
        "Hi, I am Ada.", "Hello Ada.", "Which glider do I fly?", "You fly an ASK 21.", "And what is my name?",
        "Your name is Ada."]
    memory.clear()  # a new conversation
    assert memory.chat_memory.messages == []


def test_llm_chain_with_a_string_history(manager: MemoryManager) -> None:
    from langchain_classic.chains import LLMChain
    from langchain_core.prompts import PromptTemplate

    prompt = PromptTemplate.from_template(
        "{memory_snapshot}\n\n{history}\nHuman: {memory_context}{input}\nAI:")
    model = ScriptedChatModel(["Noted, Lyon.", "You live in Lyon."])
    memory = IronClassicMemory(manager, recall_policy="ephemeral")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chain = LLMChain(llm=model, prompt=prompt, memory=memory)
    chain.invoke({"input": "I live in Lyon."})
    chain.invoke({"input": "Where do I live?"})
    assert "Human: I live in Lyon.\nAI: Noted, Lyon." in sent_text(model.requests[1])


async def test_agent_executor_gets_chat_history(manager: MemoryManager) -> None:
    prompt = ChatPromptTemplate.from_messages([
        ("system", "Be brief.\n\n{memory_snapshot}"),
        ("placeholder", "{chat_history}"),
        ("human", "{memory_context}{input}"),
        ("placeholder", "{agent_scratchpad}"),
    ])
    model = ScriptedChatModel(["Nice to meet you, Ada.", "Your name is Ada."])
    memory = IronClassicMemory(manager, history_key="chat_history", return_messages=True)
    tools = memory.get_tools()
    agent = AgentExecutor(agent=create_tool_calling_agent(model, tools, prompt), tools=tools, memory=memory)
    await agent.ainvoke({"input": "I am Ada."})
    await agent.ainvoke({"input": "What is my name?"})
    humans = [m.text for m in model.requests[1].messages if m.type == "human"]
    assert humans[0] == "I am Ada." and humans[-1].endswith("What is my name?")
    assert [m.text for m in model.requests[1].messages if m.type == "ai"] == ["Nice to meet you, Ada."]
