"""Data-parallel learners (gloo inside Ray actors), whole or sharded with FSDP2, train exactly like one
learner."""

import pytest
import torch

from ray_helpers import ray_sections, tiny_config
from rlvr.config import load_config
from rlvr.distributed.ray_roles import _free_port
from rlvr.distributed.workers import LearnerWorker
from rlvr.tasks import get_task
from rlvr.train.setup import local_roles


@pytest.mark.parametrize("aggregation, shard", [("token_mean", False), ("seq_mean_token_mean", False),
                                                ("seq_mean_token_mean", True)])
def test_two_learners_equal_one_after_three_steps(ray_cluster, tmp_path, warm_model, aggregation, shard):
    """token_mean splits a token-count denominator across ranks, seq_mean_token_mean a sequence count:
    both must give the one-process loss, gradient norm and weights. mu = 2 x two minibatches x two
    micro-batches per rank: accumulation, shuffling and the optimizer state all take part. Sharded
    (FSDP2), each rank holds half of every tensor; what leaves the ranks (weights, the policy and the
    optimizer state of a checkpoint) is whole and equals the one-process learner's."""
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, algorithm={"mu": 2, "aggregation": aggregation},
        train={"steps": 3, "batch_size": 16, "group_size": 4, "mini_batch_size": 8, "micro_batch_size": 2},
        distributed=ray_sections(learners=2, shard=shard)))
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
    weights = ray_cluster.get([rank.weights.remote() for rank in ranks])[1]  # sharded: a collective
    for name, tensor in learner.named_weights():
        torch.testing.assert_close(weights[name], tensor, atol=1e-5, rtol=1e-5)
    assert any(not torch.equal(t, w) for (_, t), w in zip(local_roles(cfg, task, warm_model, warm_model)[0]
                                                              .named_weights(), weights.values()))
    if shard:  # each rank holds about half of every parameter (dim 0 split, the first shards a row longer)
        local_numel = lambda worker: sum(p.to_local().numel() for p in worker.learner.policy.parameters())  # noqa: E731
        held = ray_cluster.get([rank.__ray_call__.remote(local_numel) for rank in ranks])
        total = sum(p.numel() for p in learner.policy.parameters())
        assert sum(held) == total and max(held) < 0.51 * total, (held, total)
        state, policy = ray_cluster.get([rank.state_dict.remote() for rank in ranks])[0], \
            ray_cluster.get([rank.policy.remote() for rank in ranks])[0]
        expected = learner.state_dict()
        kernel = lambda groups: [{k: v for k, v in g.items() if k != "fused"} for g in groups]  # noqa: E731
        # the same hyperparameters; only the kernel differs (fused AdamW needs plain tensors, not DTensors)
        assert kernel(state["optimizer"]["param_groups"]) == kernel(expected["optimizer"]["param_groups"])
        assert state["optimizer"]["state"].keys() == expected["optimizer"]["state"].keys()
        for i, moments in expected["optimizer"]["state"].items():
            for key, value in moments.items():
                torch.testing.assert_close(state["optimizer"]["state"][i][key], value, atol=1e-5, rtol=1e-5)
        assert (state["scheduler"], state["version"]) == (expected["scheduler"], expected["version"])
        for name, tensor in learner.policy.state_dict().items():
            torch.testing.assert_close(policy.state_dict()[name], tensor, atol=1e-5, rtol=1e-5)
    for rank in ranks:
        ray_cluster.kill(rank)
