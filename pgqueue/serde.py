"""How payloads and results become stored JSON documents, and the limits every stored document keeps.

The default :class:`JSONSerializer` accepts what :func:`json.dumps` accepts, strictly, so that a
value that works on SQLite also works on PostgreSQL:

- no NaN or infinity (PostgreSQL's JSONB rejects them);
- no NUL characters (``\\x00``) and no lone surrogates (``"\\udc80"``, what :func:`os.fsdecode`
  makes of a non-UTF-8 file name) in any string or key: JSONB cannot hold them;
- integers of at most :data:`MAX_INT_DIGITS` decimal digits;
- at most :data:`MAX_DEPTH` levels of nesting (lists and dicts inside each other).

The nesting limit is checked by walking the value, not by waiting for the interpreter's
recursion limit, so the same document is accepted in every thread, encoded in any stack, and read
back by ``queue.status()`` without a ``RecursionError``. :func:`encode_document` applies every
limit to whatever a serializer returns, and names the field in its error: every stored document
goes through it. No pickle, ever, by default.

Example::

    class DecimalSerializer(JSONSerializer):
        def encode(self, value):
            return super().encode(value, default=str)

    queue = pgqueue.Queue("sqlite:///app.db", serializer=DecimalSerializer())
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pgqueue.errors import PgQueueError, SerializationError

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "JSONSerializer",
    "Serializer",
    "check_document",
    "decode_document",
    "encode_document",
    "encode_value",
]

#: How deep a stored document may nest: a list or dict counts one level, its items one more.
#: A job's payload is ``{"args": [...], "kwargs": {...}}``, so an argument keeps 254 of them; a
#: result keeps all 256. Far below the interpreter's recursion limit (1000), so encoding and
#: decoding such a document never needs more stack than any thread has.
MAX_DEPTH = 256
#: The largest integers stored, in decimal digits: below Python's default limit on int/str
#: conversion (4300), so what was stored can always be read back.
MAX_INT_DIGITS = 4000
_INT_BOUND = 10**MAX_INT_DIGITS


@runtime_checkable
class Serializer(Protocol):
    """Turns values into JSON-compatible documents for storage, and back."""

    def encode(self, value: Any) -> Any:
        """Return a JSON-compatible form of ``value``; raise SerializationError if there is none."""
        ...

    def decode(self, document: Any) -> Any:
        """Return the value that :meth:`encode` stored as ``document``."""
        ...


# One encoder for every plain check: json.dumps with options builds a new one per call, which
# shows in a bulk enqueue. ensure_ascii=False keeps lone surrogates raw in the text, so encoding
# the text as UTF-8 finds them (escaped, they would look like the halves of a valid pair).
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


class JSONSerializer:
    """Plain JSON: dicts, lists, strings, numbers, booleans and None, within the module's limits.

    Example::

        JSONSerializer().encode({"a": [1, 2]})   # {'a': [1, 2]}
    """

    def encode(self, value: Any, default: Callable[[Any], Any] | None = None) -> Any:
        """Check that ``value`` is storable JSON and return it (converted, if ``default`` is given)."""
        check_document(value, "value")
        text = _json_text(value, default, "value")
        if default is None:
            return value
        converted = json.loads(text)
        check_document(converted, "value")
        return converted

    def decode(self, document: Any) -> Any:
        """Return the stored document unchanged."""
        return document

    def __repr__(self) -> str:
        return "JSONSerializer()"


def encode_document(serializer: Serializer, value: Any, field: str = "result") -> str | None:
    """``value`` as the JSON text to store, None for a JSON null (stored as SQL NULL), held to
    this module's limits; whatever goes wrong raises one :class:`SerializationError` naming
    ``field`` and the place inside it, the original error as its cause.

    The text is made once, by whoever checks the value (the handler's own thread, for a result):
    every later write binds this text as it is. Encoding again further down a deeper stack (the
    worker's loop) could fail where the check passed, and a write that fails that way would fail
    on every retry.

    Example::

        encode_document(JSONSerializer(), {"a": [1, 2]})   # '{"a":[1,2]}'
    """
    if value is None and type(serializer) is JSONSerializer:
        # Most handlers return None: a worker stores its outcome without a walk or an encoder.
        return None
    text = _checked(serializer, value, field)[1]
    return None if text == "null" else text


def encode_value(serializer: Serializer, value: Any, field: str) -> Any:
    """``serializer.encode(value)``, held to this module's limits: the JSON-compatible document
    (for a statement that binds it as JSON, like the payload of an enqueue). Errors as
    :func:`encode_document`'s.

    Example::

        document = encode_value(queue.serializer, {"args": [1], "kwargs": {}}, "payload")
    """
    return _checked(serializer, value, field)[0]


def _checked(serializer: Serializer, value: Any, field: str) -> tuple[Any, str]:
    """The document a serializer makes of ``value``, and its JSON text, both checked."""
    if type(serializer) is JSONSerializer:
        # The default serializer returns the value itself: check and encode it once, here.
        document = value
    else:
        try:
            document = serializer.encode(value)
        except SerializationError as exc:
            problem = getattr(exc, "problem", None)
            if problem is None:
                raise SerializationError(f"cannot store {field}: {exc}") from exc
            # JSONSerializer's own check (in a subclass): say where, in the caller's terms.
            raise _document_problem(field, exc.path, problem) from exc  # type: ignore[attr-defined]
        except Exception as exc:
            # A custom serializer may raise anything; RecursionError, ValueError (a huge int),
            # OverflowError... all mean "this value cannot be stored".
            detail = str(exc) if isinstance(exc, PgQueueError) else f"{type(exc).__name__}: {exc}"
            raise SerializationError(f"cannot store {field}: {detail}") from exc
    check_document(document, field)
    return document, _json_text(document, None, field)


def _json_text(value: Any, default: Callable[[Any], Any] | None, field: str) -> str:
    """The compact JSON text of a checked ``value``, or SerializationError when there is none
    (a type JSON does not have, NaN)."""
    try:
        if default is None:
            return _ENCODER.encode(value)
        return json.dumps(
            value, allow_nan=False, ensure_ascii=False, default=default, separators=(",", ":")
        )
    except PgQueueError:
        raise
    except Exception as exc:  # TypeError, ValueError, RecursionError from a default=, ...
        raise SerializationError(
            f"cannot store {field}: cannot serialize {_describe(value)} as JSON: {exc}. Pass "
            "JSON-compatible values (dict, list, str, int, float, bool, None) or give the Queue "
            "a serializer="
        ) from exc


def decode_document(serializer: Serializer, document: Any, field: str) -> Any:
    """``serializer.decode(document)``; any error raises :class:`SerializationError` naming ``field``.

    Example::

        value = decode_document(queue.serializer, row.result, "result")
    """
    try:
        return serializer.decode(document)
    except PgQueueError:
        raise
    except Exception as exc:
        raise SerializationError(f"cannot decode the stored {field}: {exc}") from exc


def check_document(document: Any, field: str, *, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`SerializationError` naming ``field`` and the place inside it if ``document``
    breaks a limit of this module (nesting, NUL, lone surrogates, huge integers, NaN).

    The walk is iterative: a value nested a million levels deep is refused as quickly as one just
    past the limit, and never touches the interpreter's recursion limit.

    Example::

        check_document({"a": "\\x00"}, "payload")   # SerializationError: payload['a'] contains a NUL
    """
    found = _first_problem(document, limit)
    if found is not None:
        raise _document_problem(field, *found)


def _document_problem(field: str, path: tuple[Any, ...], problem: str) -> SerializationError:
    """A SerializationError saying where in the document the problem is; ``path`` and
    ``problem`` stay on it, so that a caller can say it again in its own terms."""
    where = field + "".join(f"[{key!r}]" for key in path)
    error = SerializationError(f"cannot store {where}: {problem}")
    error.path = path  # type: ignore[attr-defined]
    error.problem = problem  # type: ignore[attr-defined]
    return error


_CONTAINERS = (list, tuple, dict)


def _first_problem(value: Any, limit: int) -> tuple[tuple[Any, ...], str] | None:
    problem = _scalar_problem(value)
    if problem is not None:
        return (), problem
    if not isinstance(value, _CONTAINERS):
        return None
    # (container, its depth, the keys leading to it): the path is built for containers only,
    # and read only when something is wrong.
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 1, ())]
    while stack:
        container, depth, path = stack.pop()
        if depth > limit:
            return path, (
                f"nests deeper than the limit of {limit} levels (lists and dicts inside each "
                "other; a payload's args and kwargs take two of them), or contains itself"
            )
        if isinstance(container, dict):
            for key, item in container.items():
                if type(key) is str and key.isascii() and "\x00" not in key:
                    pass  # the common key, checked without a call
                elif isinstance(key, str) and (problem := _string_problem(key)) is not None:
                    return (*path, key), f"a key {problem}"
                if _plain(item):
                    continue
                if isinstance(item, _CONTAINERS):
                    stack.append((item, depth + 1, (*path, key)))
                elif (problem := _scalar_problem(item)) is not None:
                    return (*path, key), problem
        else:
            for index, item in enumerate(container):
                if _plain(item):
                    continue
                if isinstance(item, _CONTAINERS):
                    stack.append((item, depth + 1, (*path, index)))
                elif (problem := _scalar_problem(item)) is not None:
                    return (*path, index), problem
    return None


def _plain(item: Any) -> bool:
    """The common scalars that need no closer look: small ints, finite floats, None, bools,
    ASCII strings without NUL (the walk's fast path: exact types only)."""
    kind = type(item)
    if kind is int:
        return bool(-_INT_BOUND < item < _INT_BOUND)
    if kind is str:
        return bool(item.isascii() and "\x00" not in item)
    if kind is float:
        return math.isfinite(item)
    return item is None or kind is bool


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return _string_problem(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if -_INT_BOUND < value < _INT_BOUND:
            return None
        return (
            f"is an integer of more than {MAX_INT_DIGITS} digits; store it as a string "
            "(JSON readers cannot parse it back)"
        )
    if isinstance(value, float) and not math.isfinite(value):
        return f"is {value!r}, which JSON cannot represent (PostgreSQL's JSONB rejects it)"
    return None


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return (
            "contains a NUL character (\\x00): PostgreSQL's JSONB rejects it; encode binary "
            "data, e.g. as base64"
        )
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return (
                f"contains a lone surrogate ({text[exc.start]!r} at index {exc.start}), which is "
                "not Unicode text and which PostgreSQL cannot store (os.fsdecode makes them of "
                "undecodable file names): decode with errors='replace', or store bytes as base64"
            )
    return None


class _SafeRepr(reprlib.Repr):
    """reprlib, bounded in depth and length, that also survives ints too long to print."""

    def repr_int(self, x: int, level: int) -> str:
        if -_INT_BOUND < x < _INT_BOUND:
            return super().repr_int(x, level)
        return f"<int of about {int(abs(x).bit_length() * math.log10(2)) + 1} digits>"


_REPR = _SafeRepr()


def _describe(value: Any) -> str:
    # Bounded: the value may be huge, nested past the recursion limit, or hold ints too long for
    # repr() (which raises ValueError past 4300 digits).
    try:
        return f"{type(value).__name__} {_REPR.repr(value)}"
    except Exception:
        return f"a {type(value).__name__}"
