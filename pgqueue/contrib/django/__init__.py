"""pgqueue for Django apps that share their database with the queue.

settings.py::

    INSTALLED_APPS += ["pgqueue.contrib.django"]     # `manage.py migrate` creates the tables
    PGQUEUE = {"DATABASE": "default"}                 # optional; see pgqueue.contrib.django.conf
    TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.TasksBackend"}}   # optional

Anywhere in the app::

    from django.db import transaction
    from pgqueue.contrib.django import queue

    @queue.task()
    def send_receipt(order_id: int) -> None: ...

    with transaction.atomic():
        order = Order.objects.create(...)
        send_receipt.enqueue(order.pk)   # commits or rolls back with the order

Workers: ``python manage.py pgqueue worker`` (``--burst`` drains and exits).

``queue`` is created on first use (after Django's settings are ready), one per process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgqueue.contrib.django.options import TaskOptions, task_options
    from pgqueue.contrib.django.queues import DjangoQueue
    from pgqueue.contrib.django.tasks import TasksBackend, limits

    queue: DjangoQueue

__all__ = [
    "DjangoQueue",
    "TaskOptions",
    "TasksBackend",
    "get_queue",
    "limits",
    "queue",
    "task_options",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing this package (as Django does for INSTALLED_APPS) must not need settings.
    if name == "queue":
        from pgqueue.contrib.django.queues import get_queue

        return get_queue()
    if name in ("DjangoQueue", "get_queue"):
        from pgqueue.contrib.django import queues as module

        return getattr(module, name)
    if name in ("TaskOptions", "task_options"):
        from pgqueue.contrib.django import options

        return getattr(options, name)
    if name in ("TasksBackend", "limits"):
        from pgqueue.contrib.django import tasks

        return getattr(tasks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
