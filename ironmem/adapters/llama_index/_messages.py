"""Small helpers that read LlamaIndex chat messages as plain strings (the adapter's only translation job)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

from ...core.recall import prepend_fence, split_fence

__all__ = [
    "role_of",
    "text_of",
    "has_tool_calls",
    "is_final_answer",
    "answer_text",
    "message_key",
    "with_fence",
    "strip_fence",
    "tool_results",
]

_REACT_ANSWER = re.compile(r"(?:^|\n)\s*Answer:\s*", re.IGNORECASE)


def role_of(message: ChatMessage) -> str:
    role = message.role
    return role.value if isinstance(role, MessageRole) else str(role)


def text_of(message: ChatMessage | str | None) -> str:
    """The message's text blocks joined with newlines (how the agents themselves read a user message)."""
    if message is None:
        return ""
    if isinstance(message, str):
        return message
    return "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))


def has_tool_calls(message: ChatMessage) -> bool:
    """True when an assistant message asks for tools (a ToolCallBlock or ``additional_kwargs["tool_calls"]``).

    LlamaIndex releases and integrations differ in where they put tool calls; both places are checked.
    """
    if message.additional_kwargs.get("tool_calls"):
        return True
    return any(getattr(block, "block_type", None) == "tool_call" for block in message.blocks)


def is_final_answer(message: ChatMessage) -> bool:
    """An assistant message that ends a turn: it calls no tool."""
    return role_of(message) == "assistant" and not has_tool_calls(message)


def answer_text(message: ChatMessage) -> str:
    """What the assistant told the user. A ReAct trace ("Thought: ... Answer: ...") gives its final answer."""
    text = text_of(message)
    if text.lstrip().startswith("Thought:"):
        matches = list(_REACT_ANSWER.finditer(text))
        if matches:
            return text[matches[-1].end() :].strip()
    return text


def message_key(position: int, text: str) -> str:
    """Identity of a user message: its position in the full history plus a hash of its text."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{position}:{digest}"


def with_fence(message: ChatMessage, fenced: str) -> ChatMessage:
    """A copy of ``message`` with the fenced recall placed before its text. The original is untouched."""
    copy = message.model_copy(deep=True)
    blocks: list[Any] = list(copy.blocks)
    if blocks and isinstance(blocks[0], TextBlock):
        blocks[0] = TextBlock(text=prepend_fence(fenced, blocks[0].text))
    else:
        blocks.insert(0, TextBlock(text=fenced))
    copy.blocks = blocks
    return copy


def strip_fence(message: ChatMessage) -> ChatMessage | None:
    """Remove a fenced recall that was placed at the start of a user message (so it is never stored).

    Returns the message unchanged when it carries no fence, a cleaned copy when it did, and None when
    nothing but the fence was in it.
    """
    if role_of(message) != "user" or not message.blocks or not isinstance(message.blocks[0], TextBlock):
        return message
    fenced, rest = split_fence(message.blocks[0].text)
    if not fenced:
        return message
    copy = message.model_copy(deep=True)
    blocks = list(copy.blocks)
    if rest:
        blocks[0] = TextBlock(text=rest)
    else:
        blocks.pop(0)
    if not blocks:
        return None
    copy.blocks = blocks
    return copy


def _call_names(message: ChatMessage) -> dict[str, str]:
    """Tool-call id -> tool name of an assistant message (ToolCallBlocks and OpenAI-style ``tool_calls``)."""
    names: dict[str, str] = {}
    for block in message.blocks:
        if getattr(block, "block_type", None) == "tool_call":
            names[str(getattr(block, "tool_call_id", ""))] = str(getattr(block, "tool_name", ""))
    for call in message.additional_kwargs.get("tool_calls") or []:
        if isinstance(call, dict):
            function = call.get("function") or {}
            names.setdefault(str(call.get("id", "")), str(function.get("name") or call.get("name") or ""))
        else:  # an SDK object (openai ChatCompletionMessageToolCall)
            function = getattr(call, "function", None)
            names.setdefault(str(getattr(call, "id", "")), str(getattr(function, "name", "") or ""))
    return names


def tool_results(messages: Any) -> list[tuple[str, str]]:
    """``(tool name, text)`` of every tool result among ``messages``; the name comes from the assistant message
    that called it ("" when no call matches)."""
    names: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for message in messages:
        role = role_of(message)
        if role == "assistant":
            names.update(_call_names(message))
        elif role == "tool":
            call_id = str(message.additional_kwargs.get("tool_call_id", ""))
            out.append((message.additional_kwargs.get("name") or names.get(call_id, ""), text_of(message)))
    return out
