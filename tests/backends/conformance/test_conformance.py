"""The backend conformance suite (``pgqueue.testing.conformance``) on both databases, through
the shared ``queue`` fixture (tests/conftest.py). The backends' own statements are tested beside
it (test_conformance_postgres_statements.py, test_conformance_sqlite_*.py)."""

from __future__ import annotations

from pgqueue.testing.conformance import *  # noqa: F403
