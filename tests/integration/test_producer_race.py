"""Two producers racing on the same ids get exactly one ``queued`` per id between them."""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import count_jobs
from producer_race import enqueue_all

import pgqueue

IDS = [f"race-{i}" for i in range(300)]


@pytest.mark.parametrize("bulk", [False, True], ids=["one-by-one", "bulk"])
def test_threads_racing_on_one_id(queue: pgqueue.Queue, db_url: str, bulk: bool) -> None:
    barrier = threading.Barrier(4)
    shuffled = [random.Random(n).sample(IDS, len(IDS)) for n in range(4)]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(enqueue_all, db_url, ids, barrier, bulk) for ids in shuffled]
        queued = Counter(i for f in futures for i in f.result())
    assert queued == Counter(IDS)
    assert count_jobs(queue) == len(IDS)


@pytest.mark.parametrize("bulk", [False, True], ids=["one-by-one", "bulk"])
def test_processes_racing_on_one_id(queue: pgqueue.Queue, db_url: str, bulk: bool) -> None:
    context = multiprocessing.get_context("spawn")
    shuffled = [random.Random(n).sample(IDS, len(IDS)) for n in range(3)]
    with context.Manager() as manager, context.Pool(3) as pool:
        barrier = manager.Barrier(3)
        results = pool.starmap(enqueue_all, [(db_url, ids, barrier, bulk) for ids in shuffled])
    queued = Counter(i for ids in results for i in ids)
    assert queued == Counter(IDS)
    assert count_jobs(queue) == len(IDS)
