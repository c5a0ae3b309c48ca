"""A worker's place in its fleet, read from the registry on its beats (issue 31): how many live
workers serve exactly its queues, and how many of them have a smaller id. Both databases."""

from __future__ import annotations

import pgqueue
from pgqueue.maintenance.presence import WorkerPresence


def test_the_roster_counts_live_workers_serving_the_same_queues(queue: pgqueue.Queue) -> None:
    rosters: dict[str, tuple[int, int]] = {}
    presences = []
    kinds = {"w0": ["a", "b"], "w1": ["a", "b"], "w2": None, "w3": ["a"], "w4": ["a", "b"]}
    for worker_id, queues in kinds.items():
        presence = WorkerPresence(queue, worker_id, queues=queues, crash_detection=False)
        presence.on_roster = lambda rank, size, w=worker_id: rosters.__setitem__(w, (rank, size))
        presence.start(every=10.0)
        presences.append(presence)
    try:
        for presence in presences:
            presence.read_roster()
        assert rosters == {
            "w0": (0, 3),
            "w1": (1, 3),
            "w2": (0, 1),  # every queue: a fleet of its own
            "w3": (0, 1),
            "w4": (2, 3),
        }
        presences[1].stop()  # unregistered: gone from the others' next roster
        presences[0].read_roster()
        assert rosters["w0"] == (0, 2)
    finally:
        for presence in presences:
            presence.stop()


def test_a_worker_not_yet_registered_counts_itself_in(queue: pgqueue.Queue) -> None:
    rosters: list[tuple[int, int]] = []
    other = WorkerPresence(queue, "b-other", crash_detection=False)
    other.start(every=10.0)
    alone = WorkerPresence(queue, "a-unwritten", crash_detection=False)
    alone.on_roster = lambda rank, size: rosters.append((rank, size))
    try:
        alone.read_roster()  # its row was never written
        assert rosters == [(0, 2)]
    finally:
        other.stop()
