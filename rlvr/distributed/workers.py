"""What runs inside the Ray actors: a Rollout worker, and a Learner per data-parallel rank.

Plain classes (no Ray import): `rlvr.distributed.ray_roles` turns them into actors. Each is built
from the Config and model folders alone, as the roles' constructors allow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rlvr.config import Config
from rlvr.distributed import weight_sync
from rlvr.distributed.data_parallel import DataParallelLearner, ShardedLearner
from rlvr.models import load_model, load_tokenizer, resolve_placement
from rlvr.rollout.scored import ScoredBatch
from rlvr.seeds import seed_everything
from rlvr.tasks import Example
from rlvr.train.learner import Learner
from rlvr.rollout.engines import build_engine, engine_spec
from rlvr.train.preflight import run_task
from rlvr.train.rollout import Rollout


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
        # an engine that samples from the policy module gets one of its own; another loads the folder itself
        samples_policy = engine_spec(cfg).samples_policy
        policy = load_model(init_path).to(resolve_placement(cfg.model).device) if samples_policy else None
        engine = build_engine(cfg, policy, tokenizer, init_path)
        self.rollout = Rollout(cfg, run_task(cfg), engine)
        self.group, self.layout = None, []  # the weight-sync group, with `distributed.weight_sync: collective`

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

    def ready(self) -> bool:
        """Answered once every request sent before it is done (a collective needs every member idle):
        whether this process is in the weight-sync group (one restarted by Ray is not)."""
        return self.group is not None

    def join_weight_group(self, master: tuple[str, int], rank: int, world: int, backend: str,
                          layout: weight_sync.Layout) -> None:
        self.group, self.layout = weight_sync.join_group(master, rank, world, backend), layout
        self.device = torch.device("cuda" if backend == "nccl" else "cpu")  # gloo: the CPU is always there

    def receive_weights(self, version: int) -> None:
        """Learner rank 0's broadcast, loaded into the engine as `load_weights` loads the object store's."""
        buffers = weight_sync.empty_buffers(self.layout, self.device)
        weight_sync.broadcast(self.group, buffers)
        self.rollout.engine.load_weights(weight_sync.unflatten(buffers, self.layout))
        self.rollout.version = version

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        return self.rollout.evaluate(examples, seed)

    def state_dict(self) -> dict[str, Any]:
        return self.rollout.state_dict()


class LearnerWorker:
    """One data-parallel rank; rank 0 answers for the group (weights, state, saving). With a sharded
    policy every rank takes part in those answers: gathering the shards is a collective."""

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int,
                 master: tuple[str, int]) -> None:
        _threads(cfg)
        seed_everything(cfg.seed)
        self.rank, self.sharded = rank, False
        if world == 1:
            self.learner = Learner(cfg, policy_path, init_path)
            return
        # the policy's device in this actor (`auto`: a GPU only if Ray gave it one), as the weight sync's group
        backend = weight_sync.backend_for(resolve_placement(cfg.model).device)
        dist.init_process_group(backend, store=weight_sync.tcp_store(master, rank, world), rank=rank,
                                world_size=world)
        self.sharded = cfg.distributed.shard
        self.learner = (ShardedLearner if self.sharded else DataParallelLearner)(cfg, policy_path, init_path, rank,
                                                                                 world)

    def update(self, batch: ScoredBatch) -> dict[str, float]:
        return self.learner.update(batch)

    def weights(self) -> dict[str, torch.Tensor]:
        """Engine-named weights, detached CPU copies: the one object every rollout worker reads."""
        return {name: t.detach().to("cpu", copy=True) for name, t in self.learner.named_weights()}

    def publish(self) -> tuple[dict[str, torch.Tensor] | None, int]:
        """Rank 0's weights (None from the others) and the policy version they are (two returns: the
        driver waits on the small one)."""
        weights = self.weights()
        return (weights if self.rank == 0 else None), self.learner.version

    def weight_layout(self) -> tuple[str, weight_sync.Layout]:
        """The weight-sync group's backend (from where the policy is) and the layout every sync follows."""
        with torch.no_grad():
            return weight_sync.backend_for(self.learner.device), weight_sync.layout_of(self.learner.named_weights())

    def join_weight_group(self, master: tuple[str, int], world: int, backend: str) -> None:
        """Rank 0 only: it is rank 0 of the weight-sync group too."""
        self.group = weight_sync.join_group(master, 0, world, backend)

    def send_weights(self) -> int:
        """Rank 0 broadcasts its weights to the rollout workers (sharded, every rank gathers with it)."""
        with torch.no_grad():
            named = list(self.learner.named_weights())  # sharded: a gather every rank takes part in
        if self.rank == 0:
            weight_sync.broadcast(self.group, weight_sync.flatten(named))
        return self.learner.version

    def logprobs(self, batch: ScoredBatch) -> torch.Tensor:
        return self.learner.logprobs(batch)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def policy(self) -> Any:
        """The policy module (sharded: an unsharded copy on rank 0, None on the others)."""
        return self.learner.plain_policy() if self.sharded else self.learner.policy

    def tokenizer(self) -> Any:
        return self.learner.tokenizer

    def save(self, path: Path, adapter_path: Path) -> None:
        self.learner.save(path, adapter_path)
