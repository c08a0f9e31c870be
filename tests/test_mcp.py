"""``ironmem mcp`` (issue 38): the official MCP SDK's client against the server in a subprocess, stdio and HTTP."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

mcp = pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parent.parent
FACT = "The build server is called kestrel"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("IRONMEM_HOME", "IRONMEM_DEBUG")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@asynccontextmanager
async def stdio(home: Path, *extra: str):
    params = StdioServerParameters(command=sys.executable, args=["-m", "ironmem.cli", "--home", str(home), "mcp",
                                                                 *extra], env=_env(), cwd=str(REPO))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def snapshot(session: ClientSession) -> str:
    return (await session.read_resource("memory://snapshot")).contents[0].text


async def call(session: ClientSession, name: str, args: dict[str, Any]) -> Any:
    result = await session.call_tool(name, args)
    text = result.content[0].text
    return text if name == "memory_recall" else json.loads(text)


async def test_stdio_write_search_and_a_second_connection_sees_it_while_the_first_snapshot_stays(
        tmp_path: Path) -> None:
    async with stdio(tmp_path) as first:
        names = {t.name for t in (await first.list_tools()).tools}
        assert {"memory", "session_search", "memory_recall"} <= names
        before = await snapshot(first)
        prompt = (await first.get_prompt("memory_snapshot")).messages[0].content.text
        assert prompt == before
        written = await call(first, "memory", {"action": "add", "target": "memory", "content": FACT})
        assert written["success"] is True
        found = await call(first, "session_search", {"query": "kestrel"})
        assert [h["text"] for h in found["results"]] == [FACT]
        fenced = await call(first, "memory_recall", {"message": "what is the build server called?"})
        assert fenced.startswith("<memory-context>") and FACT in fenced  # the live delta, fenced (rule 2)
        async with stdio(tmp_path) as second:
            assert FACT in await snapshot(second)
        assert await snapshot(first) == before  # rule 3: byte-identical for the whole connection
        assert FACT not in before
        bad = await first.call_tool("memory", {"action": "explode"})
        assert bad.isError and json.loads(bad.content[0].text)["success"] is False  # an error result, not a crash


async def test_with_write_approval_a_clients_write_waits_for_review_and_stays_out_of_snapshots(
        tmp_path: Path) -> None:
    config = tmp_path / "mcp.yaml"
    config.write_text(f"memory:\n  home: {tmp_path}\n  write_approval: true\n", encoding="utf-8")
    params = StdioServerParameters(command=sys.executable, args=["-m", "ironmem.cli", "--config", str(config), "mcp",
                                                                 "--user", "ada"], env=_env(), cwd=str(REPO))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        held = await call(session, "memory", {"action": "add", "target": "user", "content": FACT})
        assert held["staged"] is True and held["saved"] is False
        async with stdio(tmp_path, "--user", "ada") as second:
            assert FACT not in await snapshot(second)
    review = subprocess.run([sys.executable, "-m", "ironmem.cli", "--config", str(config), "review", "--json"],
                            capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120, check=True)
    assert [row["texts"] for row in json.loads(review.stdout)] == [[FACT]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _token(home: Path, user: str) -> str:
    out = subprocess.run([sys.executable, "-m", "ironmem.cli", "--home", str(home), "mcp", "--token", "--user", user],
                         capture_output=True, text=True, env=_env(), cwd=REPO, timeout=60, check=True)
    return out.stdout.strip()


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ironmem.cli", "--home", str(tmp_path), "mcp", "--http",
                             "--port", str(port), "--user", "ada"], env=_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(proc.stderr.read().decode() if proc.stderr else "server exited")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp", tmp_path
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@asynccontextmanager
async def http(url: str, token: str):
    import httpx

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as client, \
            streamable_http_client(url, http_client=client) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        yield session


async def test_http_needs_the_token_and_keeps_each_user_to_their_own_memory(http_server: tuple[str, Path]) -> None:
    import httpx

    url, home = http_server
    token_file = home / ".ironmem" / "mcp-tokens.json"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    ada, bob = _token(home, "ada"), _token(home, "bob")
    assert ada != bob
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(timeout=30) as raw:
        assert (await raw.post(url, json=body)).status_code == 401
        assert (await raw.post(url, json=body, headers={"Authorization": "Bearer not-a-token"})).status_code == 401
        other = await raw.post(url, json=body, headers={"Authorization": f"Bearer {ada}", "X-Ironmem-User": "bob"})
        assert other.status_code == 403 and FACT not in other.text

    async with http(url, ada) as first:
        before = await snapshot(first)
        assert (await call(first, "memory", {"action": "add", "target": "user", "content": FACT}))["success"]
        assert [h["text"] for h in (await call(first, "session_search", {"query": "kestrel"}))["results"]] == [FACT]
        async with http(url, ada) as second:
            assert FACT in await snapshot(second)
        async with http(url, bob) as stranger:
            assert FACT not in await snapshot(stranger)
            assert (await call(stranger, "session_search", {"query": "kestrel"}))["results"] == []
            assert FACT not in await call(stranger, "memory_recall", {"message": "build server kestrel?"})
        assert await snapshot(first) == before


# --------------------------------------------------------------------------------------------------
# Through the frameworks' own MCP clients
# --------------------------------------------------------------------------------------------------
def _server_args(home: Path) -> list[str]:
    return ["-m", "ironmem.cli", "--home", str(home), "mcp", "--user", "ada"]


async def test_langchain_mcp_adapters_load_and_run_the_tools(tmp_path: Path) -> None:
    adapters = pytest.importorskip("langchain_mcp_adapters.client")
    from langchain_mcp_adapters.tools import load_mcp_tools

    client = adapters.MultiServerMCPClient({"ironmem": {
        "transport": "stdio", "command": sys.executable, "args": _server_args(tmp_path), "env": _env(),
        "cwd": str(REPO)}})
    async with client.session("ironmem") as session:  # one connection: one ironmem session
        tools = {t.name: t for t in await load_mcp_tools(session)}
        assert {"memory", "session_search", "memory_recall"} <= set(tools)
        written = await tools["memory"].ainvoke({"action": "add", "target": "user", "content": FACT})
        assert '"success": true' in str(written)
        found = await tools["session_search"].ainvoke({"query": "kestrel"})
        assert FACT in str(found)
    from ironmem import MemoryManager

    with MemoryManager(home=tmp_path) as manager:
        assert FACT in manager.start_session("s", user_id="ada").system_prompt_block()


async def test_llama_index_mcp_tools_run_the_tools(tmp_path: Path) -> None:
    tools_mcp = pytest.importorskip("llama_index.tools.mcp")
    client = tools_mcp.BasicMCPClient(sys.executable, args=_server_args(tmp_path), env=_env())
    tools = {t.metadata.name: t for t in await tools_mcp.McpToolSpec(client=client).to_tool_list_async()}
    assert {"memory", "session_search", "memory_recall"} <= set(tools)
    written = await tools["memory"].acall(action="add", target="user", content=FACT)
    assert '"success": true' in str(written)
    found = await tools["session_search"].acall(query="kestrel")
    assert FACT in str(found)
