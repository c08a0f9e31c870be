"""A throwaway PostgreSQL cluster for tests and benchmarks: started from the server binaries, always stopped.

``initdb`` refuses to run as root, so when the current user is root the cluster runs as an unprivileged system
user (``ironmem-pg``, created with ``useradd`` when missing). The cluster listens on 127.0.0.1 only, on a free
port, with its socket directory in a temporary folder; start-up time is bounded; the cluster is stopped and its
folder deleted by :meth:`PostgresCluster.stop`, which also runs at interpreter exit.

Server binaries are looked up in ``$IRONMEM_PG_BIN``, then ``/usr/lib/postgresql/<version>/bin`` (Debian and
Ubuntu), then ``$PATH``. :func:`unavailable_reason` says why no cluster can be started (no binaries, no
psycopg, no unprivileged user), for ``pytest.skip``.

Example::

    with PostgresCluster() as cluster:
        url = cluster.create_database("demo")
        manager = MemoryManager(home=tmp, storage=url)
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

__all__ = ["PostgresCluster", "find_pg_bin", "unavailable_reason", "PG_USER"]

log = logging.getLogger(__name__)

#: The unprivileged OS user a root process runs the server as.
PG_USER = os.environ.get("IRONMEM_PG_USER", "ironmem-pg")
START_TIMEOUT_S = 60.0


def find_pg_bin() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    env = os.environ.get("IRONMEM_PG_BIN")
    candidates = [Path(env)] if env else []
    candidates += sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    which = shutil.which("pg_ctl")
    if which:
        candidates.append(Path(which).parent)
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _ensure_user() -> tuple[int, int] | str:
    """(uid, gid) of the unprivileged user the server runs as when we are root, or why there is none."""
    try:
        entry = pwd.getpwnam(PG_USER)
    except KeyError:
        useradd = shutil.which("useradd")
        if not useradd:
            return f"running as root, no OS user {PG_USER!r} for the PostgreSQL server and no useradd to create it"
        proc = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            capture_output=True, text=True, timeout=30, check=False,
        )
        try:
            entry = pwd.getpwnam(PG_USER)
        except KeyError:
            return f"running as root and could not create the OS user {PG_USER!r}: {proc.stderr.strip()}"
    return entry.pw_uid, entry.pw_gid


def unavailable_reason() -> str | None:
    """Why no throwaway cluster can run here (None when one can)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return "psycopg 3 / psycopg_pool not installed (pip install 'ironmem[postgres]')"
    if find_pg_bin() is None:
        return ("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found in $IRONMEM_PG_BIN, "
                "/usr/lib/postgresql/*/bin or $PATH (Debian: apt-get install postgresql-15)")
    if os.geteuid() == 0:
        found = _ensure_user()
        if isinstance(found, str):
            return found
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """A private PostgreSQL server in a temp folder. ``start()``, ``url(dbname)``, ``restart()``, ``stop()``.

    ``settings`` are extra ``postgres -c`` settings. ``fast=True`` (tests) turns off fsync: the cluster is
    thrown away anyway (commits still reach the OS, so killing the server loses nothing); benchmarks pass
    ``fast=False``.
    """

    def __init__(self, *, bin_dir: str | Path | None = None, fast: bool = True,
                 settings: dict[str, str] | None = None, start_timeout: float = START_TIMEOUT_S) -> None:
        found = Path(bin_dir) if bin_dir else find_pg_bin()
        if found is None:
            raise RuntimeError(unavailable_reason() or "no PostgreSQL server binaries")
        self.bin = found
        self.fast = fast
        self.settings = dict(settings or {})
        self.start_timeout = float(start_timeout)
        self.port = 0
        self.base: Path | None = None
        self._ids: tuple[int, int] | None = None
        self._running = False
        self._lock = threading.Lock()

    # -- paths ------------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.base is not None
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        assert self.base is not None
        return self.base / "sock"

    @property
    def log_file(self) -> Path:
        assert self.base is not None
        return self.base / "server.log"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    # -- processes --------------------------------------------------------------------------------
    def _run(self, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self._ids is not None:
            uid, gid = self._ids
            kwargs.update(user=uid, group=gid, extra_groups=[])
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C", "TZ": "UTC"}
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False, env=env,
                              cwd=str(self.base), **kwargs)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-15:])
        return ""

    def start(self) -> PostgresCluster:
        """initdb + pg_ctl start (bounded by ``start_timeout``). Raises RuntimeError with the server log."""
        with self._lock:
            if self._running:
                return self
            reason = unavailable_reason()
            if reason:
                raise RuntimeError(reason)
            if os.geteuid() == 0:
                ids = _ensure_user()
                assert not isinstance(ids, str)
                self._ids = ids
            tmp_root = tempfile.gettempdir()
            if self._ids is not None and not os.stat(tmp_root).st_mode & 0o001:
                tmp_root = "/tmp"  # the server's user must be able to reach its folder
            self.base = Path(tempfile.mkdtemp(prefix="ironmem-pg-", dir=tmp_root))
            self.socket_dir.mkdir()
            if self._ids is not None:
                for path in (self.base, self.socket_dir):
                    os.chown(path, *self._ids)
            atexit.register(self.stop)
            try:
                init = self._run(
                    [str(self.bin / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                     "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"],
                    timeout=self.start_timeout,
                )
                if init.returncode != 0:
                    raise RuntimeError(f"initdb failed ({init.returncode}): {init.stderr.strip()[-2000:]}")
                last_error = ""
                for _ in range(3):  # a free port can be taken between the probe and the bind: try another
                    self.port = _free_port()
                    if self._pg_ctl_start():
                        self._running = True
                        return self
                    last_error = self._log_tail()
                raise RuntimeError(f"PostgreSQL did not start within {self.start_timeout:g} s:\n{last_error}")
            except BaseException:
                self._cleanup()
                raise

    def _options(self) -> str:
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": "200",
            "shared_buffers": "128MB",
            "log_min_messages": "warning",
        }
        if self.fast:
            settings.update(fsync="off", full_page_writes="off")  # a killed server loses nothing; a crashed OS may
        settings.update(self.settings)
        return " ".join(f"-c {k}={v}" for k, v in settings.items())

    def _pg_ctl_start(self) -> bool:
        proc = self._run(
            [str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file), "-w",
             "-t", str(int(self.start_timeout)), "-o", self._options(), "start"],
            timeout=self.start_timeout + 10,
        )
        return proc.returncode == 0

    def restart(self, *, mode: str = "fast") -> None:
        """Stop the server (``fast``: abort open transactions, ``immediate``: like a crash) and start it again
        on the same port."""
        stop = self._run([str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "-t", "30", "stop"],
                         timeout=40)
        if stop.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed: {stop.stderr.strip()}")
        if not self._pg_ctl_start():
            raise RuntimeError(f"PostgreSQL did not restart:\n{self._log_tail()}")

    def stop_server(self, *, mode: str = "fast") -> None:
        """Stop the server but keep its files (``start_server()`` brings it back)."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "-t", "30", "stop"],
                  timeout=40)

    def start_server(self) -> None:
        if not self._pg_ctl_start():
            raise RuntimeError(f"PostgreSQL did not start:\n{self._log_tail()}")

    def stop(self) -> None:
        """Stop the server (fast, then immediate, then SIGKILL of its postmaster) and delete its folder."""
        with self._lock:
            if self.base is None:
                return
            if self._running:
                self._running = False
                for mode in ("fast", "immediate"):
                    try:
                        proc = self._run([str(self.bin / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w",
                                          "-t", "20", "stop"], timeout=30)
                    except subprocess.TimeoutExpired:
                        continue
                    if proc.returncode == 0 or not (self.data_dir / "postmaster.pid").exists():
                        break
                else:
                    self._kill_postmaster()
            self._cleanup()

    def _kill_postmaster(self) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, signal.SIGKILL)

    def _cleanup(self) -> None:
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    # -- databases --------------------------------------------------------------------------------
    def create_database(self, name: str | None = None) -> str:
        """Create a database (a fresh name when None) and return its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name_or_url: str) -> None:
        import psycopg

        name = name_or_url.rsplit("/", 1)[-1]
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
