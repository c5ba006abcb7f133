"""An environment's episodes on Ray rollout workers: the workers build the same episode player from the config, so
a synchronous Ray run equals the one-process run, and an asynchronous one (max_staleness 1) trains on episodes
sampled one update back, corrected by truncated importance weights over the model's tokens."""

import pytest

from ray_helpers import ray_sections
from rlvr.config import load_config
from rlvr.distributed.run import train_distributed
from rlvr.jsonl import read_jsonl
from rlvr.train.loop import train

pytestmark = pytest.mark.slow

SMALL = ["task.train_size=64", "env.max_turns=4", "env.max_tokens=32", "sft.steps=10", "sft.batch_size=8",
         "train.steps=3", "train.batch_size=16", "train.group_size=4", "eval.every=3", "eval.samples=2",
         "checkpoint.every=0", "log.progress=false", "log.plots=false", "log.report_to=[]"]


def _config(out, **distributed):
    sets = [*SMALL, f"out_dir={out}"] + [f"distributed.{k}={v}" for k, v in distributed.items()]
    return load_config("environments/guess", sets)


def test_a_synchronous_ray_run_of_episodes_equals_the_local_run(ray_cluster, tmp_path):
    local = train(_config(tmp_path / "local"))
    ray = train_distributed(_config(tmp_path / "ray", **ray_sections()))
    assert ray.final_eval == local.final_eval
    rows = [read_jsonl(r.run_dir / "metrics.jsonl") for r in (local, ray)]
    assert [r["loss"] for r in rows[0][1:]] == [r["loss"] for r in rows[1][1:]]
    assert [r["episode/turns"] for r in rows[0][1:]] == [r["episode/turns"] for r in rows[1][1:]]


def test_asynchronous_episodes_with_importance_weights(ray_cluster, tmp_path):
    cfg = _config(tmp_path / "async", **ray_sections())
    cfg.rollout.max_staleness, cfg.algorithm.is_cap = 1, 2.0
    rows = read_jsonl(train_distributed(cfg).run_dir / "metrics.jsonl")[1:]
    assert {r["staleness"] for r in rows} == {0.0, 1.0}  # step 1 is fresh
    assert all(0 < r["is/weight_mean"] <= 2.0 and 0 < r["episode/masked_share"] < 1 for r in rows)
