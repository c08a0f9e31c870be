"""Check a ``config.yaml`` and the memory home it names: every problem found, each with its fix.

:func:`load_config` stops at the first problem (a program needs one clear error); :func:`diagnose` goes on and
collects them all, so ``ironmem doctor`` can print one line per problem. It checks, in order: the file (exists,
UTF-8, YAML, a mapping), every setting of the ``memory`` section (each invalid key is its own problem), the
sections (unknown names, rule 1), the external provider (registered, importable, its settings, available: its
package and its server), the memory home (exists, writable, memory files readable) and the tool budget.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.yaml").write_text("memory:\\n  home: .\\n  prefetch_timeout: -1\\n  colour: red\\n")
    >>> [p.key for p in diagnose(folder / "config.yaml")]
    ['memory.prefetch_timeout', 'memory.colour']
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .config import (
    IronMemConfig,
    MemorySettings,
    available_providers,
    load_config,
    manager_from_config,
    provider_class,
)
from .errors import ConfigError, IronMemError

__all__ = ["Problem", "diagnose"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a configuration: where (``key``), what, and how to fix it."""

    key: str
    message: str
    fix: str

    def line(self) -> str:
        """``key: message. Fix: fix`` on one line."""
        return f"{self.key}: {self.message}. Fix: {self.fix}"


def _field_problems(section: str, model: type[BaseModel], data: dict[str, Any]) -> list[Problem]:
    try:
        model.model_validate(data)
    except ValidationError as exc:
        fields = list(model.model_fields)
        out = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            key = f"{section}.{loc}" if loc else section
            if err["type"] == "extra_forbidden":
                import difflib

                close = difflib.get_close_matches(loc, fields, n=1, cutoff=0.5)
                fix = f"rename it to {close[0]!r}" if close else f"delete it (settings: {', '.join(fields)})"
                out.append(Problem(key, "unknown setting", fix))
            elif err["type"] == "missing":
                info = model.model_fields.get(loc)
                what = f" ({info.description})" if info is not None and info.description else ""
                out.append(Problem(key, f"required setting is missing{what}", f"add {loc}: ... to the {section!r} section"))
            else:
                out.append(Problem(key, f"{err['msg']} (got {err.get('input')!r})",
                                   f"set a valid value (see `{section}` in docs/configuration.md)"))
        return out
    return []


def _structure_problems(data: dict[str, Any]) -> list[Problem]:
    """Per-key problems the first-error loader would report one at a time."""
    problems: list[Problem] = []
    memory = data.get("memory") or {}
    if not isinstance(memory, dict):
        return [Problem("memory", f"must be a mapping of settings, got {type(memory).__name__}",
                        "write the settings indented under 'memory:'")]
    problems += _field_problems("memory", MemorySettings, memory)
    registry = available_providers()
    for name in data:
        if name != "memory" and name not in registry:
            problems.append(Problem(str(name), "unknown section",
                                    f"delete it, or name a registered provider ({', '.join(registry)})"))
    return problems


def diagnose(path: str | os.PathLike[str], *, home: str | os.PathLike[str] | None = None,
             probe: bool = True) -> list[Problem]:
    """Every problem of the configuration at ``path`` (``home`` overrides ``memory.home``); ``[]`` when it is
    usable. ``probe=False`` skips building the manager (no contact with the provider's server)."""
    import yaml

    source = Path(path).expanduser()
    if not source.is_file():
        return [Problem(str(source), "config file not found", "create it with `ironmem setup`, or pass --config PATH")]
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return [Problem(str(source), "not UTF-8 text", "save the file as UTF-8")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return [Problem(str(source), f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}",
                        "fix the YAML syntax there (indentation, a missing ':')")]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return [Problem(str(source), "the top level is not a mapping", "start the file with a 'memory:' section")]
    problems = _structure_problems(data)
    if problems:
        return problems
    try:
        config = load_config(source)
    except ConfigError as exc:  # rule 1, the provider's name, package or settings: the loader's own words
        return [_from_error(exc)]
    if home is not None:
        from dataclasses import replace

        config = replace(config, home=Path(home).expanduser())
    problems += _home_problems(config)
    if config.provider is not None:
        try:
            provider_class(config.provider)
        except ConfigError as exc:
            return [*problems, _from_error(exc)]
    if probe and not problems:
        problems += _manager_problems(config)
    return problems


def _from_error(exc: IronMemError) -> Problem:
    text = str(exc).removeprefix("invalid configuration: ")
    key, sep, rest = text.partition(": ")
    if not sep or " " in key:
        key, rest = "config", text
    return Problem(key, rest.rstrip("."), "see the message; docs/configuration.md lists every setting")


def _home_problems(config: IronMemConfig) -> list[Problem]:
    home = config.home
    if config.memory.storage and config.memory.storage != "files":
        return []  # a database holds the entries; the home keeps only local state
    if not home.exists():
        return [Problem("memory.home", f"{home} does not exist",
                        f"create it (`mkdir -p {home}`, or `ironmem setup --home {home}`) or fix memory.home")]
    if not home.is_dir():
        return [Problem("memory.home", f"{home} is not a folder", "point memory.home at a folder")]
    if not os.access(home, os.W_OK | os.X_OK):
        return [Problem("memory.home", f"{home} is not writable by this user",
                        "fix its permissions, or run as its owner (reading still works)")]
    return []


def _manager_problems(config: IronMemConfig) -> list[Problem]:
    problems: list[Problem] = []
    try:
        manager = manager_from_config(config, read_only=True)
    except IronMemError as exc:
        return [_from_error(exc)]
    try:
        for target, info in manager.status().get("files", {}).items():
            if info.get("error"):
                problems.append(Problem(f"{target} file", str(info["error"]),
                                        f"fix or delete {info.get('path')} (a copy is kept when ironmem reads it)"))
            elif info.get("over_limit"):
                problems.append(Problem(f"{target} file", f"over its limit: {info.get('usage')}",
                                        "remove entries (`ironmem show`, `ironmem remove`) or raise the limit"))
        budget = manager.tool_budget_status()
        if budget.get("used", 0) > budget.get("limit", 0):
            problems.append(Problem("memory.tool_budget", f"the provider's tools cost {budget['used']} tokens, "
                                    f"over the budget of {budget['limit']}",
                                    f"choose fewer tools ({config.provider}.tools: [...]) or raise memory.tool_budget"))
    finally:
        manager.close()
    return problems
