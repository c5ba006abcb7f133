"""Entry point of a `WorkerPool` worker: `python -m rlvr.rewards._pool_worker RX_FD TX_FD`.

Protocol: the parent sends pickle((fn, initializer, timeout)) (its sys.path comes as PYTHONPATH);
the worker answers ("ready", None); then each list of items gets one (status, value) message per
item, in order; None ends the worker.
"""

from __future__ import annotations

import pickle
import sys
import traceback
from multiprocessing.connection import Connection

from rlvr.sandbox.deadline import DeadlineExceeded, call_with_deadline
from rlvr.rewards.pool import ERROR, OK, TIMEOUT


def _run_item(fn, item, timeout: float) -> tuple[str, object]:
    try:
        return OK, call_with_deadline(fn, timeout, item)
    except DeadlineExceeded:
        return TIMEOUT, f"exceeded {timeout:g} s"
    except Exception:  # noqa: BLE001 - reported to the parent, which decides
        return ERROR, traceback.format_exc(limit=8)


def main(rx_fd: int, tx_fd: int) -> None:
    rx, tx = Connection(rx_fd, writable=False), Connection(tx_fd, readable=False)
    fn, initializer, timeout = pickle.loads(rx.recv_bytes())
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
