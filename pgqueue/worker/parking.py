"""The outcome of a durable job that parked (``current_job().sleep()``/``wait_for()``, see
pgqueue/durable/): the handler unwound with :class:`~pgqueue.durable.run.Parked` after its job
was moved back to ``queued`` (due at its wake time, no attempt spent) in the job's own
transaction. The worker only has to forget the job: the outcome is ``settled``, like a
transactional completion's, and the store writes nothing for it.

Example::

    try:
        value = handler(*args)
    except Parked as parked:
        outcome = parked_outcome(parked)    # Outcome(QUEUED, settled=True) unless lease lost
"""

from __future__ import annotations

from pgqueue.durable.run import Parked
from pgqueue.job import JobState
from pgqueue.outcome import Outcome

__all__ = ["is_parked", "parked_outcome"]


def parked_outcome(parked: Parked) -> Outcome:
    """The attempt's outcome: stored already (``settled``), or lost with the lease."""
    return Outcome(JobState.QUEUED, settled=parked.held)


def is_parked(outcome: Outcome) -> bool:
    """Whether ``outcome`` is a parking (a hand-back by the worker has ``settled`` None)."""
    return outcome.state is JobState.QUEUED and outcome.settled is not None
