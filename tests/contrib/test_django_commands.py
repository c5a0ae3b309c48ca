"""``manage.py pgqueue ...`` runs the pgqueue command's subcommands on the Django database's
queue, and the example project works as docs/django.md tells a newcomer to run it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django_support
import pytest
from django.core.management import CommandError, call_command
from django_support import EXAMPLE
from process_output import run_ok

from pgqueue import cli
from pgqueue.contrib.django import get_queue

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

# Fixtures shared by the Django tests (pytest finds them in this module's namespace).
alias = django_support.alias
django_postgresql = django_support.django_postgresql


@task()
def double(value: int) -> int:
    return 2 * value


def needs_worker_command() -> None:
    if "worker" not in cli.command_help():
        pytest.skip("the pgqueue worker command is not registered in this build")


def test_subcommands_run_on_the_aliases_queue(
    alias: str, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("pgqueue", "migrate", database=alias)
    call_command("pgqueue", "reaper", "--once", database=alias)
    assert "released 0 stalled jobs" in capsys.readouterr().out
    call_command("pgqueue", "stats", database=alias)
    with pytest.raises(CommandError, match="exited with status 1"):
        call_command("pgqueue", "status", "no-such-job", database=alias)


def test_pause_and_resume_through_manage_py(alias: str, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("pgqueue", "migrate", database=alias)
    call_command("pgqueue", "pause", "emails", database=alias)
    assert list(get_queue(alias).paused()) == ["emails"]
    call_command("pgqueue", "paused", database=alias)
    assert "emails" in capsys.readouterr().out
    call_command("pgqueue", "resume", "emails", database=alias)
    assert get_queue(alias).paused() == {}


def test_a_django_task_round_trips_through_manage_py_pgqueue_worker_burst(alias: str) -> None:
    needs_worker_command()
    result = double.using(backend=alias).enqueue(21)
    call_command("pgqueue", "worker", "--burst", database=alias)
    assert double.using(backend=alias).get_result(result.id).return_value == 42
    assert get_queue(alias).status(result.id).state == "completed"  # type: ignore[union-attr]


def run_example(*arguments: str, env: dict[str, str]) -> str:
    return run_ok(
        [sys.executable, "manage.py", *arguments], cwd=EXAMPLE, env=env, timeout=120
    ).stdout


PLACE_ORDER = """
from django.test import Client
response = Client().post("/orders/", {"email": "a@example.com", "total_cents": "250"})
assert response.status_code == 200, response.content
print(response.json()["total_task"])
"""

READ_BACK = """
from shop.models import Order
from shop.tasks import order_total
assert Order.objects.get().receipt_sent
print(order_total.get_result("{task_id}").return_value)
"""


def test_the_example_project_runs_as_documented(alias: str, tmp_path: Path) -> None:
    needs_worker_command()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if alias == "postgresql":
        server = pytest.importorskip("django.db").connections[alias].settings_dict
        env.update(
            SHOP_DATABASE_NAME=str(server["NAME"]),
            SHOP_DATABASE_USER=str(server["USER"]),
            SHOP_DATABASE_HOST=str(server["HOST"]),
            SHOP_DATABASE_PORT=str(server["PORT"]),
        )
    else:
        env["SHOP_SQLITE_PATH"] = str(tmp_path / "shop.sqlite3")
    run_example("migrate", "--verbosity", "0", env=env)
    task_id = run_example("shell", "-c", PLACE_ORDER, env=env).strip().splitlines()[-1]
    run_example("pgqueue", "worker", "--burst", env=env)
    assert (
        run_example("shell", "-c", READ_BACK.format(task_id=task_id), env=env)
        .strip()
        .endswith("250")
    )
    assert "completed" in run_example("pgqueue", "stats", env=env)


def test_worker_settings_reach_the_worker_and_its_children_find_the_queue(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.test import override_settings

    from pgqueue import Worker
    from pgqueue.contrib.django.queues import CHILD_APP, DATABASE_ENVIRONMENT_VARIABLE

    needs_worker_command()
    seen = []
    monkeypatch.setattr(Worker, "run", lambda self, burst=False: seen.append(self.config))
    monkeypatch.delenv(DATABASE_ENVIRONMENT_VARIABLE, raising=False)
    worker = {"isolation": "process", "max_memory": "256MB", "max_jobs_per_child": 50}
    with override_settings(PGQUEUE={"DATABASE": alias, "WORKER": worker}):
        call_command("pgqueue", "worker", "--burst", database=alias)
    config = seen[0]
    assert (config.isolation, config.max_memory, config.memory_ceiling) == (
        "process",
        256 * 1000**2,
        512 * 1000**2,
    )
    assert config.max_jobs_per_child == 50 and config.app == CHILD_APP
    # The children's child_queue() picks the same alias.
    assert os.environ[DATABASE_ENVIRONMENT_VARIABLE] == alias
