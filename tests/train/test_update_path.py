"""The update path's shortcuts change nothing they should not: the sampler's log-probs as pi_old,
and micro-batches cut by a token budget instead of a row count."""

from dataclasses import replace

import pytest
import torch

from rlvr.config import load_config
from rlvr.models.forward import cached_logprobs, policy_logprobs
from rlvr.rollout.batch import completion_values
from rlvr.train.setup import prepare_run

SEVERAL_STEPS = {"batch_size": 16, "group_size": 4, "mini_batch_size": 8}  # two optimizer steps per epoch


def _learner(config_factory, name, **train):
    run = prepare_run(load_config(config_factory(name, algorithm={"mu": 2}, train={**SEVERAL_STEPS, **train})))
    return run.rollout, run.learner


def _prepared(learner, batch):
    """The batch's rows with the objective's loss inputs (advantages, pi_old), as `Learner.update` trains on them."""
    rows = learner.tensors(batch)
    learner.objective.prepare(rows, batch, learner)
    return rows


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
    # every row through the pass (rows at their group's mean reward have advantage 0 and would be left out)
    _, recompute = _learner(config_factory, "recompute", old_logprobs="recompute", zero_advantage_rows="train")
    batch = rollout.collect(1)
    sampled, recomputed = _prepared(reuse, batch).old_logprobs, _prepared(recompute, batch).old_logprobs  # (N, W)
    mask = reuse.tensors(batch).mask
    assert torch.equal(sampled, completion_values(mask, batch.sampler_logprobs))  # no forward: the sampler's own
    delta = (sampled - recomputed)[mask].abs().max()
    assert delta < 2e-5  # same weights, float32: only kernel rounding differs

    # ratio = exp(logp - old) moves by at most ~delta, so the loss moves by at most |A| x delta per token
    advantages = _prepared(reuse, batch).advantages
    grads = _record_gradients(reuse)
    metrics_reuse, metrics_recompute = reuse.update(batch), recompute.update(batch)
    bound = float(advantages.abs().max() * delta * 1.01) + 1e-7
    assert abs(metrics_reuse["loss"] - metrics_recompute["loss"]) <= bound
    _assert_same_adam_steps(_params(reuse), _params(recompute), grads, _lr(reuse), atol=1e-5)


@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(0.7, 0, 0.9), (1.3, 5, 1.0)])
def test_the_sampler_reports_what_the_learner_scores(config_factory, temperature, top_k, top_p):
    """One rule (rlvr.core.process_logits, docs/core.md): the engine reports each token's log-prob under the
    processed distribution it was drawn from, and the learner scores that distribution, so at equal weights the
    importance weight pi_old / pi_sampler is 1 up to float32 kernel rounding (cached vs full attention; within
    3.4e-6 of 1 at T = 0.7, top-p 0.9 on this model, log-probs of magnitude ~10 have an ulp of 1e-6). The raw
    log-probs the engine reported before gave weights of 0.79-1.24; scoring the temperature alone still leaves
    the nucleus's renormalisation. The sampler's entropies are the processed distribution's too."""
    run = prepare_run(load_config(config_factory("scored", rollout={"temperature": temperature, "top_k": top_k,
                                                                    "top_p": top_p, "max_new_tokens": 10})))
    batch = run.rollout.collect(1)
    learner = run.learner
    assert learner.sampler_is_old  # the stand-in for the pi_old pass holds at any temperature and filter
    rows = learner.tensors(batch)
    sampled = completion_values(rows.mask, batch.sampler_logprobs)  # (N, W)
    weights = (learner.logprobs(rows) - sampled)[rows.mask].exp()
    assert float((weights - 1).abs().max()) < 1e-5
    tempered = cached_logprobs(learner.policy, rows, temperature, 16)  # no filter: another distribution
    assert float(((tempered - sampled)[rows.mask].exp() - 1).abs().max()) > 1e-2
    _, entropy = policy_logprobs(learner.policy, rows, temperature, with_entropy=True, top_k=top_k, top_p=top_p)
    sampler_entropy = completion_values(rows.mask, batch.sampler_entropies)
    torch.testing.assert_close(entropy[rows.mask], sampler_entropy[rows.mask], atol=1e-5, rtol=0)


def test_the_weight_is_1_to_1e6_when_the_model_itself_does_not_round(config_factory):
    """The issue's bar (T = 0.7, top-p 0.9: weights of 1 to 1e-6) with the kernel rounding taken out: the policy in
    float64, so cached decoding and the full forward agree, and what is left is the float32 storage of the
    log-probs (an ulp of ~1e-6 at magnitude ~10). The float32 model adds up to ~3.4e-6 of kernel rounding."""
    run = prepare_run(load_config(config_factory("f64", rollout={"temperature": 0.7, "top_k": 0, "top_p": 0.9,
                                                                 "max_new_tokens": 10})))
    run.learner.policy.double()
    batch = run.rollout.collect(1)
    rows = run.learner.tensors(batch)
    sampled = completion_values(rows.mask, batch.sampler_logprobs)
    weights = (run.learner.logprobs(rows).double() - sampled.double())[rows.mask].exp()
    assert rows.mask.sum() > 50
    assert float((weights - 1).abs().max()) < 1e-6


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
            # other micro-batches share other prompts (rlvr.models.prefix): float32 sums in another
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


def _flatten_groups(batch, groups):
    """The batch with every reward of `groups` set to one value: those groups' advantages are exactly 0."""
    rewards = batch.rewards.clone()
    for g in groups:
        rewards[g * batch.group_size : (g + 1) * batch.group_size] = 1.0
    return replace(batch, rewards=rewards)


def _trained_rows(learner):
    """Rows each training forward + backward ran on."""
    rows, original = [], learner._micro_step
    learner._micro_step = lambda mb, *args: rows.append(len(mb)) or original(mb, *args)
    return rows


@pytest.mark.parametrize("old_logprobs", ["auto", "recompute"])
def test_zero_advantage_rows_are_left_out_of_the_backward_and_the_update_is_the_same(config_factory, old_logprobs):
    """beta 0 and the clipped loss: a row with advantage 0 adds nothing to the gradient, so 'auto' trains on the
    other rows only, with the minibatch's normaliser, and runs the pi_old pass on them only; gradients, weights,
    loss, entropy and gradient norm are those of training on every row."""
    rollout, skip = _learner(config_factory, "skip", old_logprobs=old_logprobs)
    _, train = _learner(config_factory, "train", zero_advantage_rows="train", old_logprobs=old_logprobs)
    assert skip.skips_zero_advantage and not train.skips_zero_advantage
    batch = _flatten_groups(rollout.collect(1), [0, 2])  # 8 of 16 rows flat
    zero = int((_prepared(skip, batch).advantages == 0).sum())  # the 8, and any row at its group's mean reward
    assert 8 <= zero < 16
    old_pass, original = [], skip.logprobs
    skip.logprobs = lambda rows: old_pass.append(len(rows)) or original(rows)
    rows_skip, rows_train = _trained_rows(skip), _trained_rows(train)
    grads_skip, grads_train = _record_gradients(skip), _record_gradients(train)
    m_skip, m_train = skip.update(batch), train.update(batch)
    assert sum(rows_train) == 2 * 16 and sum(rows_skip) == 2 * (16 - zero)  # mu 2 x every row / x those with A != 0
    assert old_pass == ([] if old_logprobs == "auto" else [16 - zero])
    for step_skip, step_train in zip(grads_skip, grads_train, strict=True):
        for g_skip, g_train in zip(step_skip, step_train):
            torch.testing.assert_close(g_skip, g_train, atol=1e-5 * float(g_train.abs().max()), rtol=1e-4)
    # entropy: a no-grad forward still measures the flat rows; their clip fractions are 0, counted as such
    for key in ("loss", "entropy", "grad_norm", "clip_frac_low", "clip_frac_high"):
        assert m_skip[key] == pytest.approx(m_train[key], rel=1e-4, abs=1e-7), key
    assert m_skip.keys() == m_train.keys() and m_train["clip_frac_low"] + m_train["clip_frac_high"] > 0
    _assert_same_adam_steps(_params(skip), _params(train), grads_train, _lr(train), atol=3e-5)


def test_a_minibatch_of_zero_advantages_still_takes_its_adam_step(config_factory):
    """Every row flat: no forward at all, a zero gradient, and AdamW steps on it as it would on a computed zero
    (its step count and moments move; with momentum from an earlier update, the weights too)."""
    rollout, skip = _learner(config_factory, "skip")
    _, train = _learner(config_factory, "train", zero_advantage_rows="train")
    first = rollout.collect(1)
    skip.update(first), train.update(first)  # some momentum
    flat = _flatten_groups(first, range(4))
    rows = _trained_rows(skip)
    m_skip, m_train = skip.update(flat), train.update(flat)
    assert rows == []
    assert m_train.keys() - m_skip.keys() == {"approx_kl", "ratio_mean", "ratio_max"}  # they cover trained rows: none
    assert m_skip["clip_frac_low"] == m_train["clip_frac_low"] == 0
    assert m_skip["loss"] == m_train["loss"] == 0 and m_skip["grad_norm"] == m_train["grad_norm"] == 0
    assert m_skip["entropy"] == pytest.approx(m_train["entropy"], rel=1e-5)
    steps = {int(s["step"]) for s in skip.optimizer.state.values()}
    assert steps == {int(s["step"]) for s in train.optimizer.state.values()} == {8}
    for a, b in zip(_params(skip), _params(train)):
        torch.testing.assert_close(a, b, atol=3e-5, rtol=0)


@pytest.mark.parametrize("algorithm, skips", [
    ({}, True),
    ({"policy_loss": "gspo"}, True),
    ({"beta": 0.01}, False),  # the KL term's gradient does not vanish with the advantage
    ({"advantage": "centered", "policy_loss": "kimi", "tau": 0.1, "aggregation": "seq_mean_token_sum"}, False),
    ({"preset": "ppo"}, False),  # a value loss on every row
])
def test_rows_are_left_out_only_where_their_gradient_is_zero(config_factory, algorithm, skips):
    run = prepare_run(load_config(config_factory(str(skips) + str(len(algorithm)), algorithm={"mu": 2, **algorithm},
                                                 train=SEVERAL_STEPS)))
    assert run.learner.skips_zero_advantage is skips


def test_the_sampler_entropy_stands_in_for_the_first_epochs_entropy(config_factory):
    """Where the sampler's log-probs stand in for pi_old, its entropies stand in for the entropy metric: no
    training forward computes one, and the metric equals the recomputed one (one minibatch per epoch, so the
    first epoch measures at the sampling weights) up to kernel rounding."""
    one_minibatch = {"mini_batch_size": 16, "zero_advantage_rows": "train"}
    rollout, sampler = _learner(config_factory, "sampler", **one_minibatch)
    _, forward = _learner(config_factory, "forward", old_logprobs="recompute", **one_minibatch)
    batch = rollout.collect(1)
    assert batch.sampler_entropies is not None and [len(e) for e in batch.sampler_entropies] == \
        [len(c) for c in batch.completion_ids]
    asked = {}
    for name, learner in (("sampler", sampler), ("forward", forward)):
        original = learner._forward
        learner._forward = lambda mb, with_entropy, o=original, n=name: \
            asked.setdefault(n, []).append(with_entropy) or o(mb, with_entropy)
    m_sampler, m_forward = sampler.update(batch), forward.update(batch)
    assert not any(asked["sampler"]) and asked["forward"] == [True, False]  # mu 2: the first epoch measures
    assert m_sampler["entropy"] == pytest.approx(m_forward["entropy"], rel=1e-5)
    tokens = sampler.tensors(batch).mask
    by_hand = sum(sum(e) for e in batch.sampler_entropies) / int(tokens.sum())
    assert m_sampler["entropy"] == pytest.approx(by_hand, rel=1e-6)  # every valid token once
    stale = replace(rollout.collect(2), version=sampler.version - 1)  # sampled at older weights: measured
    asked.clear()
    sampler.update(stale)
    assert asked["sampler"][0] is True
