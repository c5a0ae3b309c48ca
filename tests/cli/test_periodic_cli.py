"""``pgqueue schedules`` and ``pgqueue scheduler`` on both databases."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest
from cli_support import app_modules
from cli_support import run_cli as run

import pgqueue

APP = """
from datetime import timedelta

import pgqueue

queue = pgqueue.Queue({url!r})


@queue.periodic(cron="30 2 * * *", timezone="Europe/Berlin", name="nightly", catch_up="all")
@queue.task(name="app.report")
def report() -> None: ...


@queue.periodic(every=timedelta(minutes=10), args=("eu",), queue="sync")
@queue.task(name="app.sync")
def sync(region: str) -> None: ...
"""


@pytest.fixture
def make_app(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., ModuleType]]:
    """Write an application module that declares a Queue on ``url`` and import it."""
    with app_modules(tmp_path, monkeypatch, APP, "periodic_app") as make:
        yield make


def test_schedules_lists_next_fire_times_and_last_fired(
    db_url: str,
    make_app: Callable[..., ModuleType],
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = make_app(db_url)
    fired_at = datetime(2026, 10, 24, 0, 30, tzinfo=UTC)
    pgqueue.Scheduler(app.queue).run_once(now=fired_at)

    # The DST weekend in Berlin: 02:30 happens twice on the 25th and fires once.
    code, out, _ = run(
        capsys, "schedules", app.__name__, "--at", "2026-10-24T00:00:00Z", "--next", "3", "--json"
    )
    assert code == 0
    listing = {entry["name"]: entry for entry in json.loads(out)}
    assert sorted(listing) == ["app.sync", "nightly"]
    nightly = listing["nightly"]
    assert nightly["next_fire_times"] == [
        "2026-10-24T00:30:00+00:00",
        "2026-10-25T00:30:00+00:00",
        "2026-10-26T01:30:00+00:00",
    ]
    assert nightly["schedule"] == "cron '30 2 * * *' Europe/Berlin"
    assert (nightly["task"], nightly["catch_up"]) == ("app.report", "all")
    assert nightly["last_fire_at"] == "2026-10-24T00:30:00+00:00"
    sync = listing["app.sync"]
    assert (sync["every"], sync["args"], sync["queue"]) == (600.0, ["eu"], "sync")
    assert sync["next_fire_times"] == [
        "2026-10-24T00:10:00+00:00",
        "2026-10-24T00:20:00+00:00",
        "2026-10-24T00:30:00+00:00",
    ]
    assert sync["last_fire_at"] == "2026-10-24T00:30:00+00:00"

    code, out, _ = run(capsys, "schedules", f"{app.__name__}:queue", "--at", "2026-10-24")
    assert code == 0
    rows = [re.split(r"\s{2,}", line) for line in out.splitlines()]
    assert rows == [
        ["name", "task", "schedule", "catch-up", "next fire (UTC)", "last fired (UTC)"],
        [
            "app.sync",
            "app.sync",
            "every 0:10:00",
            "latest",
            "2026-10-24 00:10:00",
            "2026-10-24 00:30:00",
        ],
        [
            "nightly",
            "app.report",
            "cron '30 2 * * *' Europe/Berlin",
            "all",
            "2026-10-24 00:30:00",
            "2026-10-24 00:30:00",
        ],
    ]


def test_schedules_still_lists_when_the_database_is_not_migrated(
    empty_url: str,
    make_app: Callable[..., ModuleType],
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = make_app(empty_url)
    code, out, err = run(capsys, "schedules", app.__name__, "--json")
    assert code == 0
    assert "warning: last fire times unknown" in err
    assert [entry["last_fire_at"] for entry in json.loads(out)] == [None, None]


def test_scheduler_once_checks_and_prints_the_count(
    db_url: str,
    make_app: Callable[..., ModuleType],
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = make_app(db_url)
    code, out, _ = run(capsys, "scheduler", app.__name__, "--once")
    assert code == 0
    assert re.fullmatch(r"enqueued \d+ periodic jobs\n", out)
    code, out, _ = run(capsys, "schedules", app.__name__, "--json")
    assert all(entry["checked_through"] is not None for entry in json.loads(out))


def test_scheduler_refuses_a_queue_without_schedules(
    tmp_path: Path, make_app: Callable[..., ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'none.db'}"
    app = make_app(url, "import pgqueue\nqueue = pgqueue.Queue({url!r})\n")
    code, _, err = run(capsys, "scheduler", app.__name__)
    assert code == 2
    assert "declares no periodic schedules" in err
    code, out, _ = run(capsys, "schedules", app.__name__)
    assert (code, out) == (0, f"no periodic schedules in {app.__name__!r}\n")


def test_scheduler_settings_are_checked(
    tmp_path: Path, make_app: Callable[..., ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'x.db'}")
    code, _, err = run(capsys, "scheduler", app.__name__, "--interval", "90", "--once")
    assert code == 2
    assert "misfire_grace (60 s) must be at least the interval (90 s)" in err


def test_worker_takes_no_scheduler() -> None:
    from pgqueue.cli._app import _load_commands, build_parser

    _load_commands()
    parser = build_parser()
    assert parser.parse_args(["worker", "app"]).scheduler is True
    assert parser.parse_args(["worker", "app", "--no-scheduler"]).scheduler is False
