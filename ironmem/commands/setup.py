"""``ironmem setup`` (guided configuration) and ``ironmem doctor`` (check one).

``setup`` asks for the external provider (or none), checks that its package imports and that it is available
(its server answers, its embedder loads), asks for the settings it needs, writes ``config.yaml`` (owner-only: it
may hold keys) and shows the tool budget and the snapshot size the configuration leads to. Every question has a
flag, and ``--yes`` takes the defaults, so it runs in scripts::

    ironmem setup --home ~/.ironmem --provider local_vector --yes
    ironmem setup --provider mem0 --set api_key='${MEM0_API_KEY}' --yes

``doctor`` checks an existing ``config.yaml`` (:func:`ironmem.core.doctor.diagnose`): one line per problem, each
with its fix, exit status 1 when there is any. The prompts are typer's own (click's), so a test drives them
through stdin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from .common import CLIError, console, echo_json, opts

__all__ = ["DEFAULT_SETTINGS", "register"]

#: Settings ``--yes`` fills in for a provider's required keys, so the default choice works offline.
DEFAULT_SETTINGS: dict[str, dict[str, Any]] = {
    "local_vector": {"embedder": "ironmem.core.builtin.vectors:E5Embedder"},
}
#: What each provider needs, in one line (shown in the provider choice).
_ABOUT = {
    "local_vector": "vectors in SQLite on this machine (sqlite-vec + a local embedding model), offline",
    "mem0": "Mem0, hosted or self-hosted (mem0ai; an API key or a local config)",
    "honcho": "Honcho, hosted user modelling (an API key)",
    "supermemory": "Supermemory, hosted (an API key)",
    "hindsight": "Hindsight server (a URL)",
    "openviking": "OpenViking server (a URL)",
}


def _home_path(home: str | None) -> Path:
    from ..core.home import default_home

    return Path(home).expanduser() if home else default_home()


def _config_yaml(home: Path, provider: str | None, settings: dict[str, Any], config_path: Path) -> str:
    import yaml

    memory: dict[str, Any] = {"home": str(home)}
    if provider:
        memory["provider"] = provider
    data: dict[str, Any] = {"memory": memory}
    if provider:
        data[provider] = settings
    header = ("# ironmem configuration, written by `ironmem setup`; check it with `ironmem doctor`.\n"
              "# Every setting: docs/configuration.md\n")
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _parse_sets(values: list[str]) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise CLIError(f"--set {item!r}: write it as KEY=VALUE (for example --set top_k=8)")
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def _required_fields(provider: str) -> dict[str, str]:
    """Required settings of ``provider``: name -> description."""
    from ..core.config import provider_class

    model = getattr(provider_class(provider), "settings_model", None)
    if model is None:
        return {}
    return {name: info.description or "" for name, info in model.model_fields.items() if info.is_required()}


def _choose_provider(provider: str | None, yes: bool) -> str | None:
    from ..core.config import available_providers

    names = list(available_providers())
    if provider is None and not yes:
        out = console()
        out.print(Text("External memory provider (rule 1: at most one, beside the built-in MEMORY.md/USER.md):"))
        out.print(Text("  none          the built-in memory alone (the default; works everywhere)"))
        for name in names:
            out.print(Text(f"  {name:<13} {_ABOUT.get(name, '')}"))
        provider = typer.prompt("provider", default="none")
    choice = (provider or "none").strip()
    if choice in ("none", "builtin", ""):
        return None
    if choice not in names:
        import difflib

        close = difflib.get_close_matches(choice, names, n=1)
        raise CLIError(f"unknown provider {choice!r}{f' (did you mean {close[0]!r}?)' if close else ''}; "
                       f"choose none or one of {', '.join(names)}")
    return choice


def _check_package(provider: str) -> None:
    from ..core.config import provider_class
    from ..core.errors import ConfigError

    try:
        provider_class(provider)
    except ConfigError as exc:
        raise CLIError(f"{exc} Nothing was written") from None


def _fill_settings(provider: str, given: dict[str, Any], yes: bool) -> dict[str, Any]:
    settings = dict(given)
    for name, about in _required_fields(provider).items():
        if name in settings:
            continue
        default = DEFAULT_SETTINGS.get(provider, {}).get(name)
        if yes:
            if default is None:
                raise CLIError(f"{provider}.{name} is required ({about}); pass --set {name}=VALUE. Nothing was written")
            settings[name] = default
        else:
            settings[name] = typer.prompt(f"{provider}.{name} ({about})", default=default)
    return settings


def _report(config_path: Path, home: Path) -> dict[str, Any]:
    """Build the manager from the written file: the tool budget and the snapshot a new session gets."""
    from ..core.config import manager_from_config
    from ..core.errors import IronMemError

    manager = manager_from_config(config_path, home=home)
    try:
        budget = manager.tool_budget_status()
        session = manager.start_session("ironmem-setup")
        snapshot = session.system_prompt_block()
        session.end()
    finally:
        manager.close()
    report: dict[str, Any] = {"config": str(config_path), "home": str(home), "tool_budget": budget,
                              "snapshot_chars": len(snapshot)}
    try:
        from ..analysis.tokens import TokenCounter

        report["snapshot_tokens"] = TokenCounter("o200k_base").count(snapshot)
    except (IronMemError, OSError, ValueError) as exc:  # offline without the encoding file: characters only
        report["snapshot_tokens_note"] = f"token count unavailable ({exc})"
    return report


_SET_OPTION = typer.Option([], "--set", help="A provider setting KEY=VALUE (repeatable).")


def register(app: typer.Typer) -> None:
    """Add ``ironmem setup`` and ``ironmem doctor``."""

    @app.command()
    def setup(
        ctx: typer.Context,
        home: str | None = typer.Option(None, "--home", help="Memory home to create or use (default: "
                                        "$IRONMEM_HOME or ~/.ironmem)."),
        provider: str | None = typer.Option(None, "--provider", "-p",
                                            help="External provider: none, local_vector, mem0, ... (asked if omitted)."),
        set_: list[str] = _SET_OPTION,
        config: str | None = typer.Option(None, "--config", help="Where to write config.yaml (default: "
                                          "<home>/config.yaml)."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Ask nothing: take the defaults."),
        force: bool = typer.Option(False, "--force", help="Replace an existing config.yaml."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Guided configuration: choose the external provider (or none), check it, write config.yaml, and show
        the tool budget and snapshot size it leads to."""
        from ..core.errors import IronMemError
        from ..core.fileio import write_atomic

        options = opts(ctx, home)
        root = _home_path(options.home)
        config_path = Path(config or options.config or root / "config.yaml").expanduser()
        if config_path.exists() and not force:
            if yes or not typer.confirm(f"{config_path} exists; replace it?", default=False):
                raise CLIError(f"{config_path} exists; nothing was written. Check it with `ironmem doctor "
                               f"--config {config_path}`, or pass --force to replace it")
        chosen = _choose_provider(provider, yes)
        settings: dict[str, Any] = {}
        if chosen is not None:
            _check_package(chosen)
            settings = _fill_settings(chosen, _parse_sets(set_), yes)
        elif set_:
            raise CLIError("--set gives provider settings, but no provider is chosen; pass --provider NAME")
        if root.exists() and not root.is_dir():
            raise CLIError(f"memory home {root} is not a folder; pass a folder for --home")
        created = not root.exists()
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            config_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CLIError(f"cannot create {root}: {exc.strerror or exc}") from None
        text = _config_yaml(root, chosen, settings, config_path)
        previous = config_path.read_bytes() if config_path.exists() else None
        write_atomic(config_path, text.encode("utf-8"), mode=0o600)
        try:
            report = _report(config_path, root)
        except IronMemError as exc:  # the provider's server or model is not there: leave things as they were
            if previous is None:
                config_path.unlink(missing_ok=True)
            else:
                write_atomic(config_path, previous, mode=0o600)
            if created:
                try:
                    root.rmdir()
                except OSError:
                    pass
            raise CLIError(f"{exc}. Nothing was written; fix that and run `ironmem setup` again") from None
        report.update(provider=chosen, created_home=created)
        if as_json:
            echo_json(report)
            return
        out = console()
        out.print(Text(f"wrote {config_path}" + (f" and created the memory home {root}" if created else "")))
        out.print(Text(f"external provider: {chosen or 'none (the built-in memory alone)'}"))
        budget = report["tool_budget"]
        out.print(Text(f"tool budget: the external provider's tools cost {budget['used']:,} of "
                       f"{budget['limit']:,} tokens"))
        tokens = report.get("snapshot_tokens")
        out.print(Text(f"snapshot: {report['snapshot_chars']:,} characters"
                       + (f", {tokens:,} tokens (o200k_base)" if tokens is not None else "")
                       + " in every session's system prompt"))
        where = "" if options.config or config else f" --config {config_path}"
        out.print(Text(f"next: `ironmem{where} doctor` checks it, `ironmem{where} status` shows it"))

    @app.command()
    def doctor(
        ctx: typer.Context,
        home: str | None = typer.Option(None, "--home", help="Memory home whose config.yaml to check."),
        probe: bool = typer.Option(True, "--probe/--no-probe", help="Build the manager (contacts the provider)."),
        as_json: bool = typer.Option(False, "--json", help="Print the problems as JSON."),
    ) -> None:
        """Check a configuration (--config, else <home>/config.yaml): one line per problem with its fix; exit
        status 1 when there is any."""
        from ..core.doctor import diagnose

        options = opts(ctx, home)
        if options.config:
            path = Path(options.config).expanduser()
            override = options.home
        else:
            path = _home_path(options.home) / "config.yaml"
            override = None
        problems = diagnose(path, home=override, probe=probe)
        if as_json:
            echo_json({"config": str(path), "problems": [p.__dict__ for p in problems]})
        elif not problems:
            console().print(Text(f"{path}: no problem found"))
        else:
            for problem in problems:
                typer.echo(problem.line())
        if problems:
            raise typer.Exit(1)
