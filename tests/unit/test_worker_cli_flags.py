"""`pgqueue worker`'s flags are made from WorkerConfig's fields: they cannot drift from the
constructor."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from pgqueue.worker import Worker, WorkerConfig, config


def _parser() -> argparse.ArgumentParser:
    from pgqueue.cli._app import _load_commands, build_parser

    _load_commands()
    return build_parser()


def test_every_config_field_is_a_worker_flag() -> None:
    parser = _parser()
    defaults = parser.parse_args(["worker", "app"])
    for item in dataclasses.fields(WorkerConfig):
        assert hasattr(defaults, item.name), f"no flag for WorkerConfig.{item.name}"
    made = config.from_arguments(defaults)
    assert made.crash_detection is True and made.reaper is True and made.pruner is None


def test_every_constructor_option_is_a_config_field() -> None:
    import inspect

    options = set(inspect.signature(Worker).parameters) - {"queue", "clock"}
    assert options == {item.name for item in dataclasses.fields(WorkerConfig)}


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--no-crash-detection"], "crash_detection", False),
        (["--no-reaper"], "reaper", False),
        (["--no-scheduler"], "scheduler", False),
        (["--no-pruner"], "pruner", False),
        (["--no-vacuum"], "vacuum", False),
        (["--queues", "a, b,,a"], "queues", ["a", "b"]),
        (["--concurrency", "8"], "concurrency", 8),
        (["--lease", "60"], "lease", 60.0),
        (["--heartbeat", "5"], "heartbeat", 5.0),
        (["--poll-interval", "0.5"], "poll_interval", 0.5),
        (["--grace-period", "0"], "grace_period", 0.0),
        (["--worker-id", "w-7"], "worker_id", "w-7"),
    ],
)
def test_each_flag_reaches_the_config(argv: list[str], field: str, value: object) -> None:
    made = config.from_arguments(_parser().parse_args(["worker", "app", *argv]))
    assert getattr(made, field) == value


def test_the_defaults_follow_the_config() -> None:
    made = config.from_arguments(_parser().parse_args(["worker", "app"]))
    assert made.lease == WorkerConfig().lease and made.concurrency == WorkerConfig().concurrency
    assert made.heartbeat == made.lease / 3


def test_a_bad_flag_value_fails_with_the_fields_name() -> None:
    with pytest.raises(Exception, match="concurrency must be between 1 and"):
        config.from_arguments(_parser().parse_args(["worker", "app", "--concurrency", "0"]))
