"""The dashboard's HTML pieces without a database: tracebacks, charts, cursors, durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgqueue.dashboard.data import Series, decode_cursor, encode_cursor
from pgqueue.dashboard.render import age, bar_chart, highlight_traceback

TRACEBACK = """Traceback (most recent call last):
  File "/app/tasks.py", line 12, in charge
    gateway.charge(order)
    ~~~~~~~~~~~~~~^^^^^^^
ValueError: bad <script>alert(1)</script>
second line of the message

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/tasks.py", line 14, in charge
    raise PaymentError("down") from exc
app.errors.PaymentError: down
"""


def test_a_traceback_is_highlighted_and_escaped() -> None:
    html = str(highlight_traceback(TRACEBACK))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<span class="tb-path">/app/tasks.py</span>' in html
    assert (
        '<span class="tb-line">12</span>' in html and '<span class="tb-func">charge</span>' in html
    )
    assert '<span class="tb-caret">    ~~~~~~~~~~~~~~^^^^^^^</span>' in html
    assert '<span class="tb-exc-type">ValueError</span>' in html
    assert '<span class="tb-exc">second line of the message</span>' in html
    assert '<span class="tb-chain">During handling' in html
    assert '<span class="tb-exc-type">app.errors.PaymentError</span>' in html
    assert highlight_traceback(None) == "" and highlight_traceback("") == ""


def test_a_chart_has_a_bar_and_a_tooltip_per_bucket() -> None:
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    series = Series.empty([start + timedelta(minutes=i) for i in range(3)], timedelta(minutes=1))
    series.add(0, "completed", 4)
    series.add(2, "failed", 1)
    svg = str(bar_chart(series, "label <x>"))
    assert svg.startswith("<svg") and 'aria-label="label &lt;x&gt;"' in svg
    assert svg.count('class="bar completed"') == 1 and svg.count('class="bar failed"') == 1
    assert "12:02: 0 completed, 1 failed, 0 cancelled" in svg
    empty = str(bar_chart(Series.empty(series.starts, series.width), "empty"))
    assert 'class="bar' not in empty


def test_cursors_round_trip_and_garbage_is_ignored() -> None:
    moment = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert decode_cursor(encode_cursor(moment, "a~b")) == (moment, "a~b")
    for garbage in ("", "nope", "2026-13-01~x", "2026-05-01T12:00~x"):
        assert decode_cursor(garbage) is None


def test_durations_for_people() -> None:
    assert [age(None), age(0.25), age(9.5), age(125), age(7300), age(90000)] == [
        "-",
        "250 ms",
        "9.5 s",
        "2m 5s",
        "2h 1m",
        "1d 1h",
    ]
