"""The MCP server over one ironmem memory (``ironmem mcp``), on the official ``mcp`` SDK's low-level server.

One MCP connection is one ironmem :class:`~ironmem.core.session.Session`, started at the connection's first request
and ended when the connection goes: its snapshot is frozen for the connection's whole life (rule 3), writes land
on disk at once and show in the next connection's snapshot and in this connection's recall (the live delta).

What a client gets:

* tools: the session's own (``memory``, ``session_search``, and the external provider's within rule 1's tool
  budget) with their JSON schemas, plus ``memory_recall`` (the fenced recall for a message, rule 2); every result
  is the JSON the session returns (errors included: a tool never raises into the client's agent loop);
* the frozen snapshot as the resource ``memory://snapshot`` and the prompt ``memory_snapshot``.

Users: stdio serves one user (``--user``, or the shared files). Streamable HTTP listens on 127.0.0.1 only and
answers only requests carrying ``Authorization: Bearer <token>``; each token belongs to one user id (the token
file, owner-only, maps tokens to users), so the user comes from the token, never from the request. A request
asking for another scope (header ``X-Ironmem-User``) or reusing another user's connection is refused.

Example (a shell)::

    $ ironmem mcp                      # stdio, for a desktop assistant or an IDE
    $ ironmem mcp --http --user ada    # http://127.0.0.1:8765/mcp, token in <home>/.ironmem/mcp-tokens.json
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from pydantic import AnyUrl

from ..core.fileio import write_atomic

if TYPE_CHECKING:  # pragma: no cover
    from ..core.manager import MemoryManager
    from ..core.session import Session

__all__ = ["IronMemMCP", "TOKEN_FILE", "token_for"]

TOKEN_FILE = "mcp-tokens.json"
SNAPSHOT_URI = "memory://snapshot"
_RECALL = types.Tool(
    name="memory_recall",
    description="Recalled memory for a message, inside a <memory-context> fence: background, not new user input. "
                "Call it with the user's message before answering.",
    inputSchema={"type": "object", "properties": {"message": {"type": "string", "description": "the user's message"}},
                  "required": ["message"]},
)
_USER_STATE = "ironmem_user"
_ANONYMOUS = ""  # the user of a token with no user id: the shared files


def _token_path(home: Path) -> Path:
    return home / ".ironmem" / TOKEN_FILE


def _read_tokens(home: Path) -> dict[str, str]:
    try:
        data = json.loads(_token_path(home).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(k): str(v) for k, v in data.get("tokens", {}).items()}


def token_for(home: str | os.PathLike[str], user_id: str | None = None) -> str:
    """The bearer token of ``user_id`` (None: the shared files) for ``home``'s HTTP server, created on first use
    and kept in ``<home>/.ironmem/mcp-tokens.json`` (mode 0600)."""
    root = Path(home).expanduser()
    tokens = _read_tokens(root)
    wanted = user_id or _ANONYMOUS
    for token, user in tokens.items():
        if user == wanted:
            return token
    token = secrets.token_urlsafe(32)
    tokens[token] = wanted
    path = _token_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"tokens": tokens}, indent=2).encode("utf-8"), mode=0o600)
    return token


def _text(value: str) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=value)]


class IronMemMCP:
    """An MCP server over ``manager``: ``run_stdio()`` or ``http_app()`` (an ASGI app).

    Example:
        >>> import tempfile
        >>> from ironmem import MemoryManager
        >>> server = IronMemMCP(MemoryManager(home=tempfile.mkdtemp()))
        >>> server.server.name
        'ironmem'
    """

    def __init__(self, manager: MemoryManager, *, user_id: str | None = None) -> None:
        self.manager = manager
        self.user_id = user_id  # stdio's user; over HTTP the token says
        self._lock = threading.Lock()
        #: The SDK's ServerSession (one per connection) -> (user, ironmem session).
        self._sessions: weakref.WeakKeyDictionary[Any, tuple[str, Session]] = weakref.WeakKeyDictionary()
        self._open: set[Session] = set()
        server: Server[Any, Any] = Server(
            "ironmem",
            instructions="Persistent memory. Read the memory_snapshot prompt (or memory://snapshot) once as part of "
                         "your system prompt; call memory_recall with each user message; save durable facts with "
                         "the memory tool; search past conversations with session_search.",
        )
        server.list_tools()(self._list_tools)
        server.call_tool(validate_input=False)(self._call_tool)  # the session validates and answers in JSON
        server.list_resources()(self._list_resources)
        server.read_resource()(self._read_resource)
        server.list_prompts()(self._list_prompts)
        server.get_prompt()(self._get_prompt)
        self.server = server

    # -- one connection, one session --------------------------------------------------------------
    def _user_of(self, ctx: Any) -> str:
        request = getattr(ctx, "request", None)
        if request is None or not hasattr(request, "scope"):
            return self.user_id or _ANONYMOUS
        state = request.scope.get("state") or {}
        user = state.get(_USER_STATE)
        if user is None:  # pragma: no cover - the ASGI guard sets it for every request it lets through
            raise PermissionError("no authenticated user on this request")
        return str(user)

    def session_for(self) -> Session:
        """The ironmem session of the connection the current request belongs to (started on its first request,
        ended when the connection goes)."""
        ctx = self.server.request_context
        connection = ctx.session
        user = self._user_of(ctx)
        with self._lock:
            found = self._sessions.get(connection)
            if found is not None:
                if found[0] != user:
                    raise PermissionError("this MCP connection belongs to another user; open your own connection")
                return found[1]
            session = self.manager.start_session(f"mcp-{secrets.token_hex(6)}", user_id=user or None)
            self._sessions[connection] = (user, session)
            self._open.add(session)
        weakref.finalize(connection, self._end, session)
        return session

    def _end(self, session: Session) -> None:
        with self._lock:
            if session not in self._open:
                return
            self._open.discard(session)
        session.end()

    def close(self) -> None:
        """End every open session (their background syncs drain)."""
        for session in list(self._open):
            self._end(session)

    # -- handlers -----------------------------------------------------------------------------------
    async def _list_tools(self) -> list[types.Tool]:
        session = self.session_for()
        tools = [types.Tool(name=s.name, description=s.description, inputSchema=dict(s.parameters))
                 for s in session.tool_schemas()]
        return [*tools, _RECALL]

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            session = self.session_for()
        except PermissionError as exc:
            return types.CallToolResult(content=_text(json.dumps({"success": False, "error": str(exc)})),
                                        isError=True)
        args = dict(arguments or {})
        if name == _RECALL.name:
            message = args.get("message")
            if not isinstance(message, str):
                return types.CallToolResult(content=_text(json.dumps(
                    {"success": False, "error": "memory_recall needs a 'message' string"})), isError=True)
            fenced = await anyio.to_thread.run_sync(lambda: session.prefetch(message).fenced())
            return types.CallToolResult(content=_text(fenced))
        result = await anyio.to_thread.run_sync(lambda: session.handle_tool_call(name, args))
        failed = False
        try:
            failed = json.loads(result).get("success") is False
        except (ValueError, AttributeError):
            pass
        return types.CallToolResult(content=_text(result), isError=failed)

    async def _list_resources(self) -> list[types.Resource]:
        return [types.Resource(uri=AnyUrl(SNAPSHOT_URI), name="memory_snapshot", mimeType="text/plain",
                               description="The frozen memory snapshot of this connection: put it in the system "
                                           "prompt once.")]

    async def _read_resource(self, uri: AnyUrl) -> list[ReadResourceContents]:
        if str(uri) != SNAPSHOT_URI:
            raise ValueError(f"unknown resource {uri}; this server has {SNAPSHOT_URI}")
        return [ReadResourceContents(content=self.session_for().system_prompt_block(), mime_type="text/plain")]

    async def _list_prompts(self) -> list[types.Prompt]:
        return [types.Prompt(name="memory_snapshot", description="The frozen memory snapshot, as a system-prompt "
                                                                  "block.")]

    async def _get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        if name != "memory_snapshot":
            raise ValueError(f"unknown prompt {name!r}; this server has memory_snapshot")
        block = self.session_for().system_prompt_block()
        return types.GetPromptResult(description="memory snapshot", messages=[types.PromptMessage(
            role="user", content=types.TextContent(type="text", text=block))])

    # -- transports ---------------------------------------------------------------------------------
    async def run_stdio(self) -> None:
        """Serve one connection on stdin/stdout."""
        from mcp.server.stdio import stdio_server

        try:
            async with stdio_server() as (read, write):
                await self.server.run(read, write, self.server.create_initialization_options())
        finally:
            self.close()

    def http_app(self) -> Callable[..., Awaitable[None]]:
        """The streamable-HTTP ASGI app (path ``/mcp``, stateful: one MCP session per connection), behind the
        bearer-token guard and the SDK's DNS-rebinding protection for 127.0.0.1."""
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings
        from starlette.applications import Starlette
        from starlette.routing import Mount

        manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=TransportSecuritySettings(
                enable_dns_rebinding_protection=True, allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*"]),
        )

        async def handle(scope: Any, receive: Any, send: Any) -> None:
            await manager.handle_request(scope, receive, send)

        app = Starlette(routes=[Mount("/mcp", app=handle)], lifespan=lambda _: manager.run())
        return _TokenGuard(app, self.manager.home)


class _TokenGuard:
    """ASGI middleware: a request without a known bearer token gets 401; the token's user is put in the request
    state; a request naming another user (``X-Ironmem-User``) gets 403."""

    def __init__(self, app: Callable[..., Awaitable[None]], home: Path) -> None:
        self.app, self.home = app, home

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        user = None
        if given:
            for token, owner in _read_tokens(self.home).items():
                if hmac.compare_digest(token.encode(), given.encode()):
                    user = owner
        if user is None:
            await _reply(send, 401, "a bearer token is required (ironmem mcp --http printed where it is)")
            return
        asked = headers.get("x-ironmem-user")
        if asked is not None and asked != user:
            await _reply(send, 403, "this token belongs to another user")
            return
        scope.setdefault("state", {})[_USER_STATE] = user
        await self.app(scope, receive, send)


async def _reply(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer")]})
    await send({"type": "http.response.body", "body": body})
