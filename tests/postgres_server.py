"""A throwaway PostgreSQL server for one test (or benchmark) session.

Built on ``testing.postgresql`` but usable when the process runs as root, as it
does in CI: ``initdb`` and ``postgres`` refuse to run as root, so every server
binary is executed as the ``postgres`` OS user through ``setpriv``.

Deliberately free of pytest so benchmarks and scripts can import it too::

    with PostgresServer() as pg:
        engine = sqlalchemy.create_engine(pg.url)
"""

from __future__ import annotations

import atexit
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

__all__ = ["PostgresServer", "postgres_available"]

DEFAULT_BIN_DIR = "/usr/lib/postgresql/15/bin"
BIN_DIR_ENV = "PGQUEUE_PG_BIN"
SERVER_USER = "postgres"
HOST = "127.0.0.1"
DEFAULT_DBNAME = "test"

# Trades crash safety for speed; only acceptable for a server whose data is
# thrown away. Benchmarks pass fast=False so they measure real durability.
_FAST_OPTIONS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")
_BOOT_TIMEOUT = 30.0  # seconds; slow CI machines can take a while under load
_STOP_TIMEOUT = 30


@dataclass(frozen=True)
class _Binaries:
    initdb: str
    postgres: str
    pg_ctl: str


def _testing_postgresql() -> Any:
    # Imported lazily so that a missing package shows up as a skip reason from
    # postgres_available() rather than as an import error of this module.
    import testing.postgresql  # type: ignore[import-untyped]

    return testing.postgresql


def _find_binaries() -> _Binaries:
    """Locate the server binaries, raising RuntimeError with a readable reason."""
    names = ("initdb", "postgres", "pg_ctl")
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        # An explicit override that is wrong should be reported, not silently
        # replaced by whatever else happens to be installed.
        bin_dir = override
    elif os.path.isdir(DEFAULT_BIN_DIR):
        bin_dir = DEFAULT_BIN_DIR
    else:
        try:
            found = _testing_postgresql().find_program("postgres", ["bin"])
        except RuntimeError as exc:
            raise RuntimeError(
                f"no PostgreSQL binaries at {DEFAULT_BIN_DIR} or on PATH "
                f"(set {BIN_DIR_ENV} to the directory holding initdb and postgres)"
            ) from exc
        # PATH may hold a symlink; its siblings live next to the real binary.
        bin_dir = os.path.dirname(os.path.realpath(found))

    paths = {name: os.path.join(bin_dir, name) for name in names}
    missing = [n for n, p in paths.items() if not (os.path.isfile(p) and os.access(p, os.X_OK))]
    if missing:
        raise RuntimeError(f"no PostgreSQL binaries at {bin_dir} (missing: {', '.join(missing)})")
    return _Binaries(**paths)


def _running_as_root() -> bool:
    return os.geteuid() == 0


def _setpriv_prefix() -> list[str]:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("running as root but `setpriv` (util-linux) is not on PATH")
    # setpriv, unlike runuser/su, exec()s in place: the pid we started is the
    # server itself, so testing.postgresql's SIGINT on shutdown reaches it.
    return [
        setpriv,
        f"--reuid={SERVER_USER}",
        f"--regid={SERVER_USER}",
        "--init-groups",
    ]


def postgres_available() -> tuple[bool, str]:
    """Whether a server can be started here: ``(True, "")`` or ``(False, reason)``."""
    try:
        import psycopg  # noqa: F401

        _testing_postgresql()
    except ImportError as exc:
        return False, f"missing Python dependency: {exc}"
    try:
        _find_binaries()
        if _running_as_root():
            _setpriv_prefix()
            try:
                pwd.getpwnam(SERVER_USER)
            except KeyError:
                return False, f"running as root but there is no {SERVER_USER!r} OS user"
    except RuntimeError as exc:
        return False, str(exc)
    return True, ""


def _dir_reachable_by_others(path: str) -> bool:
    """Whether every ancestor of ``path`` can be traversed by an unrelated user."""
    current = Path(path).resolve()
    return all(directory.stat().st_mode & 0o001 for directory in [current, *current.parents])


def _process_running(pid: int) -> bool:
    """Alive and not a zombie: an exited detached postmaster is reaped by init, if ever."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, but belongs to another user
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): kill() is all we have
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _write_wrapper(path: Path, prefix: list[str], binary: str) -> str:
    # `cd /` because the caller's cwd (e.g. /root) may be unreadable by the
    # postgres user, and initdb/postgres fail when they cannot resolve it.
    # `exec` keeps the pid: testing.postgresql signals the pid it spawned.
    command = " ".join(shlex.quote(part) for part in [*prefix, binary])
    path.write_text(f'#!/bin/sh\ncd / || exit 1\nexec {command} "$@"\n')
    path.chmod(0o755)
    return str(path)


class PostgresServer:
    """One throwaway PostgreSQL server; a context manager (starts on enter)."""

    def __init__(self, *, fast: bool = True, settings: Sequence[str] = ()) -> None:
        self.fast = fast
        #: More ``name=value`` server settings (no spaces), e.g. ``track_wal_io_timing=on``.
        self.settings = tuple(settings)
        self._root_dir: str | None = None
        self._server: Any = None  # testing.postgresql.Postgresql (untyped library)
        self._bins: _Binaries | None = None
        self._as_server_user: list[str] = []

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        if self._server is not None:
            return
        testing_postgresql = _testing_postgresql()
        self._bins = _find_binaries()
        root = _running_as_root()
        self._as_server_user = _setpriv_prefix() if root else []

        parent = tempfile.gettempdir()
        if root and not _dir_reachable_by_others(parent):
            # TMPDIR under e.g. /root would hide the data dir from the postgres user.
            parent = "/tmp"
        self._root_dir = tempfile.mkdtemp(prefix="pgqueue-pg-", dir=parent)
        try:
            initdb, postgres = self._prepare_root_dir(Path(self._root_dir), root)
            server = testing_postgresql.Postgresql(
                base_dir=self._root_dir,
                initdb=initdb,
                postgres=postgres,
                # --no-sync: the cluster is disposable, so skip initdb's final fsync.
                # C locale: deterministic, and immune to LANG naming a missing locale.
                initdb_args="-U postgres -A trust -E UTF8 --locale=C --no-sync",
                postgres_args=self._postgres_args(),
                auto_start=0,
                boot_timeout=_BOOT_TIMEOUT,
            )
            self._server = server
            server.setup()  # initdb
            server.start()  # waits until it accepts connections, creates db "test"
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the server (also after restart()) and delete its files. Idempotent.

        An immediate shutdown: the files are thrown away, so nothing needs the shutdown
        checkpoint, which for a benchmark's durable server (fsync on) on a busy machine took
        longer than testing.postgresql's 10 s and pg_ctl's 30 s together."""
        atexit.unregister(self.stop)
        try:
            if self._server is not None:
                try:
                    self._quit_postmaster()
                    # Fast shutdown of the postmaster we spawned, if it still runs.
                    self._server.stop()
                finally:
                    # If a test ran pg_ctl itself, the postmaster is pg_ctl's child.
                    self._stop_detached_postmaster()
        finally:
            self._server = None
            if self._root_dir is not None:
                shutil.rmtree(self._root_dir, ignore_errors=True)
                self._root_dir = None

    def restart(self) -> None:
        """Fast restart, like ``pg_ctl restart -m fast -D data_dir``: every session
        is dropped, data and port are kept. Returns once connections are accepted.

        Done by signalling and respawning the postmaster ourselves rather than via
        pg_ctl: pg_ctl daemonizes the new postmaster, which then is no longer our
        child, so it gets reparented to init (a zombie where init does not reap)
        and testing.postgresql loses track of the pid it has to stop.
        """
        server = self._require_server()
        if not server.is_alive():
            # Someone ran pg_ctl themselves; that postmaster is not ours to signal.
            self._stop_detached_postmaster()
        server.terminate()  # SIGINT, i.e. fast shutdown; waits for the exit
        server.start()  # same command line, so same port and options

    @contextmanager
    def outage(self) -> Iterator[None]:
        """The server is down (fast shutdown) inside the block and back, on the same port with
        the same data, after it."""
        server = self._require_server()
        server.terminate()
        try:
            yield
        finally:
            server.start()

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- connection details ------------------------------------------------

    @property
    def port(self) -> int:
        port: int = self._require_server().settings["port"]
        return port

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``test`` database (psycopg 3 driver)."""
        return self.url_for(DEFAULT_DBNAME)

    def url_for(self, dbname: str) -> str:
        return f"postgresql+psycopg://{SERVER_USER}@{HOST}:{self.port}/{quote(dbname, safe='')}"

    @property
    def dsn(self) -> dict[str, Any]:
        """psycopg keyword arguments: ``psycopg.connect(**server.dsn)``."""
        return {"host": HOST, "port": self.port, "user": SERVER_USER, "dbname": DEFAULT_DBNAME}

    @property
    def data_dir(self) -> str:
        data_dir: str = self._require_server().get_data_directory()
        return data_dir

    @property
    def pid(self) -> int | None:
        """The running postmaster's pid (read from postmaster.pid), if any."""
        if self._server is None:
            return None
        return self._postmaster_pid()

    def create_database(self, name: str) -> str:
        """``CREATE DATABASE name`` and return its SQLAlchemy URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(**{**self.dsn, "dbname": "postgres"}, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url_for(name)

    # -- internals ---------------------------------------------------------

    def _postgres_args(self) -> str:
        # testing.postgresql splits this on whitespace, so no value may contain spaces.
        # Its default adds -F (fsync off); we build the list ourselves so that
        # fast=False really keeps default durability.
        options = ["logging_collector=off", "max_connections=200"]
        if self.fast:
            options.extend(_FAST_OPTIONS)
        options.extend(self.settings)
        return " ".join(["-h", HOST, *(f"-c {o}" for o in options)])

    def _prepare_root_dir(self, root_dir: Path, as_root: bool) -> tuple[str, str]:
        bins = self._require_bins()
        if not as_root:
            return bins.initdb, bins.postgres
        entry = pwd.getpwnam(SERVER_USER)
        # testing.postgresql would create data/ and tmp/ as root with mode 0700,
        # which initdb (running as postgres) could not use; it skips existing ones.
        for sub in ("data", "tmp"):
            (root_dir / sub).mkdir(mode=0o700)
            os.chown(root_dir / sub, entry.pw_uid, entry.pw_gid)
        os.chown(root_dir, entry.pw_uid, entry.pw_gid)
        wrapper_dir = root_dir / "bin"
        wrapper_dir.mkdir(mode=0o755)
        return (
            _write_wrapper(wrapper_dir / "initdb", self._as_server_user, bins.initdb),
            _write_wrapper(wrapper_dir / "postgres", self._as_server_user, bins.postgres),
        )

    def _run_pg_ctl(self, *args: str) -> None:
        bins = self._require_bins()
        proc = subprocess.run(
            [*self._as_server_user, bins.pg_ctl, *args],
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {args[0]} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
            )

    def _postmaster_pid(self) -> int | None:
        if self._root_dir is None:
            return None
        pid_file = Path(self._root_dir, "data", "postmaster.pid")
        try:
            pid = int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        # The file outlives a postmaster that was SIGKILLed.
        return pid if _process_running(pid) else None

    def _quit_postmaster(self) -> None:
        """SIGQUIT to the postmaster (ours or a detached one): every server process exits at
        once, without a checkpoint. Waits for the exit."""
        pid = self._postmaster_pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGQUIT)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + _STOP_TIMEOUT
        while _process_running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _stop_detached_postmaster(self) -> None:
        pid = self._postmaster_pid()
        if pid is None:
            return
        self._run_pg_ctl("stop", "-D", self.data_dir, "-m", "fast", "-w", "-t", str(_STOP_TIMEOUT))
        # pg_ctl returns once postmaster.pid is gone, a moment before the exit.
        deadline = time.monotonic() + _STOP_TIMEOUT
        while _process_running(pid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _require_server(self) -> Any:
        if self._server is None:
            raise RuntimeError("PostgresServer is not started")
        return self._server

    def _require_bins(self) -> _Binaries:
        if self._bins is None:
            raise RuntimeError("PostgresServer is not started")
        return self._bins
