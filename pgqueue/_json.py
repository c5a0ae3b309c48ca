"""Internal: a faster JSON reader for the documents pgqueue reads back (claimed payloads), that
returns exactly what :func:`json.loads` returns.

orjson parses several times faster than the standard library, but not always to the same value:
an integer beyond 64 bits comes back as a float (silently losing digits), and a number beyond
the float range (``1e400``, which PostgreSQL's JSONB stores as a numeric) or an escaped lone
surrogate is an error where :func:`json.loads` gives ``inf`` or the surrogate. So the text goes to
:func:`json.loads` whenever it holds a run of 19 digits (every integer that fits in 64 bits has
fewer, or is one orjson reads right) or orjson refuses it; every other text reads the same in
both. Without orjson (it is not installed on every interpreter: see pyproject.toml), :func:`loads`
is :func:`json.loads`.

Example::

    from pgqueue import _json
    _json.loads(b'{"args":[12345678901234567890123],"kwargs":{}}')   # the int, not a float
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["FAST", "loads"]

# Both kinds of text: psycopg hands bytes to its loaders, SQLAlchemy hands str on SQLite.
_LONG_DIGITS_BYTES = re.compile(rb"[0-9]{19}").search
_LONG_DIGITS_STR = re.compile(r"[0-9]{19}").search

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is installed wherever CPython is
    orjson = None  # type: ignore[assignment]


def _fast_loads(data: Any) -> Any:
    # Per claimed row: every lookup and check here shows next to orjson's own time.
    if (_LONG_DIGITS_STR if type(data) is str else _LONG_DIGITS_BYTES)(data) is None:
        try:
            return _orjson_loads(data)
        except _OrjsonError:
            pass  # json.loads decides: the same value, or the same error, as without orjson
    return json.loads(bytes(data) if isinstance(data, memoryview) else data)


#: Whether :func:`loads` uses orjson.
FAST = orjson is not None
_orjson_loads = orjson.loads if FAST else json.loads
_OrjsonError = orjson.JSONDecodeError if FAST else ValueError
#: ``json.loads``, sped up by orjson where it is installed: same values, same errors.
loads: Callable[[Any], Any] = _fast_loads if FAST else json.loads
