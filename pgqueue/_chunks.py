"""Consecutive slices of an iterable, taken as they are needed (enqueue writers, the dashboard's
bulk actions).

Example::

    list(iter_chunks(range(5), 2))   # [[0, 1], [2, 3], [4]]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

__all__ = ["iter_chunks"]

T = TypeVar("T")


def iter_chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Consecutive lists of at most ``size`` items (taken from ``items`` as they are needed).

    Example::

        for chunk in iter_chunks(rows, 1000):
            write(chunk)
    """
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk
