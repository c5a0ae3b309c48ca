"""The main thread's wait for a stop: it sleeps (no timed wake-ups: an idle fleet of hundreds of
worker processes pays nothing for it) and still runs a signal's handler when the kernel handed
the signal to another thread (pgqueue/worker/signals.py)."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Iterator

import pytest
from conditions import wait_until

from pgqueue.worker import signals
from pgqueue.worker.signals import wait_interruptibly


@pytest.fixture
def no_timed_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fallback's periodic check would also run the handler, within its step: make the step
    # longer than any wait here, so only the wake-up fd can.
    monkeypatch.setattr(signals, "SIGNAL_CHECK_SECONDS", 3600.0)


@pytest.fixture
def usr1() -> Iterator[threading.Event]:
    handled = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda *_: handled.set())
    yield handled
    signal.signal(signal.SIGUSR1, previous)


def _set_from_another_thread(event: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=event.set)
    thread.start()
    return thread


def _main_thread_waits() -> bool:
    """The main thread is inside ``wait_interruptibly`` (a signal sent before would be handled
    before it), at its innermost waiting call."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    if frame is None or frame.f_code.co_name not in {"wait", "_wait_on_wakeup_fd"}:
        return False
    while frame is not None:
        if frame.f_code.co_name == "wait_interruptibly":
            return True
        frame = frame.f_back
    return False


@pytest.mark.usefixtures("no_timed_checks")
def test_the_wait_ends_when_the_event_is_set() -> None:
    done = threading.Event()
    setter = _set_from_another_thread(done)
    assert wait_interruptibly(done) is True
    setter.join()
    assert signal.set_wakeup_fd(-1) == -1  # the wake-up fd was given back


def test_the_wait_ends_at_its_timeout() -> None:
    assert wait_interruptibly(threading.Event(), timeout=0.05) is False
    assert signal.set_wakeup_fd(-1) == -1


@pytest.mark.usefixtures("no_timed_checks")
def test_a_signal_taken_by_another_thread_runs_its_handler_in_the_waiting_main_thread(
    usr1: threading.Event,
) -> None:
    # The signal goes to this helper thread, as the kernel may hand SIGTERM to any thread; Python
    # runs the handler only in the main thread, which must wake for it (before: after its next
    # timed check; with the step above, not within this wait's 60 s).

    def send() -> None:
        wait_until(_main_thread_waits, what="the main thread to wait")
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

    sender = threading.Thread(target=send)
    sender.start()
    assert wait_interruptibly(usr1, timeout=60) is True
    sender.join()


def test_a_wake_up_fd_already_set_is_left_alone_and_the_wait_still_ends() -> None:
    # E.g. an event loop's: the wait falls back to timed checks rather than take it over.
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno())
    try:
        done = threading.Event()
        setter = _set_from_another_thread(done)
        assert wait_interruptibly(done, timeout=60) is True
        setter.join()
        assert signal.set_wakeup_fd(previous) == writer.fileno()
    finally:
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
