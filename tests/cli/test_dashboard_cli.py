"""``pgqueue dashboard`` (binds loopback by default and says so) and ``pgqueue top``, on both
databases."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from dashboard_support import Filled, fill

import pgqueue
from pgqueue.cli import main
from pgqueue.cli.dashboard import sparkline


@pytest.fixture
def filled(queue: pgqueue.Queue) -> Iterator[Filled]:
    state = fill(queue)
    yield state
    state.close()


def test_top_prints_one_frame(
    db_url: str, filled: Filled, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top", "--url", db_url, "--once"]) == 0
    out = capsys.readouterr().out
    for text in ("pgqueue top", "payments", "shop.charge", "worker-test", "maintenance", "free"):
        assert text in out, out


def test_sparkline() -> None:
    assert sparkline([0, 4, 8]) == " ▄█" and sparkline([0, 0]) == "  "


@pytest.mark.parametrize("live", [True, False], ids=["live", "no-live"])
def test_the_dashboard_binds_loopback_and_says_so(db_url: str, filled: Filled, live: bool) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from pgqueue.cli import main; raise SystemExit(main())",
            "dashboard",
            "--url",
            db_url,
            "--port",
            "0",
            *([] if live else ["--no-live"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        assert lines[0].startswith("pgqueue dashboard for ")
        url = lines[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        assert "listening on 127.0.0.1 only" in lines[2]
        with urllib.request.urlopen(url + "jobs", timeout=30) as response:
            assert b"job-failed" in response.read()
        # Live updates where the database pushes, unless --no-live: the overview says which.
        with urllib.request.urlopen(url, timeout=30) as response:
            pushed = b"data-live=" in response.read()
        assert pushed is (live and db_url.startswith("postgresql"))
        # Another host name (a DNS-rebinding page's) is refused; --allowed-host adds names.
        rebound = urllib.request.Request(url + "jobs", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(rebound, timeout=30)
        refused.value.close()  # the error holds the response's socket
        assert refused.value.code == 400
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_the_dashboard_refuses_a_bad_allowed_host(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["dashboard", "--url", db_url, "--port", "0", "--allowed-host", "http://x:80"])
    assert code == 2 and "allowed host" in capsys.readouterr().err


def test_the_dashboard_refuses_a_bad_database(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["dashboard", "--url", "sqlite:////nonexistent/dir/x.db", "--port", "0"])
    assert code == 2 and "pgqueue: error:" in capsys.readouterr().err


def test_a_module_queue_takes_no_url(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["top", "pgqueue.demo", "--url", "sqlite:///x.db", "--once"])
    assert code == 2 and "--url does not apply here" in capsys.readouterr().err
