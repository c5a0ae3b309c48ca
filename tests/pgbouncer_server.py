"""A throwaway pgbouncer in transaction pooling mode, in front of a test PostgreSQL server.

Like ``postgres_server`` it is free of pytest and works as root (CI): pgbouncer refuses to run as
root, so it runs as the ``postgres`` OS user through ``setpriv``::

    with PostgresServer() as pg, PgBouncer(pg.port) as bouncer:
        engine = sqlalchemy.create_engine(bouncer.url_for("test"))
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

from postgres_server import HOST, SERVER_USER, _running_as_root, _setpriv_prefix

__all__ = ["PgBouncer", "pgbouncer_available"]

BINARY_ENV = "PGQUEUE_PGBOUNCER"
_CANDIDATES = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")
_BOOT_TIMEOUT = 20.0


def _binary() -> str | None:
    override = os.environ.get(BINARY_ENV)
    if override:
        return override
    found = shutil.which("pgbouncer")
    if found:
        return found
    return next((path for path in _CANDIDATES if os.access(path, os.X_OK)), None)


def pgbouncer_available() -> tuple[bool, str]:
    """Whether pgbouncer can be started here: ``(True, "")`` or ``(False, reason)``."""
    if _binary() is None:
        return False, f"no pgbouncer binary (apt-get install pgbouncer, or set {BINARY_ENV})"
    return True, ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


class PgBouncer:
    """pgbouncer on a free loopback port, ``pool_mode = transaction``, trusting the test user,
    forwarding every database name to the PostgreSQL server on ``postgres_port``. A context
    manager (starts on enter). ``pool_size`` server connections per database: small, so that
    consecutive transactions of one client really do move between server connections;
    ``max_client_conn`` client connections at most (a benchmark's fleet needs more)."""

    def __init__(
        self, postgres_port: int, *, pool_size: int = 3, max_client_conn: int = 500
    ) -> None:
        self.postgres_port = postgres_port
        self.pool_size = pool_size
        self.max_client_conn = max_client_conn
        self.port = 0
        self._dir: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = _binary()
        if binary is None:
            raise RuntimeError(pgbouncer_available()[1])
        root = _running_as_root()
        self._dir = tempfile.mkdtemp(prefix="pgqueue-pgbouncer-", dir="/tmp")
        directory = Path(self._dir)
        self.port = _free_port()
        (directory / "userlist.txt").write_text(f'"{SERVER_USER}" ""\n')
        (directory / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={HOST} port={self.postgres_port}",
                    "[pgbouncer]",
                    f"listen_addr = {HOST}",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {directory / 'userlist.txt'}",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.pool_size}",
                    f"max_client_conn = {self.max_client_conn}",
                    "server_reset_query =",
                    # psycopg sends none of these, but a client library might.
                    "ignore_startup_parameters = extra_float_digits,options",
                    f"logfile = {directory / 'pgbouncer.log'}",
                    "",
                ]
            )
        )
        prefix: list[str] = []
        if root:
            entry = pwd.getpwnam(SERVER_USER)
            for path in [directory, *directory.iterdir()]:
                os.chown(path, entry.pw_uid, entry.pw_gid)
            prefix = _setpriv_prefix()
        self._process = subprocess.Popen(
            [*prefix, binary, str(directory / "pgbouncer.ini")],
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _BOOT_TIMEOUT
        while True:
            if self._process.poll() is not None:
                log = self.log()
                self.stop()
                raise RuntimeError(f"pgbouncer exited at start:\n{log}")
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("pgbouncer did not start listening") from None
                time.sleep(0.05)

    @property
    def pid(self) -> int | None:
        """pgbouncer's process id while it runs (``setpriv`` execs it in place)."""
        return None if self._process is None else self._process.pid

    def log(self) -> str:
        """pgbouncer's log so far (for failure messages)."""
        if self._dir is None:
            return ""
        try:
            return (Path(self._dir) / "pgbouncer.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop pgbouncer and delete its files. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def url_for(self, dbname: str) -> str:
        """SQLAlchemy URL of ``dbname`` through pgbouncer."""
        return f"postgresql+psycopg://{SERVER_USER}@{HOST}:{self.port}/{quote(dbname, safe='')}"

    def __enter__(self) -> PgBouncer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
