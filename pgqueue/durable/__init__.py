"""Durable execution inside a job (docs/durable.md): checkpointed steps, durable sleeps and
waits for external events, all through ``pgqueue.current_job()``.

- ``run``: one attempt's durable state (its steps, read once) and the writes of steps and parking;
- ``statements``: the SQL over ``pgqueue_steps`` and ``pgqueue_signals``;
- ``signals``: ``Queue.send_event`` and ``Queue.steps``.

A parked job is ``queued`` with its wake time in ``run_at`` (no new state: the claim, the
reaper, workflows, limits, statistics and the dashboard already treat it as waiting), and a
step row in state ``sleeping`` or ``waiting`` says why it waits.
"""

from pgqueue.durable.signals import StepStatus

__all__ = ["StepStatus"]
