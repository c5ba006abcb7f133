"""A run with partial rollouts (`rollout.partial`): samples carried between steps end under newer weights, the
learner corrects each token by its own version, and a stopped run resumes exactly."""

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.jsonl import read_jsonl
from rlvr.train.loop import train

SECTIONS = dict(train={"steps": 4, "batch_size": 16, "group_size": 4}, rollout={"max_new_tokens": 12, "partial": True,
                                                                              "partial_tokens": 3},
                checkpoint={"every": 1, "keep": 4}, eval={"every": 2, "samples": 2},
                log={"progress": False, "plots": False, "report_to": []})


def test_carried_tokens_are_corrected_and_a_resume_is_exact(config_factory):
    full = load_config(config_factory("full", **SECTIONS))
    train(full)
    rows = read_jsonl(full.out_dir + "/metrics.jsonl")[1:]
    assert [r["partial/rounds"] >= 1 for r in rows] == [True] * 4
    carried = [r for r in rows if r["partial/carried_share"] > 0]
    assert carried, rows  # some samples began under an earlier step's weights...
    assert all(r["staleness"] >= 1 and r["staleness/token_mean"] > 0 for r in carried)  # ...in a synchronous run
    assert all("is/weight_mean" in r for r in rows)  # each token weighted by pi_old / pi of its own version
    assert rows[0]["staleness"] == 0 and rows[0]["partial/carried_share"] == 0

    stopped = config_factory("stopped", **{**SECTIONS, "train": {**SECTIONS["train"], "steps": 2}})
    train(load_config(stopped))
    resumed = load_config(stopped, ["train.steps=4"])
    train(resumed, resume=True)
    for name in ("metrics.jsonl", "samples.jsonl"):
        assert open(f"{resumed.out_dir}/{name}").read() == open(f"{full.out_dir}/{name}").read(), name
    a = load_file(f"{full.out_dir}/final_model/model.safetensors")
    b = load_file(f"{resumed.out_dir}/final_model/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("sets, message", [
    (["rollout.partial=true", "algorithm.is_cap=0"], "rollout.partial: true needs the importance correction"),
    (["rollout.partial=true", "algorithm.dynamic_sampling=true"],
     "rollout.partial: true needs algorithm.dynamic_sampling: false"),
    (["rollout.partial=true", "rollout.partial_tokens=16"],
     "rollout.partial_tokens=16 >= rollout.max_new_tokens=16: every completion fits one segment"),
    (["rollout.partial=true", "rollout.max_new_tokens=1"],
     "rollout.partial_tokens=1 >= rollout.max_new_tokens=1"),
    (["rollout.partial_tokens=8"], "rollout.partial_tokens=8 needs rollout.partial: true"),
])
def test_partial_settings_that_cannot_work_are_one_line(sets, message):
    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(None, sets)


def test_each_carried_token_is_weighted_by_its_own_versions_log_prob(config_factory):
    """A step's batch holds tokens of two versions: those carried from step 1 (sampled at the start weights) and
    those sampled after the first update. Each token's sampler log-prob is its own version's (the start weights' or
    the updated ones', to float32 rounding), pi_old is recomputed at the updated weights, and the update's weights
    are min(pi_old / pi_sampler, C) token by token: 1 on the new tokens, off 1 on the carried ones."""
    from rlvr.rollout.batch import completion_values
    from rlvr.rollout.engines import DEFAULT_IS_CAP
    from rlvr.train.setup import prepare_run

    run = prepare_run(load_config(config_factory("versions", **SECTIONS)))
    learner, rollout = run.learner, run.rollout
    start = {k: v.detach().clone() for k, v in learner.policy.state_dict().items()}
    learner.update(rollout.collect(1))
    rollout.load_weights(learner.named_weights())
    batch = rollout.collect(2)
    rows = learner.tensors(batch)
    versions = completion_values(rows.mask, [[float(v) for v in vs] for vs in batch.token_versions])
    old, new = rows.mask & (versions == 0), rows.mask & (versions == 1)
    assert old.any() and new.any() and batch.version == 0  # a step of two versions
    sampled = completion_values(rows.mask, batch.sampler_logprobs)
    now = learner.logprobs(rows)
    updated = {k: v.detach().clone() for k, v in learner.policy.state_dict().items()}
    learner.policy.load_state_dict(start)
    before = learner.logprobs(rows)
    learner.policy.load_state_dict(updated)
    torch.testing.assert_close(sampled[new], now[new], atol=1e-4, rtol=0)  # the updated weights sampled these
    torch.testing.assert_close(sampled[old], before[old], atol=1e-4, rtol=0)  # the start weights these
    assert (now[old] - before[old]).abs().max() > 1e-3  # and the two versions differ on them
    weights = (now - sampled).double().exp().clamp(max=DEFAULT_IS_CAP)  # is_cap empty: auto, C = 2
    metrics = learner.update(batch)
    assert metrics["is/weight_mean"] == pytest.approx(float(weights[rows.mask].mean()), rel=1e-4)
    assert (weights[new] - 1).abs().max() < 1e-3 and (weights[old] - 1).abs().max() > 1e-3
