"""The update path's shortcuts change nothing they should not: the sampler's log-probs as pi_old,
and micro-batches cut by a token budget instead of a row count."""

import pytest
import torch

from rlvr.config import load_config
from rlvr.rollout.batch import completion_values
from rlvr.train.setup import prepare_run

SEVERAL_STEPS = {"batch_size": 16, "group_size": 4, "mini_batch_size": 8}  # two optimizer steps per epoch


def _learner(config_factory, name, **train):
    run = prepare_run(load_config(config_factory(name, algorithm={"mu": 2}, train={**SEVERAL_STEPS, **train})))
    return run.rollout, run.learner


def _weights(learner):
    return {k: v.detach().clone() for k, v in learner.named_weights()}


def _params(learner):
    return [p.detach().clone() for p in learner.params]


def _assert_same_adam_steps(a, b, grads, lr, atol):
    """Parameters after the same AdamW steps from gradients equal up to float rounding: equal within `atol`,
    except where a gradient element was itself at rounding level (<= 1e-4 of its tensor's largest) in some
    step. There Adam's m / sqrt(v) is about sign(g), which rounding can flip: such an element may move by up
    to lr per step either way, so the two may differ by 2 lr per step (seen on an AVX2 machine: 7e-5)."""
    steps = len(grads)
    for i, (pa, pb) in enumerate(zip(a, b)):
        tiny = torch.zeros_like(pa, dtype=torch.bool)
        for step in grads:
            g = step[i].abs()
            tiny |= g <= 1e-4 * float(g.max())
        torch.testing.assert_close(pa[~tiny], pb[~tiny], atol=atol, rtol=0)
        assert bool(((pa - pb).abs()[tiny] <= 2 * lr * steps).all())


def test_sampler_logprobs_stand_in_for_the_old_pass(config_factory):
    rollout, reuse = _learner(config_factory, "reuse")
    _, recompute = _learner(config_factory, "recompute", old_logprobs="recompute")
    batch = rollout.collect(1)
    sampled, recomputed = reuse._prepare(batch).old_logprobs, recompute._prepare(batch).old_logprobs  # (N, W)
    mask = reuse.tensors(batch).mask
    assert torch.equal(sampled, completion_values(mask, batch.sampler_logprobs))  # no forward: the sampler's own
    delta = (sampled - recomputed)[mask].abs().max()
    assert delta < 2e-5  # same weights, temperature 1, float32: only kernel rounding differs

    # ratio = exp(logp - old) moves by at most ~delta, so the loss moves by at most |A| x delta per token
    advantages = reuse._prepare(batch).advantages
    grads = _record_gradients(reuse)
    metrics_reuse, metrics_recompute = reuse.update(batch), recompute.update(batch)
    bound = float(advantages.abs().max() * delta * 1.01) + 1e-7
    assert abs(metrics_reuse["loss"] - metrics_recompute["loss"]) <= bound
    _assert_same_adam_steps(_params(reuse), _params(recompute), grads, _lr(reuse), atol=1e-5)


def test_the_old_pass_runs_when_the_weights_differ(config_factory, monkeypatch):
    rollout, learner = _learner(config_factory, "stale")
    batch = rollout.collect(1)
    calls = []
    original = learner.logprobs
    monkeypatch.setattr(learner, "logprobs", lambda rows: calls.append(1) or original(rows))
    learner.update(batch)
    assert calls == [] and learner.version == 1
    learner.update(batch)  # sampled at version 0, the policy is at version 1 now: pi_old must be recomputed
    assert calls == [1]


def test_token_budget_micro_batches_keep_the_update(config_factory):
    rollout, by_rows = _learner(config_factory, "rows")
    _, by_tokens = _learner(config_factory, "tokens", micro_batch_tokens=40)
    batch = rollout.collect(1)
    rows = by_rows.tensors(batch)
    longest = int(rows.attention_mask.sum(-1).max())
    assert 40 < 8 * longest  # the budget really splits each minibatch of 8 rows
    before = _weights(by_rows)
    grads_rows, grads_tokens = _record_gradients(by_rows), _record_gradients(by_tokens)
    m_rows, m_tokens = by_rows.update(batch), by_tokens.update(batch)
    assert abs(m_rows["loss"] - m_tokens["loss"]) < 1e-5
    assert len(grads_rows) == len(grads_tokens) == 4  # mu 2 x two minibatches
    for step_rows, step_tokens in zip(grads_rows, grads_tokens):  # the accumulated gradient of each step
        for g_rows, g_tokens in zip(step_rows, step_tokens):
            # other micro-batches share other prompts (rlvr.rollout.prefix): float32 sums in another
            # order, so equal up to rounding at the tensor's own scale
            torch.testing.assert_close(g_tokens, g_rows, atol=1e-5 * float(g_rows.abs().max()), rtol=1e-4)
    a = _weights(by_rows)
    assert any(not torch.equal(a[k], before[k]) for k in a)  # the update moved the policy
    # Adam divides by sqrt(v): a rounding-level gradient difference stays well below a step
    _assert_same_adam_steps(_params(by_rows), _params(by_tokens), grads_rows, _lr(by_rows), atol=3e-5)


def _lr(learner):
    return max(group.get("initial_lr", group["lr"]) for group in learner.optimizer.param_groups)


def _record_gradients(learner):
    """A copy of the gradients each optimizer step is about to apply."""
    recorded = []
    learner.optimizer.register_step_pre_hook(
        lambda optimizer, args, kwargs: recorded.append([p.grad.clone() for p in learner.params]))
    return recorded


def test_the_update_metrics_do_not_depend_on_the_micro_batch_split(config_factory):
    """Metrics were means over micro-batches of each one's means: another split (a row count, a token budget,
    or two data-parallel ranks that halve the micro-batches) logged other entropy, approx_kl, clip fractions
    and ratios for the same update. Now a token metric is a mean over the update's tokens, a sequence one over
    its sequences, `loss` the mean minibatch loss, a maximum the largest: the same for every split."""
    rollout, whole = _learner(config_factory, "whole", micro_batch_size=8)
    learners = [whole] + [_learner(config_factory, name, **split)[1] for name, split in
                          (("rows", {"micro_batch_size": 2}), ("four", {"micro_batch_size": 4}),
                           ("tokens", {"micro_batch_tokens": 40}))]
    batch = rollout.collect(1)
    metrics = [learner.update(batch) for learner in learners]
    assert {"entropy", "approx_kl", "clip_frac_low", "ratio_mean", "ratio_max", "loss"} <= metrics[0].keys()
    for other in metrics[1:]:
        assert other.keys() == metrics[0].keys()
        for key, value in metrics[0].items():
            assert other[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("preset", ["ppo", "reinforce_pp"])
def test_per_token_kl_estimators_log_the_kl_to_the_reference(config_factory, preset):
    """PPO and REINFORCE++ put the KL into the rewards (kl_reward_coef), so no loss metric showed it and the doctor's
    KL checks saw nothing: `kl` is now the token mean of KL(pi || pi_ref) by kl_estimator, as the group methods log
    it, and the same whatever the micro-batch split."""
    runs = [prepare_run(load_config(config_factory(f"{preset}_{micro}", algorithm={"preset": preset, "mu": 2},
                                                   train={**SEVERAL_STEPS, "micro_batch_size": micro})))
            for micro in (8, 2)]
    batch = runs[0].rollout.collect(1)
    metrics = [run.learner.update(batch) for run in runs]
    assert "kl" in metrics[0] and metrics[0]["kl"] != 0
    assert metrics[1]["kl"] == pytest.approx(metrics[0]["kl"], rel=1e-4, abs=1e-6)
