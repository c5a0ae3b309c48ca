"""The shop's own tests, as docs/django.md's testing section tells a project to write them:
`python manage.py test` runs jobs with a real pgqueue worker in a TransactionTestCase (a
TestCase's transaction would hide the jobs from the worker's connections)."""

from django.db import transaction
from django.test import TransactionTestCase

import pgqueue
import pgqueue.testing
from pgqueue.contrib.django import queue
from shop.models import Order
from shop.tasks import order_total, send_receipt


class ReceiptTests(TransactionTestCase):
    def setUp(self) -> None:
        # Django empties the tables of its managed models between these tests; pgqueue's jobs
        # table is not one of them.
        pgqueue.testing.clear(queue)

    def test_a_burst_worker_sends_the_receipt(self) -> None:
        with transaction.atomic():
            order = Order.objects.create(email="a@example.com", total_cents=250)
            job = send_receipt.enqueue(order.pk)
        pgqueue.Worker(queue).run(burst=True)
        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)
        self.assertEqual(queue.result(job.id), "receipt sent to a@example.com")

    def test_drain_runs_the_django_task_too(self) -> None:
        order = Order.objects.create(email="b@example.com", total_cents=300)
        pgqueue.testing.refute_enqueued(queue, send_receipt)
        result = order_total.enqueue(order.pk)
        stats = pgqueue.testing.drain(queue)
        self.assertEqual(stats.completed, 1)
        result.refresh()
        self.assertEqual(result.return_value, 300)
