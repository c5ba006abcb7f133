"""The Rollout and Learner roles as Ray actors, behind proxies with the roles' methods, so the loop
(`rlvr.train.loop.train`) runs unchanged: the learners (`rlvr.distributed.ray_learner`) and the rollout workers
(`rlvr.distributed.ray_rollout`), placed and stopped here. Colocated (`distributed.colocate`), the learner ranks are
the rollout workers too.
"""

from __future__ import annotations

from pathlib import Path

from rlvr.config import Config
from rlvr.distributed.cluster import role_cpus
from rlvr.distributed.ray_learner import RayLearner, _learners
from rlvr.distributed.ray_rollout import RayRollout
from rlvr.distributed.workers import RolloutWorker
from rlvr.tasks import Task

try:
    import ray
    from ray.util.placement_group import remove_placement_group
except ImportError:
    ray = None


def ray_roles(cfg: Config, task: Task, policy_path: Path, init_path: Path) -> tuple[RayLearner, RayRollout]:
    """`prepare_run`'s role builder for `distributed.backend: ray` (Ray must be started: `start_ray`)."""
    d = cfg.distributed
    learner = _learners(cfg, policy_path, init_path)
    if d.colocate:  # every rank holds an engine: they serve the Rollout role as well
        return learner, RayRollout(cfg, learner.actors, learner.named_weights())
    rollout_cls = ray.remote(RolloutWorker).options(num_cpus=role_cpus(cfg)[1], num_gpus=d.rollout_gpus,
                                                    max_restarts=d.max_restarts)
    workers = [rollout_cls.remote(cfg, init_path) for _ in range(d.rollout_workers)]
    if d.weight_sync == "collective":
        learner.join_weight_group(workers)
    return learner, RayRollout(cfg, workers, learner.named_weights())


def stop_roles(learner: RayLearner, rollout: RayRollout) -> None:
    for actor in [*learner.actors, *(a for a in rollout.actors if a not in learner.actors)]:  # colocated: the same
        ray.kill(actor, no_restart=True)
    if learner.placement is not None:
        remove_placement_group(learner.placement)
