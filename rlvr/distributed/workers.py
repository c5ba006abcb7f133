"""What runs inside the Ray actors: a Rollout worker, a Learner per data-parallel rank, and, colocated
(`distributed.colocate`), a Learner rank that holds a Rollout of its own.

Plain classes (no Ray import): `rlvr.distributed.ray_roles` turns them into actors. Each is built
from the Config and model folders alone, as the roles' constructors allow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

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
        self._serve(cfg, _engine(cfg, init_path, load_tokenizer(init_path)))

    def _serve(self, cfg: Config, engine: Any) -> None:
        self.rollout = Rollout(cfg, run_task(cfg), engine)
        self.group, self.buckets = None, []  # the weight-sync group, with `distributed.weight_sync: collective`
        self.relay: Any = None  # data-parallel coordinator: the weights its peers sample from

    @classmethod
    def around(cls, cfg: Config, engine: Any) -> RolloutWorker:
        """A worker serving `engine` inside another actor (a colocated learner rank), which set threads and seeds."""
        worker = cls.__new__(cls)
        worker._serve(cfg, engine)
        return worker

    def collect(self, step: int, stream_state: dict | None, version: int) -> tuple[ScoredBatch, dict]:
        """The step's batch from the stream state after step - 1, and the stream state after it."""
        if self.rollout.version != version:
            raise WrongWeights(f"rollout worker holds policy version {self.rollout.version}, request wants {version}")
        if stream_state is not None:
            self.rollout.load_state_dict(stream_state)
        batch = self.rollout.collect(step)
        return batch, self.rollout.state_dict()

    def load_weights(self, weights: dict[str, torch.Tensor], version: int | None = None, relay: Any = None) -> None:
        """One bucket of a sync (`rlvr.distributed.weight_sync`); the last carries the policy version they make
        and, data-parallel (`set_peers`), where the peers find those weights (`relay`)."""
        self.rollout.engine.load_weights(weights.items())
        if version is not None:
            self.rollout.version = version
        if relay is not None:
            self.relay = relay

    def set_peers(self, peers: list) -> None:
        """Data-parallel generation (`rollout.data_parallel`): this worker draws and scores every step, and its
        engine sends parts of each call to `peers` (`PartEngine`s: the other workers' engines), telling them
        which weights to sample from (`relay`)."""
        for peer in peers:
            peer.weights = lambda: self.relay
        self.rollout.engine.peers = peers

    def generate_part(self, prompts: list, n: int, sampling: Any, weights: Any) -> list:
        """A part of the coordinating worker's call, sampled by this worker's engine from the weights `weights`
        names (`relay`): loaded first, bucket by bucket, where this worker holds another version (it takes its
        weights from the requests it serves, in their order)."""
        if self.rollout.version != weights.version:
            if weights.refs is None:  # broadcast weights (collective), which this worker missed
                raise WrongWeights(f"rollout worker holds policy version {self.rollout.version}, a part wants "
                                   f"{weights.version}")
            for bucket in weights.buckets():
                self.rollout.engine.load_weights(bucket.items())
            self.rollout.version = weights.version
        return self.rollout.engine.local.generate(prompts, n, sampling)

    def ready(self) -> bool:
        """Answered once every request sent before it is done (a collective needs every member idle):
        whether this process is in the weight-sync group (one restarted by Ray is not)."""
        return self.group is not None

    def join_weight_group(self, master: tuple[str, int], rank: int, world: int, backend: str,
                          buckets: list[weight_sync.Layout]) -> None:
        self.group, self.buckets = weight_sync.join_group(master, rank, world, backend), buckets
        self.device = torch.device("cuda" if backend == "nccl" else "cpu")  # gloo: the CPU is always there

    def receive_weights(self, version: int, relay: Any = None) -> None:
        """Learner rank 0's broadcast, bucket by bucket, each loaded into the engine as it arrives (as
        `load_weights` loads the object store's)."""
        for bucket in self.buckets:
            buffers = weight_sync.empty_buffers(bucket, self.device)
            weight_sync.broadcast(self.group, buffers)
            self.rollout.engine.load_weights(weight_sync.unflatten(buffers, bucket))
        self.rollout.version = version
        if relay is not None:
            self.relay = relay

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        return self.rollout.evaluate(examples, seed)

    def stream_state(self) -> dict[str, Any]:
        """The rollout's state (the prompt stream's, carried samples): what the next request draws from."""
        return self.rollout.state_dict()


def _engine(cfg: Config, init_path: Path, tokenizer: Any, policy: Any = None) -> Any:
    """The rollout engine of an actor: one that samples from the policy module samples from `policy` (None: a copy of
    its own, from `init_path`, on model.device); another loads the folder itself."""
    if policy is None and engine_spec(cfg).samples_policy:
        policy = load_model(init_path).to(resolve_placement(cfg.model).device)
    return build_engine(cfg, policy, tokenizer, init_path)


class LearnerWorker:
    """One data-parallel rank; rank 0 answers for the group (weights, state, saving). With a sharded
    policy every rank takes part in those answers: gathering the shards is a collective."""

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int,
                 master: tuple[str, int]) -> None:
        _threads(cfg)
        seed_everything(cfg.seed)
        self.rank, self.sharded, self.cfg = rank, False, cfg
        self._buckets: list[weight_sync.Layout] | None = None  # the sync's layout, planned at the first sync
        self._stream: Iterator[list[tuple[str, torch.Tensor]]] | None = None  # the buckets of a sync under way
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

    def buckets(self) -> list[weight_sync.Layout]:
        """The layout every sync follows, planned once: the engine names and shapes, cast to the compute dtype
        (`model.dtype`; float32 stays exact), in buckets of whole layers of `distributed.sync_bucket_mb`; one
        bucket for adapters an engine serves itself (it serves them as one adapter). Sharded: all ranks call it."""
        if self._buckets is None:
            dtype = resolve_placement(self.cfg.model).dtype
            with torch.no_grad():
                layout = weight_sync.layout_of(self.learner.named_weights(), None if dtype == torch.float32 else dtype)
            size = 0 if self.learner.adapters_only else int(self.cfg.distributed.sync_bucket_mb * 2**20)
            self._buckets = weight_sync.bucket_layout(layout, size)
        return self._buckets

    def weight_buckets(self) -> int:
        return len(self.buckets())

    def publish(self, index: int) -> tuple[dict[str, torch.Tensor] | None, int]:
        """Bucket `index` of a sync as CPU tensors from rank 0 (None from the others) and the policy version (two
        returns: the driver waits on the small one). Bucket 0 starts the sync: each call makes the next bucket
        only, so the learner never holds more than one beside its model (sharded: every rank gathers it)."""
        if index == 0:
            self._stream = weight_sync.stream_buckets(self.learner.named_weights(), self.buckets())
        with torch.no_grad():
            bucket = next(self._stream)
        weights = {name: t.to("cpu") for name, t in bucket} if self.rank == 0 else None
        return weights, self.learner.version

    def weight_layout(self) -> tuple[str, list[weight_sync.Layout]]:
        """The weight-sync group's backend (from where the policy is) and the buckets every sync follows."""
        return weight_sync.backend_for(self.learner.device), self.buckets()

    def join_weight_group(self, master: tuple[str, int], world: int, backend: str) -> None:
        """Rank 0 only: it is rank 0 of the weight-sync group too."""
        self.group = weight_sync.join_group(master, 0, world, backend)

    def send_weights(self) -> int:
        """Rank 0 broadcasts its weights to the rollout workers bucket by bucket (sharded, every rank gathers each
        bucket with it)."""
        with torch.no_grad():
            for bucket in weight_sync.stream_buckets(self.learner.named_weights(), self.buckets()):
                if self.rank == 0:
                    weight_sync.broadcast(self.group, weight_sync.flatten(bucket))
        return self.learner.version

    def gpu_name(self) -> str | None:
        """The name of the GPU this rank trains on (its MFU peak), None on a CPU."""
        device = self.learner.device
        return torch.cuda.get_device_name(device) if device.type == "cuda" else None

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


class ColocatedWorker(LearnerWorker):
    """A learner rank that holds a rollout engine of its own on its own device (`distributed.colocate`: verl's hybrid
    engine, `ActorRolloutRefWorker`; TRL GRPOTrainer's `vllm_mode="colocate"`), serving the Rollout role's calls
    (`RolloutWorker`'s, same names). Rank 0's Rollout draws and scores every step and spreads each generate call's
    parts over the ranks (`rlvr.rollout.parallel.DataParallelEngine`, the other ranks its peers). Each rank's engine
    takes the weights from its own rank's policy, in process (`load_own_weights`): an engine that samples from the
    policy module samples from the rank's own one where the rank holds it whole (no copy at all, as in one
    process); sharded, from a copy of its own, loaded with the full weights every rank gathers (as TRL and verl
    do: `full_tensor()` per tensor, then the engine's `load_weights`)."""

    def __init__(self, cfg: Config, policy_path: Path, init_path: Path, rank: int, world: int,
                 master: tuple[str, int]) -> None:
        super().__init__(cfg, policy_path, init_path, rank, world, master)
        policy = None if self.sharded else self.learner.policy
        # a copy starts from `init_path`; the Rollout role loads every rank's weights into it before any request
        # (`load_own_weights`), a resume's included
        self.side = RolloutWorker.around(cfg, _engine(cfg, init_path, self.learner.tokenizer, policy))

    def load_own_weights(self, version: int, relay: Any) -> None:
        """This rank's weights into its engine, tensor by tensor (sharded: every rank makes this call, each gathering
        every tensor whole with the others); the engine then samples as policy version `version`, and `relay`
        tells rank 0's which version its peers hold (no buckets: they load their own)."""
        with torch.no_grad():
            self.side.rollout.engine.load_weights(self.learner.named_weights())
        self.side.rollout.version, self.side.relay = version, relay

    # the Rollout role's calls (`RolloutWorker`), served by this rank's rollout
    def collect(self, step: int, stream_state: dict | None, version: int) -> tuple[ScoredBatch, dict]:
        return self.side.collect(step, stream_state, version)

    def set_peers(self, peers: list) -> None:
        self.side.set_peers(peers)

    def generate_part(self, prompts: list, n: int, sampling: Any, weights: Any) -> list:
        completions = self.side.generate_part(prompts, n, sampling, weights)
        if hasattr(self.side.rollout.engine, "sleep"):  # vLLM frees its KV cache: the update comes next on this device
            self.side.rollout.engine.sleep()
        return completions

    def ready(self) -> bool:
        return self.side.ready()

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        return self.side.evaluate(examples, seed)

    def stream_state(self) -> dict[str, Any]:
        return self.side.stream_state()
