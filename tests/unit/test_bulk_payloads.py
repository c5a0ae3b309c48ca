"""The payload texts of a bulk enqueue (pgqueue/producer/payloads.py): the orjson way, taken when
one walk proves every value plain, stores the same documents as the general way
(``serde.encode_document`` per job), and anything else takes the general way: the same texts and
the same errors, naming the same field."""

from __future__ import annotations

import enum
import json
import math
import uuid
from collections import namedtuple
from typing import Any

import pytest

from pgqueue import serde
from pgqueue.errors import SerializationError
from pgqueue.producer import payloads
from pgqueue.serde import JSONSerializer

SERIALIZER = JSONSerializer()


def general(items: list[Any], extra: dict[str, Any]) -> list[Any]:
    return [
        json.loads(
            serde.encode_document(SERIALIZER, {"args": list(a), "kwargs": {}, **extra}, "payload")
            or ""
        )
        for a in items
    ]


PLAIN: list[list[Any]] = [
    [(1, 2), ("a",), ()],
    [("back\\slash", 'quote"', "new\nline", "tab\t", "\r", "\u2028", "é ü 漢字 🎉")],
    [([1, [2, [3]]], {"k": {"nested": None}}, True, False, None)],
    [(0.1, -0.0, 1e16, 1.5e-300, 2**63 - 1, -(2**63))],
    [({"": "", "ключ": "значение"},)],
]


@pytest.mark.parametrize("items", PLAIN)
@pytest.mark.parametrize("extra", [{}, {"trace": {"traceparent": "00-ab-cd-01"}}])
def test_plain_values_store_what_the_general_way_stores(items: list[Any], extra: Any) -> None:
    assert payloads._plain(items)
    texts = payloads.payload_texts(SERIALIZER, items, extra)
    assert [json.loads(text) for text in texts] == general(items, extra)


Point = namedtuple("Point", "x y")


class Colour(enum.Enum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 2


OTHER: list[Any] = [
    (2**64,),  # beyond orjson's range: the general way stores it
    (-(2**70),),
    (Size.BIG,),  # an int subclass
    ({1: "int key"},),  # the standard library writes the key as "1"
    (Point(1, 2),),  # a tuple subclass
]


@pytest.mark.parametrize("args", OTHER)
def test_other_values_take_the_general_way(args: Any) -> None:
    items = [(0,), args]
    assert not payloads._plain(items)
    texts = payloads.payload_texts(SERIALIZER, items, {})
    assert [json.loads(text) for text in texts] == general(items, {})


BAD: list[Any] = [
    ("nul\x00",),
    ("\ud800",),
    (math.nan,),
    (math.inf,),
    (Colour.RED,),  # orjson would write an Enum's value: it must be refused as everywhere
    (uuid.uuid4(),),  # likewise a UUID
    ({"k": object()},),
    ({"\x00": 1},),
    (10**5000,),
]


@pytest.mark.parametrize("args", BAD)
def test_bad_values_fail_as_on_the_general_way(args: Any) -> None:
    items = [(0,), (1,), args]
    with pytest.raises(SerializationError) as expected:
        general(items, {})
    with pytest.raises(SerializationError) as raised:
        payloads.payload_texts(SERIALIZER, items, {})
    assert str(raised.value) == str(expected.value)
    assert "payload" in str(raised.value)


def test_nesting_at_and_past_the_limit() -> None:
    deep: Any = 1
    for _ in range(serde.MAX_DEPTH - 2):  # payload dict and args list take two levels
        deep = [deep]
    texts = payloads.payload_texts(SERIALIZER, [(deep,)], {})
    assert json.loads(texts[0]) == general([(deep,)], {})[0]
    with pytest.raises(SerializationError) as raised:
        payloads.payload_texts(SERIALIZER, [([deep],)], {})
    assert "nests deeper" in str(raised.value)


def test_a_custom_serializer_takes_the_general_way() -> None:
    class Upper(JSONSerializer):
        def encode(self, value: Any, default: Any = None) -> Any:
            return {**value, "args": [str(a).upper() for a in value["args"]]}

    texts = payloads.payload_texts(Upper(), [("a", "b")], {})
    assert json.loads(texts[0]) == {"args": ["A", "B"], "kwargs": {}}


@pytest.mark.parametrize("items", PLAIN)
def test_the_args_document_holds_each_jobs_args(items: list[Any]) -> None:
    document = payloads.args_document(SERIALIZER, items)
    assert document is not None
    assert json.loads(document) == [payload["args"] for payload in general(items, {})]


@pytest.mark.parametrize("args", [*OTHER, *BAD])
def test_no_args_document_unless_every_value_is_plain(args: Any) -> None:
    # The caller then takes the way that encodes each payload and names what is wrong.
    assert payloads.args_document(SERIALIZER, [(0,), args]) is None


def _many(odd: Any, kinds: str) -> list[Any]:
    """500 args tuples of plain scalars (of ``kinds``: s str, i int, f float, b bool/None)
    with ``odd`` as one value in the middle: the whole-call checks of one kind must find it."""
    plain = {"s": "text é", "i": 7, "f": 0.5, "b": True}
    items: list[Any] = [tuple(plain[k] for k in kinds) for _ in range(500)]
    items[250] = (*items[250], odd)
    return items


@pytest.mark.parametrize("kinds", ["s", "i", "f", "sifb"])
@pytest.mark.parametrize("odd", ["nul\x00", "\ud800", math.nan, math.inf, 2**64, -(2**63) - 1])
def test_one_value_out_of_many_scalars_is_caught(kinds: str, odd: Any) -> None:
    items = _many(odd, kinds)
    assert not payloads._plain(items)
    assert payloads.args_document(SERIALIZER, items) is None


def test_positive_and_negative_infinity_together_are_caught() -> None:
    # Their sum is NaN, not infinite: the float check must catch that too.
    assert not payloads._plain([(math.inf,), (-math.inf,), (1.0,)])


def test_finite_floats_whose_sum_overflows_take_the_general_way() -> None:
    items = [(1e308,), (1e308,), (-1e308,)]
    assert not payloads._plain(items)
    texts = payloads.payload_texts(SERIALIZER, items, {})
    assert [json.loads(text) for text in texts] == general(items, {})


@pytest.mark.parametrize("kinds", ["s", "i", "f", "sifb"])
def test_many_plain_scalars_store_what_the_general_way_stores(kinds: str) -> None:
    items = [*_many(None, kinds), (), ("",), (-(2**63), 2**64 - 1)]
    assert payloads._plain(items)
    texts = payloads.payload_texts(SERIALIZER, items, {})
    assert [json.loads(text) for text in texts] == general(items, {})
