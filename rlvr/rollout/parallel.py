"""Data-parallel generation: one `generate` call's prompts (whole groups) split into D parts, sampled at once by
several engines and merged in order (`rollout.data_parallel`).

Part i holds a contiguous run of the prompts (sizes differing by at most one) and samples with its own seed,
derived from the call's and i (`part_seed`), so what a part samples depends on the call and the part alone, never
on which engine ran it or what ran beside it: D parts on one engine, one after another, give exactly the batch of
D parts on D engines at once (verl's and OpenRLHF's data-parallel rollouts spread a batch likewise, each engine
its own share). D = 1 is the plain call, its seed unchanged.

The engine this process holds samples its parts itself; the others go to `peers` (`PartEngine`: another rollout
worker's engine under Ray, `rlvr.distributed.ray_rollout.RemotePart`), all started before this process samples its
own, so they run at the same time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, Protocol, Sequence

import torch

from rlvr.rollout.base import Completion, Prompt, RolloutEngine, SamplingParams
from rlvr.seeds import ENGINE_PART, derive_seed


def split_groups(num_prompts: int, parts: int) -> list[range]:
    """`parts` contiguous runs of the prompts, sizes differing by at most one (the longer first); empty runs (more
    parts than prompts) left out."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    size, extra = divmod(num_prompts, parts)
    runs, start = [], 0
    for i in range(parts):
        stop = start + size + (i < extra)
        if stop > start:
            runs.append(range(start, stop))
        start = stop
    return runs


def part_seed(seed: int | None, part: int, parts: int) -> int | None:
    """Part `part`'s sampling seed: the call's own with one part, else derived from it and the part (None: none)."""
    return seed if parts == 1 or seed is None else derive_seed(seed, part, ENGINE_PART)


class PartEngine(Protocol):
    def start(self, prompts: list[Prompt], n: int, sampling: SamplingParams) -> Callable[[], list[Completion]]:
        """Begin sampling a part now; the returned call waits for its completions."""


class DataParallelEngine:
    """A `RolloutEngine` over `parts` parts per call: part i to member i mod (1 + len(peers)), member 0 the engine
    of this process (`local`). Everything else (weights, sleep, what an engine declares) is `local`'s."""

    def __init__(self, local: RolloutEngine, parts: int, peers: Sequence[PartEngine] = ()) -> None:
        self.local, self.parts, self.peers = local, parts, list(peers)

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingParams) -> list[Completion]:
        """len(prompts) * n completions, those of prompt i at [i*n, (i+1)*n), as the plain call returns them."""
        runs = split_groups(len(prompts), self.parts)
        members = 1 + len(self.peers)
        waits: list[Callable[[], list[Completion]]] = []
        for i, run in enumerate(runs):  # the peers' parts start first, so they sample while this process does
            part = [prompts[j] for j in run]
            params = replace(sampling, seed=part_seed(sampling.seed, i, self.parts))
            if i % members:
                waits.append(self.peers[i % members - 1].start(part, n, params))
            else:
                waits.append(_deferred(self.local, part, n, params))
        return [c for wait in waits for c in wait()]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.local.load_weights(named_tensors)

    def __getattr__(self, name: str) -> Any:  # sleep, wake_up, model, ...: the local engine's
        if name in ("local", "parts", "peers"):
            raise AttributeError(name)
        return getattr(self.local, name)


def _deferred(engine: RolloutEngine, prompts: list[Prompt], n: int, sampling: SamplingParams
              ) -> Callable[[], list[Completion]]:
    return lambda: engine.generate(prompts, n, sampling)
