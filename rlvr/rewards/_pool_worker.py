"""Entry point of a `WorkerPool` worker: `python -m rlvr.rewards._pool_worker RX_FD TX_FD`.

Protocol: the parent sends pickle((fn, initializer, timeout)) (its sys.path comes as PYTHONPATH);
the worker answers ("ready", None); then each list of items gets one (status, value) message per
item, in order; None ends the worker.
"""

from __future__ import annotations

import pickle
import signal
import sys
import traceback
from multiprocessing.connection import Connection

from rlvr.rewards.pool import ERROR, OK, TIMEOUT


class _ItemTimeout(BaseException):
    """BaseException so that a library's `except Exception` cannot swallow our timer."""


def _on_alarm(signum, frame):
    raise _ItemTimeout()


def _run_item(fn, item, timeout: float) -> tuple[str, object]:
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        value = fn(item)
        signal.setitimer(signal.ITIMER_REAL, 0)
        return OK, value
    except _ItemTimeout:
        return TIMEOUT, f"exceeded {timeout:g} s"
    except Exception:  # noqa: BLE001 - reported to the parent, which decides
        signal.setitimer(signal.ITIMER_REAL, 0)
        return ERROR, traceback.format_exc(limit=8)


def main(rx_fd: int, tx_fd: int) -> None:
    rx, tx = Connection(rx_fd, writable=False), Connection(tx_fd, readable=False)
    fn, initializer, timeout = pickle.loads(rx.recv_bytes())
    signal.signal(signal.SIGALRM, _on_alarm)
    if initializer is not None:
        initializer()
    tx.send(("ready", None))
    while True:
        batch = rx.recv()
        if batch is None:
            return
        for item in batch:
            tx.send(_run_item(fn, item, timeout))


if __name__ == "__main__":
    try:
        main(int(sys.argv[1]), int(sys.argv[2]))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the parent went away: nothing left to do
