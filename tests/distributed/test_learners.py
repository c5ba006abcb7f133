"""Data-parallel learners (gloo inside Ray actors), whole or sharded with FSDP2, train exactly like one
learner."""

from dataclasses import replace

import pytest
import torch
import torch.distributed as dist

from ray_helpers import ray_sections, tiny_config
from rlvr.config import load_config
from rlvr.distributed import weight_sync
from rlvr.distributed.ray_learner import _free_port
from rlvr.distributed.workers import LearnerWorker
from rlvr.models import placement
from rlvr.tasks import get_task
from rlvr.train.setup import local_roles


@pytest.mark.parametrize("aggregation, shard, micro, refresh", [
    ("token_mean", False, 2, 0), ("seq_mean_token_mean", False, 2, 0), ("seq_mean_token_mean", True, 2, 0),
    ("token_mean", False, 8, 0), ("token_mean", True, 2, 1)])
def test_two_learners_equal_one_after_three_steps(ray_cluster, tmp_path, warm_model, aggregation, shard, micro,
                                                  refresh):
    """token_mean splits a token-count denominator across ranks, seq_mean_token_mean a sequence count:
    both must give the one-process loss, gradient norm and weights. mu = 2 x two minibatches x two
    micro-batches per rank: accumulation, shuffling and the optimizer state all take part. Sharded
    (FSDP2), each rank holds half of every tensor; what leaves the ranks (weights, the policy and the
    optimizer state of a checkpoint) is whole and equals the one-process learner's. Every logged metric equals
    the one-process one, also where the ranks split the micro-batches otherwise (one micro-batch of 8 rows in
    one process, one of 4 on each rank: entropy, approx_kl, clip fractions and ratios differed). `refresh`: a KL
    reference that takes the policy's weights after every update (algorithm.ref_refresh_every), gathered from
    the shards on every rank, gives the one-process KL and weights too."""
    kl = {"beta": 0.04, "ref_refresh_every": refresh} if refresh else {}
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, algorithm={"mu": 2, "aggregation": aggregation, **kl},
        train={"steps": 3, "batch_size": 16, "group_size": 4, "mini_batch_size": 8, "micro_batch_size": micro,
               "zero_advantage_rows": "train"},  # ranks keep such rows; one process trains on them too
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
        assert two[0].keys() == one.keys()
        for key in one:
            assert two[0][key] == pytest.approx(one[key], abs=1e-5, rel=1e-4), (step, key)
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
        assert state.keys() == expected.keys()
        for name, tensor in expected.get("reference", {}).items():  # refreshed: whole, the policy of the last update
            torch.testing.assert_close(state["reference"][name], tensor, atol=1e-5, rtol=1e-5)
        if refresh:  # a resume hands every rank the whole reference, which each shards back: the start model's, then
            # the checkpoint's, read back whole
            start = {name: p.detach() for name, p in local_roles(cfg, task, warm_model, warm_model)[0]
                     .policy.named_parameters()}
            for loaded in (start, state["reference"]):
                ray_cluster.get([rank.__ray_call__.remote(lambda w, s: w.learner.load_passes_state(s),
                                                          {"version": 3, "reference": loaded}) for rank in ranks])
                read = ray_cluster.get([rank.__ray_call__.remote(lambda w: w.learner._reference_weights())
                                        for rank in ranks])[0]
                for name, tensor in loaded.items():
                    torch.testing.assert_close(read[name], tensor, atol=0, rtol=0)
        for name, tensor in learner.policy.state_dict().items():
            torch.testing.assert_close(policy.state_dict()[name], tensor, atol=1e-5, rtol=1e-5)
        # two syncs streamed bucket by bucket (the object store's path): the first one's gathering left suspended
        # and closed by the second leaves gradients on for the next update (they were off: the update failed)
        buckets = ray_cluster.get([rank.weight_buckets.remote() for rank in ranks])[0]  # a collective once
        for index in [*range(buckets)] * 2:
            ray_cluster.get([ref for rank in ranks for ref in rank.publish.options(num_returns=2).remote(index)])
        assert ray_cluster.get([rank.__ray_call__.remote(lambda w: torch.is_grad_enabled()) for rank in ranks]) == \
            [True, True]
    for rank in ranks:
        ray_cluster.kill(rank)


def _flatten_groups(batch, groups):
    """The batch with every reward of `groups` set to one value: those groups' advantages are exactly 0."""
    rewards = batch.rewards.clone()
    for g in groups:
        rewards[g * batch.group_size : (g + 1) * batch.group_size] = 1.0
    return replace(batch, rewards=rewards)


@pytest.mark.parametrize("shard, micro", [(False, 2), (False, 8), (True, 2), (True, 8)])
def test_two_learners_leave_out_rows_of_advantage_zero_as_one_learner_does(ray_cluster, tmp_path, warm_model, shard,
                                                                           micro):
    """`train.zero_advantage_rows: auto` on two data-parallel ranks: each trains on its share of the rows whose
    advantage is not 0, split so that both get some where there are two, and the metrics, gradient norm and
    weights are the one-process learner's, which leaves the same rows out. Step 1: a quarter of the rows flat;
    step 2: three quarters (a minibatch may hold one row to train on, so one rank none); step 3: every row (both
    ranks step AdamW on a zero gradient). Sharded (FSDP2), a rank with fewer micro-batches runs the difference
    for nothing, so the ranks' gathers pair up (else the run hangs or gloo aborts)."""
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, algorithm={"mu": 2},
        train={"steps": 3, "batch_size": 16, "group_size": 4, "mini_batch_size": 8, "micro_batch_size": micro},
        distributed=ray_sections(learners=2, shard=shard)))
    task = get_task(cfg.task.name, **cfg.task.options)
    learner, rollout = local_roles(cfg, task, warm_model, warm_model)
    assert learner.skips_zero_advantage
    remote = ray_cluster.remote(LearnerWorker).options(num_cpus=0.5)
    master = ("127.0.0.1", _free_port())
    ranks = [remote.remote(cfg, warm_model, warm_model, r, 2, master) for r in range(2)]

    def count_trained_rows(worker):  # in a learner actor (defined here: the actors cannot import this module)
        learner, rows, forwards = worker.learner, [], []
        step, forward = learner._micro_step, learner._forward
        learner._micro_step = lambda mb, *args: rows.append(len(mb)) or step(mb, *args)
        learner._forward = lambda mb, *args, **kw: forwards.append(len(mb)) or forward(mb, *args, **kw)
        learner.trained_rows, learner.forwards = rows, forwards  # rows of every training step; every forward

    ray_cluster.get([rank.__ray_call__.remote(count_trained_rows) for rank in ranks])
    uneven = []  # whether the ranks ran different numbers of training steps
    for step, flat in ((1, [0]), (2, [0, 1, 2]), (3, [0, 1, 2, 3])):
        batch = _flatten_groups(rollout.collect(step), flat)
        rows = learner.tensors(batch)
        learner.objective.prepare(rows, batch, learner)
        zero = int((rows.advantages == 0).sum())
        assert zero >= 4 * len(flat)
        one = learner.update(batch)
        two = ray_cluster.get([rank.update.remote(batch) for rank in ranks])
        trained, forwards = zip(*ray_cluster.get([rank.__ray_call__.remote(
            lambda w: (w.learner.trained_rows[:], w.learner.forwards[:])) for rank in ranks]))
        ray_cluster.get([rank.__ray_call__.remote(
            lambda w: (w.learner.trained_rows.clear(), w.learner.forwards.clear())) for rank in ranks])
        assert sum(map(sum, trained)) == 2 * (16 - zero), (step, trained)  # mu 2 x the rows with advantage != 0
        uneven.append(len(trained[0]) != len(trained[1]))
        if step == 1:
            assert all(trained), trained  # both ranks train on some rows
        if shard:
            assert len(forwards[0]) == len(forwards[1]), (step, forwards)
        assert two[0] == two[1]
        assert two[0].keys() == one.keys()
        for key in one:
            assert two[0][key] == pytest.approx(one[key], abs=1e-5, rel=1e-4), (step, key)
        rollout.load_weights(learner.named_weights())
    assert one["loss"] == one["grad_norm"] == 0  # step 3: nothing to train on
    assert uneven[1] and not uneven[2], uneven  # step 2: some minibatch with an odd number of rows to train on
    weights = ray_cluster.get([rank.weights.remote() for rank in ranks])
    for name, tensor in learner.named_weights():
        for rank_weights in weights:
            torch.testing.assert_close(rank_weights[name], tensor, atol=1e-5, rtol=1e-5)
    for rank in ranks:
        ray_cluster.kill(rank)


class _Joined(Exception):
    """Raised by the stand-in for `init_process_group`, carrying the backend it was asked for."""


@pytest.mark.parametrize("device, gpus, cuda", [("cpu", 0, False), ("auto", 0, False), ("cpu", 1, True),
                                                ("auto", 1, True), ("cuda", 0, True)])
def test_the_learners_group_backend_is_the_weight_syncs_for_the_policys_device(tmp_path, monkeypatch, device,
                                                                               gpus, cuda):
    """The learners' data-parallel group and the weight-sync group choose their backend in one place
    (`weight_sync.backend_for`) from where this process puts the policy: a policy on CPU all-reduces
    with gloo even where a GPU is reserved and visible (NCCL cannot reduce CPU tensors), and one on
    CUDA with NCCL. `cuda`: whether this process sees a GPU (faked: the tests run on CPU)."""
    monkeypatch.setattr(placement, "cuda_device_count", lambda: int(cuda))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(weight_sync, "tcp_store", lambda *args: None)  # no rendezvous: nobody else joins
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the worker's, not this test process's

    def join(backend, **kwargs):
        raise _Joined(backend)

    monkeypatch.setattr(dist, "init_process_group", join)
    cfg = load_config(None, [f"model.device={device}", "distributed.backend=ray", f"distributed.learner_gpus={gpus}"],
                      base={"model": {"tiny_preset": "test"}, "out_dir": str(tmp_path)})
    with pytest.raises(_Joined) as joined:
        LearnerWorker(cfg, tmp_path, tmp_path, 0, 2, ("127.0.0.1", 0))
    expected = weight_sync.backend_for(placement.resolve_placement(cfg.model).device)
    assert str(joined.value) == expected == ("nccl" if device != "cpu" and cuda else "gloo")


@pytest.mark.skipif(not placement.cpu_supports_bf16(), reason="bfloat16 needs AVX512-BF16/AMX on a CPU")
def test_sharded_learners_in_mixed_precision_with_offload_and_a_sharded_reference(ray_cluster, tmp_path, warm_model):
    """`distributed.mixed_precision` (parameters gathered in bfloat16, gradients reduced in float32),
    `cpu_offload` (shards and AdamW in host memory; on a CPU, unpinned) and a KL reference held in bfloat16 and
    sharded like the policy, with the output layer scored in chunks: two FSDP2 ranks train as one bfloat16
    learner does, to bfloat16's rounding (the ranks cast activations at every block, the one process keeps them
    float32 between its autocast matmuls), and each holds half of the reference."""
    base = tiny_config(tmp_path / "run", warm_model, algorithm={"beta": 0.1},
                       train={"steps": 2, "batch_size": 8, "group_size": 4, "micro_batch_size": 4,
                              "logprob_chunk": 5},
                       distributed=ray_sections(learners=2, shard=True, mixed_precision=True, cpu_offload=True))
    cfg = load_config(None, ["model.dtype=bfloat16"], base=base)
    task = get_task(cfg.task.name, **cfg.task.options)
    learner, rollout = local_roles(cfg, task, warm_model, warm_model)
    assert next(learner.reference.parameters()).dtype == torch.bfloat16  # frozen: no float32 copy
    remote = ray_cluster.remote(LearnerWorker).options(num_cpus=0.5)
    master = ("127.0.0.1", _free_port())
    ranks = [remote.remote(cfg, warm_model, warm_model, r, 2, master) for r in range(2)]

    def held(worker):  # in a learner actor: what it stores, and the dtype its blocks compute with
        seen = []
        block = next(m for m in worker.learner.policy.modules() if type(m).__name__.endswith("DecoderLayer"))
        block.register_forward_pre_hook(lambda m, args: seen.append(next(m.parameters()).dtype))
        worker.learner.gathered = seen
        return ({p.to_local().dtype for p in worker.learner.policy.parameters()},
                sum(p.to_local().numel() for p in worker.learner.reference.parameters()))

    stored = ray_cluster.get([rank.__ray_call__.remote(held) for rank in ranks])
    total = sum(p.numel() for p in learner.reference.parameters())
    assert all(dtypes == {torch.float32} for dtypes, _ in stored)  # the shards stay float32 master weights
    assert sum(n for _, n in stored) == total and max(n for _, n in stored) < 0.51 * total
    for step in (1, 2):
        batch = rollout.collect(step)
        one = learner.update(batch)
        two = ray_cluster.get([rank.update.remote(batch) for rank in ranks])
        assert two[0] == two[1] and two[0].keys() == one.keys()
        for key in ("loss", "kl", "grad_norm", "entropy"):
            assert two[0][key] == pytest.approx(one[key], abs=2e-3, rel=5e-2), (step, key)
        rollout.load_weights(learner.named_weights())
    gathered = ray_cluster.get(ranks[0].__ray_call__.remote(lambda w: set(w.learner.gathered)))
    assert gathered == {torch.bfloat16}  # every block ran on parameters gathered in bfloat16
    weights = ray_cluster.get([rank.weights.remote() for rank in ranks])[1]
    for name, tensor in learner.named_weights():
        assert weights[name].dtype == torch.float32
        torch.testing.assert_close(weights[name], tensor, atol=2e-3, rtol=0)
    for rank in ranks:
        ray_cluster.kill(rank)
