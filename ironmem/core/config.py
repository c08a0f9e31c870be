"""``config.yaml`` loading (validated with pydantic) and the provider registry (entry points).

A config file has one ``memory`` section and, optionally, one section for the external provider::

    memory:
      home: ~/.ironmem          # optional; relative paths are relative to this file
      memory_enabled: true      # Hermes's keys are accepted as Hermes writes them
      user_profile_enabled: true
      memory_char_limit: 2200
      user_char_limit: 1375
      memory_per_user: true     # false: agent notes (MEMORY.md) shared by all user ids (USER.md always is per user)
      prefetch_timeout: 3.0
      strict: false
      tool_budget: 600          # tokens the external provider's tool schemas may cost (see ironmem.core.budget)
      storage: files            # or postgresql://user:pass@host/db (one memory shared by many machines)
      provider: local_vector    # optional: the ONE external provider (rule 1)
    local_vector:               # that provider's own settings
      embedder: my_project.embeddings:embedder
      tools: [vector_search]    # optional, in any provider section: which of its tools to expose ([] for none)

How the external provider is chosen:

- ``memory.provider`` names it. Without it, a single provider section selects its provider.
- Rule 1 is checked here too: ``provider: [a, b]``, or a second provider section next to the chosen one, is an
  error. A section kept only for switching later must say ``enabled: false``.

Environment variables override the file (for secrets above all): ``IRONMEM_<PROVIDER>_<KEY>`` sets the key
``<key>`` of a provider's section (``IRONMEM_MEM0_API_KEY``, ``IRONMEM_LOCAL_VECTOR_PATH``); a provider may also
honour its vendor's variable (``MEM0_API_KEY``); ``IRONMEM_MEMORY_<KEY>`` sets a key of the ``memory`` section
(``IRONMEM_MEMORY_PREFETCH_TIMEOUT=5``). A value written ``${NAME}`` in the file is read from the environment.
Precedence: ``IRONMEM_*`` variable, then the vendor variable, then the file.

Providers are found by name in the entry-point group ``ironmem.providers``; ironmem registers ``mem0`` and
``local_vector`` there. A provider class may declare ``settings_model`` (a pydantic model for its section),
``env_aliases`` (``{"api_key": "MEM0_API_KEY"}``) and ``from_config(settings, *, home)``; without them the
section's keys are passed to the constructor.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "config.yaml").write_text("memory:\\n  home: mem\\n  prefetch_timeout: 2\\n")
    >>> config = load_config(folder / "config.yaml")
    >>> config.memory.prefetch_timeout, config.provider
    (2.0, None)
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import re
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .budget import DEFAULT_TOOL_BUDGET
from .errors import ConfigError
from .provider import MemoryProvider

if TYPE_CHECKING:  # pragma: no cover
    from .manager import MemoryManager

__all__ = [
    "ENTRY_POINT_GROUP",
    "MemorySettings",
    "IronMemConfig",
    "available_providers",
    "provider_class",
    "load_config",
    "build_provider",
    "manager_from_config",
    "import_object",
]

log = logging.getLogger("ironmem.config")

ENTRY_POINT_GROUP = "ironmem.providers"

#: ironmem's own providers, used when the package metadata (entry points) is missing, e.g. when running from a
#: source checkout that was never installed. Installed entry points always win.
_OWN_PROVIDERS = {
    "mem0": "ironmem.providers.mem0:Mem0Provider",
    "local_vector": "ironmem.providers.local_vector:LocalVectorProvider",
    # hosted services (issue 19)
    "honcho": "ironmem.providers.honcho:HonchoProvider",
    "supermemory": "ironmem.providers.supermemory:SupermemoryProvider",
    "hindsight": "ironmem.providers.hindsight:HindsightProvider",
    "openviking": "ironmem.providers.openviking:OpenVikingProvider",
}

_MEMORY_SECTION = "memory"
_SECTION_SWITCH = "enabled"
_SECTION_TOOLS = "tools"  # in any provider section: which of its tools to expose (rule 1's token budget)
_SECRET_KEY = re.compile(r"key|secret|token|password|credential", re.IGNORECASE)
_ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


class MemorySettings(BaseModel):
    """The ``memory`` section: where memory lives, its limits, and the external provider's name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    home: Path | None = Field(None, description="Memory folder (MEMORY.md, USER.md). Default: $IRONMEM_HOME or ~/.ironmem")
    memory_char_limit: int = Field(2200, gt=0, description="Character limit of MEMORY.md")
    user_char_limit: int = Field(1375, gt=0, description="Character limit of USER.md")
    prefetch_timeout: float = Field(3.0, gt=0, description="Seconds a turn waits for the external provider's recall")
    tool_timeout: float = Field(30.0, gt=0, description="Seconds a tool call into the external provider may take")
    sync_drain_timeout: float = Field(30.0, gt=0, description="Seconds session.end() waits for queued syncs")
    strict: bool = Field(False, description="Raise instead of warning when a second provider is added")
    recall_budget: int = Field(5, ge=0, le=50, description="Items a turn's recall may hold (sets the fence's token budget)")
    embeddings: bool | Literal["auto", "e5", "minilm"] = Field(
        "auto", description="Recall ranking: 'auto' (hybrid with the local model when ironmem[embeddings] is "
        "installed, else lexical), false (lexical), true (e5, else MiniLM; an error when neither is installed), "
        "'e5' or 'minilm'"
    )
    provider: str | list[str] | None = Field(
        None, description="The one external provider, by registered name ('builtin' or empty: none, as in Hermes)"
    )
    # Hermes's own keys of its `memory:` section, so a Hermes config.yaml memory section loads as is.
    memory_enabled: bool = Field(True, description="Hermes key: MEMORY.md in the snapshot and writable")
    user_profile_enabled: bool = Field(True, description="Hermes key: USER.md in the snapshot and writable")
    nudge_interval: int | None = Field(None, description="Hermes key, accepted for compatibility; no effect here")
    flush_min_turns: int | None = Field(None, description="Hermes key, accepted for compatibility; no effect here")
    memory_per_user: bool = Field(
        True, description="Give each user id its own MEMORY.md too (USER.md always is); false shares agent notes"
    )
    tool_budget: int = Field(
        DEFAULT_TOOL_BUDGET, ge=0,
        description="Tokens the external provider's exposed tool schemas may cost (o200k_base, OpenAI format)",
    )
    storage: str | None = Field(
        None, description="Where entries and turns live: 'files' (default) or a postgresql:// URL"
    )
    overflow: Literal["archive", "refuse"] = Field(
        "archive", description="A write that does not fit: 'archive' moves the least recalled, oldest entries to the "
        "archive beside the file (searchable, restorable); 'refuse' refuses it as Hermes does"
    )
    write_approval: bool | str = Field(
        False, description="Hermes key: hold every memory write the agent makes for the user's approval (custody)"
    )
    trusted_tools: list[str] = Field(
        default_factory=list, description="Tools whose results do not make a turn untrusted (custody, docs/custody.md)"
    )
    held_recall: Literal["label", "hide"] = Field(
        "label", description="Held writes in recall: labelled as unverified, or hidden until approved"
    )


@dataclass
class IronMemConfig:
    """A validated configuration: the memory settings and the chosen provider with its settings."""

    memory: MemorySettings
    home: Path
    provider: str | None = None
    provider_settings: Any = None
    source: Path | None = None
    disabled_sections: list[str] = field(default_factory=list)
    provider_tools: list[str] | None = None  # the provider section's 'tools' list; None exposes all


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------
def available_providers() -> dict[str, EntryPoint]:
    """Every provider that can be named in ``memory.provider``: name -> entry point.

    Example:
        >>> {"local_vector", "mem0", "hindsight", "openviking"} <= set(available_providers())
        True
    """
    found: dict[str, EntryPoint] = {
        name: EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP) for name, value in _OWN_PROVIDERS.items()
    }
    try:
        installed = list(entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # pragma: no cover - broken metadata somewhere on sys.path
        log.warning("could not read entry points of group %r: %s", ENTRY_POINT_GROUP, exc)
        installed = []
    seen: dict[str, str] = {}
    for ep in installed:
        if ep.name in seen and seen[ep.name] != ep.value:
            log.warning(
                "memory provider %r is registered twice (%s and %s); using the first. Uninstall one of the packages.",
                ep.name, seen[ep.name], ep.value,
            )
            continue
        seen[ep.name] = ep.value
        found[ep.name] = ep
    return dict(sorted(found.items()))


def _suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" Did you mean {close[0]!r}?" if close else ""


def provider_class(name: str) -> type[MemoryProvider]:
    """The provider class registered under ``name``; :class:`ConfigError` if none is."""
    registry = available_providers()
    if name not in registry:
        known = ", ".join(registry) or "none"
        raise ConfigError(
            f"memory.provider: unknown provider {name!r}.{_suggest(name, list(registry))} Registered providers: "
            f"{known}. A third-party provider registers itself under the entry-point group {ENTRY_POINT_GROUP!r} "
            "when its package is installed; install it, or fix the name."
        )
    ep = registry[name]
    try:
        cls = ep.load()
    except ImportError as exc:
        raise ConfigError(
            f"memory.provider: provider {name!r} ({ep.value}) cannot be imported: {exc}. "
            f"Install its dependencies (for ironmem's own providers: pip install 'ironmem[{_extra_for(name)}]')."
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, MemoryProvider)):
        raise ConfigError(
            f"memory.provider: entry point {name!r} ({ep.value}) is not a MemoryProvider subclass; "
            "it must point at the provider class"
        )
    return cls


def _extra_for(name: str) -> str:
    return {"local_vector": "vector"}.get(name, name)


def import_object(path: str, *, key: str = "") -> Any:
    """Import ``"package.module:attribute"`` (or ``package.module.attribute``); ConfigError naming ``key``.

    Example:
        >>> import_object("os.path:join") is os.path.join
        True
    """
    where = f"{key}: " if key else ""
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{where}expected an import path such as 'my_package.module:object', got {path!r}")
    module_name, sep, attr = path.strip().partition(":")
    if not sep:
        module_name, _, attr = module_name.rpartition(".")
    if not module_name or not attr:
        raise ConfigError(f"{where}{path!r} is not an import path; write it as 'my_package.module:object'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{where}cannot import module {module_name!r} ({exc}); check the path and the installed packages") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise ConfigError(f"{where}module {module_name!r} has no attribute {attr!r}; check the name in {path!r}") from exc
    return obj


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------
def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    if not path.is_file():
        raise ConfigError(f"config file not found: {path}. Create it with `ironmem setup` (docs/configuration.md describes the file) or fix the path")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path} is not valid YAML{where}: {problem}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with a 'memory' section, got {type(data).__name__}")
    return data


def _expand_env_refs(value: Any, key: str) -> Any:
    if isinstance(value, str):
        match = _ENV_REF.match(value.strip())
        if match:
            name = match.group(1)
            if name not in os.environ:
                raise ConfigError(f"{key}: refers to the environment variable {name}, which is not set; set it or write the value")
            return os.environ[name]
        return value
    if isinstance(value, dict):
        return {k: _expand_env_refs(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env_refs(v, f"{key}[{i}]") for i, v in enumerate(value)]
    return value


def _env_prefix(section: str) -> str:
    return "IRONMEM_" + re.sub(r"[^A-Za-z0-9]", "_", section).upper() + "_"


def _env_overrides(section: str, model: type[BaseModel] | None, aliases: dict[str, str]) -> dict[str, str]:
    """Values for a section from ``IRONMEM_<SECTION>_<KEY>`` and from vendor variables (``aliases``)."""
    out: dict[str, str] = {}
    for key, var in aliases.items():
        if os.environ.get(var):
            out[key] = os.environ[var]
    prefix = _env_prefix(section)
    keys = list(model.model_fields) if model is not None else []
    for var, value in os.environ.items():
        if not var.startswith(prefix) or not value:
            continue
        key = var[len(prefix):].lower()
        if keys and key not in keys:
            # An IRONMEM_* variable that matches no setting is almost always a typo: say so.
            raise ConfigError(
                f"environment variable {var} sets {section}.{key}, which is not a setting of {section!r}.{_suggest(key, keys)} "
                f"Settings: {', '.join(keys)}"
            )
        out[key] = value
    return out


#: IRONMEM_* variables that are not config keys.
KNOWN_GLOBAL_VARIABLES = frozenset({
    "IRONMEM_HOME", "IRONMEM_DEBUG", "IRONMEM_LOCAL_MODEL",
    # read by the test suite, the benchmarks and CI (server venvs, PostgreSQL binaries, evaluation knobs)
    "IRONMEM_VENVS", "IRONMEM_SERVERS", "IRONMEM_SERVER_PYTHON", "IRONMEM_PG_BIN", "IRONMEM_PG_USER",
    "IRONMEM_RUN_LOSO", "IRONMEM_FENCE_EXAMPLES", "IRONMEM_BENCH_CACHE",
})


def unknown_environment_variables(environ: dict[str, str] | None = None) -> list[str]:
    """``IRONMEM_*`` variables that set nothing: neither a known global (``IRONMEM_HOME``, ``IRONMEM_DEBUG``)
    nor a key of the ``memory`` section or of a registered provider's section. Almost always typos.

    Example:
        >>> unknown_environment_variables({"IRONMEM_HOME": "/x", "IRONMEM_HOMEE": "/x", "PATH": "/bin"})
        ['IRONMEM_HOMEE']
    """
    env = os.environ if environ is None else environ
    memory_keys = set(MemorySettings.model_fields)
    providers = {name: _env_prefix(name) for name in available_providers()}
    unknown = []
    for var in sorted(env):
        if not var.startswith("IRONMEM_") or var in KNOWN_GLOBAL_VARIABLES:
            continue
        prefix = _env_prefix("memory")
        if var.startswith(prefix) and var[len(prefix):].lower() in memory_keys:
            continue
        if any(var.startswith(p) for p in providers.values()):
            continue  # checked against the provider's own settings when its section loads
        unknown.append(var)
    return unknown


def _format_validation(section: str, exc: ValidationError, model: type[BaseModel]) -> str:
    lines = []
    fields = list(model.model_fields)
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        key = f"{section}.{loc}" if loc else section
        kind = err["type"]
        if kind == "extra_forbidden":
            last = str(err["loc"][-1]) if err["loc"] else ""
            lines.append(
                f"{key}: unknown setting.{_suggest(last, fields)} Allowed in {section!r}: {', '.join(fields)}"
            )
        elif kind == "missing":
            info = model.model_fields.get(str(err["loc"][0])) if err["loc"] else None
            hint = f" ({info.description})" if info is not None and info.description else ""
            lines.append(f"{key}: required setting is missing{hint}; add it to the {section!r} section")
        else:
            shown = "***" if _SECRET_KEY.search(loc) else repr(err.get("input"))
            lines.append(f"{key}: {err['msg']} (got {shown})")
    return "; ".join(lines)


def _validate(section: str, model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"invalid configuration: {_format_validation(section, exc, model)}") from exc


def _provider_names(value: str | list[str] | None) -> list[str]:
    """The external providers named; Hermes writes ``provider: builtin`` (or an empty string) for none."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    return [item.strip() for item in items if item.strip() and item.strip() != "builtin"]


def load_config(path: str | Path) -> IronMemConfig:
    """Read and validate ``path``; :class:`ConfigError` names the key and the fix for any problem."""
    source = Path(path).expanduser()
    data = _read_yaml(source)
    data = _expand_env_refs(data, "")
    data = {str(k): v for k, v in data.items()}

    memory_raw = data.pop(_MEMORY_SECTION, None) or {}
    if not isinstance(memory_raw, dict):
        raise ConfigError(f"memory: must be a mapping of settings, got {type(memory_raw).__name__}")
    memory_raw.update(_env_overrides(_MEMORY_SECTION, MemorySettings, {}))
    memory = _validate(_MEMORY_SECTION, MemorySettings, memory_raw)

    registry = available_providers()
    # Sections other than 'memory' must belong to a registered provider.
    sections: dict[str, dict[str, Any]] = {}
    disabled: list[str] = []
    for name, body in data.items():
        if name not in registry:
            options = [_MEMORY_SECTION, *registry]
            raise ConfigError(
                f"{name}: unknown section.{_suggest(name, options)} The top level may hold 'memory' and one section "
                f"per registered provider ({', '.join(registry) or 'none registered'})"
            )
        body = {} if body is None else body
        if not isinstance(body, dict):
            raise ConfigError(f"{name}: a provider section must be a mapping of settings, got {type(body).__name__}")
        body = dict(body)
        enabled = body.pop(_SECTION_SWITCH, True)
        if not isinstance(enabled, bool):
            raise ConfigError(f"{name}.{_SECTION_SWITCH}: must be true or false, got {enabled!r}")
        if enabled:
            sections[name] = body
        else:
            disabled.append(name)

    names = _provider_names(memory.provider)
    if len(names) > 1:
        raise ConfigError(
            f"memory.provider: lists {len(names)} providers ({', '.join(names)}), but ironmem runs ONE external "
            "provider beside the built-in memory (rule 1: every provider adds tools to every request and two "
            f"backends would store the same facts twice). Keep one, e.g. 'provider: {names[0]}'"
        )
    chosen = names[0] if names else None
    if chosen is None and len(sections) > 1:
        raise ConfigError(
            f"two provider sections are enabled ({', '.join(sections)}), but ironmem runs ONE external provider "
            f"(rule 1). Choose one with 'memory.provider: <name>' and mark the others 'enabled: false' or delete them"
        )
    if chosen is None and len(sections) == 1:
        chosen = next(iter(sections))
    if chosen is not None:
        if chosen not in registry:
            provider_class(chosen)  # raises the unknown-provider error
        others = [name for name in sections if name != chosen]
        if others:
            raise ConfigError(
                f"{others[0]}: a second provider section is enabled while memory.provider is {chosen!r}; ironmem runs "
                f"ONE external provider (rule 1). Delete the {others[0]!r} section or add 'enabled: false' to it"
            )

    home = _resolve_home(memory.home, source)
    config = IronMemConfig(memory=memory, home=home, provider=chosen, source=source, disabled_sections=disabled)
    if chosen is not None:
        cls = provider_class(chosen)
        model: type[BaseModel] | None = getattr(cls, "settings_model", None)
        aliases: dict[str, str] = dict(getattr(cls, "env_aliases", {}) or {})
        body = dict(sections.get(chosen, {}))
        tools = body.get(_SECTION_TOOLS) if model is not None and _SECTION_TOOLS in model.model_fields else None
        config.provider_tools = _section_tools(chosen, body.pop(_SECTION_TOOLS, None))
        if tools is not None:  # a provider that chooses its own tools (opt-in extras) gets the list too
            body[_SECTION_TOOLS] = tools
        body.update(_env_overrides(chosen, model, aliases))
        if model is not None:
            config.provider_settings = _validate(chosen, model, body)
        else:
            config.provider_settings = body
    return config


def _section_tools(section: str, value: Any) -> list[str] | None:
    """A provider section's ``tools`` list (names of its tools to expose); None when absent."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(
            f"{section}.{_SECTION_TOOLS}: must be a list of the provider's tool names (e.g. [{section}_search]), "
            f"got {value!r}; an empty list exposes no tools"
        )
    return [v.strip() for v in value]


def _resolve_home(home: Path | None, source: Path) -> Path:
    if home is None:
        from .home import default_home

        return default_home()
    home = Path(os.path.expandvars(str(home))).expanduser()
    if not home.is_absolute():
        home = (source.parent / home).resolve()
    return home


# --------------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------------
def build_provider(name: str, settings: Any, *, home: Path) -> MemoryProvider:
    """Create provider ``name`` from validated ``settings``; errors become :class:`ConfigError`."""
    cls = provider_class(name)
    try:
        factory = getattr(cls, "from_config", None)
        if factory is not None:
            provider = factory(settings, home=home)
        elif isinstance(settings, BaseModel):
            provider = cls(**settings.model_dump())
        else:
            provider = cls(**(settings or {}))
    except ConfigError:
        raise
    except TypeError as exc:
        raise ConfigError(f"{name}: the provider rejected its settings: {exc}. Check the {name!r} section") from exc
    except Exception as exc:
        raise ConfigError(f"{name}: the provider could not be created: {type(exc).__name__}: {exc}") from exc
    if not isinstance(provider, MemoryProvider):
        raise ConfigError(f"{name}: from_config returned {type(provider).__name__}, not a MemoryProvider")
    return provider


def manager_from_config(
    path: str | Path | IronMemConfig, *, home: str | Path | None = None, read_only: bool = False
) -> MemoryManager:
    """A :class:`~ironmem.MemoryManager` built from ``config.yaml`` at ``path`` (or an already loaded
    :class:`IronMemConfig`), with its provider attached. ``home`` overrides the file's ``memory.home``;
    ``read_only`` opens the memory for inspection (see :class:`~ironmem.MemoryManager`).

    A configured provider that cannot join (unavailable, tools over the budget) is a :class:`ConfigError`: the file
    asked for it, so running without it silently would hide the problem.
    """
    from dataclasses import replace

    from .manager import MemoryManager
    from .security.policy import Policy

    config = path if isinstance(path, IronMemConfig) else load_config(path)
    if home is not None:
        config = replace(config, home=Path(home).expanduser())
    settings = config.memory
    provider = build_provider(config.provider, config.provider_settings, home=config.home) if config.provider else None
    manager = MemoryManager(
        home=config.home,
        memory_char_limit=settings.memory_char_limit,
        user_char_limit=settings.user_char_limit,
        strict=settings.strict,
        prefetch_timeout=settings.prefetch_timeout,
        tool_timeout=settings.tool_timeout,
        sync_drain_timeout=settings.sync_drain_timeout,
        memory_enabled=settings.memory_enabled,
        user_profile_enabled=settings.user_profile_enabled,
        memory_per_user=settings.memory_per_user,
        tool_budget=settings.tool_budget,
        recall_budget=settings.recall_budget,
        embeddings=settings.embeddings,
        storage=settings.storage,
        read_only=read_only,
        overflow=settings.overflow,
        policy=Policy(trusted_tools=frozenset(settings.trusted_tools), write_approval=settings.write_approval,
                      held_recall=settings.held_recall),
    )
    if provider is not None:
        reason = ""
        try:
            available = bool(provider.is_available())
        except Exception as exc:
            available, reason = False, f"is_available() raised {type(exc).__name__}: {exc}"
        if not available:
            reason = reason or str(getattr(provider, "unavailable_reason", "") or "it reports it is not available")
        else:
            try:
                added = manager.add_provider(provider, tools=config.provider_tools)
            except ConfigError as exc:
                added, reason = False, f"{config.provider}.{_SECTION_TOOLS}: {exc}"
            if not added and not reason:
                reason = ("the manager refused it (see the warning above: its tools are over memory.tool_budget, "
                          "or tool_schemas() failed)")
        if reason:
            manager.close()
            try:
                provider.shutdown()
            except Exception:  # pragma: no cover - best effort
                pass
            raise ConfigError(f"memory.provider: {config.provider!r} is configured but cannot be used: {reason}")
    return manager
