"""Dependency cycles among the jobs of one ``enqueue_many`` are refused at the call (none of their
jobs could ever leave ``waiting``), and ids in ``depends_on`` are checked like job ids: a
ConfigError naming the field, nothing written, on both databases."""

from __future__ import annotations

import pytest
from conftest import count_jobs

import pgqueue
from pgqueue import JobSpec
from pgqueue.workflow.dependencies import find_cycle


@pytest.fixture
def step(queue: pgqueue.Queue) -> pgqueue.Task[..., None]:
    @queue.task(name="wf.step")
    def step() -> None: ...

    return step


def specs(edges: dict[str, list[str]]) -> list[JobSpec]:
    return [JobSpec(id=job_id, depends_on=parents or None) for job_id, parents in edges.items()]


@pytest.mark.parametrize(
    ("edges", "shown"),
    [
        ({"a": ["b"], "b": ["a"]}, "'a' -> 'b' -> 'a'"),
        ({"a": ["b"], "b": ["c"], "c": ["a"]}, "'a' -> 'b' -> 'c' -> 'a'"),
        # A cycle further down, behind a job that is not on it, and beside a sound chain.
        ({"x": ["y"], "y": [], "z": ["p"], "p": ["q"], "q": ["p", "y"]}, "'p' -> 'q' -> 'p'"),
    ],
)
def test_a_cycle_in_one_call_is_refused_and_nothing_is_written(
    queue: pgqueue.Queue, step: pgqueue.Task[..., None], edges: dict[str, list[str]], shown: str
) -> None:
    existing = step.enqueue()
    with pytest.raises(pgqueue.ConfigError, match="cycle") as caught:
        queue.enqueue_many("wf.step", specs(edges))
    assert shown in str(caught.value)
    assert count_jobs(queue) == 1
    # The same jobs without the edge that closes the cycle are accepted.
    edges = {**edges, next(iter(edges)): [existing.id]}
    if "q" in edges:
        edges["q"] = ["y"]
    assert {r.status for r in queue.enqueue_many("wf.step", specs(edges))} == {"queued"}


def test_a_long_chain_closed_into_a_cycle_is_found_without_recursion(
    queue: pgqueue.Queue, step: pgqueue.Task[..., None]
) -> None:
    count = 100_000
    edges = {f"j{i}": [f"j{i + 1}"] for i in range(count - 1)}
    edges[f"j{count - 1}"] = ["j0"]
    rows = [{"id": job_id, "depends_on": parents} for job_id, parents in edges.items()]
    cycle = find_cycle(rows)  # deeper than any recursion limit
    assert len(cycle) == count and cycle[0] == "j0"
    assert find_cycle(rows[:-1]) == []
    # Through enqueue_many on a shorter chain (the check is the same; the writes cost time).
    short = {f"k{i}": [f"k{i + 1}"] for i in range(2000)}
    short["k2000"] = ["k0"]
    with pytest.raises(pgqueue.ConfigError, match=r"cycle.*\(2001 jobs\)"):
        queue.enqueue_many("wf.step", specs(short))
    assert count_jobs(queue) == 0


def test_a_cycle_cannot_form_across_calls(
    queue: pgqueue.Queue, step: pgqueue.Task[..., None]
) -> None:
    # A job may only depend on jobs that exist, so the later call cannot close a cycle through
    # an earlier job: naming a job that is not there yet is refused.
    queue.enqueue_many("wf.step", specs({"a": [], "b": ["a"]}))
    with pytest.raises(pgqueue.ConfigError, match="do not exist: c"):
        queue.enqueue_many("wf.step", specs({"a2": ["b"], "d": ["c"]}))
    # Re-enqueueing an existing id with other dependencies is a duplicate: its edges stay.
    again = queue.enqueue_many("wf.step", specs({"a": ["b"]}))
    assert [r.status for r in again] == ["duplicate"]
    status = queue.status("a")
    assert status is not None and status.state is pgqueue.JobState.QUEUED


@pytest.mark.parametrize(
    ("bad", "said"),
    [("\ud800", "lone surrogate"), ("job\udc80-1", "lone surrogate"), ("a\x00b", "NUL")],
)
def test_an_unstorable_dependency_id_names_the_field(
    queue: pgqueue.Queue, step: pgqueue.Task[..., None], bad: str, said: str
) -> None:
    parent = step.enqueue()
    with pytest.raises(pgqueue.ConfigError, match=f"depends_on.*{said}"):
        step.using(depends_on=[parent.id, bad]).enqueue()
    with pytest.raises(pgqueue.ConfigError, match=f"depends_on.*{said}"):
        queue.enqueue_many("wf.step", [JobSpec(depends_on=[bad])])
    assert count_jobs(queue) == 1
