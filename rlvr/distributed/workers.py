"""What runs inside the Ray actors: a Rollout worker, and a Learner per data-parallel rank.

Plain classes (no Ray import): `rlvr.distributed.ray_roles` turns them into actors. Each is built
from the Config and model folders alone, as the roles' constructors allow.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlvr.config import Config
from rlvr.models import load_model, load_tokenizer, resolve_placement
from rlvr.rollout.scored import ScoredBatch
from rlvr.seeds import seed_everything
from rlvr.tasks import Example, get_task
from rlvr.train.learner import Learner
from rlvr.train.rollout import Rollout, build_engine


def _threads(cfg: Config) -> None:
    torch.set_num_threads(cfg.threads or 1)


class WrongWeights(RuntimeError):
    """A worker holds other weights than a request was made for (it was restarted and lost them)."""


class RolloutWorker:
    """A Rollout over its own copy of the policy. The prompt stream's state travels with each request,
    so whichever worker collects step t draws exactly the prompts one worker would have drawn."""

    def __init__(self, cfg: Config, init_path: Path) -> None:
        _threads(cfg)
        seed_everything(cfg.seed)
        tokenizer = load_tokenizer(init_path)
        # the HF engine samples from a module of its own; vLLM loads the folder itself
        policy = load_model(init_path).to(resolve_placement(cfg.model).device) if cfg.rollout.engine == "hf" else None
        engine = build_engine(cfg, policy, tokenizer, init_path)
        self.rollout = Rollout(cfg, get_task(cfg.task.name, **cfg.task.options), engine)

    def collect(self, step: int, stream_state: dict | None, version: int) -> tuple[ScoredBatch, dict]:
        """The step's batch from the stream state after step - 1, and the stream state after it."""
        if self.rollout.version != version:
            raise WrongWeights(f"rollout worker holds policy version {self.rollout.version}, request wants {version}")
        if stream_state is not None:
            self.rollout.load_state_dict(stream_state)
        batch = self.rollout.collect(step)
        return batch, self.rollout.state_dict()

    def load_weights(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.rollout.engine.load_weights(weights.items())
        self.rollout.version = version

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        return self.rollout.evaluate(examples, seed)

    def state_dict(self) -> dict[str, Any]:
        return self.rollout.state_dict()


class DataParallelLearner(Learner):
    """One rank of M: every rank prepares the whole batch (advantages need whole groups, the
    accumulation denominator the whole minibatch), backpropagates its 1/M of the micro-batches, and the
    gradients are summed. Each micro-batch loss is already divided by the global denominator, so the
    sum is the one-process minibatch gradient, exactly, whatever the aggregation mode."""

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int) -> None:
        super().__init__(cfg, policy_path, init_path)
        self.rank, self.world = rank, world
        for p in self.params:  # identical start even if a head was initialised randomly
            dist.broadcast(p.data, src=0)

    def _reduce_grads(self) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # one all-reduce instead of one per tensor
        dist.all_reduce(flat)
        offset = 0
        for p, g in zip(self.params, grads):
            p.grad = flat[offset : offset + g.numel()].view_as(p).clone()
            offset += g.numel()

    def _reduce_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        keys = sorted(metrics)
        values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64)
        dist.all_reduce(values)
        return dict(zip(keys, (values / self.world).tolist()))


class LearnerWorker:
    """One data-parallel rank; rank 0 answers for the group (weights, state, saving)."""

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int,
                 master: tuple[str, int]) -> None:
        _threads(cfg)
        seed_everything(cfg.seed)
        if world == 1:
            self.learner = Learner(cfg, policy_path, init_path)
            return
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
        backend = "nccl" if torch.cuda.is_available() and cfg.distributed.learner_gpus > 0 else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world)
        self.learner = DataParallelLearner(cfg, policy_path, init_path, rank, world)

    def update(self, batch: ScoredBatch) -> dict[str, float]:
        return self.learner.update(batch)

    def weights(self) -> dict[str, torch.Tensor]:
        """Engine-named weights, detached CPU copies: the one object every rollout worker reads."""
        return {name: t.detach().to("cpu", copy=True) for name, t in self.learner.named_weights()}

    def publish(self) -> tuple[dict[str, torch.Tensor], int]:
        """The weights and the policy version they are (two returns: the driver waits on the small one)."""
        return self.weights(), self.learner.version

    def logprobs(self, batch: ScoredBatch) -> torch.Tensor:
        return self.learner.logprobs(batch)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def policy(self) -> Any:
        return self.learner.policy

    def tokenizer(self) -> Any:
        return self.learner.tokenizer

    def save(self, path: Path, adapter_path: Path) -> None:
        self.learner.save(path, adapter_path)
