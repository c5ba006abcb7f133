"""A persistent pool of worker processes that maps a function over items, each under a timeout.

Why not `concurrent.futures.ProcessPoolExecutor`: it can neither time out one item nor replace a
worker stuck in C code (a sympy power tower ignores Python signals). Here each worker streams one
result per item back, so when a worker hangs or dies we know exactly which item did it: that item
gets ("timeout" | "error"), the worker is killed and replaced, and the rest of its chunk is resent.

Workers are fresh interpreters (`python -m rlvr.rewards._pool_worker`), not multiprocessing children:
no fork of a threaded trainer (deadlock-prone) and no re-import of the user's `__main__` script
(spawn/forkserver do that, and break any script without an `if __name__ == "__main__"` guard).

Inside a worker the per-item timeout is a SIGALRM timer (workers run their loop on their main
thread, where signals work, unlike a trainer's threads); the parent's watchdog, at 1.5x the timeout
plus a grace second, catches what the signal cannot interrupt.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

OK, ERROR, TIMEOUT, LATE = "ok", "error", "timeout", "late"  # LATE: not answered by the map's deadline
_MAX_START_FAILURES = 3


@dataclass
class _Worker:
    process: subprocess.Popen
    rx: Connection  # results from the worker
    tx: Connection  # batches to the worker
    ready: bool = False
    started: float = field(default_factory=time.monotonic)
    inflight: deque = field(default_factory=deque)  # (index, item) sent, not yet answered
    last_progress: float = 0.0


class WorkerPool:
    """`pool.map(items) -> [(status, value), ...]`, status in {"ok", "error", "timeout"}.

    `fn` (and `initializer`, run once per worker before it reports ready, e.g. to import sympy)
    must be picklable: module-level functions, or functools.partial of them. Workers start at
    construction, so their imports overlap with whatever the caller does next.
    """

    def __init__(self, fn: Callable[[Any], Any], n_workers: int = 2, timeout: float = 5.0,
                 chunk_size: int = 32, start_timeout: float = 120.0,
                 initializer: Callable[[], Any] | None = None) -> None:
        if n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {n_workers}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.fn, self.timeout, self.chunk_size = fn, float(timeout), max(1, chunk_size)
        self.start_timeout = start_timeout
        try:
            self._hello = pickle.dumps((fn, initializer, self.timeout))
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ValueError(f"{fn!r} must be picklable (a module-level function): {e}") from None
        self._lock = threading.Lock()
        self._on_result: Callable[[int, str], None] | None = None
        self._start_failures = 0
        self.restarts = 0
        self._workers = [self._spawn() for _ in range(n_workers)]

    def _spawn(self) -> _Worker:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # The worker imports exactly what this process can: rlvr itself and fn's module.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlvr.rewards._pool_worker", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL, env=env)
        os.close(to_child_r)
        os.close(from_child_w)
        tx = Connection(to_child_w, readable=False)
        tx.send_bytes(self._hello)
        return _Worker(proc, Connection(from_child_r, writable=False), tx)

    def _replace(self, i: int) -> None:
        w = self._workers[i]
        _stop(w)
        self.restarts += 1
        self._workers[i] = self._spawn()

    def map(self, items: list[Any], deadline: float | None = None,
            on_result: Callable[[int, str], None] | None = None) -> list[tuple[str, Any]]:
        """Every item's (status, value), the workers scoring them concurrently. `deadline`: the `time.monotonic()`
        by which all must be answered; those that are not get (LATE, ...). `on_result(index, status)` hears of
        each result as it arrives; what it raises ends the map. Either way the workers still busy are replaced,
        so that no late answer reaches a later map."""
        with self._lock:
            self._on_result = on_result
            try:
                return self._map(list(items), deadline)
            except BaseException:
                self._abandon()
                raise

    def _map(self, items: list[Any], deadline: float | None) -> list[tuple[str, Any]]:
        results: list[tuple[str, Any] | None] = [None] * len(items)
        pending = deque(enumerate(items))
        remaining = len(items)
        while remaining:
            if deadline is not None and time.monotonic() >= deadline:
                self._abandon()
                return [r or (LATE, "past the deadline of the batch") for r in results]
            self._dispatch(pending)
            conns = {w.rx: i for i, w in enumerate(self._workers)}
            for conn in wait(list(conns), timeout=self._next_deadline(deadline)):
                remaining -= self._receive(conns[conn], results, pending)
            remaining -= self._watchdog(results, pending)
        return results  # type: ignore[return-value]

    def _settle(self, results: list, index: int, outcome: tuple[str, Any]) -> None:
        results[index] = outcome
        if self._on_result is not None:
            self._on_result(index, outcome[0])

    def _abandon(self) -> None:
        """Replace every worker still on an item: its answer would come too late."""
        for i, w in enumerate(self._workers):
            if w.inflight:
                w.inflight.clear()
                self._replace(i)

    def _dispatch(self, pending: deque) -> None:
        idle = [w for w in self._workers if w.ready and not w.inflight]
        # A share per worker, not per idle one: a worker still starting (or busy) takes its share when it is free,
        # rather than the first one up taking the whole map.
        size = min(self.chunk_size, -(-len(pending) // len(self._workers))) if pending else 0
        for w in idle:
            chunk = [pending.popleft() for _ in range(min(size, len(pending)))]
            if not chunk:
                return
            w.inflight.extend(chunk)
            w.last_progress = time.monotonic()
            try:
                w.tx.send([item for _, item in chunk])
            except (OSError, ValueError):  # died since: the receive side reports it
                pass

    def _next_deadline(self, deadline: float | None) -> float:
        """How long to wait for a message: short enough for the watchdog, and not past the map's deadline."""
        step = max(0.01, min(0.5, self.timeout))
        return step if deadline is None else max(0.0, min(step, deadline - time.monotonic()))

    def _receive(self, i: int, results: list, pending: deque) -> int:
        """Read one message from worker i; returns how many items got their final result."""
        w = self._workers[i]
        try:
            msg = w.rx.recv()
        except (EOFError, OSError):
            return self._fail(i, results, pending, (ERROR, "worker process died"))
        if msg[0] == "ready" and not w.ready:
            w.ready, self._start_failures = True, 0
            return 0
        index, _ = w.inflight.popleft()
        w.last_progress = time.monotonic()
        self._settle(results, index, msg)
        return 1

    def _watchdog(self, results: list, pending: deque) -> int:
        done, now = 0, time.monotonic()
        for i, w in enumerate(self._workers):
            if w.inflight and now - w.last_progress > 1.5 * self.timeout + 1.0:
                done += self._fail(i, results, pending, (TIMEOUT, f"worker unresponsive > {self.timeout:g} s"))
            elif not w.ready and now - w.started > self.start_timeout:
                self._fail(i, results, pending, (ERROR, "worker did not start"))
        return done

    def _fail(self, i: int, results: list, pending: deque, outcome: tuple[str, str]) -> int:
        """Blame the first in-flight item of worker i, resend the rest, replace the worker."""
        w = self._workers[i]
        if not w.ready:
            self._start_failures += 1
            if self._start_failures >= _MAX_START_FAILURES:
                _stop(w)
                raise RuntimeError(f"reward worker failed to start {_MAX_START_FAILURES} times "
                                   f"(exit code {w.process.poll()}); is {self.fn!r} importable?")
        blamed = 0
        pending.extendleft(reversed(list(w.inflight)[1:]))
        blamed = w.inflight.popleft()[0] if w.inflight else None
        w.inflight.clear()
        self._replace(i)
        if blamed is not None:
            self._settle(results, blamed, outcome)
        return int(blamed is not None)

    def close(self) -> None:
        for w in self._workers:
            try:
                w.tx.send(None)
            except (OSError, ValueError):
                pass
        for w in self._workers:
            _stop(w, grace=1.0)
        self._workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stop(w: _Worker, grace: float = 0.0) -> None:
    try:
        w.process.wait(timeout=grace) if grace else None
    except subprocess.TimeoutExpired:
        pass
    if w.process.poll() is None:
        w.process.kill()
        w.process.wait()
    w.rx.close()
    w.tx.close()
