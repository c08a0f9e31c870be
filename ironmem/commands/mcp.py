"""``ironmem mcp``: serve the memory home over the Model Context Protocol (stdio, or streamable HTTP)."""

from __future__ import annotations

import sys

import typer

from .common import HOME_OPTION, CLIError, open_manager, opts

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``ironmem mcp``."""

    @app.command("mcp")
    def mcp_(
        ctx: typer.Context,
        home: str | None = HOME_OPTION,
        user: str | None = typer.Option(None, "--user", "-u", help="The user this server serves (stdio), or the "
                                        "user of the token it creates (HTTP). Default: the shared files."),
        http: bool = typer.Option(False, "--http", help="Streamable HTTP on 127.0.0.1 instead of stdio."),
        port: int = typer.Option(8765, "--port", help="HTTP port (on 127.0.0.1 only)."),
        token_only: bool = typer.Option(False, "--token", help="Print the user's bearer token and exit."),
    ) -> None:
        """An MCP server over this memory: tools memory, session_search, memory_recall; the frozen snapshot as a
        resource and a prompt. One connection = one session."""
        try:
            import anyio

            from ..mcp import IronMemMCP, token_for
        except ImportError as exc:
            raise CLIError(f"ironmem mcp needs the MCP SDK ({exc}): pip install 'ironmem[mcp]'") from None
        options = opts(ctx, home)
        manager = open_manager(options, read_only=False)
        try:
            if token_only:
                sys.stdout.write(token_for(manager.home, user) + "\n")
                return
            server = IronMemMCP(manager, user_id=user)
            if not http:
                anyio.run(server.run_stdio)
                return
            import uvicorn

            token_for(manager.home, user)
            sys.stderr.write(f"ironmem mcp: http://127.0.0.1:{port}/mcp; bearer token: `ironmem mcp --token"
                             f"{' --user ' + user if user else ''}` (kept in {manager.home}/.ironmem/mcp-tokens.json)\n")
            uvicorn.run(server.http_app(), host="127.0.0.1", port=port, log_level="warning")
            server.close()
        finally:
            manager.close()
