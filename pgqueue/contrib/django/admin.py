"""Admin pages for pgqueue's jobs: browse, filter by state and queue, retry or cancel.

Jobs are read-only here; the two actions go through :class:`~pgqueue.Queue` so they follow the
same rules as ``pgqueue retry`` (failed or cancelled jobs only) and ``Queue.cancel`` (jobs that
have not started).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages

from pgqueue.contrib.django.models import Job
from pgqueue.contrib.django.queues import get_queue

__all__ = ["JobAdmin"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]
    """Browse jobs; actions: retry (failed/cancelled → queued) and cancel (not yet started)."""

    list_display = (
        "id",
        "task",
        "queue",
        "state",
        "priority",
        "attempts",
        "run_at",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", "queue")
    search_fields = ("id", "task")
    date_hierarchy = "created_at"
    actions = ("retry_jobs", "cancel_jobs")

    def get_queryset(self, request: Any) -> Any:
        return super().get_queryset(request).using(get_queue().database)

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        # The user's change permission allows the actions on the list; a job's own page stays
        # read-only, since saving the model would overwrite what workers write.
        return obj is None and bool(super().has_change_permission(request))

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    @admin.action(description="Retry selected failed or cancelled jobs", permissions=["change"])  # type: ignore[untyped-decorator]
    def retry_jobs(self, request: Any, queryset: Any) -> None:
        queue = get_queue()
        ids = list(queryset.values_list("id", flat=True))
        done = sum(queue.retry(job_id) for job_id in ids)
        self._report(request, done, len(ids), "queued again", "not failed or cancelled")

    @admin.action(description="Cancel selected jobs that have not started", permissions=["change"])  # type: ignore[untyped-decorator]
    def cancel_jobs(self, request: Any, queryset: Any) -> None:
        queue = get_queue()
        ids = list(queryset.values_list("id", flat=True))
        done = sum(queue.cancel(job_id).cancelled for job_id in ids)
        self._report(request, done, len(ids), "cancelled", "already running or finished")

    def _report(self, request: Any, done: int, total: int, verb: str, why_not: str) -> None:
        self.message_user(request, f"{done} of {total} jobs {verb}.", messages.SUCCESS)
        if done < total:
            self.message_user(request, f"{total - done} skipped: {why_not}.", messages.WARNING)
