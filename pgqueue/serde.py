"""How payloads and results become stored JSON documents.

The default :class:`JSONSerializer` accepts what :func:`json.dumps` accepts, strictly: no NaN or
infinity (PostgreSQL's JSONB rejects them) and no NUL characters in strings (JSONB cannot hold
``\\u0000``), so a value that works on SQLite also works on PostgreSQL. No pickle, ever, by default.

Example::

    class DecimalSerializer(JSONSerializer):
        def encode(self, value):
            return super().encode(value, default=str)

    queue = pgqueue.Queue("sqlite:///app.db", serializer=DecimalSerializer())
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from pgqueue.errors import SerializationError

__all__ = ["JSONSerializer", "Serializer", "encode_document"]


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
# shows in a bulk enqueue.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


class JSONSerializer:
    """Plain JSON: dicts, lists, strings, numbers, booleans and None.

    Example::

        JSONSerializer().encode({"a": [1, 2]})   # {'a': [1, 2]}
    """

    def encode(self, value: Any, default: Callable[[Any], Any] | None = None) -> Any:
        """Check that ``value`` is storable JSON and return it (converted, if ``default`` is given)."""
        text = _json_text(value, default)
        return value if default is None else json.loads(text)

    def decode(self, document: Any) -> Any:
        """Return the stored document unchanged."""
        return document

    def __repr__(self) -> str:
        return "JSONSerializer()"


def encode_document(serializer: Serializer, value: Any) -> str | None:
    """``value`` as the JSON text to store, None for a JSON null (stored as SQL NULL).

    The text is made once, by whoever checks the value (the handler's own thread, for a result):
    every later write binds this text as it is. Encoding again further down a deeper stack (the
    worker's loop) could fail where the check passed, e.g. with RecursionError on a deep value,
    and a write that fails that way would fail on every retry. Raises SerializationError (or
    whatever a custom serializer's ``encode`` raises) when there is no such text.

    Example::

        encode_document(JSONSerializer(), {"a": [1, 2]})   # '{"a":[1,2]}'
    """
    # The default serializer's check already makes the text: no need to make it twice.
    document = value if type(serializer) is JSONSerializer else serializer.encode(value)
    text = _json_text(document, None)
    return None if text == "null" else text


def _json_text(value: Any, default: Callable[[Any], Any] | None) -> str:
    """The compact JSON text of ``value``, or SerializationError when there is no storable one."""
    try:
        if default is None:
            text = _ENCODER.encode(value)
        else:
            text = json.dumps(value, allow_nan=False, default=default, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(
            f"cannot serialize {_describe(value)} as JSON: {exc}. Pass JSON-compatible values "
            "(dict, list, str, int, float, bool, None) or give the Queue a serializer="
        ) from exc
    if "\\u0000" in text:
        raise SerializationError(
            "cannot store a string containing a NUL character (\\x00): PostgreSQL's JSONB "
            "rejects it; encode binary data, e.g. as base64"
        )
    return text


def _describe(value: Any) -> str:
    # reprlib bounds depth and length: the value may be huge or nested past the recursion limit.
    return f"{type(value).__name__} {reprlib.repr(value)}"
