"""``ironmem mcp``: one memory for every MCP client (needs ``pip install 'ironmem[mcp]'``); see docs/mcp.md."""

from __future__ import annotations

from .server import TOKEN_FILE, IronMemMCP, token_for

__all__ = ["TOKEN_FILE", "IronMemMCP", "token_for"]
