"""plan_enqueue (pgqueue/producer/paths.py): which way an enqueue call writes, from the call's
shape and the backend's flags alone, without a database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pgqueue.backends.postgres.backend import PostgresBackend
from pgqueue.backends.sqlite.backend import SQLiteBackend
from pgqueue.producer.paths import FRESH_PATHS, EnqueuePath, plan_enqueue

P = EnqueuePath


@dataclass
class Flags:
    committed_enqueue_limit: int = 5000
    fresh_enqueue: bool = True
    copy_enqueue: bool = True
    column_enqueue: bool = True


POSTGRES = Flags()
SQLITE = Flags(committed_enqueue_limit=0, fresh_enqueue=False, copy_enqueue=False,
               column_enqueue=False)  # fmt: skip


def plan(flags: Flags, count: int = 1, **shape: Any) -> tuple[EnqueuePath, ...]:
    shape.setdefault("own", True)
    shape.setdefault("args_only", True)
    return plan_enqueue(flags, count, **shape)


def test_the_backends_flags_are_the_ones_these_tests_assume() -> None:
    for flags, backend in ((POSTGRES, PostgresBackend), (SQLITE, SQLiteBackend)):
        for name in ("committed_enqueue_limit", "fresh_enqueue", "copy_enqueue", "column_enqueue"):
            assert getattr(backend, name) == getattr(flags, name), name


def test_args_tuples_with_generated_ids_take_the_fresh_paths() -> None:
    assert plan(POSTGRES, 1) == (P.FRESH_ARGS, P.FRESH_COMMITTED)
    assert plan(POSTGRES, 5000) == (P.FRESH_ARGS, P.FRESH_COMMITTED)
    assert plan(POSTGRES, 5001) == (P.FRESH_COPY, P.FRESH_DOCUMENTS)
    # A statement smaller than the committed limit decides what "small" is.
    assert plan(POSTGRES, 8, statement_rows=7) == (P.FRESH_COPY, P.FRESH_DOCUMENTS)
    # No bulk load: the documents in pgqueue's transaction.
    assert plan(Flags(copy_enqueue=False), 9000) == (P.FRESH_DOCUMENTS,)
    assert plan(Flags(committed_enqueue_limit=0), 1) == (P.FRESH_COPY, P.FRESH_DOCUMENTS)


def test_the_last_path_of_every_plan_always_writes() -> None:
    declining = {P.FRESH_ARGS, P.FRESH_COPY}
    for flags in (POSTGRES, SQLITE, Flags(copy_enqueue=False)):
        for count in (1, 5000, 5001):
            for own in (True, False):
                for args_only in (True, False):
                    for limited in (True, False):
                        paths = plan(flags, count, own=own, args_only=args_only, limited=limited)
                        assert paths[-1] not in declining
                        assert all(p in FRESH_PATHS for p in paths) or len(paths) == 1


@pytest.mark.parametrize(
    "shape",
    [
        {"own": False},
        {"args_only": False},
        {"chosen_ids": True},
        {"unique": True},
        {"linked": True},
        {"limited": True},
    ],
)
def test_anything_but_plain_args_tuples_leaves_the_fresh_paths(shape: dict[str, Any]) -> None:
    assert not set(plan(POSTGRES, 10, **shape)) & FRESH_PATHS


def test_a_small_call_of_whole_rows_commits_by_itself() -> None:
    assert plan(POSTGRES, 10, args_only=False) == (P.COMMITTED,)
    assert plan(POSTGRES, 10, chosen_ids=True) == (P.COMMITTED,)
    assert plan(POSTGRES, 10, limited=True) == (P.COMMITTED,)
    # Not when a rule needs more than one statement, nor in the caller's transaction.
    assert plan(POSTGRES, 10, unique=True) == (P.GENERAL,)
    assert plan(POSTGRES, 10, linked=True) == (P.GENERAL,)
    assert plan(POSTGRES, 10, chosen_ids=True, replacing=True) == (P.GENERAL,)
    assert plan(POSTGRES, 10, own=False) == (P.GENERAL,)
    # Past the limit: generated ids stream, chosen ones take every rule.
    assert plan(POSTGRES, 5001, args_only=False) == (P.STREAMED,)
    assert plan(POSTGRES, 5001, chosen_ids=True) == (P.GENERAL,)


def test_sqlite_writes_whole_rows_only() -> None:
    assert plan(SQLITE, 1) == (P.STREAMED,)
    assert plan(SQLITE, 10_000, args_only=False) == (P.STREAMED,)
    assert plan(SQLITE, 1, limited=True) == (P.STREAMED,)
    assert plan(SQLITE, 1, chosen_ids=True) == (P.GENERAL,)
    assert plan(SQLITE, 1, own=False) == (P.GENERAL,)
    assert plan(SQLITE, 3, columns=True) == (P.GENERAL,)


def test_columns_take_the_column_verb_unless_a_rule_needs_rows() -> None:
    columns = {"columns": True, "chosen_ids": True, "args_only": False}
    assert plan(POSTGRES, 3, **columns) == (P.COLUMNS,)
    # In the caller's transaction too: the verb writes on the connection it is given.
    assert plan(POSTGRES, 3, own=False, **columns) == (P.COLUMNS,)
    assert plan(POSTGRES, 3, limited=True, **columns) == (P.COMMITTED,)
    assert plan(POSTGRES, 3, linked=True, **columns) == (P.GENERAL,)
    assert plan(POSTGRES, 3, repeated_ids=True, **columns) == (P.COMMITTED,)
    assert plan(POSTGRES, 3, own=False, repeated_ids=True, **columns) == (P.GENERAL,)
