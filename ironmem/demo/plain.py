"""The demo run on the core alone, without an agent framework: what an adapter does, written out.

Each request is built the way the adapters build it: the base system prompt and the session's frozen memory block,
the conversation so far (every earlier user message with its own fence replayed, :class:`FenceHistory`), and the
new user message with its fenced recall before it. Tool calls go to ``Session.handle_tool_call`` and each finished
exchange to ``Session.sync_turn``. The scripted model answers from what the request carried, so the record shows
the same three rules as the framework runs.
"""

from __future__ import annotations

from typing import Any

from ..core.manager import MemoryManager
from ..core.recall import FenceHistory, prepend_fence
from .records import DemoRequest, DemoTurn
from .script import SCRIPT, ToolStep, View


def run_plain(manager: MemoryManager, tag: str) -> tuple[list[DemoRequest], list[DemoTurn]]:
    """Run :data:`SCRIPT` on ``manager`` through the core API; returns the requests and the turns."""
    from ..analysis.replay import APP_TOOLS, BASE_SYSTEM_PROMPT

    requests: list[DemoRequest] = []
    turns: list[DemoTurn] = []
    session: Any = None
    current = 0  # the script's session number that ``session`` runs
    fences = FenceHistory("replay")
    history: list[dict[str, Any]] = []  # the conversation with the user's own text (fences are replayed from keys)
    number = 0
    calls = 0
    for index, spec in enumerate(SCRIPT):
        if spec.session != current:
            session = manager.start_session(f"demo-{tag}-session-{spec.session}", user_id="ada")
            current, fences, history, number = spec.session, FenceHistory("replay"), [], 0
        number += 1
        key = f"user-{number}"
        fences.recall_once(session, key, spec.user)
        history.append({"role": "user", "content": spec.user, "key": key})
        system_blocks = [BASE_SYSTEM_PROMPT, session.system_prompt_block()]
        tools = [s.to_openai() for s in session.tool_schemas()] + [s.to_openai() for s in APP_TOOLS]
        turn = DemoTurn(spec.session, number, spec.user)
        for step in spec.steps:
            messages = [
                {"role": "user", "content": prepend_fence(fences.fenced_for(m["key"], key), m["content"])}
                if m["role"] == "user" else m
                for m in history
            ]
            request = DemoRequest(len(requests) + 1, spec.session, number, 0.0, list(system_blocks), messages, tools)
            requests.append(request)
            turn.requests.append(request.number)
            if isinstance(step, ToolStep):
                calls += 1
                call_id = f"call_demo_{calls}"
                request.reply_tool_calls = [{"name": step.name, "args": dict(step.args)}]
                result = session.handle_tool_call(step.name, dict(step.args))
                turn.tool_calls.append({"name": step.name, "args": dict(step.args), "result": result})
                history.append({"role": "assistant", "content": "",
                                "tool_calls": [{"id": call_id, "name": step.name, "arguments": dict(step.args)}]})
                history.append({"role": "tool", "tool_call_id": call_id, "content": result})
            else:
                user_text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
                turn.answer = step.reply(View("\n\n".join(system_blocks), user_text))
                history.append({"role": "assistant", "content": turn.answer})
        turn.recall_fenced = requests[turn.requests[0] - 1].recall_fenced if turn.requests else ""
        turns.append(turn)
        session.sync_turn(spec.user, turn.answer)
        if index + 1 == len(SCRIPT) or SCRIPT[index + 1].session != spec.session:
            session.end()
    return requests, turns
