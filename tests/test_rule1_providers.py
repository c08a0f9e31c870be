"""Rule 1: the built-in provider is always there; at most one external provider joins it."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from ironmem import BuiltinProviderError, MemoryManager, MemoryProvider, ProviderConflictError, ToolSchema


class NotesProvider(MemoryProvider):
    """A small, real external provider: keeps notes in a dict and recalls those sharing a word."""

    def __init__(self, name: str = "notes", tools: int = 1) -> None:
        self.name = name
        self._tools = tools
        self.notes: list[str] = []
        self.initialized: list[str] = []

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        self.initialized.append(session_id)

    def tool_schemas(self) -> list[ToolSchema]:
        return [
            ToolSchema(f"{self.name}_tool{i}", "Save a note.", {"type": "object", "properties": {"text": {"type": "string"}}})
            for i in range(self._tools)
        ]

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        self.notes.append(args["text"])
        return json.dumps({"success": True, "saved": args["text"]})

    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        words = set(query.lower().split())
        return [n for n in self.notes if words & set(n.lower().split())]


class UnavailableProvider(NotesProvider):
    def is_available(self) -> bool:
        return False


class BrokenSchemaProvider(NotesProvider):
    def tool_schemas(self) -> list[ToolSchema]:
        raise RuntimeError("cannot reach schema registry")


def test_builtin_is_always_present(manager: MemoryManager) -> None:
    assert [p.name for p in manager.providers] == ["builtin"]
    assert [s.name for s in manager.tool_schemas()] == ["memory", "session_search"]


def test_builtin_cannot_be_removed(manager: MemoryManager) -> None:
    with pytest.raises(BuiltinProviderError, match="cannot be removed"):
        manager.remove_provider("builtin")
    with pytest.raises(BuiltinProviderError):
        manager.remove_provider(manager.builtin)
    assert manager.providers[0] is manager.builtin


def test_second_external_provider_refused_with_warning(manager: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    first, second = NotesProvider("mem0"), NotesProvider("honcho")
    assert manager.add_provider(first) is True
    with caplog.at_level(logging.WARNING, logger="ironmem"):
        assert manager.add_provider(second) is False
    assert "'honcho'" in caplog.text and "'mem0' is already active" in caplog.text
    assert manager.external is first
    assert [p.name for p in manager.providers] == ["builtin", "mem0"]
    assert "honcho_tool0" not in {s.name for s in manager.tool_schemas()}


def test_second_external_provider_raises_in_strict_mode(home) -> None:
    with MemoryManager(home=home, strict=True) as manager:
        manager.add_provider(NotesProvider("mem0"))
        with pytest.raises(ProviderConflictError, match="'mem0' is already active"):
            manager.add_provider(NotesProvider("honcho"))
        assert manager.external.name == "mem0"


def test_failed_setup_is_not_registered_and_does_not_block_a_later_one(manager: MemoryManager) -> None:
    assert manager.add_provider(UnavailableProvider("offline")) is False
    assert manager.add_provider(BrokenSchemaProvider("broken")) is False
    assert manager.external is None
    assert manager.add_provider(NotesProvider("notes")) is True
    assert manager.external.name == "notes"


def test_provider_over_the_tool_budget_is_refused(manager: MemoryManager) -> None:
    # Rule 1 counts tokens: 60 small tools cost far more than the default budget (tests/test_tool_budget.py).
    assert manager.add_provider(NotesProvider("bloated", tools=60)) is False
    assert manager.external is None


def test_external_can_be_removed_and_replaced(manager: MemoryManager) -> None:
    manager.add_provider(NotesProvider("a"))
    assert manager.remove_provider("a") is True
    assert manager.add_provider(NotesProvider("b")) is True
    assert [p.name for p in manager.providers] == ["builtin", "b"]


def test_tools_are_merged_and_routed(manager: MemoryManager) -> None:
    notes = NotesProvider("notes")
    manager.add_provider(notes)
    session = manager.start_session("s1")
    assert [(s.name, s.provider) for s in session.tool_schemas()] == [
        ("memory", "builtin"), ("session_search", "builtin"), ("notes_tool0", "notes"),
    ]
    result = json.loads(session.handle_tool_call("notes_tool0", {"text": "ferry at 9"}))
    assert result == {"success": True, "saved": "ferry at 9"}
    assert notes.initialized == ["s1"]
    assert "ferry at 9" in session.prefetch("when is the ferry").fenced()


def test_duplicate_tool_name_keeps_first_owner(manager: MemoryManager, caplog: pytest.LogCaptureFixture) -> None:
    class Shadowing(NotesProvider):
        def tool_schemas(self) -> list[ToolSchema]:
            return [ToolSchema("memory", "A rival memory tool.", {"type": "object", "properties": {}})]

    with caplog.at_level(logging.WARNING, logger="ironmem"):
        assert manager.add_provider(Shadowing("rival")) is True
    assert "already provides a tool of that name" in caplog.text
    owners = {s.name: s.provider for s in manager.tool_schemas()}
    assert owners["memory"] == "builtin"


def test_unknown_tool_and_bad_arguments_return_json_errors(manager: MemoryManager) -> None:
    session = manager.start_session()
    unknown = json.loads(session.handle_tool_call("teleport", {}))
    assert unknown["success"] is False and "unknown tool 'teleport'" in unknown["error"]
    assert "memory" in unknown["error"]
    bad_json = json.loads(session.handle_tool_call("memory", "{not json"))
    assert bad_json["success"] is False and "not valid JSON" in bad_json["error"]
    not_object = json.loads(session.handle_tool_call("memory", ["add"]))  # type: ignore[arg-type]
    assert not_object["success"] is False and "JSON object" in not_object["error"]
    missing = json.loads(session.handle_tool_call("memory", {"target": "user"}))
    assert missing["success"] is False and "action" in missing["error"]


def test_non_provider_is_a_type_error(manager: MemoryManager) -> None:
    with pytest.raises(TypeError, match="MemoryProvider instance"):
        manager.add_provider(object())  # type: ignore[arg-type]


def test_builtin_writes_are_mirrored_with_secrets_redacted(manager: MemoryManager) -> None:
    class Mirror(NotesProvider):
        def __init__(self) -> None:
            super().__init__("mirror")
            self.writes: list[tuple[str, str, str]] = []

        def on_memory_write(self, action: str, target: str, content: str) -> None:
            self.writes.append((action, target, content))

    mirror = Mirror()
    manager.add_provider(mirror)
    session = manager.start_session()
    session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Lives in Oslo"})
    session.handle_tool_call("memory", {"action": "replace", "target": "user", "old_text": "Oslo",
                                        "content": "Lives in Bergen"})
    session.handle_tool_call("memory", {"action": "add", "target": "memory",
                                        "content": "Deploy key for CI is sk-proj-abcdefghijklmnopqrstuvwx"})
    manager.drain()
    assert mirror.writes[:3] == [
        ("add", "user", "Lives in Oslo"),
        ("remove", "user", "Lives in Oslo"),
        ("add", "user", "Lives in Bergen"),
    ]
    assert len(mirror.writes) == 4  # a secret is stored locally, and leaves for the provider redacted
    assert mirror.writes[3][:2] == ("add", "memory")
    assert "sk-proj-abcdefghijklmnopqrstuvwx" not in mirror.writes[3][2] and "Deploy key" in mirror.writes[3][2]


def test_the_same_text_from_two_sources_is_recalled_once(manager: MemoryManager) -> None:
    class Echo(NotesProvider):
        def prefetch(self, query: str, *, session_id: str) -> list[str]:
            return ["User: We adopted a cat named Pixel\nAssistant: Lovely!"]

    manager.add_provider(Echo("echo"))
    manager.start_session("old").sync_turn("We adopted a cat named Pixel", "Lovely!")
    recall = manager.start_session("new").prefetch("what is the cat named Pixel like?")
    assert [item.source for item in recall.items] == ["echo"]
    assert recall.fenced().count("adopted a cat") == 1


def test_a_provider_passed_to_the_constructor_that_cannot_join_is_an_error(home) -> None:
    """``MemoryManager(external=p)`` names the provider it wants: falling back to the built-in layer alone
    would hide a missing package or backend, so it fails and says why."""
    from ironmem.core.errors import ProviderUnavailableError

    class MissingPackage(UnavailableProvider):
        unavailable_reason = "notes-client is not installed: pip install 'ironmem[notes]'"

    with pytest.raises(ProviderUnavailableError, match=r"pip install 'ironmem\[notes\]'"):
        MemoryManager(home=home, external=MissingPackage("notes"))
