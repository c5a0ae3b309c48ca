from django.contrib import admin
from django.urls import include, path

from shop.views import place_order

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", place_order),
    # The queue's web dashboard, for staff users (see docs/dashboard.md).
    path("pgqueue/", include("pgqueue.contrib.django.dashboard")),
]
