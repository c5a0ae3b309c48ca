"""Job ids that pgqueue generates: time-ordered UUIDs (the version 7 layout of RFC 9562) as text.

Why not ``uuid4``: the id is the jobs table's primary key, a B-tree. Random ids land on random
leaf pages, so a bulk enqueue touches (and, after each checkpoint, writes whole into the WAL)
a page per row, and splits pages all over the index; ids that grow with time all land at the
right edge of it: a bulk enqueue costs the server less per row and writes far fewer full pages
(docs/benchmarks.md, "Index upkeep per job").

Layout (32 hex digits, 8-4-4-4-12 like any UUID, so ``uuid.UUID(job_id).version == 7``)::

    48 bits  Unix time in milliseconds
     4 bits  version (7)
    12 bits  counter: starts at a random value below 2048 in each new millisecond and counts up
     2 bits  variant (RFC 4122/9562)
    62 bits  random

Within a process the ids strictly increase, in text order too (lower-case hex of fixed width
sorts like the number), across threads: the timestamp and counter come from one reservation
under a lock, and a counter that runs out in a millisecond carries into the timestamp (which may
then run a little ahead of the clock, as RFC 9562 allows). Between processes ids are ordered by
millisecond only, and kept apart by the 62 random bits (and the random counter start). Ids a
caller chooses are any text and are never parsed.

Example::

    job_id = new_id()                   # '019ab3c2-5f1e-7a3c-9d2e-4b7f0c1a2e3d'
    first, second = new_ids(2)          # first < second
"""

from __future__ import annotations

import os
import sys
import threading
import time
from array import array

__all__ = ["new_id", "new_ids"]

_COUNTER_BITS = 12
_VARIANT = 0x80  # the top two bits of byte 8: 10

_lock = threading.Lock()
# The last (milliseconds << 12 | counter) handed out in this process.
_last = 0


def _new_lock_after_fork() -> None:
    # A fork while another thread held the lock would leave the child's copy held for ever.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_new_lock_after_fork)


def _reserve(count: int) -> int:
    """The first of ``count`` consecutive (milliseconds << 12 | counter) values, all above every
    value reserved before in this process."""
    global _last
    # The random start below half the counter's range leaves at least 2048 ids per millisecond
    # before the carry; drawn outside the lock, it costs the lock nothing.
    fresh = (time.time_ns() // 1_000_000) << _COUNTER_BITS | (
        int.from_bytes(os.urandom(2), "big") & 0x7FF
    )
    with _lock:
        first = max(fresh, _last + 1)
        _last = first + count - 1
    return first


def new_ids(count: int) -> list[str]:
    """``count`` new job ids, increasing, from one reservation and one read of the OS's random
    source (a bulk enqueue's per-id cost stays below ``str(uuid.uuid4())``'s).

    Example::

        ids = new_ids(1000)
        assert ids == sorted(ids) and len(set(ids)) == 1000
    """
    if count <= 0:
        return []
    first = _reserve(count)
    if count < _COLUMNS_FROM:
        return _one_by_one(first, count)
    return _by_columns(first, count)


# From this many ids a call builds them column by column (a few dozen C-level copies whatever
# the count); below it, one at a time is cheaper.
_COLUMNS_FROM = 32
# Where each hex digit of an id's two 64-bit halves goes in its 36 characters (8-4-4-4-12).
_HIGH_PLACES = (*range(0, 8), *range(9, 13), *range(14, 18))
_LOW_PLACES = (*range(19, 23), *range(24, 36))
_WIDTH = 37  # an id and the comma after it
# The low half's first hex digit carries the variant (binary 10xx): 2 of its 4 random bits kept.
_VARIANT_DIGIT = bytes.maketrans(
    b"0123456789abcdef", bytes(b"89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef")
)


def _one_by_one(first: int, count: int) -> list[str]:
    raw = bytearray(os.urandom(8 * count))
    for offset in range(0, 8 * count, 8):
        raw[offset] = (raw[offset] & 0x3F) | _VARIANT
    tail = raw.hex()
    ids = []
    prefix = ""
    current_ms = -1
    for number in range(count):
        value = first + number
        ms = value >> _COUNTER_BITS
        if ms != current_ms:
            # The timestamp's 12 hex digits change once per millisecond, not per id.
            current_ms = ms
            stamp = f"{ms:012x}"
            prefix = f"{stamp[:8]}-{stamp[8:]}-7"
        k = 16 * number
        ids.append(
            f"{prefix}{value & 0xFFF:03x}-{tail[k : k + 4]}-{tail[k + 4 : k + 16]}",
        )
    return ids


def _by_columns(first: int, count: int) -> list[str]:
    """The ids as one comma-separated text, written a column at a time (every id's n-th
    character in one strided copy), split once: no Python bytecode runs per id."""
    # The high halves (milliseconds, version 7, counter) are consecutive numbers within a
    # millisecond: one run per millisecond the reservation spans (one or two, nearly always).
    high = array("Q")
    value, end = first, first + count
    while value < end:
        ms = value >> _COUNTER_BITS
        stop = min(end, (ms + 1) << _COUNTER_BITS)
        base = (ms << 16) | 0x7000
        high.extend(range(base | (value & 0xFFF), (base | ((stop - 1) & 0xFFF)) + 1))
        value = stop
    if sys.byteorder == "little":
        high.byteswap()  # big-endian: the hex digits in the order they are written
    high_digits = high.tobytes().hex().encode()
    low_digits = os.urandom(8 * count).hex().encode()
    text = bytearray(_WIDTH * count - 1)
    for column, place in enumerate(_HIGH_PLACES):
        text[place::_WIDTH] = high_digits[column::16]
    text[_LOW_PLACES[0] :: _WIDTH] = low_digits[0::16].translate(_VARIANT_DIGIT)
    for column, place in enumerate(_LOW_PLACES[1:], 1):
        text[place::_WIDTH] = low_digits[column::16]
    dashes = b"-" * count
    for place in (8, 13, 18, 23):
        text[place::_WIDTH] = dashes
    text[36::_WIDTH] = b"," * (count - 1)
    return text.decode("ascii").split(",")


def new_id() -> str:
    """One new job id (see ``new_ids``).

    Example::

        job_id = new_id()
        assert uuid.UUID(job_id).version == 7
    """
    return new_ids(1)[0]
