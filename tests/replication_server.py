"""A throwaway PostgreSQL primary with a streaming-replication standby, for failover tests.

Built from the server binaries (``initdb``, ``pg_basebackup -R``, ``pg_ctl``), run as the
``postgres`` OS user through ``setpriv`` when the process is root (as ``postgres_server`` does).
Free of pytest so benchmarks and scripts can import it::

    with ReplicatedPair(synchronous=True) as pair:
        queue = pgqueue.Queue(pair.url)      # host=primary,standby, target_session_attrs=read-write
        ...
        pair.crash_primary()                 # immediate shutdown: every server process gone
        pair.promote()                       # the standby becomes the primary
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

from postgres_server import (
    HOST,
    SERVER_USER,
    _dir_reachable_by_others,
    _find_binaries,
    _running_as_root,
    _setpriv_prefix,
)

__all__ = ["ReplicatedPair"]

STANDBY_NAME = "standby1"
DBNAME = "test"
_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class ReplicatedPair:
    """A primary and one streaming standby on this host; a context manager (starts on enter).

    ``synchronous=True`` makes the primary wait for the standby's flush before a commit returns
    (``synchronous_standby_names``): what a client saw committed survives the primary's crash.
    ``synchronous=False`` is asynchronous streaming: the last commits may be lost.
    """

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.primary_port = _free_port()
        self.standby_port = _free_port()
        self._root: Path | None = None
        self._prefix: list[str] = []

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        bins = _find_binaries()
        self._bin_dir = Path(bins.pg_ctl).parent
        root = _running_as_root()
        self._prefix = _setpriv_prefix() if root else []
        parent = tempfile.gettempdir()
        if root and not _dir_reachable_by_others(parent):
            parent = "/tmp"
        self._root = Path(tempfile.mkdtemp(prefix="pgqueue-repl-", dir=parent))
        if root:
            entry = pwd.getpwnam(SERVER_USER)
            os.chown(self._root, entry.pw_uid, entry.pw_gid)
        try:
            self._run(
                "initdb", "-D", str(self.primary_dir), "-U", SERVER_USER, "-A", "trust",
                "-E", "UTF8", "--locale=C", "--no-sync",
            )  # fmt: skip
            settings = [
                f"port = {self.primary_port}",
                f"listen_addresses = '{HOST}'",
                f"unix_socket_directories = '{self._root}'",
                "wal_level = replica",
                "max_wal_senders = 5",
                "max_connections = 200",
                "hot_standby = on",
                "logging_collector = off",
                # The data is thrown away and no test crashes the OS, only the server: the
                # page cache keeps what was written, so fsync buys nothing here.
                "fsync = off",
                "full_page_writes = off",
            ]
            self._append_conf(self.primary_dir / "postgresql.conf", settings)
            self._pg_ctl(self.primary_dir, "start")
            self._psql(self.primary_port, f"CREATE DATABASE {DBNAME}", dbname="postgres")
            if self.synchronous:
                # Only now: with no standby yet, every commit would wait for one.
                self._append_conf(
                    self.primary_dir / "postgresql.conf",
                    [f"synchronous_standby_names = '{STANDBY_NAME}'"],
                )
                self._pg_ctl(self.primary_dir, "reload")
            self._run(
                "pg_basebackup", "-h", HOST, "-p", str(self.primary_port), "-U", SERVER_USER,
                "-D", str(self.standby_dir), "-R", "-X", "stream", "--checkpoint=fast",
            )  # fmt: skip
            # The base backup copied the primary's postgresql.conf, synchronous_standby_names
            # included: exactly the trap a promoted standby falls into (see promote()).
            self._append_conf(
                self.standby_dir / "postgresql.auto.conf",
                [f"port = {self.standby_port}", f"cluster_name = '{STANDBY_NAME}'"],
            )
            self._pg_ctl(self.standby_dir, "start")
            self.wait_streaming()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop both servers (immediately) and delete their files. Idempotent."""
        if self._root is None:
            return
        for data in (self.primary_dir, self.standby_dir):
            if (data / "postmaster.pid").exists():
                self._pg_ctl(data, "stop", "-m", "immediate", check=False)
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def __enter__(self) -> ReplicatedPair:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- failover ----------------------------------------------------------

    def wait_streaming(self) -> None:
        """Until the standby streams from the primary (and is the synchronous one if asked)."""
        want = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + _TIMEOUT
        while time.monotonic() < deadline:
            state = self._psql(
                self.primary_port,
                "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'",
            )
            if state == want:
                return
            time.sleep(0.1)
        raise TimeoutError(f"the standby is not streaming ({want}) after {_TIMEOUT} s")

    def crash_primary(self) -> None:
        """Immediate shutdown: every server process of the primary exits at once, no checkpoint
        (what a crash looks like to clients and to the standby)."""
        self._pg_ctl(self.primary_dir, "stop", "-m", "immediate")

    def promote(self, *, reset_synchronous_names: bool = True) -> None:
        """Promote the standby to primary. It inherited the old primary's
        ``synchronous_standby_names`` and, with no standby of its own, would make every commit
        wait forever: an HA manager (Patroni, pg_auto_failover, RDS) resets it, and so does this
        unless told not to."""
        self._pg_ctl(self.standby_dir, "promote")
        if reset_synchronous_names:
            self._psql(self.standby_port, "ALTER SYSTEM SET synchronous_standby_names = ''")
            self._psql(self.standby_port, "SELECT pg_reload_conf()")

    # -- connection details ------------------------------------------------

    @property
    def url(self) -> str:
        """SQLAlchemy URL naming both hosts; psycopg connects to whichever accepts writes."""
        return (
            f"postgresql+psycopg://{SERVER_USER}@/{DBNAME}?host={HOST}:{self.primary_port}"
            f"&host={HOST}:{self.standby_port}&target_session_attrs=read-write"
        )

    @property
    def primary_url(self) -> str:
        """The first primary alone (before any failover)."""
        return f"postgresql+psycopg://{SERVER_USER}@{HOST}:{self.primary_port}/{DBNAME}"

    @property
    def standby_url(self) -> str:
        return f"postgresql+psycopg://{SERVER_USER}@{HOST}:{self.standby_port}/{DBNAME}"

    @property
    def primary_dir(self) -> Path:
        assert self._root is not None
        return self._root / "primary"

    @property
    def standby_dir(self) -> Path:
        assert self._root is not None
        return self._root / "standby"

    # -- internals ---------------------------------------------------------

    def _run(self, binary: str, *args: str, check: bool = True) -> str:
        done = subprocess.run(
            [*self._prefix, str(self._bin_dir / binary), *args],
            cwd="/",
            capture_output=True,
            text=True,
            timeout=_TIMEOUT,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{binary} {' '.join(args)} failed: {done.stderr or done.stdout}")
        return done.stdout.strip()

    def _pg_ctl(self, data: Path, action: str, *args: str, check: bool = True) -> None:
        log = data.parent / f"{data.name}.log"
        self._run("pg_ctl", "-D", str(data), "-l", str(log), "-w", "-t", "60", action, *args,
                  check=check)  # fmt: skip

    def _psql(self, port: int, sql: str, *, dbname: str = DBNAME) -> str:
        psql = shutil.which("psql") or str(self._bin_dir / "psql")
        done = subprocess.run(
            [*self._prefix, psql, "-h", HOST, "-p", str(port), "-U", SERVER_USER, "-d", dbname,
             "-XAtqc", sql],
            cwd="/", capture_output=True, text=True, timeout=_TIMEOUT, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"psql {sql!r} failed: {done.stderr}")
        return done.stdout.strip()

    def _append_conf(self, path: Path, lines: list[str]) -> None:
        with path.open("a") as conf:
            conf.write("\n" + "\n".join(lines) + "\n")
