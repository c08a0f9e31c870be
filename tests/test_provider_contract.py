"""The shared provider contract: both of ironmem's providers pass it; broken providers fail the right check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ironmem import MemoryProvider, ToolSchema
from ironmem.providers.local_vector import LocalVectorProvider
from ironmem.testing.embeddings import HashingEmbedder
from ironmem.testing.provider_contract import (
    CHECKS,
    ContractSettings,
    ContractViolation,
    ProviderContract,
    check_provider,
)


# -- ironmem's own providers pass (pytest collects one test per check from each class) -----------------
class TestLocalVectorContract(ProviderContract):
    def make_provider(self, tmp_path: Path) -> MemoryProvider:
        return LocalVectorProvider(HashingEmbedder(dims=128), path=tmp_path / "vectors.db")


class TestMem0Contract(ProviderContract):
    def make_provider(self, tmp_path: Path) -> MemoryProvider:
        pytest.importorskip("mem0")
        from ironmem.providers.mem0 import Mem0Provider
        from ironmem.testing.embeddings import HashingEmbeddings

        return Mem0Provider(embedder=HashingEmbeddings(dims=64), path=tmp_path / "mem0")


def test_contract_classes_expose_every_check() -> None:
    tests = {name for name in dir(ProviderContract) if name.startswith("test_contract_")}
    assert tests == {f"test_contract_{name}" for name in CHECKS}


def test_check_provider_runs_everything_for_a_good_provider(tmp_path: Path) -> None:
    passed = check_provider(lambda d: LocalVectorProvider(HashingEmbedder(), path=d / "v.db"), tmp_path)
    assert passed == list(CHECKS)


# -- deliberately broken providers --------------------------------------------------------------
class _Base(MemoryProvider):
    """A small, correct, file-backed provider; each broken variant below changes one thing."""

    name = "notes"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.user = "default"

    def is_available(self) -> bool:
        return True

    def initialize(self, session_id: str, **ctx: Any) -> None:
        self.user = ctx.get("user_id") or "default"
        self.folder.mkdir(parents=True, exist_ok=True)

    def _file(self) -> Path:
        return self.folder / f"{self.user}.jsonl"

    def tool_schemas(self) -> list[ToolSchema]:
        return [ToolSchema("notes_search", "Search notes.", {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Words to look for."}},
            "required": ["query"],
        })]

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        if name != "notes_search":
            return json.dumps({"success": False, "error": f"unknown tool {name!r}"})
        query = args.get("query")
        if not isinstance(query, str):
            return json.dumps({"success": False, "error": "'query' must be a string"})
        return json.dumps({"success": True, "results": self._search(query)})

    def _search(self, query: str) -> list[str]:
        if not self._file().exists():
            return []
        words = {w.strip("?.,!").lower() for w in query.split() if len(w) > 3}
        lines = [json.loads(line) for line in self._file().read_text().splitlines()]
        return [line for line in lines if words & {w.strip("?.,!").lower() for w in line.split()}]

    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        return self._search(query)

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        with self._file().open("a") as fh:
            fh.write(json.dumps(user) + "\n")


def _check(cls: type[MemoryProvider], tmp_path: Path, **settings: Any) -> ContractViolation | None:
    try:
        check_provider(lambda d: cls(d / "notes"), tmp_path, settings=ContractSettings(**settings))  # type: ignore[call-arg]
    except ContractViolation as exc:
        return exc
    return None


def test_the_reference_provider_passes(tmp_path: Path) -> None:
    assert _check(_Base, tmp_path) is None


class TooManyTools(_Base):
    def tool_schemas(self) -> list[ToolSchema]:
        schema = super().tool_schemas()[0]
        return [schema] + [
            ToolSchema(f"notes_extra_{i}", "More. " * 40, {"type": "object", "properties": {}}) for i in range(12)
        ]

    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        if name.startswith("notes_extra_"):
            return json.dumps({"success": True})
        return super().handle_tool_call(name, args)


def test_tools_over_the_budget_fail_tool_budget(tmp_path: Path) -> None:
    failure = _check(TooManyTools, tmp_path)
    assert failure is not None
    assert "tool_budget" in failure.checks
    message = next(f.message for f in failure.failures if f.check == "tool_budget")
    assert "13 tool schemas cost" in message and "over the default tool budget" in message
    # The manager refuses a provider over the budget, so the checks that run it through a manager fail too, for
    # that stated reason.
    assert failure.checks[:2] == ["tool_budget", "persistence"] and set(failure.checks) <= {
        "tool_budget", "persistence", "user_scope"}
    assert any(s in failure.failures[1].message for s in ("refused the provider", "cannot join"))


class RaisesOnUnknownTool(_Base):
    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        if name != "notes_search":
            raise KeyError(name)
        return super().handle_tool_call(name, args)


def test_raising_on_an_unknown_tool_fails_unknown_tool(tmp_path: Path) -> None:
    failure = _check(RaisesOnUnknownTool, tmp_path)
    assert failure is not None and failure.checks == ["unknown_tool"]
    assert "raised KeyError" in failure.failures[0].message and "return a JSON error" in failure.failures[0].message


class Forgetful(_Base):
    """Keeps turns in memory only: nothing survives a restart."""

    store: dict[int, list[str]] = {}

    def sync_turn(self, user: str, assistant: str, *, session_id: str) -> None:
        self.store.setdefault(id(self), []).append(user)

    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        return list(self.store.get(id(self), []))


def test_a_provider_that_forgets_after_restart_fails_persistence(tmp_path: Path) -> None:
    failure = _check(Forgetful, tmp_path, scoped_by_user=False)
    assert failure is not None and failure.checks == ["persistence"]
    assert "after a restart" in failure.failures[0].message and "Verdon" in failure.failures[0].message


class BadSchemas(_Base):
    def tool_schemas(self) -> list[ToolSchema]:
        return [ToolSchema("memory", "", {
            "type": "objekt",
            "properties": {"query": {"type": "text"}},
            "required": ["q"],
        })]


def test_invalid_schemas_fail_tool_schemas_with_every_problem_listed(tmp_path: Path) -> None:
    failure = _check(BadSchemas, tmp_path, scoped_by_user=False)
    assert failure is not None and "tool_schemas" in failure.checks
    message = next(f.message for f in failure.failures if f.check == "tool_schemas")
    for fragment in [
        "clashes with a built-in tool",
        "has no description",
        "\"type\": \"object\"",
        "unknown JSON Schema type 'text'",
        "add a 'description'",
        "'required' names properties that do not exist: ['q']",
    ]:
        assert fragment in message, fragment


class ReturnsDict(_Base):
    def handle_tool_call(self, name: str, args: dict[str, Any]) -> str:
        return {"success": True}  # type: ignore[return-value]


def test_returning_a_dict_instead_of_json_text_fails_tool_calls(tmp_path: Path) -> None:
    failure = _check(ReturnsDict, tmp_path)
    assert failure is not None and "tool_calls" in failure.checks
    assert "must return a JSON string" in next(f.message for f in failure.failures if f.check == "tool_calls")


class NotThreadSafe(_Base):
    """Opens a stdlib SQLite connection in initialize() and uses it from whatever thread calls."""

    def initialize(self, session_id: str, **ctx: Any) -> None:
        import sqlite3

        super().initialize(session_id, **ctx)
        self.conn = sqlite3.connect(str(self.folder / "db.sqlite"))
        self.conn.execute("CREATE TABLE IF NOT EXISTS t (x TEXT)")

    def prefetch(self, query: str, *, session_id: str) -> list[str]:
        return [row[0] for row in self.conn.execute("SELECT x FROM t")]


def test_thread_bound_connection_fails_prefetch_shape(tmp_path: Path) -> None:
    failure = _check(NotThreadSafe, tmp_path)
    assert failure is not None and failure.checks == ["prefetch_shape", "persistence"]
    message = next(f.message for f in failure.failures if f.check == "prefetch_shape")
    assert "from another thread raised ProgrammingError" in message and "thread-safe" in message


class LeaksAcrossUsers(_Base):
    def _file(self) -> Path:
        return self.folder / "everyone.jsonl"


def test_sharing_memories_between_users_fails_user_scope(tmp_path: Path) -> None:
    failure = _check(LeaksAcrossUsers, tmp_path)
    assert failure is not None and failure.checks == ["user_scope"]
    assert "user 'bob' was shown what user 'alice' stored" in failure.failures[0].message


class ShutdownTwiceFails(_Base):
    def shutdown(self) -> None:
        if getattr(self, "_down", False):
            raise RuntimeError("already closed")
        self._down = True


def test_non_idempotent_shutdown_fails_shutdown(tmp_path: Path) -> None:
    failure = _check(ShutdownTwiceFails, tmp_path)
    assert failure is not None and failure.checks == ["shutdown"]
    assert "second shutdown() raised RuntimeError" in failure.failures[0].message


def test_unknown_check_name_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown contract checks"):
        check_provider(lambda d: _Base(d), tmp_path, checks=["nmae"])
