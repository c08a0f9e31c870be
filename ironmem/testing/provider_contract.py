"""The contract every external memory provider must keep, as tests anyone can run against their provider.

Two ways to use it:

1. pytest: subclass :class:`ProviderContract` in a test module (the subclass name must start with ``Test``) and
   implement :meth:`ProviderContract.make_provider`. Each check becomes its own test::

       from ironmem.testing.provider_contract import ProviderContract

       class TestMyProvider(ProviderContract):
           def make_provider(self, tmp_path):
               return MyProvider(path=tmp_path / "store")

2. anywhere: ``check_provider(factory, workdir)`` runs every check and raises :class:`ContractViolation` (an
   ``AssertionError``) listing each failed check with what to fix.

``make_provider(tmp_path)`` / ``factory(tmp_path)`` must return a NEW, not yet initialized provider each call,
whose storage lives under ``tmp_path``: the persistence check calls it twice with the same folder and expects
the second instance to find what the first one stored (as after a restart).

What is checked (names of the checks in :data:`CHECKS`):

- ``name``: a non-empty lowercase name (letters, digits, ``_``, ``-``), not ``builtin``.
- ``available``: ``is_available()`` returns the bool True for a configured provider, quickly.
- ``tool_budget``: at least one tool, and the tools' schemas together fit the default token budget
  (:data:`~ironmem.core.budget.DEFAULT_TOOL_BUDGET`; rule 1 keeps what every request carries small).
- ``tool_schemas``: ToolSchema objects with valid, unique names (no clash with the built-in ``memory`` and
  ``session_search``), descriptions, and a JSON Schema object for the parameters: ``type: object``, described
  properties, ``required`` naming existing properties (and a valid schema for jsonschema when installed).
- ``tool_calls``: every tool returns a JSON object for good arguments built from its schema and for bad ones
  (missing required, wrong types), and never raises.
- ``unknown_tool``: an unknown tool name gives a JSON object with an error, not an exception.
- ``prefetch_shape``: ``prefetch`` returns ``str`` or a list of ``str``, empty store included, from any thread.
- ``persistence``: a fact synced in session 1 is recalled by the provider in session 2 through a real
  :class:`~ironmem.MemoryManager` and ``Session.prefetch``, with a new provider instance on the same storage.
- ``user_scope``: what one user stored is not recalled for another user (skip with ``scoped_by_user = False``).
- ``shutdown``: ``shutdown()`` can be called twice.
"""

from __future__ import annotations

import json
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.budget import DEFAULT_TOOL_BUDGET, measure_tools
from ..core.errors import InvalidArgumentError, IronMemError
from ..core.manager import MemoryManager
from ..core.provider import MemoryProvider, ToolSchema

__all__ = [
    "ProviderContract",
    "ContractViolation",
    "CheckFailure",
    "check_provider",
    "CHECKS",
    "ContractSettings",
]

ProviderFactory = Callable[[Path], MemoryProvider]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_\-]{0,63}$")
_TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")  # what OpenAI and Anthropic accept
_BUILTIN_TOOLS = ("memory", "session_search")
_JSON_TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}


class ContractViolation(IronMemError, AssertionError):
    """A provider broke the contract. ``failures`` lists every failed check."""

    def __init__(self, failures: list[CheckFailure]) -> None:
        self.failures = failures
        lines = [f"provider contract violated ({len(failures)} check(s) failed):"]
        lines += [f"  - [{f.check}] {f.message}" for f in failures]
        super().__init__("\n".join(lines))

    @property
    def checks(self) -> list[str]:
        return [f.check for f in self.failures]


@dataclass(frozen=True)
class CheckFailure:
    check: str
    message: str


@dataclass
class ContractSettings:
    """Knobs for providers whose behaviour differs in a legitimate way.

    ``fact`` is synced as a user message in session 1 and ``query`` asked in session 2; ``keyword`` must appear in
    what the provider recalls. Pick a pair your embedder/search can match (the defaults share words).
    """

    fact: str = "My favourite climbing spot is the Verdon gorge in France"
    query: str = "Where is my favourite climbing spot?"
    keyword: str = "Verdon"
    scoped_by_user: bool = True
    prefetch_timeout: float = 30.0
    tool_budget: int = DEFAULT_TOOL_BUDGET


class _Fail(IronMemError):
    """One check failed (internal: collected into ContractViolation)."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise _Fail(message)


def _new(factory: ProviderFactory, workdir: Path) -> MemoryProvider:
    provider = factory(workdir)
    _require(isinstance(provider, MemoryProvider),
             f"the factory returned {type(provider).__name__}, not a MemoryProvider instance")
    return provider


def _init(provider: MemoryProvider, workdir: Path, session: str = "contract-s1", user: str = "contract-user") -> None:
    home = workdir / "contract-home"
    home.mkdir(parents=True, exist_ok=True)
    provider.initialize(session, user_id=user, home=str(home))


def _schemas(provider: MemoryProvider) -> list[ToolSchema]:
    schemas = provider.tool_schemas()
    _require(isinstance(schemas, list), f"tool_schemas() must return a list, got {type(schemas).__name__}")
    return schemas


def _parse_json_object(text: Any, what: str) -> dict[str, Any]:
    _require(isinstance(text, str), f"{what} returned {type(text).__name__}; it must return a JSON string")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Fail(f"{what} returned text that is not JSON ({exc.msg}): {text[:120]!r}") from exc
    _require(isinstance(value, dict), f"{what} returned JSON {type(value).__name__}; return a JSON object")
    return value


def _is_error(result: dict[str, Any]) -> bool:
    return "error" in result or result.get("success") is False or result.get("ok") is False


# --------------------------------------------------------------------------------------------------
# The checks. Each takes (factory, workdir, settings) and raises _Fail with a message saying what to fix.
# --------------------------------------------------------------------------------------------------
def check_name(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        name = getattr(provider, "name", None)
        _require(isinstance(name, str) and bool(name), f"name must be a non-empty string, got {name!r}")
        _require(name != "builtin", "name 'builtin' is reserved for the built-in provider")
        _require(bool(_NAME_RE.match(str(name))),
                 f"name {name!r} should be lowercase letters, digits, '_' or '-' (it is used in config files and status)")
    finally:
        provider.shutdown()


def check_available(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        started = time.perf_counter()
        available = provider.is_available()
        elapsed = time.perf_counter() - started
        _require(available is True, f"is_available() returned {available!r} for the configured provider; "
                 "it must return the bool True when the provider can work")
        _require(elapsed < 2.0, f"is_available() took {elapsed:.2f}s; it must be a cheap check (no network round trips)")
    finally:
        provider.shutdown()


def check_tool_budget(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        schemas = _schemas(provider)
        _require(len(schemas) >= 1, "exposes no tools; an external provider offers at least one (config may hide it)")
        budget = measure_tools([s for s in schemas if isinstance(s, ToolSchema)], settings.tool_budget)
        _require(budget.fits,
                 f"its {len(schemas)} tool schemas cost {budget.describe()}, over the default tool budget "
                 "(rule 1: every tool is sent with every request). Shorten descriptions, merge tools or offer fewer")
    finally:
        provider.shutdown()


def _schema_problems(schema: dict[str, Any], where: str) -> list[str]:
    problems: list[str] = []
    if not isinstance(schema, dict):
        return [f"{where}: parameters must be a dict (a JSON Schema object), got {type(schema).__name__}"]
    if schema.get("type") != "object":
        problems.append(f"{where}: parameters must have \"type\": \"object\", got {schema.get('type')!r}")
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        problems.append(f"{where}: 'properties' must be an object")
        props = {}
    for pname, pschema in props.items():
        if not isinstance(pschema, dict):
            problems.append(f"{where}.{pname}: property schema must be an object")
            continue
        ptype = pschema.get("type")
        types = ptype if isinstance(ptype, list) else [ptype]
        if ptype is None and not any(k in pschema for k in ("enum", "anyOf", "oneOf", "$ref", "const")):
            problems.append(f"{where}.{pname}: give the property a 'type'")
        elif ptype is not None and not all(t in _JSON_TYPES for t in types):
            problems.append(f"{where}.{pname}: unknown JSON Schema type {ptype!r}")
        if not str(pschema.get("description", "")).strip():
            problems.append(f"{where}.{pname}: add a 'description' (the model reads it to fill the argument)")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append(f"{where}: 'required' must be a list of property names")
    else:
        missing = [r for r in required if r not in props]
        if missing:
            problems.append(f"{where}: 'required' names properties that do not exist: {missing}")
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema is optional
        jsonschema = None
    if jsonschema is not None:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            problems.append(f"{where}: not a valid JSON Schema: {exc.message}")
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        problems.append(f"{where}: parameters are not JSON-serializable ({exc})")
    return problems


def check_tool_schemas(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        problems: list[str] = []
        names: list[str] = []
        for i, schema in enumerate(_schemas(provider)):
            if not isinstance(schema, ToolSchema):
                problems.append(f"tool #{i} is a {type(schema).__name__}, not an ironmem.ToolSchema")
                continue
            names.append(schema.name)
            if not _TOOL_NAME_RE.match(schema.name or ""):
                problems.append(f"tool name {schema.name!r} must match {_TOOL_NAME_RE.pattern} (OpenAI/Anthropic rule)")
            if schema.name in _BUILTIN_TOOLS:
                problems.append(f"tool name {schema.name!r} clashes with a built-in tool; prefix it with the provider name")
            if not (schema.description or "").strip():
                problems.append(f"tool {schema.name!r} has no description")
            problems += _schema_problems(schema.parameters, f"tool {schema.name!r}")
            for fmt in ("to_openai", "to_anthropic"):
                try:
                    json.dumps(getattr(schema, fmt)())
                except Exception as exc:
                    problems.append(f"tool {schema.name!r}: {fmt}() is not JSON-serializable ({exc})")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"duplicate tool names: {dupes}")
        _require(not problems, "; ".join(problems))
    finally:
        provider.shutdown()


def _sample(pschema: dict[str, Any], name: str) -> Any:
    if "enum" in pschema and pschema["enum"]:
        return pschema["enum"][0]
    if "const" in pschema:
        return pschema["const"]
    ptype = pschema.get("type")
    ptype = ptype[0] if isinstance(ptype, list) else ptype
    if ptype == "integer":
        low = pschema.get("minimum", 1)
        return int(max(low, min(pschema.get("maximum", low), 1)))
    if ptype == "number":
        return float(pschema.get("minimum", 1.0))
    if ptype == "boolean":
        return True
    if ptype == "array":
        return []
    if ptype == "object":
        return {}
    return f"contract probe value for {name}"


def _good_args(schema: ToolSchema) -> dict[str, Any]:
    props = schema.parameters.get("properties", {}) or {}
    return {name: _sample(props[name], name) for name in schema.parameters.get("required", []) or [] if name in props}


def _wrong(pschema: dict[str, Any]) -> Any:
    ptype = pschema.get("type")
    ptype = ptype[0] if isinstance(ptype, list) else ptype
    return {"unexpected": ["nested", 1]} if ptype != "object" else "not an object"


def check_tool_calls(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        _init(provider, workdir)
        problems: list[str] = []
        for schema in _schemas(provider):
            props = schema.parameters.get("properties", {}) or {}
            cases = {
                "good arguments": _good_args(schema),
                "no arguments": {},
                "wrong argument types": {name: _wrong(p) for name, p in props.items()},
            }
            for label, args in cases.items():
                what = f"handle_tool_call({schema.name!r}, {label})"
                try:
                    _parse_json_object(provider.handle_tool_call(schema.name, args), what)
                except _Fail as exc:
                    problems.append(str(exc))
                except Exception as exc:
                    problems.append(f"{what} raised {type(exc).__name__}: {exc}; return a JSON error instead")
            required = schema.parameters.get("required") or []
            if required:
                try:
                    result = json.loads(provider.handle_tool_call(schema.name, {}))
                    if isinstance(result, dict) and not _is_error(result):
                        problems.append(f"{schema.name!r} accepted a call without its required {required}; "
                                        "return {\"success\": false, \"error\": ...}")
                except Exception:
                    pass  # reported above
        _require(not problems, "; ".join(problems))
    finally:
        provider.shutdown()


def check_unknown_tool(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        _init(provider, workdir)
        what = "handle_tool_call('no_such_tool_xyz', {})"
        try:
            result = provider.handle_tool_call("no_such_tool_xyz", {})
        except Exception as exc:
            raise _Fail(f"{what} raised {type(exc).__name__}: {exc}; return a JSON error instead") from exc
        parsed = _parse_json_object(result, what)
        _require(_is_error(parsed), f"{what} returned {parsed!r}; it must report an error ('error' key or success false)")
    finally:
        provider.shutdown()


def _prefetch_ok(value: Any, what: str) -> None:
    if isinstance(value, str):
        return
    _require(isinstance(value, (list, tuple)), f"{what} returned {type(value).__name__}; return a str or a list of str")
    bad = [type(v).__name__ for v in value if not isinstance(v, str)]
    _require(not bad, f"{what} returned a list with non-str items ({', '.join(sorted(set(bad)))})")


def check_prefetch_shape(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    try:
        _init(provider, workdir)
        _prefetch_ok(provider.prefetch("anything at all?", session_id="contract-s1"), "prefetch() on an empty store")
        provider.sync_turn(settings.fact, "Noted.", session_id="contract-s1")
        box: dict[str, Any] = {}

        def worker() -> None:  # the manager calls hooks from worker threads
            try:
                box["value"] = provider.prefetch(settings.query, session_id="contract-s1")
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(settings.prefetch_timeout)
        _require(not thread.is_alive(), f"prefetch() from another thread did not return within {settings.prefetch_timeout}s")
        if "error" in box:
            exc = box["error"]
            raise _Fail(f"prefetch() from another thread raised {type(exc).__name__}: {exc} "
                        "(the manager calls hooks from worker threads: make connections thread-safe)")
        _prefetch_ok(box.get("value"), "prefetch() from another thread")
        _prefetch_ok(provider.system_prompt_block(), "system_prompt_block()")
    finally:
        provider.shutdown()


def _recalled_by(recall: Any, provider_name: str) -> list[str]:
    return [item.text for item in recall.items if item.source == provider_name]


def check_persistence(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    home = workdir / "contract-manager-home"
    first = _new(factory, workdir)
    with MemoryManager(home=home, external=first, prefetch_timeout=settings.prefetch_timeout) as manager:
        _require(manager.external is first, "the MemoryManager refused the provider (see the log: unavailable, "
                 "or tool_schemas() failed)")
        session = manager.start_session("contract-session-1", user_id="contract-user")
        session.sync_turn(settings.fact, "Noted, I will remember that.")
        session.end()
        health = manager.health(first.name)
        _require(health.state == "active", f"a hook failed in session 1: {health.reason}")
    second = _new(factory, workdir)
    with MemoryManager(home=home, external=second, prefetch_timeout=settings.prefetch_timeout) as manager:
        session = manager.start_session("contract-session-2", user_id="contract-user")
        recall = session.prefetch(settings.query)
        health = manager.health(second.name)
        _require(health.state == "active", f"a hook failed in session 2: {health.reason}")
        mine = _recalled_by(recall, second.name)
        _require(any(settings.keyword.lower() in text.lower() for text in mine),
                 f"after a restart, session 2's prefetch({settings.query!r}) recalled {mine!r} from the provider; "
                 f"expected the fact synced in session 1 (containing {settings.keyword!r}). Store turns durably "
                 "under the factory's folder and search them in prefetch()")
        session.end()


def check_user_scope(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    if not settings.scoped_by_user:
        return
    home = workdir / "contract-scope-home"
    provider = _new(factory, workdir / "scope")
    with MemoryManager(home=home, external=provider, prefetch_timeout=settings.prefetch_timeout) as manager:
        alice = manager.start_session("contract-alice", user_id="alice")
        alice.sync_turn(settings.fact, "Noted.")
        alice.end()
        bob = manager.start_session("contract-bob", user_id="bob")
        leaked = [t for t in _recalled_by(bob.prefetch(settings.query), provider.name)
                  if settings.keyword.lower() in t.lower()]
        _require(not leaked, f"user 'bob' was shown what user 'alice' stored: {leaked!r}; scope memories by the "
                 "user_id given to initialize()")
        bob.end()


def check_shutdown(factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> None:
    provider = _new(factory, workdir)
    _init(provider, workdir)
    for attempt in ("first", "second"):
        try:
            provider.shutdown()
        except Exception as exc:
            raise _Fail(f"the {attempt} shutdown() raised {type(exc).__name__}: {exc}; shutdown must be idempotent") from exc


CHECKS: dict[str, Callable[[ProviderFactory, Path, ContractSettings], None]] = {
    "name": check_name,
    "available": check_available,
    "tool_budget": check_tool_budget,
    "tool_schemas": check_tool_schemas,
    "tool_calls": check_tool_calls,
    "unknown_tool": check_unknown_tool,
    "prefetch_shape": check_prefetch_shape,
    "persistence": check_persistence,
    "user_scope": check_user_scope,
    "shutdown": check_shutdown,
}


def _run(name: str, factory: ProviderFactory, workdir: Path, settings: ContractSettings) -> CheckFailure | None:
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    try:
        CHECKS[name](factory, folder, settings)
    except _Fail as exc:
        return CheckFailure(name, str(exc))
    except Exception as exc:
        return CheckFailure(name, f"raised {type(exc).__name__}: {exc}")
    return None


def check_provider(
    factory: ProviderFactory,
    workdir: str | Path | None = None,
    *,
    checks: list[str] | None = None,
    settings: ContractSettings | None = None,
) -> list[str]:
    """Run the contract checks (all by default) and return the names that passed.

    Raises :class:`ContractViolation` listing every failed check.

    Example:
        >>> import tempfile
        >>> from ironmem.providers.local_vector import LocalVectorProvider
        >>> from ironmem.testing.embeddings import HashingEmbedder
        >>> passed = check_provider(lambda d: LocalVectorProvider(HashingEmbedder(), path=d / "v.db"), tempfile.mkdtemp())
        >>> "persistence" in passed
        True
    """
    settings = settings or ContractSettings()
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise InvalidArgumentError(f"unknown contract checks {unknown}; choose from {list(CHECKS)}")
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="ironmem-contract-"))
    failures = [f for f in (_run(n, factory, base, settings) for n in names) if f is not None]
    if failures:
        raise ContractViolation(failures)
    return names


class ProviderContract:
    """Subclass as ``Test<Something>`` and implement :meth:`make_provider`; pytest runs one test per check.

    Override :attr:`contract` (a :class:`ContractSettings`) to change the probe fact or skip user scoping.

    Example:
        >>> class TestNotes(ProviderContract):          # doctest: +SKIP
        ...     def make_provider(self, tmp_path):
        ...         return NotesProvider(folder=tmp_path)
    """

    contract: ContractSettings = ContractSettings()

    def make_provider(self, tmp_path: Path) -> MemoryProvider:
        """A new provider storing under ``tmp_path`` (called several times with the same folder)."""
        raise NotImplementedError("implement make_provider(tmp_path) to return your provider")

    def _check(self, name: str, tmp_path: Path) -> None:
        failure = _run(name, self.make_provider, Path(tmp_path), self.contract)
        if failure is not None:
            raise ContractViolation([failure])

    def test_contract_name(self, tmp_path: Path) -> None:
        self._check("name", tmp_path)

    def test_contract_available(self, tmp_path: Path) -> None:
        self._check("available", tmp_path)

    def test_contract_tool_budget(self, tmp_path: Path) -> None:
        self._check("tool_budget", tmp_path)

    def test_contract_tool_schemas(self, tmp_path: Path) -> None:
        self._check("tool_schemas", tmp_path)

    def test_contract_tool_calls(self, tmp_path: Path) -> None:
        self._check("tool_calls", tmp_path)

    def test_contract_unknown_tool(self, tmp_path: Path) -> None:
        self._check("unknown_tool", tmp_path)

    def test_contract_prefetch_shape(self, tmp_path: Path) -> None:
        self._check("prefetch_shape", tmp_path)

    def test_contract_persistence(self, tmp_path: Path) -> None:
        self._check("persistence", tmp_path)

    def test_contract_user_scope(self, tmp_path: Path) -> None:
        self._check("user_scope", tmp_path)

    def test_contract_shutdown(self, tmp_path: Path) -> None:
        self._check("shutdown", tmp_path)
