"""Which driver errors say "the database cannot be reached for now" (a waiter retries those)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from pgqueue.backends.postgres import PostgresBackend
from pgqueue.backends.sqlite import SQLiteBackend


class DriverError(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__("driver error")
        self.sqlstate = sqlstate


def error(kind: type[DBAPIError], sqlstate: str | None) -> DBAPIError:
    return kind("SELECT 1", {}, DriverError(sqlstate))


@pytest.mark.parametrize(
    ("failure", "unreachable"),
    [
        (error(OperationalError, None), True),  # connection refused: no server answered
        (error(OperationalError, "08006"), True),  # connection failure
        (error(OperationalError, "57P01"), True),  # terminated by an administrator
        (error(OperationalError, "57P03"), True),  # the server is starting up
        (error(OperationalError, "28P01"), False),  # wrong password: retrying will not help
        (error(OperationalError, "3D000"), False),  # no such database
        (error(IntegrityError, "23505"), False),  # the statement itself was refused
    ],
)
def test_postgres(failure: DBAPIError, unreachable: bool) -> None:
    assert PostgresBackend().unreachable(failure) is unreachable


def test_sqlite_is_never_unreachable() -> None:
    assert SQLiteBackend().unreachable(error(OperationalError, None)) is False
