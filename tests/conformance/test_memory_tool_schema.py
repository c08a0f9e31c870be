"""Hermes's schema-shape tests (NousResearch/hermes-agent, tests/tools/test_memory_tool_schema.py), ported.

Strict backends (OpenAI's Codex endpoint) reject ``allOf``/``anyOf``/``oneOf``/``enum``/``not`` at the top level
of a function's parameters; per-action required fields are checked at run time instead.
"""

from __future__ import annotations

import json

from ironmem.core.builtin import MEMORY_TOOL

_FORBIDDEN_TOP_LEVEL_KEYS = ("allOf", "anyOf", "oneOf", "enum", "not")


def test_memory_schema_has_no_forbidden_top_level_combinators() -> None:
    params = MEMORY_TOOL.parameters
    for key in _FORBIDDEN_TOP_LEVEL_KEYS:
        assert key not in params, f"top-level {key!r} in the memory tool parameters breaks strict backends"


def test_memory_schema_is_well_formed() -> None:
    params = MEMORY_TOOL.parameters
    assert params["type"] == "object"
    assert params["required"] == ["target"]
    assert params["properties"]["action"]["enum"] == ["add", "replace", "remove"]
    # Hermes's newest schema adds a third target, "posture" (README: deliberate difference).
    assert params["properties"]["target"]["enum"] == ["memory", "user"]
    assert params["properties"]["operations"]["type"] == "array"
    assert params["properties"]["operations"]["items"]["properties"]["action"]["enum"] == ["add", "replace", "remove"]


def test_memory_schema_is_json_serializable() -> None:
    json.dumps(MEMORY_TOOL.to_openai())
    json.dumps(MEMORY_TOOL.to_anthropic())


def test_every_memory_tool_description_fits_llama_index() -> None:
    """LlamaIndex's FunctionTool refuses a description over 1,024 characters; the variant that says whether the
    agent's notes are shared (the longest) must fit, with Hermes's guidance in it."""
    from ironmem.core.builtin.tools import MAX_DESCRIPTION_CHARS, memory_tool_schema

    for notes in (None, "shared", "private"):
        assert len(memory_tool_schema(notes).description) <= MAX_DESCRIPTION_CHARS
