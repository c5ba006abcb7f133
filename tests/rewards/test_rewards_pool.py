"""WorkerPool: per-item timeouts (signal and watchdog paths), crashes, ordering, restarts."""

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


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(job, n_workers=2, timeout=0.5, chunk_size=4) as p:
        yield p


def test_results_in_order(pool):
    items = [("ok", i) for i in range(37)]
    assert pool.map(items) == [(OK, 2 * i) for i in range(37)]


def test_exception_and_signal_timeout_blame_one_item(pool):
    items = [("ok", 1), ("raise", 0), ("sleep", 5), ("ok", 2)]
    start = time.monotonic()
    out = pool.map(items)
    assert time.monotonic() - start < 3
    assert out[0] == (OK, 2) and out[3] == (OK, 4)
    assert out[1][0] == ERROR and "ValueError: bad item" in out[1][1]
    assert out[2][0] == TIMEOUT


def test_uninterruptible_hang_and_crash_replace_the_worker(pool):
    restarts = pool.restarts
    items = [("ok", 1), ("c_hang", 0), ("ok", 2), ("crash", 0), ("ok", 3)] + [("ok", i) for i in range(8)]
    start = time.monotonic()
    out = pool.map(items)
    assert time.monotonic() - start < 10
    assert out[1][0] == TIMEOUT and out[3] == (ERROR, "worker process died")
    assert [v for s, v in out if s == OK] == [2, 4, 6] + [2 * i for i in range(8)]
    assert pool.restarts == restarts + 2
    assert pool.map([("ok", 5)]) == [(OK, 10)]  # still serving


def test_unpicklable_function_is_refused():
    with pytest.raises(ValueError, match="picklable"):
        WorkerPool(lambda x: x)


def test_bad_arguments():
    with pytest.raises(ValueError):
        WorkerPool(job, n_workers=0)
    with pytest.raises(ValueError):
        WorkerPool(job, timeout=0)
