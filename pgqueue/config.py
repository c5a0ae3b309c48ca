"""Named defaults and the validation every public option goes through.

Each ``check_*`` function takes user input and returns the normalised value, or raises
:class:`~pgqueue.errors.ConfigError` with a message that says what would be accepted. They run
before anything touches the database, so bad input never leaves a half-written job behind.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from pgqueue.errors import ConfigError

DEFAULT_URL = "sqlite:///pgqueue.db"
URL_ENVIRONMENT_VARIABLE = "PGQUEUE_URL"
DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_RESULT_TTL = 3600
DEFAULT_PRIORITY = 0
#: Worker registry rows silent for this long are deleted by the reaper, and no longer count as
#: live workers (``maintenance.reaper``, ``operations.queue_stats``, the dashboard).
DEFAULT_WORKER_TTL = 300.0
#: The error type stored on a job the reaper took back from a dead or stalled worker.
STALLED_ERROR_TYPE = "StalledJobError"

# A job id is limited in UTF-8 bytes, not characters: PostgreSQL refuses an index row larger than
# 2704 bytes (btree version 4, 8 kB pages), and the id is the last column of the widest index,
# ix_pgqueue_jobs_claim_queue (queue, priority, run_at, id). Its worst row: 8 bytes of tuple
# header, the queue name (255 characters, at most 1020 bytes, plus a 4-byte length, 4-aligned:
# 1024), priority (4), run_at (8, 8-aligned: 1040 + 8 = 1048), then the id's 4-byte length:
# 1052 + id bytes <= 2704 leaves 1652 bytes. 1024 keeps every ASCII id that the earlier limit of
# 1024 characters allowed, with room to spare (tests/backends/test_bad_input_generated.py stores
# a worst case on PostgreSQL).
MAX_ID_BYTES = 1024
#: Kept for compatibility: ids are limited in bytes (MAX_ID_BYTES); ASCII ids of this many
#: characters fit.
MAX_ID_LENGTH = MAX_ID_BYTES
MAX_NAME_LENGTH = 255
# Priorities are stored in a 32-bit INTEGER; keep well inside it.
PRIORITY_RANGE = (-1_000_000, 1_000_000)
MAX_ATTEMPTS_LIMIT = 1_000_000
# One hundred years: long enough for "keep", short enough to stay inside every datetime type.
MAX_SECONDS = 100 * 365 * 24 * 3600


def parse_url(url: str | URL | None) -> URL:
    """Parse ``url``, ``$PGQUEUE_URL`` or the SQLite default into a SQLAlchemy URL, whatever the
    database it names: ``pgqueue.backends.resolve_url`` then checks the database and its driver.

    A URL that cannot be parsed raises ConfigError without echoing the password.

    Example::

        parse_url("sqlite:///jobs.db").database  # 'jobs.db'
    """
    if url is None:
        url = os.environ.get(URL_ENVIRONMENT_VARIABLE) or DEFAULT_URL
    if not isinstance(url, str):
        return url
    if not url.strip():
        raise ConfigError("the database URL is empty; pass e.g. 'sqlite:///pgqueue.db'")
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(
            f"cannot parse database URL {_redact(url)!r}: expected e.g. "
            "'postgresql://user:password@host/dbname' or 'sqlite:///path/to/file.db'"
        ) from exc


def _redact(url: str) -> str:
    # An unparseable URL may still carry a password: keep only the scheme and the host part.
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<unparseable URL>"
    return f"{scheme}://{'***@' if '@' in rest else ''}{rest.rpartition('@')[2]}"


def check_positive_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Seconds as a positive finite number or a timedelta."""
    seconds: float
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise ConfigError(
            f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise ConfigError(f"{name} must be finite and {bound} seconds, got {value!r}")
    if seconds > MAX_SECONDS:
        raise ConfigError(f"{name} must be at most {MAX_SECONDS} seconds (100 years)")
    return seconds


#: Where a handler runs: a thread of the worker (the default) or a child process of its pool.
ISOLATIONS = ("thread", "process")
_MEMORY_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
}


def check_isolation(name: str, value: object) -> str:
    """``"thread"`` or ``"process"``."""
    if value not in ISOLATIONS:
        raise ConfigError(f"{name} must be 'thread' or 'process', not {value!r}")
    return str(value)


def check_memory(name: str, value: object) -> int:
    """An amount of memory in bytes: an int, or a string with a unit (``"512MB"``, ``"1GiB"``;
    KB, MB, GB are powers of 1000, KiB, MiB, GiB of 1024), at least one MB."""
    amount: float
    if isinstance(value, int) and not isinstance(value, bool):
        amount = value
    elif isinstance(value, str):
        text = value.strip().upper().replace(" ", "")
        digits = text.rstrip("KMGIB")
        unit = text[len(digits) :]
        try:
            amount = float(digits) * _MEMORY_UNITS[unit]
        except (KeyError, ValueError):
            raise ConfigError(
                f"{name} must be a number of bytes or a size such as '512MB' or '1GiB', "
                f"not {value!r}"
            ) from None
    else:
        raise ConfigError(
            f"{name} must be a number of bytes or a size such as '512MB', not "
            f"{type(value).__name__} {value!r}"
        )
    if not math.isfinite(amount) or amount < 1000**2:
        raise ConfigError(f"{name} must be at least 1MB, got {value!r}")
    return int(amount)


def check_result_ttl(value: object) -> int:
    """A result TTL: a positive whole number of seconds, or a timedelta of whole seconds."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds != int(seconds):
            raise ConfigError(f"result_ttl must be whole seconds, got {value!r}")
    elif isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    else:
        raise ConfigError(
            f"result_ttl must be a positive whole number of seconds or a timedelta, "
            f"not {type(value).__name__} {value!r}"
        )
    if seconds < 1 or seconds > MAX_SECONDS:
        raise ConfigError(f"result_ttl must be between 1 and {MAX_SECONDS} seconds, got {value!r}")
    return int(seconds)


def check_bool(name: str, value: object) -> bool:
    """A true bool (a truthy string such as "no" would silently mean yes)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, not {value!r}")
    return value


def check_int(name: str, value: object, *, low: int, high: int) -> int:
    """A true int (not bool) within [low, high]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name} must be an int, not {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def check_max_attempts(value: object) -> int:
    """At least one attempt."""
    return check_int("max_attempts", value, low=1, high=MAX_ATTEMPTS_LIMIT)


def check_priority(value: object) -> int:
    """Higher runs first; the default is 0."""
    return check_int("priority", value, low=PRIORITY_RANGE[0], high=PRIORITY_RANGE[1])


def check_name(kind: str, value: object, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """A queue name, task name, schedule name: a non-empty str of at most ``max_length``
    characters that both databases can store (no NUL, no lone surrogate)."""
    value = check_text(kind, value)
    if len(value) > max_length:
        raise ConfigError(f"{kind} is {len(value)} characters long; the limit is {max_length}")
    return value


#: PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes: a longer schema name would
#: silently name another schema.
MAX_SCHEMA_BYTES = 63


def check_schema(value: object) -> str:
    """A schema name (``Queue(schema=...)``), the same rule on every database: non-empty text
    (no NUL, no lone surrogate) of at most :data:`MAX_SCHEMA_BYTES` bytes of UTF-8. Anything
    else is one identifier, used exactly as given: dots, quotes, ``%``, spaces, capitals and
    non-ASCII letters included (``"Billing"`` is not ``billing``)."""
    value = check_name("schema", value)
    size = len(value.encode("utf-8"))
    if size > MAX_SCHEMA_BYTES:
        raise ConfigError(
            f"schema must be at most {MAX_SCHEMA_BYTES} bytes in UTF-8 (PostgreSQL's identifier "
            f"limit, beyond which it would name another schema), got {size} bytes: {value!r}"
        )
    return value


def check_job_id(value: object) -> str:
    """A caller-chosen job id (the dedup key): at most :data:`MAX_ID_BYTES` bytes of UTF-8."""
    value = check_text("job id", value)
    if len(value) > MAX_ID_BYTES or (
        not value.isascii() and len(value.encode("utf-8")) > MAX_ID_BYTES
    ):
        size = len(value.encode("utf-8"))
        raise ConfigError(
            f"job id is {size} bytes long in UTF-8 ({len(value)} characters); the limit is "
            f"{MAX_ID_BYTES} bytes (PostgreSQL's index rows are bounded): hash longer keys, e.g. "
            "with hashlib.sha256"
        )
    return value


def check_text(kind: str, value: object) -> str:
    """A non-empty str that PostgreSQL and SQLite both store as it is: no NUL character, which
    PostgreSQL's text refuses, and no lone surrogate (``os.fsdecode`` of a non-UTF-8 file name),
    which is not Unicode text and which PostgreSQL refuses while SQLite would keep it."""
    if not isinstance(value, str):
        raise ConfigError(f"{kind} must be a str, not {type(value).__name__} {value!r}")
    if not value:
        raise ConfigError(f"{kind} must not be empty")
    if "\x00" in value:
        raise ConfigError(f"{kind} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConfigError(
                f"{kind} contains a lone surrogate ({value[exc.start]!r} at index {exc.start}), "
                "which is not Unicode text: decode it with errors='replace' first"
            ) from None
    return value


def check_run_at(value: object) -> datetime:
    """An aware datetime; naive ones are refused because their time zone would be a guess."""
    if not isinstance(value, datetime):
        raise ConfigError(f"run_at must be a datetime, not {type(value).__name__} {value!r}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ConfigError(
            "run_at must be timezone-aware (e.g. datetime.now(timezone.utc)); "
            "a naive datetime's time zone would be a guess"
        )
    return value.astimezone(UTC)


def check_options(where: str, given: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse unknown option names, suggesting the closest known one."""
    known = sorted(allowed)
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known options: {known}"
            raise ConfigError(f"unknown option {key!r} for {where}{hint}")


def utc_now() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


#: What an enqueue that meets a waiting job of its unique key (or id) may do: keep that job (the
#: default), replace its arguments and due time (debounce), or its arguments only (throttle).
ON_CONFLICT_MODES = ("keep", "replace", "replace_keep_run_at")


def check_on_conflict(value: object) -> str:
    """One of :data:`ON_CONFLICT_MODES`."""
    if not isinstance(value, str) or value not in ON_CONFLICT_MODES:
        raise ConfigError(
            f"on_conflict must be one of {', '.join(map(repr, ON_CONFLICT_MODES))}, got {value!r}"
        )
    return value


def check_max_snoozes(value: object) -> int:
    """A task's ``max_snoozes``: a whole number from 0 (a snooze fails the job at once)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31 - 1:
        raise ConfigError(f"max_snoozes must be a whole number from 0 to 2**31-1, got {value!r}")
    return value
