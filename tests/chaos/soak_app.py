"""The application of the soak test (started by path in child processes; not a test module).

    python tests/chaos/soak_app.py worker [--queues default crash] [--lease 30]
    python tests/chaos/soak_app.py produce --seconds 600 --rate 10 --seed 1

The Queue's database comes from ``$PGQUEUE_URL``. Workers run a mix of tasks, some of them poison:
a result nested past the limit, ``async def`` handlers raising BaseExceptions, a handler that ends
its process with ``os._exit``. Producers enqueue a random mix at a steady rate for a while.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

import pgqueue
from pgqueue.serde import MAX_DEPTH

MAX_ATTEMPTS = 3
#: A crash job stalls this many times and is then failed by the reaper (each stall costs the
#: worker process that ran it).
MAX_STALLS = 2
queue = pgqueue.Queue(max_attempts=MAX_ATTEMPTS)
QUICK_RETRY = pgqueue.Backoff(base=0.1, max=0.5)


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = {"k": value} if level % 3 == 2 else [value]
    return value


@queue.task(name="soak.good", retry=QUICK_RETRY)
def good(n: int) -> dict[str, Any]:
    return {"n": n, "pad": "x" * 200}


@queue.task(name="soak.slow", retry=QUICK_RETRY)
def slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@queue.task(name="soak.failing", retry=QUICK_RETRY)
def failing(n: int) -> None:
    raise RuntimeError(f"soak failure {n}")


@queue.task(name="soak.deep_ok", retry=QUICK_RETRY)
def deep_ok() -> Any:
    """A result exactly at the nesting limit: stored."""
    return nested(MAX_DEPTH)


@queue.task(name="soak.deep_result", retry=QUICK_RETRY)
def deep_result() -> Any:
    """Poison: a result nested past the limit; every attempt fails, the worker goes on."""
    return nested(MAX_DEPTH + 40)


_BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "exit": SystemExit,
    "interrupt": KeyboardInterrupt,
    "generator": GeneratorExit,
}


@queue.task(name="soak.async_base", retry=QUICK_RETRY)
async def async_base(kind: str) -> None:
    """Poison: an async handler raising a BaseException; fails its attempt, the loop survives."""
    raise _BASE_EXCEPTIONS[kind]()


@queue.task(name="soak.crash", queue="crash", retry=QUICK_RETRY)
def crash() -> None:
    """Poison: ends the worker process that runs it, every time (the reaper fails it after
    MAX_STALLS stalls)."""
    import os

    os._exit(3)


#: (task, weight, arguments maker): the producers' mix; crashes are rare since each one costs
#: MAX_STALLS + 1 worker processes.
MIX: list[tuple[str, float, Any]] = [
    ("soak.good", 60, lambda rng: (rng.randrange(10**6),)),
    ("soak.slow", 8, lambda rng: (round(rng.uniform(0.2, 1.0), 2),)),
    ("soak.failing", 10, lambda rng: (rng.randrange(10**6),)),
    ("soak.deep_ok", 6, lambda rng: ()),
    ("soak.deep_result", 6, lambda rng: ()),
    ("soak.async_base", 9, lambda rng: (rng.choice(sorted(_BASE_EXCEPTIONS)),)),
    ("soak.crash", 0.25, lambda rng: ()),
]


def produce(seconds: float, rate: float, seed: int) -> None:
    rng = random.Random(seed)
    names = [name for name, _, _ in MIX]
    weights = [weight for _, weight, _ in MIX]
    makers = {name: maker for name, _, maker in MIX}
    end = time.monotonic() + seconds
    next_at = time.monotonic()
    while time.monotonic() < end:
        name = rng.choices(names, weights)[0]
        queue.enqueue(name, args=makers[name](rng))
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))


def work(queues: list[str] | None, lease: float, concurrency: int) -> None:
    reaper = pgqueue.Reaper(queue, interval=0.5, max_stalls=MAX_STALLS)
    pgqueue.Worker(queue, queues=queues, concurrency=concurrency, lease=lease, reaper=reaper).run()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker")
    worker.add_argument("--queues", nargs="*", default=None)
    worker.add_argument("--lease", type=float, default=30.0)
    worker.add_argument("--concurrency", type=int, default=4)
    producer = commands.add_parser("produce")
    producer.add_argument("--seconds", type=float, required=True)
    producer.add_argument("--rate", type=float, default=10.0)
    producer.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "worker":
        work(args.queues, args.lease, args.concurrency)
    else:
        produce(args.seconds, args.rate, args.seed)


if __name__ == "__main__":
    main(sys.argv[1:])
