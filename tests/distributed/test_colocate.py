"""Colocated rollout (`distributed.colocate`): every learner rank holds a rollout engine and samples its parts of
each step from its own policy, in process (verl's hybrid engine, TRL's vllm_mode="colocate"). The batches are one
engine's sampling the parts in turn, the weights changing every step; set-ups that cannot work are one line. A
colocated run stopped and resumed: test_train_ray.py::test_ray_run_stopped_and_resumed_equals_local."""

import re

import pytest

from ray_helpers import same_batch, tiny_config
from rlvr.config import ConfigError, load_config
from rlvr.distributed.ray_learner import ColocatedWeights, LearnerFailed, _learners
from rlvr.distributed.ray_roles import stop_roles
from rlvr.distributed.ray_rollout import RayRollout
from rlvr.tasks import get_task
from rlvr.train.setup import local_roles


def _colocated(**distributed) -> dict:
    """Two learner ranks holding the engines, half a CPU each in the 2-CPU test cluster."""
    return {"backend": "ray", "learners": 2, "learner_cpus": 0.5, "colocate": True, **distributed}


@pytest.mark.parametrize("shard, partial", [(False, False), (True, False), (False, True)],
                         ids=["whole", "sharded", "whole_partial"])
def test_colocated_ranks_sample_the_one_process_batches(ray_cluster, tmp_path, warm_model, shard, partial):
    """`rollout.data_parallel: 2` on two colocated learner ranks: rank 0 draws and scores each step (failure-rate
    sampling: it learns from every batch), its engine samples part 0 and rank 1's part 1, each from its own rank's
    policy. Every batch equals the one process's (one engine sampling both parts in turn from rank 0's weights),
    the ranks updating on it every step. No weights go through the object store; whole, an engine samples from
    its rank's policy module itself; sharded (FSDP2), from a copy loaded with the weights every rank gathers. With
    partial rollouts the samples carried between steps travel in the rollout's state from step to step."""
    partial_rollouts = {"partial": True, "partial_tokens": 3, "max_new_tokens": 10} if partial else {}
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, train={"steps": 4, "batch_size": 16, "group_size": 4},
        rollout={"data_parallel": 2, **partial_rollouts}, task={"prompt_sampler": "failure_rate"},
        distributed=_colocated(shard=shard)))
    _, local = local_roles(cfg, get_task(cfg.task.name, **cfg.task.options), warm_model, warm_model)
    learner = _learners(cfg, warm_model, warm_model)
    weights = learner.named_weights()
    assert isinstance(weights, ColocatedWeights)  # a marker: nothing was put in the object store
    remote = RayRollout(cfg, learner.actors, weights)
    try:
        for step in range(1, 5):
            batch = remote.collect(step)
            same_batch(batch, local.collect(step))
            learner.update(batch)
            remote.load_weights(learner.named_weights())
            local.load_weights(learner.policy.state_dict().items())  # rank 0's weights after the update
        # each rank's engine: its policy version, parts per call, whether it samples the rank's own policy module
        engine_of = lambda rank: (rank.side.rollout.version, rank.side.rollout.engine.parts,  # noqa: E731
                                  rank.side.rollout.engine.local.model is rank.learner.policy)
        held = ray_cluster.get([rank.__ray_call__.remote(engine_of) for rank in learner.actors])
        assert [(version, parts) for version, parts, _ in held] == [(4, 2), (4, 2)]
        assert [shares for _, _, shares in held] == [not shard] * 2  # whole: the rank's own module, no copy
        assert not partial or remote.state_dict()["partial_pool"] == local.state_dict()["partial_pool"]
    finally:
        stop_roles(learner, remote)


def test_a_colocated_rank_that_dies_stops_the_run_naming_it(ray_cluster, tmp_path, warm_model):
    """Rank 1 dies (Ray restarts no learner): rank 0's step fails on its part, and the run stops with one line that
    names the rank as a learner and the command to go on with, not as a rollout worker waiting for restarts."""
    cfg = load_config(None, [], base=tiny_config(tmp_path / "run", warm_model, rollout={"data_parallel": 2},
                                                 distributed=_colocated()))
    learner = _learners(cfg, warm_model, warm_model)
    remote = RayRollout(cfg, learner.actors, learner.named_weights())
    try:
        ray_cluster.kill(learner.actors[1])
        with pytest.raises(LearnerFailed, match=r"^learner rank 1 \(colocated rollout\) failed: Ray reports it "
                                                r"dead for good \(ActorDiedError.*\); the run stops\. .* "
                                                r"--resume-or-start"):
            remote.collect(1)
    finally:
        stop_roles(learner, remote)


@pytest.mark.parametrize("sections, needle", [
    ({"distributed": _colocated(rollout_workers=2)},
     "distributed.colocate: true puts a rollout engine on every learner rank; leave distributed.rollout_workers"),
    ({"distributed": _colocated(weight_sync="collective")}, "leave distributed.weight_sync (no weights travel)"),
    ({"distributed": _colocated(rollout_gpus=1)}, "leave distributed.rollout_cpus / rollout_gpus"),
    ({"distributed": _colocated(), "rollout": {"data_parallel": 2, "max_staleness": 1}},
     "rollout.max_staleness=1 samples while the learners update, but distributed.colocate: true runs both"),
    ({"distributed": _colocated(), "rollout": {"data_parallel": 3}},
     "set rollout.data_parallel to a multiple of distributed.learners (got 3)"),
    ({"distributed": {"colocate": True}}, "distributed.colocate=true needs distributed.backend=ray"),
])
def test_set_ups_that_cannot_colocate_are_one_line(tmp_path, warm_model, sections, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)) as err:
        load_config(None, [], base=tiny_config(tmp_path / "run", warm_model, **sections))
    assert "\n" not in str(err.value)
