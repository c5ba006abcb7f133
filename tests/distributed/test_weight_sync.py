"""`distributed.weight_sync: collective`: learner rank 0 broadcasts the weights to the rollout workers
over a gloo group of their own. Every worker then holds rank 0's weights bit for bit, a run gives the
object store's metrics, and a killed worker leaves the group for the object store, every batch intact."""

import logging
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_helpers import ray_sections, tiny_config, write_config
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.distributed import weight_sync
from rlvr.distributed.ray_learner import CollectiveWeights, RayLearner, RemoteWeights, _free_port
from rlvr.distributed.ray_rollout import RayRollout
from rlvr.distributed.run import train_distributed
from rlvr.distributed.workers import LearnerWorker, RolloutWorker
from rlvr.models import placement
from rlvr.tasks import get_task
from rlvr.train.setup import local_roles
from rlvr.commands.grammar import set_args


def test_a_gloo_broadcast_of_flat_buffers_per_dtype_is_bitwise():
    """Three members in threads: interleaved dtypes go as one buffer each, in the layout's order, and
    come out named, shaped and bit-equal."""
    named = [("a", torch.randn(3, 4)), ("b", torch.arange(5)), ("c", torch.randn(2).to(torch.bfloat16)),
             ("d", torch.randn(1, 2, 2))]
    layout, master, received = weight_sync.layout_of(named), ("127.0.0.1", _free_port()), {}
    assert [dtype for dtype in weight_sync.flatten(named)] == [torch.float32, torch.int64, torch.bfloat16]

    def member(rank: int) -> None:
        group = weight_sync.join_group(master, rank, 3, weight_sync.backend_for(torch.device("cpu")))
        buffers = weight_sync.flatten(named) if rank == 0 else weight_sync.empty_buffers(layout, torch.device("cpu"))
        weight_sync.broadcast(group, buffers)
        received[rank] = weight_sync.unflatten(buffers, layout)

    threads = [threading.Thread(target=member, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rank in (1, 2):
        assert [n for n, _ in received[rank]] == ["a", "b", "c", "d"]
        assert all(torch.equal(t, u) and t.dtype == u.dtype for (_, t), (_, u) in zip(received[rank], named))


def test_buckets_by_hand():
    # sizes 4, 4, 10, 3, 3 in buckets of 8: [0, 1], [2] (larger than a bucket: alone), [3, 4]
    assert weight_sync.plan_buckets([4, 4, 10, 3, 3], 8) == [range(0, 2), range(2, 3), range(3, 5)]
    assert weight_sync.plan_buckets([4, 4, 10], 0) == [range(0, 3)]  # 0: one bucket, as the sync was before
    assert weight_sync.plan_buckets([], 8) == []
    with pytest.raises(ValueError, match="bucket_bytes must be >= 0"):
        weight_sync.plan_buckets([1], -1)


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 100), max_size=30), bucket=st.integers(0, 150))
def test_buckets_cover_every_tensor_once_in_order_within_the_size(sizes, bucket):
    buckets = weight_sync.plan_buckets(sizes, bucket)
    assert [i for b in buckets for i in b] == list(range(len(sizes)))
    for b in buckets:
        held = sum(sizes[i] for i in b)
        assert len(b) >= 1 and (held <= bucket or len(b) == 1 or bucket == 0)
    for first, second in zip(buckets, buckets[1:]):  # a bucket is closed only when the next tensor would not fit
        assert sum(sizes[i] for i in first) + sizes[second.start] > bucket > 0


def test_buckets_hold_whole_layers_cast_to_the_compute_dtype():
    named = [("model.embed_tokens.weight", torch.randn(10, 4)),
             *[(f"model.layers.{i}.{part}", torch.randn(4, 4)) for i in range(3) for part in ("q.weight", "k.weight")],
             ("model.norm.weight", torch.randn(4)), ("lm_head.weight", torch.randn(10, 4))]
    layout = weight_sync.layout_of(named, torch.bfloat16)
    assert {dtype for _, _, dtype in layout} == {torch.bfloat16}
    buckets = weight_sync.bucket_layout(layout, 70)  # a layer is 2 x 32 bytes in bfloat16: one layer a bucket
    names = [[name.rsplit(".", 2)[0] if "layers" in name else name for name, _, _ in b] for b in buckets]
    assert names == [["model.embed_tokens.weight"], ["model.layers.0"] * 2, ["model.layers.1"] * 2,
                     ["model.layers.2"] * 2, ["model.norm.weight"], ["lm_head.weight"]]
    streamed = list(weight_sync.stream_buckets(named, buckets))
    assert [[n for n, _ in b] for b in streamed] == [[n for n, _, _ in b] for b in buckets]
    assert all(torch.equal(t, dict(named)[n].to(torch.bfloat16)) for b in streamed for n, t in b)
    with pytest.raises(ValueError, match="expected model.embed_tokens.weight"):
        next(weight_sync.stream_buckets(named[1:], buckets))


def _assert_workers_hold(ray, workers, weights: dict[str, torch.Tensor]) -> None:
    engine_weights = lambda worker: worker.rollout.engine.model.state_dict()  # noqa: E731  (by value, not by module)
    for held in ray.get([w.__ray_call__.remote(engine_weights) for w in workers]):
        assert all(torch.equal(held[name], tensor) for name, tensor in weights.items())


def test_collective_sync_is_bitwise_and_survives_a_killed_worker(ray_cluster, tmp_path, warm_model, caplog):
    """One learner actor, two rollout workers in its weight-sync group. After every broadcast both
    workers hold rank 0's weights bit for bit. Worker 0 is killed before step 3: Ray restarts it
    outside the group, the weights go through the object store from then on (one logged line), and
    every batch is exactly the one a local Rollout samples from rank 0's weights."""
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, train={"steps": 5, "batch_size": 16, "group_size": 4},
        distributed=ray_sections(rollout_workers=2, weight_sync="collective")))
    _, local = local_roles(cfg, get_task(cfg.task.name, **cfg.task.options), warm_model, warm_model)
    rank0 = ray_cluster.remote(LearnerWorker).options(num_cpus=0.5).remote(cfg, warm_model, warm_model, 0, 1, ("", 0))
    learner = RayLearner([rank0], cfg.out_dir)
    workers = [ray_cluster.remote(RolloutWorker).options(num_cpus=0.5, max_restarts=2).remote(cfg, warm_model)
               for _ in range(2)]
    learner.join_weight_group(workers)
    assert isinstance(learner.named_weights(), CollectiveWeights)
    remote = RayRollout(cfg, workers, learner.named_weights())
    with caplog.at_level(logging.WARNING, logger="rlvr.distributed"):
        for step in range(1, 6):
            weights = ray_cluster.get(rank0.weights.remote())
            if step <= 3:  # in the group until the kill
                _assert_workers_hold(ray_cluster, workers, weights)
            if step == 3:
                ray_cluster.kill(workers[0], no_restart=False)
            local.load_weights(weights.items())
            local.version = step - 1
            batch = remote.collect(step)
            expected = local.collect(step)
            assert (batch.step, batch.version, batch.completion_ids) == (step, step - 1, expected.completion_ids)
            assert batch.sampler_logprobs == expected.sampler_logprobs
            learner.update(batch)
            remote.load_weights(learner.named_weights())
    assert remote.restarts == 1 and learner.weight_sync == "object_store"
    assert isinstance(learner.named_weights(), RemoteWeights)
    assert [r.message.split(";")[0] for r in caplog.records if r.name == "rlvr.distributed"] == [
        "rlvr: a rollout worker died", "rlvr: rollout worker 0 died and Ray restarted it (1 restart(s) of the workers "
                                       "so far"]
    _assert_workers_hold(ray_cluster, workers, ray_cluster.get(rank0.weights.remote()))
    for actor in [rank0, *workers]:
        ray_cluster.kill(actor)


def _config(tmp_path, model, weight_sync: str, steps: int) -> dict:
    return tiny_config(tmp_path / weight_sync, model, train={"steps": steps, "batch_size": 16, "group_size": 4},
                       log={"progress": False, "plots": False}, checkpoint={"every": 2},
                       distributed=ray_sections(rollout_workers=2, weight_sync=weight_sync))


def test_collective_run_equals_object_store_run(ray_cluster, tmp_path, warm_model, caplog):
    """Same seed, two rollout workers: the same completions and losses, byte for byte; the collective
    run is stopped after its step-2 checkpoint and resumed (the group is formed again)."""
    runs = [train_distributed(load_config(None, [], base=_config(tmp_path, warm_model, "object_store", 3))).run_dir]
    with caplog.at_level(logging.WARNING, logger="rlvr.distributed"):
        train_distributed(load_config(None, [], base=_config(tmp_path, warm_model, "collective", 2)))
        runs.append(train_distributed(load_config(None, [], base=_config(tmp_path, warm_model, "collective", 3)),
                                      resume=True).run_dir)
    assert not caplog.records  # no fallback: every sync was a broadcast
    for name in ("metrics.jsonl", "samples.jsonl"):
        assert (runs[0] / name).read_text() == (runs[1] / name).read_text(), name


@pytest.mark.parametrize("sets, message", [
    (["distributed.weight_sync=collective"], "distributed.weight_sync=collective needs distributed.backend=ray"),
    (["distributed.weight_sync=nccl"], "distributed.weight_sync: unknown 'nccl'; choose from ['object_store', "
                                       "'collective']"),
])
def test_bad_weight_sync_is_one_line_and_exit_code_2(tmp_path, warm_model, capsys, sets, message):
    config = write_config(tmp_path / "run.yaml", tiny_config(tmp_path / "run", warm_model))
    assert main(["train", str(config), *set_args(sets)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


@pytest.mark.parametrize("mode", ["object_store", "collective"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bucketed_syncs_stream_whole_layers_in_the_compute_dtype(ray_cluster, tmp_path, warm_model, mode, dtype):
    """Buckets of 0.02 MB (the tiny model's 0.34 MB in several): after each sync both workers hold rank 0's
    weights, bit for bit in float32, rounded to bfloat16 in bfloat16 (half the bytes sent), whichever path;
    rank 0 made the buckets one call (object store) or one broadcast (collective) at a time."""
    if dtype == "bfloat16" and not placement.cpu_supports_bf16():
        pytest.skip("bfloat16 needs AVX512-BF16/AMX on a CPU")
    cfg = load_config(None, [f"model.dtype={dtype}"], base=tiny_config(
        tmp_path / "run", warm_model, distributed=ray_sections(rollout_workers=2, weight_sync=mode,
                                                               sync_bucket_mb=0.02)))
    rank0 = ray_cluster.remote(LearnerWorker).options(num_cpus=0.5).remote(cfg, warm_model, warm_model, 0, 1, ("", 0))
    learner = RayLearner([rank0], cfg.out_dir)
    workers = [ray_cluster.remote(RolloutWorker).options(num_cpus=0.5).remote(cfg, warm_model) for _ in range(2)]
    if mode == "collective":
        learner.join_weight_group(workers)
    buckets = ray_cluster.get(rank0.buckets.remote())
    sent = {t for bucket in buckets for _, _, t in bucket}
    assert len(buckets) > 3 and sent == {getattr(torch, dtype)}
    layers = [{weight_sync.layer_of(name) for name, _, _ in b} for b in buckets]
    assert sum(map(len, layers)) == len(set().union(*layers))  # no layer split between two buckets
    remote = RayRollout(cfg, workers, learner.named_weights())
    for step in (1, 2):
        batch = remote.collect(step)
        learner.update(batch)
        remote.load_weights(learner.named_weights())
        ray_cluster.get([w.ready.remote() for w in workers])
        weights = ray_cluster.get(rank0.weights.remote())
        _assert_workers_hold(ray_cluster, workers, {n: t.to(getattr(torch, dtype)).float() for n, t in weights.items()})
    assert ray_cluster.get([w.__ray_call__.remote(lambda w: w.rollout.version) for w in workers]) == [2, 2]
    for actor in [rank0, *workers]:
        ray_cluster.kill(actor)
