from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from shop.models import Order
from shop.tasks import order_total, send_receipt


@csrf_exempt
def place_order(request: HttpRequest) -> JsonResponse:
    """POST email=...&total_cents=...: the order and its jobs commit together, or not at all."""
    with transaction.atomic():
        order = Order.objects.create(
            email=request.POST["email"], total_cents=int(request.POST["total_cents"])
        )
        job = send_receipt.enqueue(order.pk)
        total = order_total.enqueue(order.pk)
    return JsonResponse({"order": order.pk, "receipt_job": job.id, "total_task": total.id})
