"""Where a worker listener's drains run (`agentrun.pg_listen.ChannelListener`, issue 18):
a listener of one channel drains on its own thread, with no thread wake-up between the
notification and the claim (bench cell 4); a listener of several channels drains each on
a thread of its own, so one channel's long batch never delays another's pickup."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection

from agentrun.pg_listen import ChannelListener


def _recorder(seen: list[str]) -> Callable[[], None]:
    def drain() -> None:
        seen.append(threading.current_thread().name)

    return drain


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def _notify_and_wait(channel: str, seen: list[str]) -> None:
    """After the drain every (re)connection runs, NOTIFY, and wait for the next drain."""
    _wait_for(lambda: len(seen) >= 1, "the connection's drain")
    before = len(seen)
    with connection.cursor() as cursor:
        cursor.execute(f"NOTIFY {channel}")
    _wait_for(lambda: len(seen) > before, f"a drain after NOTIFY {channel}")


@pytest.mark.django_db(transaction=True)
def test_a_listener_of_one_channel_drains_on_its_own_thread() -> None:
    seen: list[str] = []
    listener = ChannelListener(drains={"pk_one": _recorder(seen)}, name="test-one")
    listener.start()
    try:
        assert listener.listening.wait(10)
        _notify_and_wait("pk_one", seen)
    finally:
        listener.stop()
    assert set(seen) == {"test-one"}, seen  # the reconnection's drain and the notified one


@pytest.mark.django_db(transaction=True)
def test_a_listener_of_two_channels_drains_each_on_a_thread_of_its_own() -> None:
    first: list[str] = []
    second: list[str] = []
    drains = {"pk_first": _recorder(first), "pk_second": _recorder(second)}
    listener = ChannelListener(drains=drains, name="test-two")
    listener.start()
    try:
        assert listener.listening.wait(10)
        _notify_and_wait("pk_first", first)
        _notify_and_wait("pk_second", second)
    finally:
        listener.stop()
    assert set(first) == {"test-two-pk_first"}, first
    assert set(second) == {"test-two-pk_second"}, second
