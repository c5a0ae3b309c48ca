"""A read-only Django model over ``pgqueue_jobs`` for the admin and for queries.

The table belongs to pgqueue (``managed = False``): its DDL comes from pgqueue's Alembic lineage,
and writes go through :class:`~pgqueue.Queue` (``retry``, ``cancel``), never through this model.

Example::

    from pgqueue.contrib.django.models import Job

    Job.objects.filter(state="failed", queue="emails").count()
"""

from __future__ import annotations

from django.db import models

from pgqueue.contrib.django.conf import jobs_table
from pgqueue.job import JobState

__all__ = ["Job"]


class Job(models.Model):  # type: ignore[misc]
    """One row of ``pgqueue_jobs``."""

    id = models.TextField(primary_key=True)
    task = models.TextField()
    queue = models.TextField()
    state = models.TextField(choices=[(state.value, state.value) for state in JobState])
    payload = models.JSONField()
    priority = models.IntegerField()
    run_at = models.DateTimeField()
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    stall_count = models.IntegerField()
    lock_token = models.TextField(null=True)
    locked_by = models.TextField(null=True)
    locked_until = models.DateTimeField(null=True)
    result = models.JSONField(null=True)
    error = models.JSONField(null=True)
    errors = models.JSONField(null=True)
    result_ttl = models.IntegerField()
    result_expires_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    # Flow limits (docs/limits.md); None for a job without them.
    concurrency_key = models.TextField(null=True)
    max_running = models.IntegerField(null=True)
    rate_key = models.TextField(null=True)
    rate_limit = models.IntegerField(null=True)
    rate_period = models.FloatField(null=True)
    unique_key = models.TextField(null=True)
    unique_until = models.TextField(null=True)
    workflow_id = models.TextField(null=True)
    has_dependents = models.BooleanField(default=False)
    snoozes = models.IntegerField(default=0)
    # Fair share and priority aging (docs/fairness.md); None for a job without them.
    fairness_key = models.TextField(null=True)
    fairness_weight = models.FloatField(null=True)
    priority_aging = models.FloatField(null=True)
    base_priority = models.IntegerField(null=True)

    class Meta:
        managed = False
        db_table = jobs_table()
        ordering = ("-created_at",)
        verbose_name = "job"

    def __str__(self) -> str:
        return f"{self.task} {self.id} ({self.state})"
