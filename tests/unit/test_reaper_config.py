"""Reaper configuration is validated at construction, before anything touches the database."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue.errors import ConfigError
from pgqueue.maintenance import Reaper, ReaperConfig


def test_defaults_follow_the_semantics(queue: pgqueue.Queue) -> None:
    reaper = Reaper(queue)
    assert reaper.config == ReaperConfig(interval=10, max_stalls=1, grace=0)
    assert repr(reaper).endswith("interval=10, max_stalls=1, grace=0)")
    assert not reaper.is_leader and not reaper.running


def test_timedeltas_are_seconds(queue: pgqueue.Queue) -> None:
    reaper = Reaper(queue, interval=timedelta(seconds=5), grace=timedelta(milliseconds=500))
    assert (reaper.config.interval, reaper.config.grace) == (5.0, 0.5)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"interval": -1}, "interval"),
        ({"interval": "10"}, "interval"),
        ({"interval": float("inf")}, "interval"),
        ({"max_stalls": -1}, "max_stalls"),
        ({"max_stalls": 1.5}, "max_stalls"),
        ({"max_stalls": True}, "max_stalls"),
        ({"grace": -0.1}, "grace"),
        ({"batch_size": 0}, "batch_size"),
        ({"crash_detection": "yes"}, "crash_detection"),
        ({"worker_ttl": 0}, "worker_ttl"),
        ({"lock_namespace": 2**31}, "lock_namespace"),
        ({"orphan_confirm": -1}, "orphan_confirm"),
        ({"orphan_confirm": "1"}, "orphan_confirm"),
    ],
)
def test_bad_options_are_refused(
    queue: pgqueue.Queue, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Reaper(queue, **options)
    assert not Path(str(queue.engine.url.database)).exists()
