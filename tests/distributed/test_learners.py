"""Data-parallel learners (gloo inside Ray actors) train exactly like one learner."""

import pytest
import torch

from ray_helpers import ray_sections, tiny_config
from rlvr.config import load_config
from rlvr.distributed.ray_roles import _free_port
from rlvr.distributed.workers import LearnerWorker
from rlvr.tasks import get_task
from rlvr.train.setup import local_roles


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_two_learners_equal_one_after_three_steps(ray_cluster, tmp_path, warm_model, aggregation):
    """token_mean splits a token-count denominator across ranks, seq_mean_token_mean a sequence count:
    both must give the one-process loss, gradient norm and weights. mu = 2 x two minibatches x two
    micro-batches per rank: accumulation, shuffling and the optimizer state all take part."""
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, algorithm={"mu": 2, "aggregation": aggregation},
        train={"steps": 3, "batch_size": 16, "group_size": 4, "mini_batch_size": 8, "micro_batch_size": 2},
        distributed=ray_sections(learners=2)))
    task = get_task(cfg.task.name, **cfg.task.options)
    learner, rollout = local_roles(cfg, task, warm_model, warm_model)
    remote = ray_cluster.remote(LearnerWorker).options(num_cpus=0.5)
    master = ("127.0.0.1", _free_port())
    ranks = [remote.remote(cfg, warm_model, warm_model, r, 2, master) for r in range(2)]
    for step in range(1, 4):
        batch = rollout.collect(step)
        one = learner.update(batch)
        two = ray_cluster.get([rank.update.remote(batch) for rank in ranks])
        assert two[0] == two[1]  # every rank reports the all-reduced metrics
        for key in ("loss", "grad_norm"):
            assert two[0][key] == pytest.approx(one[key], abs=1e-5, rel=1e-5), (step, key)
        rollout.load_weights(learner.named_weights())
    weights = ray_cluster.get(ranks[1].weights.remote())
    for name, tensor in learner.named_weights():
        torch.testing.assert_close(weights[name], tensor, atol=1e-5, rtol=1e-5)
    assert any(not torch.equal(t, w) for (_, t), w in zip(local_roles(cfg, task, warm_model, warm_model)[0]
                                                              .named_weights(), weights.values()))
    for rank in ranks:
        ray_cluster.kill(rank)
