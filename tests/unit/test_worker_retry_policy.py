"""Backoff arithmetic, Retry requests, and how failures become stored outcomes."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgqueue
from pgqueue import JobState
from pgqueue.job import error_fields
from pgqueue.outcome import error_document, failed


def test_backoff_grows_by_its_factor_up_to_its_cap() -> None:
    backoff = pgqueue.Backoff(base=2, factor=3, max=100, jitter=0)
    assert [backoff.delay(n) for n in range(1, 6)] == [2, 6, 18, 54, 100]


def test_backoff_survives_absurd_attempt_numbers() -> None:
    assert pgqueue.Backoff(jitter=0).delay(1_000_000) == pgqueue.Backoff().max


def test_jitter_takes_off_at_most_its_share() -> None:
    backoff = pgqueue.Backoff(base=10, jitter=0.25)
    assert backoff.delay(1, rand=lambda: 0.0) == 10
    assert backoff.delay(1, rand=lambda: 1.0) == 7.5
    assert all(7.5 <= backoff.delay(1) <= 10 for _ in range(200))


def test_a_zero_base_means_retry_at_once() -> None:
    assert pgqueue.Backoff(base=0).delay(7) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base": -1}, "Backoff base"),
        ({"factor": 0.5}, "factor must be a number from 1 to 1000"),
        ({"jitter": 1.5}, "jitter must be a number from 0 to 1"),
        ({"jitter": float("nan")}, "jitter"),
        ({"base": 10, "max": 5}, "must not be less than base"),
    ],
)
def test_bad_backoffs_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(pgqueue.ConfigError, match=message):
        pgqueue.Backoff(**options)


def test_retry_takes_seconds_or_a_timedelta() -> None:
    assert pgqueue.Retry(timedelta(minutes=2)).delay == 120
    assert pgqueue.Retry().delay is None
    assert "in 5s: not yet" in str(pgqueue.Retry(5, reason="not yet"))
    with pytest.raises(pgqueue.ConfigError):
        pgqueue.Retry(-1)
    assert not isinstance(pgqueue.Retry(), pgqueue.PgQueueError)


def test_a_failure_with_attempts_left_is_retried_on_the_policy() -> None:
    outcome = failed(
        ValueError("x"), attempts=2, max_attempts=3, policy=pgqueue.Backoff(base=4, jitter=0)
    )
    assert (outcome.state, outcome.retry_in) == (JobState.FAILING, 8)


def test_a_retry_request_overrides_the_policy_and_the_last_attempt_dead_letters() -> None:
    assert failed(pgqueue.Retry(30), attempts=1, max_attempts=3).retry_in == 30
    assert failed(pgqueue.Retry(30), attempts=3, max_attempts=3).state is JobState.FAILED


def test_a_policy_that_breaks_falls_back_to_the_default() -> None:
    class Broken:
        def delay(self, attempt: int) -> float:
            raise ZeroDivisionError

    class Negative:
        def delay(self, attempt: int) -> float:
            return -5

    for policy in (Broken(), Negative()):
        outcome = failed(ValueError("x"), attempts=1, max_attempts=2, policy=policy)
        assert outcome.retry_in is not None and 0 < outcome.retry_in <= 1


def test_error_documents_are_safe_to_store() -> None:
    document = error_fields("Kind\x00", "bad \x00 \udc80", "x" * 100_000)
    assert "\x00" not in document["type"] + document["message"]
    assert document["message"] == "bad \\x00 \\udc80"
    assert len(document["traceback"]) < 20_000 and document["traceback"].endswith("x")


def test_an_exception_whose_str_fails_is_still_recorded() -> None:
    class Odd(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    document = error_document(Odd())
    assert document["type"].endswith("Odd")
    assert "str() failed" in document["message"]
