"""The example Flask store: an order and its receipt job commit together, or not at all.

    flask --app store pgqueue migrate            # pgqueue's tables (the app's own: db.create_all)
    flask --app store run                         # POST /orders email=...&total_cents=...
    flask --app store pgqueue worker              # runs the receipts (--burst: drain and exit)

The database is ``STORE_DATABASE_URL`` (default: SQLite ``store.sqlite3`` in the instance folder).
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column

from pgqueue.contrib.flask import PgQueue

db = SQLAlchemy()
pgq = PgQueue(db=db)


class Order(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    total_cents: Mapped[int]
    receipt_sent: Mapped[bool] = mapped_column(default=False)


@pgq.task(queue="emails", max_attempts=5)
def send_receipt(order_id: int) -> str:
    """Runs on a worker, inside an app context, so db.session works as in a view."""
    order = db.session.get_one(Order, order_id)
    # ... hand the e-mail to the mail service here, with the job id as idempotency key ...
    order.receipt_sent = True
    db.session.commit()
    return f"receipt sent to {order.email}"


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config["SQLALCHEMY_DATABASE_URI"] = os.environ.get(
        "STORE_DATABASE_URL", "sqlite:///store.sqlite3"
    )
    app.config.update(config or {})
    db.init_app(app)
    pgq.init_app(app)  # after db.init_app: the queue shares db's engine
    with app.app_context():
        db.create_all()

    @app.post("/orders")
    def place_order() -> dict[str, Any]:
        order = Order(email=request.form["email"], total_cents=int(request.form["total_cents"]))
        db.session.add(order)
        db.session.flush()  # the order gets its id
        job = send_receipt.using(session=db.session).enqueue(order.id)
        db.session.commit()  # the order and its job, together
        return {"order": order.id, "receipt_job": job.id}

    return app
