"""CLI edges from issue 13: an empty --id and a deeply nested JSON argument fail in one line with
exit 2, and metrics listen on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import count_jobs
from test_cli_errors import assert_one_line_error

import pgqueue
from pgqueue.cli import main
from pgqueue.cli._app import _load_commands, build_parser
from pgqueue.serde import MAX_DEPTH


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_empty_id_is_refused(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "enqueue", "tasks.t", "--id", "", "--url", db_url)
    assert_one_line_error(code, out, err, "job id must not be empty")
    queue = pgqueue.Queue(db_url)
    try:
        assert count_jobs(queue) == 0
    finally:
        queue.close()


@pytest.mark.parametrize("depth", [MAX_DEPTH, 100_000], ids=["past the limit", "far past it"])
def test_deeply_nested_json_argument(
    db_url: str, capsys: pytest.CaptureFixture[str], depth: int
) -> None:
    deep = "[" * depth + "]" * depth
    code, out, err = run(capsys, "enqueue", "tasks.t", deep, "--url", db_url)
    assert_one_line_error(code, out, err, f"{MAX_DEPTH} levels")
    queue = pgqueue.Queue(db_url)
    try:
        assert count_jobs(queue) == 0
    finally:
        queue.close()


def test_deeply_nested_kwargs_and_file_lines(
    db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(SystemExit) as exited:
        main(["enqueue", "tasks.t", "--kwargs", '{"a": ' + deep + "}", "--url", db_url])
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("[1]\n" + deep + "\n")
    code, out, err = run(capsys, "enqueue", "tasks.t", "--file", str(lines), "--url", db_url)
    assert_one_line_error(code, out, err, "line 2", f"{MAX_DEPTH} levels")


def test_metrics_listen_on_localhost_by_default() -> None:
    _load_commands()
    parser = build_parser()
    assert parser.parse_args(["metrics"]).host == "127.0.0.1"
    assert parser.parse_args(["metrics", "--host", "0.0.0.0"]).host == "0.0.0.0"
    worker = parser.parse_args(["worker", "app", "--metrics-port", "9401"])
    assert worker.metrics_host == "127.0.0.1"
    chosen = parser.parse_args(["worker", "app", "--metrics-port", "1", "--metrics-host", "::1"])
    assert chosen.metrics_host == "::1"


def test_worker_serves_metrics_on_the_host_given(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pgqueue import metrics

    hosts: list[str] = []
    real_serve = metrics.serve

    def serve(*args: Any, **kwargs: Any) -> Any:
        hosts.append(kwargs["host"])
        return real_serve(*args, **{**kwargs, "port": 0})

    monkeypatch.setattr(metrics, "serve", serve)
    queue = pgqueue.Queue(db_url)
    try:
        for extra in ([], ["--metrics-host", "127.0.0.1"]):
            argv = ["worker", "--burst", "--metrics-port", "0", *extra]
            assert main(argv, queue=queue) == 0
        assert hosts == ["127.0.0.1", "127.0.0.1"]
        assert "serving metrics on http://127.0.0.1:" in capsys.readouterr().err
    finally:
        queue.close()
