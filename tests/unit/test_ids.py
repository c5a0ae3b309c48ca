"""pgqueue.ids: generated job ids are version-7 UUID text, increasing within a process (across
threads, across a clock that steps back, and past a millisecond's counter), and unique."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from pgqueue import ids


def test_ids_are_version_7_uuid_text_carrying_the_time() -> None:
    before = time.time_ns() // 1_000_000
    batch = ids.new_ids(500)
    after = time.time_ns() // 1_000_000
    for job_id in [*batch, ids.new_id()]:
        parsed = uuid.UUID(job_id)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == job_id  # lower-case, hyphenated: the text sorts like the number
    stamp = uuid.UUID(batch[0]).int >> 80
    assert before <= stamp <= after + 1


def test_ids_increase_in_text_order_across_calls() -> None:
    seen = [ids.new_id() for _ in range(200)] + ids.new_ids(3000) + [ids.new_id()]
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    assert ids.new_ids(0) == []


def test_a_full_millisecond_carries_into_the_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    # A frozen clock: 10,000 ids cannot fit one millisecond's 12-bit counter, so the timestamp
    # runs ahead rather than the counter wrapping round into smaller ids.
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_800_000_000_000 * 1_000_000)
    monkeypatch.setattr(ids, "_last", 0)
    batch = ids.new_ids(10_000) + ids.new_ids(10)
    assert batch == sorted(batch) and len(set(batch)) == len(batch)
    stamps = {uuid.UUID(job_id).int >> 80 for job_id in batch}
    assert min(stamps) == 1_800_000_000_000 and 1 < len(stamps) <= 6


def test_a_clock_stepping_back_keeps_ids_increasing(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1_800_000_000_000]
    monkeypatch.setattr(ids.time, "time_ns", lambda: now[0] * 1_000_000)
    monkeypatch.setattr(ids, "_last", 0)
    first = ids.new_ids(5)
    now[0] -= 60_000  # NTP steps the clock back a minute
    second = ids.new_ids(5)
    assert first + second == sorted(first + second)


def test_threads_get_disjoint_increasing_ids() -> None:
    results: list[list[str]] = []
    start = threading.Barrier(4)

    def make() -> None:
        start.wait()
        mine: list[str] = []
        for _ in range(300):
            mine += ids.new_ids(5)
            mine.append(ids.new_id())
        results.append(mine)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [job_id for mine in results for job_id in mine]
    assert len(every) == 4 * 300 * 6 and len(set(every)) == len(every)
    for mine in results:
        assert mine == sorted(mine)


def test_the_random_part_differs_between_ids_of_one_instant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two processes generating in the same millisecond share the timestamp and may share the
    # counter: the 62 random bits keep them apart. Simulated by resetting the process state.
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_800_000_000_000 * 1_000_000)
    tails = set()
    for _ in range(200):
        monkeypatch.setattr(ids, "_last", 0)
        tails.update(job_id[19:] for job_id in ids.new_ids(3))
    assert len(tails) == 600


@pytest.mark.parametrize("count", [1, 31, 32, 33, 1000, 4097])
def test_both_builders_write_the_same_ids_but_for_the_random_bits(count: int) -> None:
    # Below ids._COLUMNS_FROM ids are written one at a time, from it a column at a time.
    first = ids._reserve(count)
    one_by_one, by_columns = ids._one_by_one(first, count), ids._by_columns(first, count)
    assert [i[:19] for i in one_by_one] == [i[:19] for i in by_columns]
    for job_id in by_columns:
        parsed = uuid.UUID(job_id)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122 and str(parsed) == job_id
    assert by_columns == sorted(by_columns) and len(set(by_columns)) == count


def test_the_variant_digit_takes_each_of_its_four_values() -> None:
    # Two random bits beside the variant's two: 8, 9, a and b all occur.
    assert {job_id[19] for job_id in ids.new_ids(2000)} == set("89ab")
