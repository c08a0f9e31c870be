"""Start and stop the real local memory servers the provider integration tests talk to.

Each server runs in its own venv under ``$IRONMEM_VENVS`` (default ``/opt/ironmem-venvs``; made by
``tools/install_servers.sh``), bound to 127.0.0.1 on a free port, with a bounded start-up time, and is always
stopped (context managers; pytest fixtures use them). A server whose venv is absent raises
:class:`ServerUnavailable`, which the fixtures turn into a skip that names the install command.

- :class:`EmbeddingServer`: ``tools/embedding_server.py`` (all-MiniLM-L6-v2 int8 ONNX from PyPI; no downloads).
- :class:`HindsightServer`: ``hindsight-api`` with its embedded PostgreSQL (pg0), LLM provider ``none``, reranker
  ``rrf`` and the embedding server above. PostgreSQL's initdb refuses root, so as root the server runs as the
  system user ``ironmem-test`` (``setpriv``); its pg0 data lives in a fresh folder per server.
- :class:`OpenVikingServer`: ``openviking-server`` with a generated ``ov.conf`` (local storage, no auth, the
  embedding server above as an OpenAI-style dense embedder, no VLM).
- :class:`DelayProxy`: a loopback TCP proxy that holds each connection for ``delay`` seconds (slow-server tests).

:class:`ServerScenarios`, at the end, is what the Hindsight and OpenViking tests check alike, and
:class:`HostedScenarios` what the Honcho and Supermemory tests (against a loopback stub of the service's API)
check alike; each test module subclasses one and keeps its provider's own cases.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ironmem import MemoryManager
from ironmem.core.provider import MemoryProvider
from ironmem.testing.openapi_stub import Fault, StubServer
from ironmem.testing.provider_contract import ProviderContract

ROOT = Path(__file__).resolve().parent.parent
VENVS = Path(os.environ.get("IRONMEM_VENVS", "/opt/ironmem-venvs"))
TEST_USER = "ironmem-test"
INSTALL_HINT = "bash tools/install_servers.sh"


class ServerUnavailable(RuntimeError):
    """The server cannot run here (venv missing, start-up failed); the message says why and what to do."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def venv_python(name: str) -> Path:
    python = VENVS / name / "bin" / "python"
    if not python.exists():
        raise ServerUnavailable(f"the {name!r} server venv is not installed at {VENVS / name}; run: {INSTALL_HINT}")
    return python


class _Process:
    """A server process in its own process group, stopped with SIGTERM then SIGKILL."""

    name = "server"
    start_timeout = 120.0

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.workdir = Path(tempfile.mkdtemp(prefix=f"ironmem-{self.name}-"))
        self.log_path = self.workdir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, argv: list[str], env: dict[str, str], *, cwd: Path | None = None) -> None:
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd=str(cwd or self.workdir), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()

    def _wait_ready(self, path: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise ServerUnavailable(f"{self.name} exited with code {self.proc.returncode} during start-up:\n{self.log_tail()}")
            try:
                if _get(self.url + path) == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise ServerUnavailable(f"{self.name} did not answer {path} within {self.start_timeout:g}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """Kill the server abruptly (SIGKILL to its process group), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._after_stop()

    def _after_stop(self) -> None:
        pass

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Any:
        try:
            self.start()
        except BaseException:
            self.stop()
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.cleanup()

    def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class EmbeddingServer(_Process):
    """all-MiniLM-L6-v2 behind ``POST /v1/embeddings`` on 127.0.0.1 (``tools/embedding_server.py``)."""

    name = "embeddings"
    start_timeout = 90.0
    model = "all-MiniLM-L6-v2"
    dimensions = 384

    def start(self) -> None:
        python = venv_python("embed")
        self.port = free_port()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.workdir),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self._spawn([str(python), str(ROOT / "tools" / "embedding_server.py"), "--port", str(self.port)], env)
        self._wait_ready("/health")

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


def _unprivileged() -> tuple[list[str], int | None, int | None]:
    """argv prefix (and uid/gid) to drop root for the server; empty when not root."""
    if os.geteuid() != 0:
        return [], None, None
    try:
        user = pwd.getpwnam(TEST_USER)
    except KeyError:
        raise ServerUnavailable(
            f"running as root, and the unprivileged user {TEST_USER!r} that runs PostgreSQL does not exist; "
            f"run: {INSTALL_HINT}") from None
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise ServerUnavailable("running as root and setpriv (util-linux) is missing: apt-get install util-linux")
    return ([setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"], user.pw_uid, user.pw_gid)


class HindsightServer(_Process):
    """``hindsight-api`` on 127.0.0.1 with embedded PostgreSQL, no LLM, RRF reranking, local embeddings."""

    name = "hindsight"
    start_timeout = 180.0

    def __init__(self, embeddings: EmbeddingServer) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.instance = f"ironmem{os.getpid()}x{free_port()}"
        self.pg_port = 0
        self._uid: int | None = None

    def _home(self) -> Path:
        """pg0 unpacks PostgreSQL under $HOME/.pg0 once; a shared home keeps later start-ups fast."""
        shared = VENVS / "home"
        if self._uid is not None:
            usable = shared.is_dir() and shared.stat().st_uid == self._uid
        else:
            usable = shared.is_dir() and os.access(shared, os.W_OK)
        return shared if usable else self.workdir

    def start(self) -> None:
        python = venv_python("hindsight")
        prefix, uid, gid = _unprivileged()
        self._uid = uid
        if uid is not None:
            os.chown(self.workdir, uid, gid if gid is not None else -1)
            os.chmod(self.workdir, 0o700)
        self.port, self.pg_port = free_port(), free_port()
        home = self._home()
        env = {
            "PATH": f"{python.parent}:/usr/bin:/bin",
            "HOME": str(home),
            "HINDSIGHT_API_HOST": "127.0.0.1",
            "HINDSIGHT_API_PORT": str(self.port),
            "HINDSIGHT_API_DATABASE_URL": f"pg0://{self.instance}:{self.pg_port}",
            "HINDSIGHT_API_LLM_PROVIDER": "none",
            "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
            "HINDSIGHT_API_EMBEDDINGS_PROVIDER": "openai",
            "HINDSIGHT_API_EMBEDDINGS_OPENAI_BASE_URL": self.embeddings.base_url,
            "HINDSIGHT_API_EMBEDDINGS_OPENAI_API_KEY": "local-no-key",
            "HINDSIGHT_API_EMBEDDINGS_OPENAI_MODEL": self.embeddings.model,
            "HINDSIGHT_API_EMBEDDINGS_OPENAI_DIMENSIONS": str(self.embeddings.dimensions),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TMPDIR": str(self.workdir),
            "HINDSIGHT_API_WORKER_ID": f"ironmem-test-{self.instance}",
        }
        argv = [*prefix, str(python.parent / "hindsight-api"), "--host", "127.0.0.1", "--port", str(self.port)]
        self._spawn(argv, env)
        self._wait_ready("/health")

    def _after_stop(self) -> None:
        # The server stops its PostgreSQL on a clean exit; after a kill, stop it by its pid file and drop the data.
        for pid_file in (self._home() / ".pg0" / "instances" / self.instance).glob("**/postmaster.pid"):
            with contextlib.suppress(Exception):
                pid = int(pid_file.read_text().splitlines()[0])
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    os.kill(pid, 0)
                    time.sleep(0.1)
        shutil.rmtree(self._home() / ".pg0" / "instances" / self.instance, ignore_errors=True)


class OpenVikingServer(_Process):
    """``openviking-server`` on 127.0.0.1: local workspace, no auth, the loopback embedder, no VLM."""

    name = "openviking"
    start_timeout = 180.0

    def __init__(self, embeddings: EmbeddingServer) -> None:
        super().__init__()
        self.embeddings = embeddings

    def config(self) -> dict[str, Any]:
        return {
            "server": {"host": "127.0.0.1", "port": self.port},
            "storage": {"workspace": str(self.workdir / "workspace")},
            "embedding": {"dense": {
                "provider": "openai",
                "model": self.embeddings.model,
                "api_base": self.embeddings.base_url,
                "api_key": "local-no-key",
                "dimension": self.embeddings.dimensions,
                "input": "text",
            }},
        }

    def start(self) -> None:
        python = venv_python("openviking")
        self.port = free_port()
        conf = self.workdir / "ov.conf"
        conf.write_text(json.dumps(self.config(), indent=2))
        env = {
            "PATH": f"{python.parent}:/usr/bin:/bin",
            "HOME": str(self.workdir),
            "OPENVIKING_CONFIG_FILE": str(conf),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        argv = [str(python.parent / "openviking-server"), "--config", str(conf), "--host", "127.0.0.1",
                "--port", str(self.port)]
        self._spawn(argv, env)
        self._wait_ready("/health")


class DelayProxy:
    """A loopback TCP proxy to ``target_port`` that waits ``delay`` seconds before relaying each connection.

    Leaving it closes every connection it relays, so a client sees the server as gone (a network outage); a new
    proxy on the same ``port`` brings it back at the same URL.

    Example:
        >>> with DelayProxy(9, delay=0.0) as proxy:  # doctest: +SKIP
        ...     proxy.url
    """

    def __init__(self, target_port: int, delay: float, *, port: int = 0) -> None:
        self.target_port = target_port
        self.delay = delay
        self._open: set[socket.socket] = set()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", port))
        self._server.listen(64)
        self.port = int(self._server.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="delay-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            self._open.add(client)
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        if self._stop.wait(self.delay):
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError:
            client.close()
            return
        self._open.add(upstream)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)

        other = threading.Thread(target=pump, args=(upstream, client), daemon=True)
        other.start()
        pump(client, upstream)
        other.join(30)
        client.close()
        upstream.close()

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(2)
        for sock in list(self._open):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


@contextlib.contextmanager
def running(server: _Process) -> Iterator[Any]:
    with server:
        yield server


@contextlib.contextmanager
def started(server: _Process) -> Iterator[Any]:
    """A test's own ``server``, running, then stopped; the test is skipped, with the reason, if it cannot run here."""
    try:
        server.__enter__()
    except ServerUnavailable as exc:
        pytest.skip(f"{server.name} server unavailable: {exc}")
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


# --------------------------------------------------------------------------------------------------
# Scenarios shared by the server-backed provider tests (Hindsight, OpenViking)
# --------------------------------------------------------------------------------------------------
def name_for(path: Path) -> str:
    """A bank or folder name unique to one test folder, so tests sharing a server never see each other's data."""
    return "t" + hashlib.sha256(str(path).encode()).hexdigest()[:12]


def provider_status(manager: MemoryManager, name: str) -> dict[str, Any]:
    """The ``status()`` entry of provider ``name``."""
    return next(p for p in manager.status()["providers"] if p["name"] == name)


def _sources(recall: Any) -> set[str]:
    return {item.source for item in recall.items}


class ServerScenarios:
    """What every provider of a server that runs elsewhere must do, as tests: subclass it as ``Test...`` in the
    provider's test module and fill in the class attributes and :meth:`make`.

    Every scenario runs through a real :class:`~ironmem.MemoryManager`; the server is the session's shared one
    (the fixture named ``server_fixture``), except in the server-down test (no server) and the killed-server test
    (a server of its own).
    """

    server_class: type[_Process]
    server_fixture: str  # the session fixture of a running server_class
    search_tool: str  # the tool that searches the server
    tools: frozenset[str]  # tools the model is offered by default
    secret: str  # a secret the redaction must catch before it reaches the server

    def make(self, url: str, tmp_path: Path, **options: Any) -> MemoryProvider:
        """A new provider for the server at ``url``, its data under a name unique to ``tmp_path``."""
        raise NotImplementedError

    def stored_texts(self, provider: Any, query: str) -> list[str]:
        """What a fresh provider (session ``s2``) finds on the server for ``query``."""
        raise NotImplementedError

    @pytest.fixture
    def server(self, request: pytest.FixtureRequest) -> _Process:
        return request.getfixturevalue(self.server_fixture)

    def test_server_down_at_start_the_turn_goes_on_and_status_says_why(self, tmp_path: Path) -> None:
        dead = f"http://127.0.0.1:{free_port()}"
        provider = self.make(dead, tmp_path, timeout=5)
        with MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=5) as manager:
            session = manager.start_session("down", user_id="u1")
            session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Prefers green tea"})
            recall = session.prefetch("What tea do I like?")
            assert provider.name not in _sources(recall) and "green tea" in recall.fenced()
            status = provider_status(manager, provider.name)
            assert status["state"] == "degraded" and "not reachable" in status["reason"] and dead in status["reason"]
            assert status["details"]["url"] == dead
            result = json.loads(session.handle_tool_call(self.search_tool, {"query": "tea"}))
            assert result["success"] is False and "not reachable" in result["error"]
            session.end()

    def test_secrets_are_masked_before_they_reach_the_server(self, server: _Process, tmp_path: Path) -> None:
        with MemoryManager(home=tmp_path / "home", external=self.make(server.url, tmp_path),
                           prefetch_timeout=30) as manager:
            session = manager.start_session("s1", user_id="ada")
            session.sync_turn(f"My deploy key for the billing service is {self.secret}", "I will keep it safe.")
            session.end()
        provider = self.make(server.url, tmp_path)  # the manager shut the first one
        provider.initialize("s2", user_id="ada")
        texts = self.stored_texts(provider, "deploy key for the billing service")
        provider.shutdown()
        assert texts and all(self.secret not in text for text in texts)
        assert any("billing service" in text for text in texts)

    def test_end_to_end_fact_from_an_earlier_session_is_in_the_fence(self, server: _Process, tmp_path: Path) -> None:
        with MemoryManager(home=tmp_path / "home", external=self.make(server.url, tmp_path),
                           prefetch_timeout=30) as manager:
            first = manager.start_session("monday", user_id="dee")
            first.sync_turn("My daughter's piano recital is on the 14th of June", "I'll remember that.")
            first.end()
        # A new process would build a new manager and provider: nothing is shared but the server.
        provider = self.make(server.url, tmp_path)
        with MemoryManager(home=tmp_path / "home2", external=provider, prefetch_timeout=30) as manager:
            second = manager.start_session("tuesday", user_id="dee")
            recall = second.prefetch("When is the piano recital?")
            assert recall.fenced().startswith("<memory-context>") and "14th of June" in recall.fenced()
            assert any(i.source == provider.name and "recital" in i.text for i in recall.items)
            other = manager.start_session("tuesday-other", user_id="someone-else")
            assert provider.name not in _sources(other.prefetch("When is the piano recital?"))
            other.end()
            second.end()

    def test_end_to_end_through_the_langchain_middleware(self, server: _Process, tmp_path: Path) -> None:
        pytest.importorskip("langchain.agents")
        from langchain.agents import create_agent
        from langgraph.checkpoint.memory import InMemorySaver

        from ironmem.adapters.langchain import IronMemoryMiddleware
        from ironmem.testing.langchain import ScriptedChatModel

        with MemoryManager(home=tmp_path / "home", external=self.make(server.url, tmp_path),
                           prefetch_timeout=30) as manager:
            model = ScriptedChatModel(["Noted: the spare key is under the blue flowerpot.", "Under the blue flowerpot."])
            agent = create_agent(model, middleware=[IronMemoryMiddleware(manager)], checkpointer=InMemorySaver())
            agent.invoke({"messages": [("user", "The spare house key is under the blue flowerpot.")]},
                         {"configurable": {"thread_id": "one"}})
            manager.drain()
            agent.invoke({"messages": [("user", "Where did I leave the spare key?")]},
                         {"configurable": {"thread_id": "two"}})
            last = [m for m in model.requests[-1].messages if m.type == "human"][-1].text
            assert last.startswith("<memory-context>") and "blue flowerpot" in last
            assert self.tools <= set(model.requests[-1].tool_names)

    def test_slow_server_past_the_prefetch_timeout(self, server: _Process, tmp_path: Path) -> None:
        with DelayProxy(server.port, delay=4.0) as proxy:
            provider = self.make(proxy.url, tmp_path, timeout=20)
            with MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=1.0) as manager:
                session = manager.start_session("slow", user_id="eve")
                session.handle_tool_call("memory", {"action": "add", "target": "memory",
                                                    "content": "Deploys run on Fridays"})
                started_at = time.monotonic()
                recall = session.prefetch("When do deploys run?")
                assert time.monotonic() - started_at < 3.0
                assert "Fridays" in recall.fenced() and provider.name not in _sources(recall)
                status = provider_status(manager, provider.name)
                assert status["state"] == "degraded" and "prefetch timed out after 1s" in status["reason"]
                session.end()

    def test_server_killed_mid_session(self, embedding_server: EmbeddingServer, tmp_path: Path) -> None:
        with started(self.server_class(embedding_server)) as server:  # type: ignore[call-arg]
            provider = self.make(server.url, tmp_path, timeout=60)
            with MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=60) as manager:
                session = manager.start_session("crash", user_id="fay")
                session.sync_turn("Our wifi password hint is the cat's name", "Got it.")
                manager.drain()
                assert provider.name in _sources(session.prefetch("wifi password hint"))
                server.kill()
                session.handle_tool_call("memory", {"action": "add", "target": "memory",
                                                    "content": "Router is in the attic"})
                recall = session.prefetch("Where is the router?")
                assert "attic" in recall.fenced() and provider.name not in _sources(recall)
                session.sync_turn("Thanks", "Any time.")  # queued in the background; fails there, not here
                assert manager.drain(30)
                status = provider_status(manager, provider.name)
                assert status["state"] == "degraded" and "not reachable" in status["reason"]
                assert set(status["failing_hooks"]) >= {"prefetch", "sync_turn"}
                session.end()

    def _write_during_outage(self, manager: MemoryManager, name: str) -> Any:
        """A mirrored note and a synced turn while the server cannot be reached; both wait in the outbox."""
        session = manager.start_session("outage", user_id="gus")
        session.handle_tool_call("memory", {"action": "add", "target": "user",
                                            "content": "Gus rides a green Brompton bicycle"})
        session.sync_turn("I moved to Utrecht last spring", "Noted.")
        assert manager.drain(30)
        status = provider_status(manager, name)
        assert status["state"] == "degraded" and status["writes"]["pending"] == 2
        return session

    def _on_the_server(self, url: str, tmp_path: Path) -> list[str]:
        provider = self.make(url, tmp_path)  # a fresh client: only what the server holds
        provider.initialize("check", user_id="gus")
        try:
            return (self.stored_texts(provider, "Where did Gus move last spring?")
                    + self.stored_texts(provider, "What bicycle does Gus ride?"))
        finally:
            provider.shutdown()

    def test_writes_during_an_outage_reach_the_server_when_it_answers_again(self, server: _Process,
                                                                             tmp_path: Path) -> None:
        port = free_port()
        with DelayProxy(server.port, delay=0.0, port=port) as proxy:
            provider = self.make(proxy.url, tmp_path, timeout=5)
            manager = MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=30)
            manager.start_session("before", user_id="gus").prefetch("hello")  # connected before the outage
        try:
            session = self._write_during_outage(manager, provider.name)  # the proxy is gone: unreachable
            with DelayProxy(server.port, delay=0.0, port=port):  # the server answers again, at the same URL
                session.prefetch("Where do I live now?")  # a successful recall: replays what waits
                status = provider_status(manager, provider.name)
                assert status["state"] == "active" and "failing_hooks" not in status
                assert "not reachable" in status["last_failure"]["reason"]
                deadline = time.monotonic() + 60
                while provider_status(manager, provider.name)["writes"]["pending"] and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert provider_status(manager, provider.name)["writes"] == {"pending": 0}
                session.end()
                assert provider_status(manager, provider.name)["state"] == "active"
        finally:
            manager.close()
        texts = self._on_the_server(server.url, tmp_path)
        assert any("Utrecht" in t for t in texts) and any("Brompton" in t for t in texts)

    def test_writes_left_by_an_outage_are_sent_by_the_next_run(self, server: _Process, tmp_path: Path) -> None:
        dead = f"http://127.0.0.1:{free_port()}"
        with MemoryManager(home=tmp_path / "home", external=self.make(dead, tmp_path, timeout=5),
                           prefetch_timeout=5) as manager:
            self._write_during_outage(manager, self.make(dead, tmp_path).name).end()
        saved = list((tmp_path / "home").glob("*/unsent-*.jsonl"))
        assert len(saved) == 1 and len(saved[0].read_text().splitlines()) == 2
        # The next process on the same home, with the server up: the saved writes go first, then its own.
        with MemoryManager(home=tmp_path / "home", external=self.make(server.url, tmp_path),
                           prefetch_timeout=30) as manager:
            session = manager.start_session("next", user_id="gus")
            session.end()
            name = manager.external.name if manager.external else ""
            assert provider_status(manager, name)["writes"] == {"pending": 0}
        assert not list((tmp_path / "home").glob("*/unsent-*.jsonl"))
        texts = self._on_the_server(server.url, tmp_path)
        assert any("Utrecht" in t for t in texts) and any("Brompton" in t for t in texts)


# --------------------------------------------------------------------------------------------------
# Scenarios shared by the hosted-service provider tests (Honcho, Supermemory), against a stub of the API
# --------------------------------------------------------------------------------------------------
def vendored_spec(filename: str, api: str) -> Path:
    """The vendored API description ``tests/data/openapi/<filename>``; the test module is skipped without it."""
    spec = ROOT / "tests" / "data" / "openapi" / filename
    if not spec.is_file():  # pragma: no cover - see tests/data/openapi/README.md
        pytest.skip(f"the vendored {api} API description is missing ({spec})", allow_module_level=True)
    return spec


def checked_stub(server: StubServer, api: str) -> Iterator[StubServer]:
    """A pytest fixture's body: ``server`` running; at the end, stopped, and no request or answer broke ``api``'s
    description."""
    with server:
        yield server
    assert server.violations == [], f"requests or answers that do not match the {api} API description"


def hosted_manager(tmp_path: Path, provider: MemoryProvider) -> MemoryManager:
    """A manager on ``tmp_path/home`` with ``provider`` as its external provider (checked: it was accepted)."""
    manager = MemoryManager(home=tmp_path / "home", external=provider, prefetch_timeout=5.0)
    assert manager.external is provider
    return manager


def cli_status(cfg: Path, *extra: str, clear_env: str) -> tuple[int, str, str]:
    """``ironmem --config cfg status ...`` in a new process, without ``IRONMEM_*`` or ``clear_env*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith((clear_env, "IRONMEM_"))}
    proc = subprocess.run([sys.executable, "-m", "ironmem.cli", "--config", str(cfg), "status", *extra],
                          check=False, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    return proc.returncode, proc.stdout, proc.stderr


class HostedScenarios(ProviderContract):
    """What every hosted-service provider must do, as tests: the provider contract and the scenarios below,
    against a stub of the service's API. Subclass it as ``Test...`` in the provider's test module (which provides
    the ``stub`` fixture, a running stub) and fill in the class attributes, :meth:`make` and :meth:`user_turns`."""

    key_env: str  # the variable that holds the API key
    wrong_key: str  # a key the stub refuses
    search_tool: str
    add_operation: str  # the API operation a turn's write calls
    rate_limit_body: dict[str, Any]  # the service's body of a 429 answer

    def make(self, stub: StubServer, **options: Any) -> Any:
        """A provider for ``stub``, with the right key unless ``options`` give one."""
        raise NotImplementedError

    @pytest.fixture(autouse=True)
    def _stub(self, stub: StubServer) -> None:
        self.stub = stub

    def make_provider(self, tmp_path: Path) -> MemoryProvider:  # the contract's provider
        return self.make(self.stub)

    def user_turns(self, stub: StubServer, user: str) -> list[str]:
        """The user's side of the turns the service stored for ``user``, in order."""
        raise NotImplementedError

    def test_bad_key_401_turn_goes_on_and_status_names_the_variable(self, stub: StubServer, tmp_path: Path) -> None:
        with hosted_manager(tmp_path, provider := self.make(stub, api_key=self.wrong_key)) as manager:
            session = manager.start_session("s-401", user_id="alice")
            session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "Alice drinks tea"})
            assert "Alice drinks tea" in session.prefetch("what do I drink?").fenced()  # the built-in layer answers
            entry = provider_status(manager, provider.name)
            assert entry["state"] == "degraded" and entry["service"]["state"] == "failing"
            assert "HTTP 401" in entry["reason"] and self.key_env in entry["reason"]
            result = json.loads(session.handle_tool_call(self.search_tool, {"query": "tea"}))
            assert result["success"] is False and self.key_env in result["error"]
            session.end()
        assert self.wrong_key not in json.dumps(entry)
        assert all(e.status == 401 for e in stub.calls())

    def test_429_honours_retry_after_queues_writes_and_sends_them_in_order(self, stub: StubServer) -> None:
        provider = self.make(stub)
        provider.initialize("s-429", user_id="bob")
        provider.sync_turn("first turn about kayaks", "ok", session_id="s-429")
        stub.inject(Fault(429, self.rate_limit_body, {"Retry-After": "1"}, operation=self.add_operation))
        with pytest.raises(Exception, match="HTTP 429"):
            provider.sync_turn("second turn about canoes", "ok", session_id="s-429")
        before = len(stub.calls())
        with pytest.raises(Exception, match="rate limited"):
            provider.sync_turn("third turn about rafts", "ok", session_id="s-429")
        assert len(stub.calls()) == before  # nothing sent while the service asked us to wait
        info = provider.status_info()
        snap = info["service"]
        assert snap["state"] == "rate_limited" and info["writes"]["pending"] == 2 and 0 < snap["retry_after_s"] <= 1
        time.sleep(1.1)
        provider.sync_turn("fourth turn about sails", "ok", session_id="s-429")
        assert self.user_turns(stub, "bob") == ["first turn about kayaks", "second turn about canoes",
                                                "third turn about rafts", "fourth turn about sails"]
        assert provider.status_info()["service"]["state"] == "ok" and provider.status_info()["writes"]["pending"] == 0
        provider.shutdown()

    def test_writes_during_an_outage_are_sent_when_a_recall_succeeds(self, stub: StubServer, tmp_path: Path) -> None:
        with hosted_manager(tmp_path, provider := self.make(stub)) as manager:
            session = manager.start_session("s-outage", user_id="dan")
            stub.inject(Fault(503, {"error": "maintenance"}, operation=self.add_operation, times=None))
            session.sync_turn("first turn about kayaks", "ok")
            session.sync_turn("second turn about canoes", "ok")
            assert manager.drain(10)
            entry = provider_status(manager, provider.name)
            assert entry["state"] == "degraded" and entry["writes"]["pending"] == 2
            stub.clear_faults()
            session.prefetch("what boats do I like?")  # the service answers a recall: what waits is sent
            assert provider_status(manager, provider.name)["state"] == "active"
            deadline = time.monotonic() + 10
            while provider_status(manager, provider.name)["writes"]["pending"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert self.user_turns(stub, "dan") == ["first turn about kayaks", "second turn about canoes"]
            session.end()


if __name__ == "__main__":  # manual use: python tests/servers.py hindsight|openviking
    which = sys.argv[1] if len(sys.argv) > 1 else "hindsight"
    with EmbeddingServer() as emb:
        cls = HindsightServer if which == "hindsight" else OpenVikingServer
        with cls(emb) as srv:
            print(f"{which} on {srv.url} (embeddings {emb.base_url}); Ctrl-C stops", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(1)
