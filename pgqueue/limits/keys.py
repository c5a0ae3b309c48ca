"""Limit keys as they are stored: one function encodes every key, so two tasks never share one.

A job's ``concurrency_key``, ``rate_key`` and ``unique_key`` columns (and ``pgqueue_limits.key``)
hold the task's name and, for a per-key limit, the key's value. The task's name is written with
its length in front (``"7:billing:x:1"``): a plain ``task:value`` made task ``billing`` with key
``"x:1"`` and task ``billing:x`` with key ``"1"`` one key, so the second enqueue came back as a
duplicate of the other task's job, and their concurrency and rate slots were shared. Read from
the left, the length says where the task's name ends; what follows is nothing (a task-wide
limit) or ``:`` and the value (never empty), so no two (task, value) pairs give one string.

The length counts characters (code points), as SQL's ``length()`` does on both databases: the
migration ``0009_limit_key_encoding`` rewrites the keys stored before with
``length(task) || ':' || key``, which gives what :func:`stored_key` gives. Keep the two in step.

Example::

    stored_key("billing")           # '7:billing'         (a task-wide limit)
    stored_key("billing", "x:1")    # '7:billing:x:1'
    stored_key("billing:x", "1")    # '9:billing:x:1'
"""

from __future__ import annotations

from pgqueue.config import check_text
from pgqueue.errors import ConfigError

__all__ = [
    "MAX_INDEXED_KEY_BYTES",
    "MAX_KEY_LENGTH",
    "check_key_sizes",
    "check_key_value",
    "split_key",
    "stored_key",
]

#: A key's value, as text, has at most this many characters.
MAX_KEY_LENGTH = 512
# PostgreSQL refuses an index row over 2704 bytes (btree version 4, 8 kB pages), where SQLite
# would store it: the widest row holding keys is ix_pgqueue_jobs_claim_limited's (concurrency key,
# rate key, priority, run_at, id). Its fixed parts (tuple header, null bitmap, the 4-byte lengths
# of the three texts with their alignment, priority and run_at) take less than 64 bytes; the
# rest is the two stored keys and the id, in UTF-8. ux_pgqueue_jobs_unique holds one key alone.
MAX_INDEXED_KEY_BYTES = 2704 - 64
# An int with more bits than this has more than MAX_KEY_LENGTH digits: refused before str(),
# which raises a bare ValueError past Python's 4300-digit conversion limit.
_MAX_KEY_BITS = 1702


def stored_key(task: str, value: str | None = None) -> str:
    """The stored form of a limit key: task ``task``'s own (``value`` None: a limit on the whole
    task), or the key ``value`` of task ``task`` (a checked value, see :func:`check_key_value`).

    Every limit column is written through this function; nothing reads a key back apart.

    Example::

        stored_key("app.sync", "42")    # '8:app.sync:42'
    """
    prefix = f"{len(task)}:{task}"
    return prefix if value is None else f"{prefix}:{value}"


def split_key(stored: str) -> tuple[str, str | None]:
    """The task and value of a stored key (:func:`stored_key` read back, for display): value
    None for a task-wide limit. A key not in that form comes back whole as the task.

    Example::

        split_key("8:app.sync:42")    # ("app.sync", "42")
        split_key("7:billing")        # ("billing", None)
    """
    length, colon, rest = stored.partition(":")
    if not colon or not length.isdigit() or len(rest) < int(length):
        return stored, None
    task, tail = rest[: int(length)], rest[int(length) :]
    if not tail:
        return task, None
    if tail[0] != ":" or len(tail) == 1:
        return stored, None
    return task, tail[1:]


def check_key_value(field: str, value: object) -> str:
    """A key's value as text: a non-empty ``str`` both databases store as it is (no NUL, no lone
    surrogate) or an ``int``, at most :data:`MAX_KEY_LENGTH` characters; anything else raises
    :class:`ConfigError` naming ``field``.

    Example::

        check_key_value("concurrency_key", 42)   # "42"
    """
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ConfigError(f"{field} must give a str or an int, not {type(value).__name__}")
    if isinstance(value, int):
        if value.bit_length() > _MAX_KEY_BITS:
            raise ConfigError(
                f"{field} is an int of {value.bit_length()} bits; a key has at most "
                f"{MAX_KEY_LENGTH} characters (hash larger values, e.g. with hashlib.sha256)"
            )
        text = str(int(value))
    else:
        text = check_text(field, value)
    if len(text) > MAX_KEY_LENGTH:
        raise ConfigError(
            f"{field} must be 1 to {MAX_KEY_LENGTH} characters, got {len(text)}: {text[:40]!r}…"
        )
    return text


def check_key_sizes(row: dict[str, object]) -> None:
    """Refuse a job whose stored keys (with its task's name, see :func:`stored_key`) and id would
    not fit in one PostgreSQL index row: :data:`MAX_INDEXED_KEY_BYTES` in UTF-8 for the
    concurrency key, the rate key and the id together, and for the unique key. SQLite would
    store any of them; the check keeps both databases alike. A key's value alone (at most
    :data:`MAX_KEY_LENGTH` characters) fits unless the task's name and the id are long too.

    Example::

        check_key_sizes({"id": "a", "concurrency_key": "8:app.sync:42", "rate_key": None,
                         "unique_key": None})   # fits: nothing raised
    """
    claim_row = [
        (name, value)
        for name, value in (
            ("concurrency_key", row.get("concurrency_key")),
            ("rate_limit_key", row.get("rate_key")),
        )
        if isinstance(value, str)
    ]
    if claim_row:
        size = sum(_size(value) for _, value in claim_row) + _size(row.get("id"))
        if size > MAX_INDEXED_KEY_BYTES:
            fields = " and ".join(name for name, _ in claim_row)
            raise ConfigError(
                f"{fields} with the task's name and the job id take {size} bytes in UTF-8; "
                f"PostgreSQL's index rows hold {MAX_INDEXED_KEY_BYTES}: use shorter keys (hash "
                "them, e.g. with hashlib.sha256), a shorter id or task name"
            )
    unique = row.get("unique_key")
    if isinstance(unique, str) and (size := _size(unique)) > MAX_INDEXED_KEY_BYTES:
        raise ConfigError(
            f"unique_key with the task's name takes {size} bytes in UTF-8; PostgreSQL's index "
            f"rows hold {MAX_INDEXED_KEY_BYTES}: use a shorter key (hash it, e.g. with "
            "hashlib.sha256) or task name"
        )


def _size(value: object) -> int:
    if not isinstance(value, str):
        return 0
    # Every character of an ASCII string is one byte: no encoding on the common path.
    return len(value) if value.isascii() else len(value.encode("utf-8"))
