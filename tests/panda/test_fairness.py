"""Fairness between the sessions of a class (issue 29, item 2), on a real local Dask cluster.

* a session (an *owner*) has at most ``MAX_JOBS_PER_OWNER`` jobs in flight; a further one waits, and says so;
* owners are served in turn: a session's later jobs queue behind another session's first one;
* a waiting job says how many jobs go before it ("busy: N ahead of you");
* a job nobody waits for any more (its session went away) is withdrawn after a grace period: a queued one
  is cancelled, a long running one stopped; a job someone else still waits for is kept.

One cluster of two one-thread workers for the file; the jobs are this module's functions (the workers get
the test folders on their path).
"""

from __future__ import annotations

import threading
import time

import pytest
from executor_support import in_thread, local_cluster

from panda.execution import (
    ABANDON_GRACE_S,
    HIGH,
    LOW,
    MAX_JOBS_PER_OWNER,
    Executor,
    JobAbandoned,
    JobBusy,
    JobError,
    job_key,
)


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    with local_cluster(tmp_path_factory, memory_limit=2**30) as ex:
        yield ex


# --- jobs (run on the workers) -----------------------------------------------------------------


def started_at(seconds: float, tag: str) -> float:
    """The wall-clock time the job started; then sleep."""
    t = time.time()
    time.sleep(seconds)
    return t


def first_long(seconds: float) -> float:
    """Like :func:`started_at`, under a name the scheduler has no durations for (it guesses 0.5 s)."""
    return started_at(seconds, "first-long")


def first_short(seconds: float, tag: str) -> float:
    """Like :func:`started_at`, under another name the scheduler has not seen."""
    return started_at(seconds, tag)


# --- helpers -----------------------------------------------------------------------------------


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _flight_of(executor: Executor, fn, *args):
    """The flight in ``executor`` of job ``fn(*args)`` once it is submitted (its future is there), else None."""
    flight = executor._flights.of(job_key(fn.__name__, args))
    return flight if flight is not None and flight.future is not None else None


def _started(executor: Executor, fn, *args) -> bool:
    flight = _flight_of(executor, fn, *args)
    return flight is not None and flight.started is not None


def _until(moment: float) -> None:
    """Let the clock reach ``moment`` (time.monotonic): for the tests of a time limit itself."""
    while time.monotonic() < moment:
        time.sleep(0.05)


def _occupy_both_workers(executor: Executor, seconds: float, tag: str) -> list:
    """Two interactive jobs of ``seconds``, one on each worker, started before returning (a long job could
    only take the one worker with the ``long`` resource)."""
    futures = [executor.submit(started_at, seconds, f"{tag}-{k}", priority=HIGH) for k in range(2)]
    deadline = time.monotonic() + 60
    while sum(1 for f in executor._flights.all() if f.started is not None) < 2:
        assert time.monotonic() < deadline, "the blocking jobs did not start"
        time.sleep(0.05)
    return futures


# --- tests -------------------------------------------------------------------------------------


def test_a_session_has_at_most_a_few_jobs_in_flight(executor):
    messages: list[str] = []
    runs = [
        in_thread(
            executor.run,
            started_at,
            1.0,
            f"limit-{k}",
            timeout_s=60,
            owner="many",
            progress=lambda phase, _f: messages.append(phase),
        )
        for k in range(MAX_JOBS_PER_OWNER + 2)
    ]
    peak = 0
    while any(t.is_alive() for t, _ in runs):
        peak = max(peak, executor.jobs_of("many"))
        time.sleep(0.02)
    assert all("value" in box for _, box in runs), [box.get("error") for _, box in runs]
    assert peak == MAX_JOBS_PER_OWNER
    assert any(m.startswith("busy: waiting for this session's other") for m in messages), messages
    assert executor.jobs_of("many") == 0


def _block_the_long_worker(executor, tag: str):
    """A long job holding the long worker for 2.5 s (the jobs after it queue in the order under test)."""
    blocker = executor.submit(started_at, 2.5, tag, priority=LOW)
    deadline = time.monotonic() + 60
    while not any(f.started is not None for f in executor._flights.all() if f.base.startswith("started_at")):
        assert time.monotonic() < deadline, "the blocking job did not start"
        time.sleep(0.05)
    return blocker


def test_sessions_are_served_in_turn(executor):
    """A session asks for three long jobs, then another session for one: the other session's first job
    starts before the first session's second and third (first come, first served would start it last).

    Long jobs all wait for the one worker with the ``long`` resource, whose queue Dask orders by priority
    (an interactive job is handed to a worker when it is submitted, so its order is the worker's choice).
    """
    blocker = _block_the_long_worker(executor, "turn-block")
    hog = []
    for k in range(3):
        hog.append(in_thread(executor.run, started_at, 0.3, f"hog-{k}", timeout_s=60, priority=LOW, owner="hog"))
        _wait_for(lambda k=k: _flight_of(executor, started_at, 0.3, f"hog-{k}") is not None, f"hog-{k}'s submission")
    fair_thread, fair = in_thread(executor.run, started_at, 0.3, "fair", timeout_s=60, priority=LOW, owner="fair")
    for thread, _ in [*hog, (fair_thread, fair)]:
        thread.join(90)
    executor.result(blocker, timeout_s=30)
    starts = [box["value"] for _, box in hog]
    # (Its tie with the first session's first job, at the same priority, is Dask's to break.)
    assert fair["value"] < min(starts[1:]), (fair["value"], starts)


def test_addresses_are_served_in_turn(executor):
    """Three tabs of one address ask for a long job each (three sessions, one address), then a session of
    another address asks for one: its job starts before the address's second and third, as a session's
    first goes before another session's second (test_sessions_are_served_in_turn)."""
    blocker = _block_the_long_worker(executor, "address-block")
    tabs = []
    for k in range(3):
        tabs.append(
            in_thread(
                executor.run,
                started_at,
                0.3,
                f"tab-{k}",
                timeout_s=60,
                priority=LOW,
                owner=f"tab-{k}",
                group="192.0.2.7",
            )
        )
        _wait_for(lambda k=k: _flight_of(executor, started_at, 0.3, f"tab-{k}") is not None, f"tab-{k}'s submission")
    other_thread, other = in_thread(
        executor.run, started_at, 0.3, "other", timeout_s=60, priority=LOW, owner="other", group="198.51.100.1"
    )
    for thread, _ in [*tabs, (other_thread, other)]:
        thread.join(90)
    executor.result(blocker, timeout_s=30)
    starts = [box["value"] for _, box in tabs]
    assert other["value"] < min(starts[1:]), (other["value"], starts)


def test_a_waiting_job_says_how_many_go_before_it(executor):
    blockers = _occupy_both_workers(executor, 2.5, "ahead-block")
    queued = [executor.submit(started_at, 0.2, f"ahead-{k}", priority=HIGH) for k in range(2)]  # in flight now
    messages: list[str] = []
    executor.run(started_at, 0.1, "ahead-me", timeout_s=60, priority=HIGH, progress=lambda p, _f: messages.append(p))
    assert "busy: 2 ahead of you" in messages, messages
    for future in [*blockers, *queued]:
        executor.result(future, timeout_s=30)


def test_a_job_nobody_waits_for_is_withdrawn(executor):
    blockers = _occupy_both_workers(executor, ABANDON_GRACE_S + 6.0, "gone-block")
    gone = threading.Event()
    thread, box = in_thread(
        executor.run, started_at, 0.1, "gone-queued", timeout_s=60, owner="left", keep_waiting=lambda: not gone.is_set()
    )
    _wait_for(lambda: _flight_of(executor, started_at, 0.1, "gone-queued") is not None, "the job's submission")
    flight = _flight_of(executor, started_at, 0.1, "gone-queued")
    assert flight.started is None  # queued behind the blockers
    gone.set()
    thread.join(5)
    assert isinstance(box.get("error"), JobAbandoned)
    deadline = time.monotonic() + ABANDON_GRACE_S + 10
    while flight.future.status != "cancelled":
        assert time.monotonic() < deadline, f"the abandoned job was not withdrawn: {flight.future.status}"
        time.sleep(0.1)
    assert flight.stopped == "nobody waits for this computation any more"
    for future in blockers:
        executor.result(future, timeout_s=30)


def test_a_long_job_is_stopped_when_its_session_leaves_but_kept_while_another_waits(executor):
    restarts = len(executor.restarted)
    gone = threading.Event()
    # Two sessions wait for the same long job; one leaves: the job goes on for the other.
    leaver, left_box = in_thread(
        executor.run, started_at, 4.0, "shared-long", timeout_s=60, priority=LOW, keep_waiting=lambda: not gone.is_set()
    )
    stayer, stay_box = in_thread(executor.run, started_at, 4.0, "shared-long", timeout_s=60, priority=LOW)
    _wait_for(lambda: getattr(_flight_of(executor, started_at, 4.0, "shared-long"), "claims", 0) == 2, "both claims")
    gone.set()
    leaver.join(5)
    stayer.join(60)
    assert isinstance(left_box.get("error"), JobAbandoned)
    assert "value" in stay_box, stay_box
    assert len(executor.restarted) == restarts
    # Alone, the leaving session's long job is stopped, and its worker restarted.
    gone.clear()
    thread, box = in_thread(
        executor.run, started_at, 60.0, "alone-long", timeout_s=90, priority=LOW, keep_waiting=lambda: not gone.is_set()
    )
    _wait_for(lambda: _started(executor, started_at, 60.0, "alone-long"), "the long job to start")
    gone.set()
    thread.join(5)
    assert isinstance(box.get("error"), JobAbandoned)
    deadline = time.monotonic() + ABANDON_GRACE_S + 10
    while len(executor.restarted) == restarts:
        assert time.monotonic() < deadline, "the abandoned long job's worker was not restarted"
        time.sleep(0.1)
    executor.wait_for_workers(2, timeout_s=120)
    assert executor.run(started_at, 0.0, "after", timeout_s=60) > 0


def test_an_abandoned_wait_is_a_job_error_in_plain_words(executor):
    with pytest.raises(JobError, match="nobody waits"):
        executor.run(started_at, 0.5, "plain", timeout_s=30, keep_waiting=lambda: False)


def test_a_sessions_interactive_job_never_waits_for_its_own_long_jobs(executor):
    """Long jobs (a curve) fill the session's long slots; its slider's job still goes at once."""
    long_runs = [
        in_thread(executor.run, started_at, 4.0, f"own-long-{k}", timeout_s=60, priority=LOW, owner="busy")
        for k in range(MAX_JOBS_PER_OWNER)
    ]
    deadline = time.monotonic() + 30
    while executor.jobs_of("busy") < MAX_JOBS_PER_OWNER:
        assert time.monotonic() < deadline, "the long jobs did not take their slots"
        time.sleep(0.05)
    messages: list[str] = []
    t0 = time.monotonic()
    executor.run(
        started_at,
        0.0,
        "own-slider",
        timeout_s=60,
        priority=HIGH,
        owner="busy",
        progress=lambda p, _f: messages.append(p),
    )
    assert time.monotonic() - t0 < 3.5, "the interactive job waited for the session's long ones"
    assert not [m for m in messages if "other" in m], messages
    for thread, box in long_runs:
        thread.join(60)
        assert "value" in box, box


def test_an_interactive_job_is_not_given_to_a_worker_busy_with_a_long_one(executor):
    """Dask hands a job to a worker when it is submitted; one given to the worker running a long job would
    wait for all of it. Two interactive jobs while the long worker is busy: both run on the other worker,
    one after the other, long before the long job ends."""
    long_job = executor.submit(first_long, 8.0, priority=LOW)
    deadline = time.monotonic() + 30
    while not any(f.started is not None for f in executor._flights.all() if f.key == long_job.key):
        assert time.monotonic() < deadline, "the long job did not start"
        time.sleep(0.05)
    t0 = time.time()
    first = executor.submit(first_short, 1.5, "beside-long-1", priority=HIGH)
    second = executor.submit(first_short, 0.0, "beside-long-2", priority=HIGH)
    starts = [executor.result(f, timeout_s=60) - t0 for f in (first, second)]
    assert max(starts) < 5.0, starts  # not after the long job's 8 s
    executor.result(long_job, timeout_s=60)


def test_long_workers_yield_the_cores(executor):
    """The long workers run at a lower CPU priority (nice 10) than the interactive one and the server."""
    import psutil

    from panda.execution import LONG_WORKER_NICENESS

    niceness = {}
    for proc in psutil.Process().children(recursive=True):
        line = " ".join(proc.cmdline())
        for name in ("panda-long", "panda-interactive"):
            if name in line:
                niceness.setdefault(name, set()).add(proc.nice())
    assert niceness == {"panda-long": {LONG_WORKER_NICENESS}, "panda-interactive": {psutil.Process().nice()}}


def test_a_sessions_later_interactive_jobs_stay_interactive(executor):
    """A session's second and third interactive jobs are queued a step or two below HIGH, still far above
    LOW: they must not become long jobs (which only the workers with the long resource may run)."""
    blocker = executor.submit(first_long, 4.0, priority=LOW)
    _wait_for(lambda: _started(executor, first_long, 4.0), "the long job to start")  # the long worker is busy
    runs = [
        in_thread(executor.run, first_short, 0.0, f"later-{k}", timeout_s=60, priority=HIGH, owner="later")
        for k in range(MAX_JOBS_PER_OWNER)
    ]
    t0 = time.time()
    for thread, _ in runs:
        thread.join(60)
    starts = sorted(box["value"] - t0 for _, box in runs)
    assert starts[-1] < 3.0, starts  # on the interactive worker, not behind the long job
    executor.result(blocker, timeout_s=60)


def test_a_slot_wait_that_runs_out_says_the_server_is_busy_not_that_the_setting_is_too_heavy(executor, monkeypatch):
    """A session whose long slots stay taken (a curve's first three methods) and none of them finishes: its
    fourth job's wait ends with JobBusy, which the page shows as "try again", not as a too heavy setting."""
    from app.widgets.current_view import RETRY_HINT, job_failure

    slots = ("full", "long")
    for _ in range(MAX_JOBS_PER_OWNER):
        executor._enter(slots, None, None)
    monkeypatch.setattr(executor, "queue_limit_s", 1.0)
    messages: list[str] = []
    try:
        with pytest.raises(JobBusy) as info:
            executor.run(
                started_at,
                0.0,
                "full-4th",
                timeout_s=60,
                priority=LOW,
                owner="full",
                progress=lambda p, _f: messages.append(p),
            )
    finally:
        for _ in range(MAX_JOBS_PER_OWNER):
            executor._leave(slots)
    assert any(m.startswith("busy: waiting for this session's other") for m in messages), messages
    headline, hint = job_failure(info.value)
    assert "too heavy" not in headline and hint == RETRY_HINT, (headline, hint)
    assert executor.jobs_of("full") == 0
    assert _flight_of(executor, started_at, 0.0, "full-4th") is None  # never submitted


def test_a_slot_wait_lasts_while_the_sessions_own_jobs_keep_finishing(executor, monkeypatch):
    """Two jobs wait for the session's three taken slots (a curve's methods 4 and 5). One slot is given back
    half-way through the limit, the next only after it: the second waiter waited longer than the limit in
    all, but never longer than the limit since the session's last job finished, so it gets its slot."""
    limit = 10.0
    monkeypatch.setattr(executor, "queue_limit_s", limit)
    slots = ("curve", "long")
    for _ in range(MAX_JOBS_PER_OWNER):
        executor._enter(slots, None, None)
    t0 = time.monotonic()
    waiters = [in_thread(executor._enter, slots, None, None) for _ in range(2)]
    try:
        _until(t0 + 0.5 * limit)
        executor._leave(slots)
        _wait_for(lambda: sum(not t.is_alive() for t, _ in waiters) == 1, "a waiter to take the slot")
        _until(t0 + 1.2 * limit)  # past the other waiter's limit counted from its start
        assert [t.is_alive() for t, _ in waiters].count(True) == 1, [box for _, box in waiters]
        executor._leave(slots)
        for thread, _ in waiters:
            thread.join(60)
        assert [box.get("value") for _, box in waiters] == [MAX_JOBS_PER_OWNER - 1] * 2, waiters
    finally:
        held = executor._slots.held(slots)
        for _ in range(held):
            executor._leave(slots)
    assert executor.jobs_of("curve") == 0


def test_the_sessions_of_one_address_share_its_slots(monkeypatch):
    """Twenty tabs of one address hold MAX_JOBS_PER_GROUP slots of a kind, not twenty times three; another
    address is not held up; a freed slot goes on; 0 turns the limit per address off (a class behind one NAT)."""
    from panda.execution import fairness
    from panda.execution.errors import JobBusy

    slots = fairness.OwnerSlots()
    per_owner, per_group = fairness.MAX_JOBS_PER_OWNER, fairness.MAX_JOBS_PER_GROUP
    assert per_group == 2 * per_owner
    tabs = [(f"tab-{i}", "interactive") for i in range(20)]
    taken = []
    for tab in tabs:
        for _ in range(per_owner):
            try:
                slots.enter(tab, None, None, 0.2, group="192.0.2.7")
            except JobBusy as exc:
                assert "this network's other" in str(exc)
                break
            taken.append(tab)
    assert len(taken) == per_group
    other = ("someone-else", "interactive")
    assert [slots.enter(other, None, None, 0.2, group="198.51.100.1") for _ in range(per_owner)] == [0, 1, 2]
    slots.leave(taken.pop(), group="192.0.2.7")
    # A tab's first job ranks behind its address's other jobs in flight (one priority step each).
    assert slots.enter(tabs[-1], None, None, 0.2, group="192.0.2.7") == per_group - 1

    monkeypatch.setattr(fairness, "MAX_JOBS_PER_GROUP", 0)
    open_slots = fairness.OwnerSlots()
    for tab in tabs[:5]:
        for _ in range(per_owner):
            open_slots.enter(tab, None, None, 0.2, group="192.0.2.7")
    assert sum(open_slots.held(tab) for tab in tabs[:5]) == 5 * per_owner
