"""The training prompt stream: a fixed pool, reshuffled (seeded) every epoch, with a resumable position."""

from __future__ import annotations

import random
from typing import Any, Generic, Sequence, TypeVar

T = TypeVar("T")


class PromptStream(Generic[T]):
    """Yields the pool in a seeded random order, epoch after epoch.

    The order of epoch e depends only on (seed, e), so `state_dict()` = (epoch, position) is all a
    checkpoint needs to continue exactly where it stopped.
    """

    def __init__(self, pool: Sequence[T], seed: int):
        if not pool:
            raise ValueError("the training prompt pool is empty")
        self.pool, self.seed = list(pool), seed
        self.epoch, self.position = 0, 0
        self._order = self._shuffled(0)

    def _shuffled(self, epoch: int) -> list[int]:
        order = list(range(len(self.pool)))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[T]:
        out = []
        while len(out) < n:
            if self.position == len(self.pool):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled(self.epoch)
            out.append(self.pool[self._order[self.position]])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._shuffled(self.epoch)
