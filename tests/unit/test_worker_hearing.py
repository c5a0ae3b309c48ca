"""What a worker hears of enqueues (pgqueue.worker.hearing): wake-ups decided by the fleet, and
how many jobs they announced, which ends a claim that took them all. No database: a fake
listener delivers the notifications."""

from __future__ import annotations

from collections.abc import Callable

from pgqueue.notifications import ENQUEUED_CHANNEL, enqueued_payload
from pgqueue.worker.fleet import FleetWakes
from pgqueue.worker.hearing import WakeUpHearing


class FakeListener:
    def __init__(self) -> None:
        self.channels: dict[str, Callable[[str], None]] = {}
        self.reconnects: list[Callable[[], None]] = []

    def subscribe(
        self, channel: str, callback: Callable[[str], None], *, wait: float = 10.0
    ) -> Callable[[], None]:
        self.channels[channel] = callback
        return lambda: self.channels.pop(channel, None)

    def on_reconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        self.reconnects.append(callback)
        return lambda: self.reconnects.remove(callback)

    def stop(self) -> None: ...


def hearing(fleet: FleetWakes, listener: FakeListener, woken: list[str]) -> WakeUpHearing:
    ears = WakeUpHearing(
        fleet,
        None,
        wake=lambda: woken.append("wake"),
        look=lambda: woken.append("look"),
        nudge=lambda: woken.append("nudge"),
    )
    ears.subscribe(listener, payloads=True)
    return ears


def test_wake_ups_count_their_jobs_and_a_reconnect_makes_the_count_unknown() -> None:
    fleet = FleetWakes(poll_interval=1.0)
    listener, woken = FakeListener(), []
    ears = hearing(fleet, listener, woken)
    listener.channels[ENQUEUED_CHANNEL](enqueued_payload("default", 2, nonce=5))
    assert woken == ["wake"]
    assert fleet.take_announced() == 2
    # Notifications may have been lost with the connection: how many jobs is unknown, so the
    # next claim cannot end the worker's looking on a full batch.
    for reconnected in listener.reconnects:
        reconnected()
    assert woken == ["wake", "wake"]
    assert fleet.take_announced() is None
    ears.close()
    assert not listener.channels and not listener.reconnects


def test_a_payload_less_listener_only_looks() -> None:
    fleet = FleetWakes(poll_interval=1.0)
    listener, woken = FakeListener(), []
    hearing_ = WakeUpHearing(
        fleet, None, wake=lambda: woken.append("wake"), look=lambda: woken.append("look"),
        nudge=lambda: None,
    )  # fmt: skip
    hearing_.subscribe(listener, payloads=False)
    for reconnected in listener.reconnects:
        reconnected()
    assert woken == ["look"]
