"""Script runs in progress per client address (app/run_slots.py): one person's tabs wait for each other."""

from __future__ import annotations

import threading
import time

from app import run_slots


def _hold(group: str, entered: threading.Event, leave: threading.Event, got: list) -> None:
    with run_slots.slot(group, wait_s=5.0) as ok:
        got.append(ok)
        entered.set()
        leave.wait(10)


def test_an_address_holds_at_most_its_limit_and_the_next_run_waits(monkeypatch):
    monkeypatch.setenv(run_slots.RUNS_PER_ADDRESS_ENV, "2")
    leave = threading.Event()
    got: list = []
    holders = []
    for _ in range(2):
        entered = threading.Event()
        t = threading.Thread(target=_hold, args=("198.51.100.66", entered, leave, got))
        t.start()
        assert entered.wait(5)
        holders.append(t)
    t0 = time.monotonic()
    with run_slots.slot("198.51.100.66", wait_s=0.3) as ok:  # a third tab: no slot within its wait
        assert not ok
    assert time.monotonic() - t0 >= 0.3
    with run_slots.slot("203.0.113.1", wait_s=0.3) as ok:  # another student: at once
        assert ok
    with run_slots.slot(None, wait_s=0.3) as ok:  # an unknown address (this machine): not limited
        assert ok

    # the third tab waits and runs as soon as one of the two ends
    third: list = []
    entered = threading.Event()
    done = threading.Event()
    waiter = threading.Thread(target=_hold, args=("198.51.100.66", entered, done, third))
    waiter.start()
    assert not entered.wait(0.3)
    leave.set()
    for t in holders:
        t.join(5)
    assert entered.wait(5) and third == [True]
    done.set()
    waiter.join(5)
    assert got == [True, True]
    assert not run_slots._slots and not run_slots._holders  # nothing kept for addresses gone


def test_zero_turns_the_limit_off(monkeypatch):
    monkeypatch.setenv(run_slots.RUNS_PER_ADDRESS_ENV, "0")
    with run_slots.slot("198.51.100.66", wait_s=0.1) as a, run_slots.slot("198.51.100.66", wait_s=0.1) as b:
        assert a and b
