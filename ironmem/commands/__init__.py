"""The ``ironmem`` command's sub-commands, one module per concern.

Each module ``ironmem/commands/<name>.py`` exposes ``register(app: typer.Typer) -> None``, which adds its
commands to the ``ironmem`` app; :mod:`ironmem.cli` lists the modules in ``COMMAND_MODULES`` and calls each
``register`` (adding a module is one line there). Shared helpers (global options, the manager of the home, the
one-line :class:`~ironmem.commands.common.CLIError`) live in :mod:`ironmem.commands.common`. A module imports its
heavy dependencies inside the command functions, so ``ironmem --help`` stays fast.

Example (a module)::

    import typer
    from .common import opts

    def register(app: typer.Typer) -> None:
        @app.command()
        def hello(ctx: typer.Context) -> None:
            '''Say hello.'''
            typer.echo(f"hello from {opts(ctx).home}")
"""

from __future__ import annotations

import importlib

import typer

__all__ = ["register_all"]


def register_all(app: typer.Typer, modules: tuple[str, ...]) -> None:
    """Import ``ironmem.commands.<name>`` for each name and call its ``register(app)``."""
    for name in modules:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(app)
