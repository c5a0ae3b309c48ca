"""A module with one Queue, for ``pgqueue reaper reaper_cli_app`` in test_reaper_failover.py."""

from __future__ import annotations

import pgqueue

queue = pgqueue.Queue(allow_unknown_tasks=True)  # $PGQUEUE_URL
