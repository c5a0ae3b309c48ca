"""The shop's background work, in both styles: a pgqueue task and a Django task."""

try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2 with the django-tasks backport

from pgqueue.contrib.django import queue
from shop.models import Order


@queue.task(queue="emails", max_attempts=5)
def send_receipt(order_id: int) -> str:
    """A pgqueue task: retried up to five times if it raises."""
    order = Order.objects.get(pk=order_id)
    # ... hand the e-mail to the mail service here, with the job id as idempotency key ...
    Order.objects.filter(pk=order_id).update(receipt_sent=True)
    return f"receipt sent to {order.email}"


@task()
def order_total(order_id: int) -> int:
    """A Django task (the TASKS backend is pgqueue's): its return value reaches get_result()."""
    return Order.objects.get(pk=order_id).total_cents
