"""WorkerPool: per-item timeouts (signal and watchdog paths), crashes, ordering, restarts."""

import functools
import os
import time

import pytest

from rlvr.rewards.pool import ERROR, OK, TIMEOUT, WorkerPool


def job(item):
    kind, value = item
    if kind == "sleep":  # interruptible: the worker's SIGALRM ends it
        time.sleep(value)
    elif kind == "c_hang":  # a C loop that never checks signals: only the parent watchdog ends it
        sum(range(10**13))
    elif kind == "crash":
        os._exit(3)
    elif kind == "raise":
        raise ValueError("bad item")
    return value * 2


def _starts_late_but_one(flags):
    """A worker's initializer: the first worker to get here starts at once; the others wait until an item has
    started on it, then say they are up (`up`)."""
    try:
        os.close(os.open(os.path.join(flags, "first"), os.O_CREAT | os.O_EXCL))
        return
    except FileExistsError:
        pass
    while not os.path.exists(os.path.join(flags, "go")):
        time.sleep(0.01)
    open(os.path.join(flags, "up"), "w").close()


def _pid_after(item):
    """Lets the late workers start, and takes `seconds` once they are up (so they are ready before it ends)."""
    flags, seconds = item
    open(os.path.join(flags, "go"), "w").close()
    while not os.path.exists(os.path.join(flags, "up")):
        time.sleep(0.01)
    time.sleep(seconds)
    return os.getpid()


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(job, n_workers=2, timeout=1.0, chunk_size=4) as p:  # 1 s: a busy machine times out no quick item
        yield p


def test_results_in_order(pool):
    items = [("ok", i) for i in range(37)]
    assert pool.map(items) == [(OK, 2 * i) for i in range(37)]


def test_exception_and_signal_timeout_blame_one_item(pool):
    items = [("ok", 1), ("raise", 0), ("sleep", 5), ("ok", 2)]
    out = pool.map(items)  # no bound on the time: a sleep the timeout missed would end (OK, 10)
    assert out[0] == (OK, 2) and out[3] == (OK, 4)
    assert out[1][0] == ERROR and "ValueError: bad item" in out[1][1]
    assert out[2][0] == TIMEOUT


def test_uninterruptible_hang_and_crash_replace_the_worker(pool):
    restarts = pool.restarts
    items = [("ok", 1), ("c_hang", 0), ("ok", 2), ("crash", 0), ("ok", 3)] + [("ok", i) for i in range(8)]
    out = pool.map(items)  # sum(range(10**13)) takes hours: only the watchdog ends it, as it says
    assert out[1] == (TIMEOUT, "worker unresponsive > 1 s") and out[3] == (ERROR, "worker process died")
    assert [v for s, v in out if s == OK] == [2, 4, 6] + [2 * i for i in range(8)]
    assert pool.restarts == restarts + 2
    assert pool.map([("ok", 5)]) == [(OK, 10)]  # still serving


def test_a_worker_that_starts_late_still_gets_a_share_of_the_map(tmp_path):
    """The first worker up must not take the whole map: the second is up while the first is on its first item, and
    scores at least one of the four (a slow machine staggers the workers' start; the first map of a run was scored
    by one worker, one sample after another)."""
    late = functools.partial(_starts_late_but_one, str(tmp_path))
    with WorkerPool(_pid_after, n_workers=2, timeout=30.0, initializer=late) as pool:
        out = pool.map([(str(tmp_path), 1.0)] * 4)
    assert [status for status, _ in out] == [OK] * 4 and len({pid for _, pid in out}) == 2


def test_unpicklable_function_is_refused():
    with pytest.raises(ValueError, match="picklable"):
        WorkerPool(lambda x: x)


def test_bad_arguments():
    with pytest.raises(ValueError):
        WorkerPool(job, n_workers=0)
    with pytest.raises(ValueError):
        WorkerPool(job, timeout=0)
