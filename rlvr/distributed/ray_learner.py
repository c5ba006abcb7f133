"""The Learner role as Ray actors: M data-parallel ranks (`rlvr.distributed.workers.LearnerWorker`) behind
`RayLearner`, a proxy with the role's methods, so the loop (`rlvr.train.loop.train`) runs unchanged.

- Learners (M > 1) are placed as one placement group; torch.distributed meets at the node of rank
  0's bundle. With `distributed.shard` they hold FSDP2 shards (`rlvr.distributed.data_parallel`).
- Their weights leave as `RemoteWeights` (rank 0's buckets in the object store) or, with
  `distributed.weight_sync: collective`, as `CollectiveWeights` (a marker: rank 0 broadcasts them to a
  torch.distributed group of its own with the rollout workers, `rlvr.distributed.weight_sync`, when the
  rollout side loads them: `rlvr.distributed.ray_rollout`).
- Colocated (`distributed.colocate`), every rank holds a rollout engine (`ColocatedWorker`) and the weights leave
  no rank: `ColocatedWeights` tells the rollout side to have each rank load its own.
- A learner that dies stops the run (`LearnerFailed`, one line): resume from the last checkpoint.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config import Config
from rlvr.distributed.cluster import role_cpus
from rlvr.distributed.workers import ColocatedWorker, LearnerWorker
from rlvr.rollout.scored import ScoredBatch
from rlvr.train.guard import RunStopped, continue_hint

try:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
except ImportError:
    ray = None


def _cause(err: Exception) -> str:
    """Ray's kind of failure, with the error the actor's own code raised when Ray reports one (the last
    `SomethingError: ...` line of its traceback; e.g. a bad setting met while building the learner)."""
    raised = [line.strip() for line in str(err).splitlines()
              if re.match(r"^\s*[A-Za-z_.]*(Error|Exception): ", line) and not line.strip().startswith("ray.")
              and type(err).__name__ not in line.split(":")[0]]
    return type(err).__name__ + (f": {raised[-1]}" if raised else "")


class LearnerFailed(RunStopped):
    """A learner actor died: its optimizer state and (sharded) weights are gone, so the run stops;
    the last checkpoint resumes it (the CLI prints this one line, exit code 1)."""


@dataclass
class RemoteWeights:
    """The learners' weights in the object store, as `named_weights()` returns them under Ray: one object per
    bucket (`rlvr.distributed.weight_sync`), which a worker loads one after another."""

    refs: list


@dataclass
class CollectiveWeights:
    """The learners' weights, to be broadcast by rank 0 to the weight-sync group when the rollout loads
    them (a collective: it starts once every member is there)."""

    learner: RayLearner


@dataclass
class ColocatedWeights:
    """The learners' weights where every rank holds a rollout engine (`distributed.colocate`): nothing travels, each
    rank loads its own policy's weights into its engine when the rollout loads them (`RayLearner.sync_engines`)."""

    learner: RayLearner


def _process_id(_actor: Any = None) -> str:
    """Run inside an actor (`__ray_call__` passes it): the id of its worker process, another after a restart."""
    return ray.get_runtime_context().get_worker_id()


class RayLearner:
    """`update`, `named_weights`, `state_dict`, `save`, `policy` of the Learner role over M ranks.
    Every call goes through `_get`, so a dead learner, whichever call meets it, stops the run with
    one message instead of a Ray traceback (or a hang of the ranks left waiting in a collective).
    `collective`: the ranks shard the policy, so every rank takes part in what rank 0 answers.
    `weight_sync`: object_store, collective once `join_weight_group` has formed the group, or colocated (every
    rank a `ColocatedWorker`: its engine loads the rank's own weights)."""

    def __init__(self, actors: list, run_dir: str, collective: bool = False, placement: Any = None,
                 colocated: bool = False) -> None:
        self.actors, self.run_dir, self.collective, self.placement = actors, run_dir, collective, placement
        self.weight_sync = "colocated" if colocated else "object_store"
        self._buckets: int | None = None  # buckets per sync, asked once
        self.tokenizer = self._call("tokenizer")  # checkpoints save it beside the policy

    def _get(self, refs: list, method: str) -> list:
        """The results in order; the first failure to arrive stops the run (a rank that died leaves the
        others blocked in an all-reduce, so waiting for results in order could wait forever)."""
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                ray.get(ready)
            return ray.get(refs)
        except (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError) as err:  # or Ray's memory monitor
            raise LearnerFailed(f"a learner actor died during {method} ({_cause(err)}); the run stops. "
                                f"{continue_hint(self.run_dir)}") from None

    def wait(self, refs: list, method: str) -> list:
        return self._get(refs, method)

    def _all(self, method: str, *args) -> list:
        return self._get([getattr(a, method).remote(*args) for a in self.actors], method)

    def _call(self, method: str, *args) -> Any:
        """Rank 0's answer (weights and state are the same on every rank); all ranks take part if collective."""
        actors = self.actors if self.collective else self.actors[:1]
        return self._get([getattr(a, method).remote(*args) for a in actors], method)[0]

    def update(self, batch: ScoredBatch) -> dict[str, float]:
        return self._all("update", ray.put(batch))[0]

    def named_weights(self) -> RemoteWeights | CollectiveWeights:
        """Rank 0's weights as one object; waits until they are in the store (a small second return),
        so a learner that dies before is reported here, not later by the workers that read them.
        Collective: a marker; the rollout starts the broadcast when it loads them."""
        if self.weight_sync == "collective":
            return CollectiveWeights(self)
        if self.weight_sync == "colocated":
            return ColocatedWeights(self)
        actors = self.actors if self.collective else self.actors[:1]
        if self._buckets is None:
            self._buckets = self._call("weight_buckets")
        calls = [[a.publish.options(num_returns=2).remote(i) for a in actors] for i in range(self._buckets)]
        self._get([version for bucket in calls for _, version in bucket], "named_weights")
        return RemoteWeights([bucket[0][0] for bucket in calls])  # rank 0's buckets

    def sync_engines(self, version: int, relay: Any) -> None:
        """Colocated: every rank loads its own weights into its engine, in process (sharded: gathered whole, all
        ranks at once); rank 0's engine learns from `relay` which version its peers hold."""
        self._all("load_own_weights", version, relay)

    def send_weights(self) -> list:
        """Start rank 0's broadcast (sharded: every rank gathers with it); the caller waits (`wait`)."""
        actors = self.actors if self.collective else self.actors[:1]
        return [a.send_weights.remote() for a in actors]

    def join_weight_group(self, workers: list) -> None:
        """Rank 0 and the rollout workers form the weight-sync group (rank 0 serves its rendezvous at its
        node); the layout (names, shapes, dtypes, buckets) travels once, through the object store."""
        backend, layout = self._call("weight_layout")
        master = ray.get(self.actors[0].__ray_call__.remote(_rendezvous))
        world = len(workers) + 1
        self._get([self.actors[0].join_weight_group.remote(master, world, backend),
                   *(w.join_weight_group.remote(master, r + 1, world, backend, layout)
                     for r, w in enumerate(workers))], "join_weight_group")
        self.weight_sync = "collective"

    def fall_back(self) -> RemoteWeights:
        """The object store from now on; today's weights through it."""
        self.weight_sync = "object_store"
        return self.named_weights()

    def gpu_name(self) -> str | None:
        """Rank 0's GPU (every rank's kind is the same: one placement group), for the MFU's peak."""
        return self._get([self.actors[0].gpu_name.remote()], "gpu_name")[0]

    def logprobs(self, batch: ScoredBatch):
        return self._call("logprobs", batch)

    def state_dict(self) -> dict[str, Any]:
        return self._call("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._all("load_state_dict", state)

    @property
    def policy(self) -> Any:
        """A copy of rank 0's policy (for checkpoints, which save it from the driver)."""
        return self._call("policy")

    def save(self, path: Path, adapter_path: Path) -> None:
        self._call("save", path, adapter_path)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _rendezvous(_actor: Any = None) -> tuple[str, int]:
    """Run in the first learner's place: that node's address and a port free there (torch.distributed's
    rendezvous; the learners may be on another node than the driver, or on several). Also run inside
    rank 0's actor (`_actor`, as `__ray_call__` passes it) for the weight-sync group."""
    return ray.util.get_node_ip_address(), _free_port()


def _learners(cfg: Config, policy_path: Path, init_path: Path) -> RayLearner:
    """M learner actors; with M > 1 in a placement group (packed on as few nodes as fit them), rank 0
    in its first bundle, which also answers the rendezvous address."""
    d, (cpus, _) = cfg.distributed, role_cpus(cfg)
    cls = ray.remote(ColocatedWorker if d.colocate else LearnerWorker)
    resources = {"num_cpus": cpus, "num_gpus": d.learner_gpus}
    if d.learners == 1:
        return RayLearner([cls.options(**resources).remote(cfg, policy_path, init_path, 0, 1, ("", 0))], cfg.out_dir,
                          colocated=d.colocate)
    bundle = {key: n for key, n in (("CPU", cpus), ("GPU", d.learner_gpus)) if n}
    group = placement_group([bundle] * d.learners, strategy="PACK")
    ray.get(group.ready())

    def place(i: int) -> Any:
        return PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)

    master = ray.get(ray.remote(num_cpus=0)(_rendezvous).options(scheduling_strategy=place(0)).remote())
    actors = [cls.options(**resources, scheduling_strategy=place(r)).remote(cfg, policy_path, init_path, r,
                                                                            d.learners, master)
              for r in range(d.learners)]
    return RayLearner(actors, cfg.out_dir, collective=d.shard, placement=group, colocated=d.colocate)
