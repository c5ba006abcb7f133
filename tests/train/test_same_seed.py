"""Same seed, same run: the Learner's metrics and weights for four presets and PPO against values recorded
before the Learner was split into roles and objectives (tests/train/data/same_seed.json, with the command and
commit that recorded it). Three batches are sampled first, at the start weights, so that what is compared is the
update alone: the first batch is trained on at the weights it was sampled from (the sampler's log-probs stand in
for pi_old), the other two at later ones (pi_old recomputed); mu 2 x two minibatches, micro-batches of 4.

A metric added since (a new key) changes none of these; every recorded one must still be there, equal. Re-record
only for a change that means to change the numbers:
    RLVR_RECORD_SAME_SEED=1 .venv/bin/python -m pytest -q -n 0 tests/train/test_same_seed.py
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.train.setup import prepare_run

FIXTURE = Path(__file__).parent / "data" / "same_seed.json"
RECORD = os.environ.get("RLVR_RECORD_SAME_SEED") == "1"
SHAPE = {"batch_size": 16, "group_size": 4, "mini_batch_size": 8, "micro_batch_size": 4}
PRESETS = ["grpo", "dr_grpo", "dapo", "kimi", "ppo"]  # a reference; constant normaliser; overlong filter; tau; GAE


def fingerprint(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """Per weight tensor, what the update moved it by: [sum, L2 norm, projection on a fixed random direction]."""
    out = {}
    for i, (name, start) in enumerate(sorted(before.items())):
        delta = (after[name] - start).double()
        direction = torch.randn(delta.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
        out[name] = [float(delta.sum()), float(delta.norm()), float((delta * direction).sum())]
    return out


def trained_weights(learner) -> dict[str, torch.Tensor]:
    """The policy's weights and, for PPO, its value model's (a checkpoint's `value_model`)."""
    weights = {k: v.detach().clone() for k, v in learner.named_weights()}
    value_model = learner.state_dict().get("value_model", {})
    return {**weights, **{f"value_model.{k}": v.detach().clone() for k, v in value_model.items()}}


def run_preset(config_factory, preset: str) -> dict:
    cfg = load_config(config_factory(preset, algorithm={"preset": preset, "mu": 2}, train=SHAPE))
    run = prepare_run(cfg)
    batches = [run.rollout.collect(step) for step in (1, 2, 3)]  # at the start weights
    before = trained_weights(run.learner)
    metrics = [run.learner.update(batch) for batch in batches]
    after = trained_weights(run.learner)
    return {"metrics": metrics, "weights": fingerprint(before, after)}


@pytest.fixture(scope="module")
def recorded():
    if RECORD:
        return {}
    return json.loads(FIXTURE.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_the_update_is_the_recorded_one(config_factory, recorded, preset):
    got = run_preset(config_factory, preset)
    if RECORD:
        data = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        data.update({"command": "RLVR_RECORD_SAME_SEED=1 .venv/bin/python -m pytest -q -n 0 "
                                "tests/train/test_same_seed.py", "commit": commit, preset: got})
        FIXTURE.parent.mkdir(exist_ok=True)
        FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        return
    want = recorded[preset]
    for step, (g, w) in enumerate(zip(got["metrics"], want["metrics"], strict=True), 1):
        assert w.keys() <= g.keys(), (step, w.keys() - g.keys())  # a metric added since is new, not a change
        for key in w:
            assert g[key] == pytest.approx(w[key], rel=1e-4, abs=1e-6), (preset, step, key)
    assert got["weights"].keys() == want["weights"].keys()
    for name, values in want["weights"].items():
        for g, w in zip(got["weights"][name], values, strict=True):  # to 1e-4 of the tensor's own movement
            assert abs(g - w) <= 1e-4 * max(values[1], abs(w)) + 1e-9, (preset, name, g, w)
