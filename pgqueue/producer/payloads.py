"""The payload texts of a bulk enqueue of args-only jobs, checked and encoded with as little
Python per job as the checks allow.

The general way (``serde.encode_document`` per job) walks each payload and runs the standard
library's encoder on it: several microseconds a job, more than the server's share of the
insert. With the default serializer, one walk of the whole batch proves every value is of a
plain type (exact ``dict``/``list``/``tuple`` with ``str`` keys, ``str``, ``int``, ``float``,
``bool``, ``None``) within the limits of :mod:`pgqueue.serde`; for such values orjson writes the
same JSON values as the standard library (tuples as arrays, non-ASCII text as it is), so each
job's args are then encoded by orjson. Anything else (another serializer, any value outside that
set, anything orjson refuses, such as an integer beyond 64 bits) takes the general way for the
whole batch: the same texts, and the same errors naming the same field.

Example::

    texts = payload_texts(JSONSerializer(), [(1, 2), ("a",)], {})
    # [b'{"args":[1,2],"kwargs":{}}', b'{"args":["a"],"kwargs":{}}']
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Any

from pgqueue import serde
from pgqueue.errors import SerializationError
from pgqueue.serde import MAX_DEPTH, JSONSerializer, Serializer

__all__ = ["args_document", "payload_texts"]

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is installed wherever CPython is
    orjson = None  # type: ignore[assignment]

# Beyond 64 bits orjson refuses an integer (its error sends the batch the general way).
_INT_LOW, _INT_HIGH = -(2**63), 2**64
_SCALARS = (str, int, float, bool, type(None))
_SCALAR_SET = frozenset(_SCALARS)
_ARGS = frozenset((tuple, list))


def payload_texts(
    serializer: Serializer, items: Sequence[Sequence[Any]], extra: Mapping[str, Any]
) -> list[bytes]:
    """The stored payload (``{"args": [...], "kwargs": {}, **extra}``) of each args sequence in
    ``items``, as JSON text in UTF-8; a bad value raises :class:`~pgqueue.SerializationError`
    naming the ``payload`` and the place in it, as ``enqueue`` does."""
    encode = serde.encode_document
    if orjson is not None and type(serializer) is JSONSerializer and _plain(items):
        # The shared members once, as the general way writes them (extra: the trace context).
        shared = encode(serializer, {"kwargs": {}, **extra}, "payload")
        assert shared is not None
        head, tail = b'{"args":', b"," + shared[1:].encode()
        dumps = orjson.dumps
        try:
            return [head + dumps(args) + tail for args in items]
        except orjson.JSONEncodeError:
            pass  # e.g. an integer beyond 64 bits: the general way says what it makes of it
    texts = [
        encode(serializer, {"args": list(args), "kwargs": {}, **extra}, "payload") for args in items
    ]
    if None in texts:
        raise SerializationError("cannot store payload: the serializer made a JSON null of it")
    return [text.encode() for text in texts]  # type: ignore[union-attr]


def args_document(serializer: Serializer, items: Sequence[Sequence[Any]]) -> str | None:
    """``items`` (args sequences) as one JSON array of arrays, for a statement that builds each
    payload on the server; None unless every value is plain (see :func:`payload_texts`), when
    the caller takes a way that checks and encodes each payload and names what is wrong."""
    if orjson is None or type(serializer) is not JSONSerializer or not _plain(items):
        return None
    try:
        return orjson.dumps(items).decode()
    except orjson.JSONEncodeError:
        return None


def _plain(items: Sequence[Sequence[Any]]) -> bool:
    """Whether every value in ``items`` (a sequence of args sequences) is of a plain type and
    within serde's limits: then orjson and the standard library write the same values. Any
    doubt answers False (the general way checks again and names the problem).

    Args of scalars only (the common call) are checked a kind at a time over the whole call,
    each check one C-level pass (the types, the joined text, the smallest and largest integer,
    the sum of the floats); args holding containers are walked (:func:`_walk`)."""
    kind = type(items)
    if kind is not list and kind is not tuple:
        return False
    if not set(map(type, items)) <= _ARGS:
        return False
    values: list[Any] = list(chain.from_iterable(items))
    kinds: set[type] = set(map(type, values))
    if not kinds <= _SCALAR_SET:
        return _walk(items)
    for scalar in kinds:
        same: list[Any] = (
            values if len(kinds) == 1 else [value for value in values if type(value) is scalar]
        )
        if scalar is str:
            if not _plain_text("".join(same)):
                return False
        elif scalar is int:
            if min(same) < _INT_LOW or max(same) >= _INT_HIGH:
                return False
        elif scalar is float and not math.isfinite(sum(same)):
            # Not finite: an infinity or NaN among them, or (taken as a doubt) a sum too large.
            return False
    return True


def _walk(items: Sequence[Sequence[Any]]) -> bool:
    """:func:`_plain` one container at a time, for args holding containers."""
    # (container, depth): the batch is depth 1 as the payload is, its args lists depth 2.
    stack: list[tuple[Any, int]] = [(items, 1)]
    scalars = _SCALARS
    while stack:
        container, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if type(container) is dict:
            values = container.values()
            for key in container:
                if type(key) is not str or not _plain_text(key):
                    return False
        else:
            values = container
        for value in values:
            kind = type(value)
            if kind in scalars:
                if kind is str:
                    if not _plain_text(value):
                        return False
                elif kind is int:
                    if not _INT_LOW <= value < _INT_HIGH:
                        return False
                elif kind is float and not math.isfinite(value):
                    return False
            elif kind is list or kind is tuple or kind is dict:
                stack.append((value, depth + 1))
            else:
                return False
    return True


def _plain_text(text: str) -> bool:
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")  # a lone surrogate has no UTF-8 form
    except UnicodeEncodeError:
        return False
    return True
