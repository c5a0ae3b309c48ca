"""Unit tests need no database: their ``queue`` is never connected."""

from __future__ import annotations

from pathlib import Path

import pytest

import pgqueue


@pytest.fixture
def queue(tmp_path: Path) -> pgqueue.Queue:
    """A Queue on a SQLite file that is never created: making a Queue, a Worker, a Reaper or a
    periodic declaration must not connect."""
    return pgqueue.Queue(f"sqlite:///{tmp_path / 'never-created.db'}")
