"""Flask: PgQueue on Flask-SQLAlchemy's engine (or PGQUEUE_URL), jobs joining the session's
transaction, tasks running in an app context, and the ``flask pgqueue`` commands. Uses the
example app in examples/flask_app; both databases."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import count_jobs
from flask import Flask

import pgqueue
from pgqueue.contrib.flask import PgQueue

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "flask_app"))

import store as shop


@pytest.fixture
def app(db_url: str) -> Iterator[Flask]:
    app = shop.create_app({"SQLALCHEMY_DATABASE_URI": db_url, "TESTING": True})
    yield app
    with app.app_context():
        shop.db.session.remove()
        shop.db.drop_all()
        shop.pgq.queue.close()
        shop.db.engine.dispose()


def drain(app: Flask) -> None:
    with app.app_context():
        pgqueue.Worker(shop.pgq.queue, concurrency=2, reaper=False).run(burst=True)


def test_the_queue_uses_flask_sqlalchemys_engine(app: Flask) -> None:
    with app.app_context():
        assert shop.pgq.queue.engine is shop.db.engine
        assert shop.pgq.queue.get_task("store.send_receipt").queue_name == "emails"


def test_rollback_of_the_session_leaves_no_job(app: Flask) -> None:
    with app.app_context():
        order = shop.Order(email="a@example.com", total_cents=100)
        shop.db.session.add(order)
        shop.db.session.flush()
        shop.send_receipt.using(session=shop.db.session).enqueue(order.id)
        shop.db.session.rollback()
        assert count_jobs(shop.pgq.queue) == 0
        assert shop.db.session.query(shop.Order).count() == 0


def test_a_committed_order_gets_its_receipt_from_a_worker(app: Flask) -> None:
    response = app.test_client().post("/orders", data={"email": "a@b.c", "total_cents": "5"})
    assert response.status_code == 200
    job_id = response.json["receipt_job"]
    drain(app)
    with app.app_context():
        assert shop.pgq.queue.result(job_id) == "receipt sent to a@b.c"
        assert shop.db.session.get_one(shop.Order, response.json["order"]).receipt_sent


def test_calling_a_task_runs_it_here(app: Flask) -> None:
    with app.app_context():
        order = shop.Order(email="x@y.z", total_cents=1)
        shop.db.session.add(order)
        shop.db.session.commit()
        assert shop.send_receipt(order.id) == "receipt sent to x@y.z"
        # On SQLite every transaction on the shared engine holds the write lock (BEGIN
        # IMMEDIATE): end the session, as Flask does after each request, before counting.
        shop.db.session.remove()
        assert count_jobs(shop.pgq.queue) == 0


def test_flask_pgqueue_commands_exist_and_run(app: Flask) -> None:
    runner = app.test_cli_runner()
    listing = runner.invoke(args=["pgqueue", "--help"])
    assert listing.exit_code == 0
    for name in ("migrate", "reaper", "status", "retry"):
        assert name in listing.output
    migrated = runner.invoke(args=["pgqueue", "migrate"])
    assert migrated.exit_code == 0, migrated.output
    assert "pgqueue schema already at revision" in migrated.output  # db_url is migrated
    missing = runner.invoke(args=["pgqueue", "status", "no-such-job"])
    assert missing.exit_code == 1
    paused = runner.invoke(args=["pgqueue", "pause", "emails"])
    assert paused.exit_code == 0 and "paused" in paused.output
    with app.app_context():
        assert list(shop.pgq.queue.paused()) == ["emails"]
    resumed = runner.invoke(args=["pgqueue", "resume", "emails"])
    assert resumed.exit_code == 0 and "resumed" in resumed.output
    with app.app_context():
        assert shop.pgq.queue.paused() == {}


def test_flask_pgqueue_worker_burst_runs_the_jobs(app: Flask) -> None:
    response = app.test_client().post("/orders", data={"email": "b@c.d", "total_cents": "9"})
    worked = app.test_cli_runner().invoke(args=["pgqueue", "worker", "--burst"])
    assert worked.exit_code == 0, worked.output
    with app.app_context():
        assert shop.pgq.queue.result(response.json["receipt_job"]) == "receipt sent to b@c.d"


def test_without_db_the_queue_comes_from_pgqueue_url(db_url: str) -> None:
    app = Flask("plain")
    app.config["PGQUEUE_URL"] = db_url
    pgq = PgQueue(app)

    @pgq.task(name="plain.add")
    def add(a: int, b: int) -> int:
        return a + b

    assert add.enqueue(1, 2).queued  # outside a context: the app given to PgQueue(app)
    with app.app_context():
        pgqueue.Worker(pgq.queue, reaper=False).run(burst=True)
    assert pgq.queue.status(pgq.queue.enqueue("plain.add", args=[2, 2]).id) is not None
    pgq.queue.close()


def test_one_extension_serves_several_apps(tmp_path: Path) -> None:
    pgq = PgQueue()

    @pgq.task(name="multi.echo")
    def echo(value: str) -> str:
        return value

    apps = []
    for name in ("one", "two"):
        app = Flask(name)
        app.config["PGQUEUE_URL"] = f"sqlite:///{tmp_path / name}.db"
        pgq.init_app(app)
        with app.app_context():
            pgq.queue.migrate()
        apps.append(app)
    with apps[0].app_context():
        echo.enqueue("first")
    with apps[1].app_context():
        assert count_jobs(pgq.queue) == 0
    with apps[0].app_context():
        assert count_jobs(pgq.queue) == 1
    with pytest.raises(RuntimeError, match="application context"):
        _ = pgq.queue
    for app in apps:
        app.extensions["pgqueue"].close()


def test_flow_limits_reach_flask_tasks(app: Flask) -> None:
    @shop.pgq.task(
        name="store.refresh_stock",
        unique_key="sku",
        max_running=1,
        concurrency_key="sku",
        rate_limit="50/s",
    )
    def refresh_stock(sku: str) -> str:
        return sku

    with app.app_context():
        first = refresh_stock.enqueue("A-1")
        again = refresh_stock.enqueue("A-1")
        assert again.status == "duplicate" and again.id == first.id
        other = refresh_stock.using(unique_key="manual", concurrency_key="B").enqueue("A-1")
        assert other.status == "queued"
        assert count_jobs(shop.pgq.queue) == 2
    drain(app)
    with app.app_context():
        assert shop.pgq.queue.result(first.id) == "A-1"


def test_pgqueue_worker_settings_reach_the_worker(
    app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgqueue.contrib.flask import CHILD_APP

    seen = []
    monkeypatch.setattr(pgqueue.Worker, "run", lambda self, burst=False: seen.append(self.config))
    app.config["PGQUEUE_WORKER"] = {"isolation": "process", "max_jobs_per_child": 9}
    worked = app.test_cli_runner().invoke(args=["pgqueue", "worker", "--burst"])
    assert worked.exit_code == 0, worked.output
    config = seen[0]
    assert (config.isolation, config.max_jobs_per_child, config.app) == ("process", 9, CHILD_APP)
