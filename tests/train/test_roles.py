"""The roles the loop is written over: Rollout.collect -> ScoredBatch -> Learner.update, and the
interfaces a remote worker needs (picklable batches, named weights, state round trips)."""

import pickle

import pytest
import torch

from rlvr.config import load_config
from rlvr.rollout.scored import ScoredBatch
from rlvr.train.setup import prepare_run


def _roles(config_factory, name="roles", **sections):
    run = prepare_run(load_config(config_factory(name, **sections)))
    return run.rollout, run.learner


def test_scored_batch_by_hand():
    batch = ScoredBatch(prompts=["a", "a"], prompt_ids=[[1], [1]], completion_ids=[[2, 3], [4]],
                        sampler_logprobs=[[-0.1, -0.2], [-0.3]], rewards=torch.tensor([1.0, 0.0]),
                        correct=[True, False], finish_reasons=["stop", "length"], group_size=2)
    assert batch.truncated.tolist() == [False, True]
    metrics = batch.metrics()
    assert float(metrics["reward"]) == 0.5 and metrics["accuracy"] == 0.5 and metrics["truncated"] == 0.5
    assert float(metrics["completion_length"]) == 1.5
    assert abs(float(metrics["reward_std"]) - 0.5 ** 0.5) < 1e-6  # unbiased std of {1, 0}
    assert pickle.loads(pickle.dumps(batch)).completion_ids == [[2, 3], [4]]  # crosses a process boundary


def test_collect_update_and_weight_sync(config_factory):
    rollout, learner = _roles(config_factory)
    batch = rollout.collect(1)
    n = 16  # train.batch_size
    assert len(batch) == n and batch.group_size == 4 and batch.step == 1 and batch.version == 0
    assert all(len(ids) == len(lp) for ids, lp in zip(batch.completion_ids, batch.sampler_logprobs))
    assert batch.rewards.shape == (n,) and len(batch.correct) == n and len(batch.finish_reasons) == n
    batch = pickle.loads(pickle.dumps(batch))

    # the learner recomputes exactly the log-probs the engine sampled with (same weights, same temperature)
    logprobs = learner.logprobs(batch)  # (N, W)
    rows = learner.tensors(batch)
    for row, sampled in enumerate(batch.sampler_logprobs):
        torch.testing.assert_close(logprobs[row][rows.mask[row]], torch.tensor(sampled), atol=2e-5, rtol=0)

    before = {k: v.detach().clone() for k, v in learner.named_weights()}
    metrics = learner.update(batch)
    assert {"loss", "entropy", "lr", "grad_norm"} <= set(metrics)
    assert all(isinstance(v, float) for v in metrics.values())
    after = dict(learner.named_weights())
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the update moved the policy
    rollout.load_weights(learner.named_weights())
    assert rollout.version == 1


def test_state_dicts_round_trip(config_factory):
    rollout, learner = _roles(config_factory, "a", algorithm={"preset": "ppo"})
    learner.update(rollout.collect(1))
    state, data = learner.state_dict(), rollout.state_dict()
    assert {"optimizer", "scheduler", "value_model"} <= set(state)  # PPO's critic is the learner's
    rollout2, learner2 = _roles(config_factory, "b", algorithm={"preset": "ppo"})
    learner2.load_state_dict(pickle.loads(pickle.dumps(state)))
    rollout2.load_state_dict(data)
    assert learner2.scheduler.state_dict() == learner.scheduler.state_dict()
    for key, value in learner.objective.value_model.state_dict().items():  # PPO's objective owns its value model
        torch.testing.assert_close(learner2.objective.value_model.state_dict()[key], value)


def test_entropy_is_measured_in_the_first_epoch_only(config_factory, monkeypatch):
    # every row through the micro-steps; the forwards measure it (the sampler's entropies stand in under 'auto':
    # tests/train/test_update_path.py)
    rollout, learner = _roles(config_factory, "entropy", algorithm={"mu": 3},
                              train={"zero_advantage_rows": "train", "old_logprobs": "recompute"})
    calls, forward = [], learner.objective.forward

    def recorded(policy, mb, with_entropy):
        calls.append(with_entropy)
        return forward(policy, mb, with_entropy)

    monkeypatch.setattr(learner.objective, "forward", recorded)
    batch = rollout.collect(1)
    metrics = learner.update(batch)
    steps_per_epoch = len(calls) // 3  # micro-steps per epoch (no-grad passes do not go through here)
    assert steps_per_epoch >= 1 and len(calls) == 3 * steps_per_epoch
    assert calls == [True] * steps_per_epoch + [False] * 2 * steps_per_epoch
    assert 0.0 < metrics["entropy"] <= torch.log(torch.tensor(float(learner.policy.config.vocab_size))).item()


def _written_out_update(policy, reference, batch, cfg, pad_id):
    """One RL step of GRPO as the formulas read (TRL's _compute_loss; DeepSeek-V3.2 for kl_unbiased),
    on a deep copy of `policy`: a plain forward per minibatch, token log-probs by log_softmax + gather,
    clipped ratio against the sampler's log-probs, beta x k3 (x ratio), per-sequence token mean, mean
    over rows, clip to max_grad_norm, torch's for-loop AdamW at the scheduled lr; minibatches drawn by
    the learner's seeded shuffle."""
    import copy

    from rlvr.algorithms.optim import lr_factor
    from rlvr.seeds import SHUFFLE, derive_seed

    a, o = cfg.algorithm, cfg.optim
    model = copy.deepcopy(policy).train()
    P, C = batch.prompt_ids, batch.completion_ids
    width, K = max(len(p) + len(c) for p, c in zip(P, C)), max(map(len, C))

    def completion_logprobs(net, rows):
        ids = torch.full((len(rows), width), pad_id)
        attention = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(P[r]) + len(C[r])] = torch.tensor(P[r] + C[r])
            attention[i, : len(P[r]) + len(C[r])] = 1
        logp = net(input_ids=ids, attention_mask=attention).logits[:, :-1].log_softmax(-1)
        logp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)  # (b, width - 1): log pi of token t + 1
        out, mask = torch.zeros(len(rows), K), torch.zeros(len(rows), K)
        for i, r in enumerate(rows):
            out[i, : len(C[r])] = logp[i, len(P[r]) - 1 : len(P[r]) - 1 + len(C[r])]
            mask[i, : len(C[r])] = 1
        return out, mask

    everyone = list(range(len(C)))
    with torch.no_grad():
        ref, _ = completion_logprobs(reference, everyone)
    old = torch.zeros(len(C), K)
    for i, sampled in enumerate(batch.sampler_logprobs):
        old[i, : len(sampled)] = torch.tensor(sampled)
    r = batch.rewards.view(-1, batch.group_size)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + a.advantage_eps)).view(-1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=0.0,
                                  foreach=False)
    total = cfg.train.steps * a.mu * (len(C) // cfg.mini_batch_size)
    factor, step = lr_factor(o.schedule, o.warmup_steps, total, o.min_lr_ratio), 0
    shuffle = torch.Generator().manual_seed(derive_seed(cfg.seed, batch.step, SHUFFLE))
    for _ in range(a.mu):
        order = torch.randperm(len(C), generator=shuffle).tolist()
        for lo in range(0, len(C), cfg.mini_batch_size):
            rows = order[lo : lo + cfg.mini_batch_size]
            logp, mask = completion_logprobs(model, rows)
            A = adv[rows][:, None]
            ratio = (logp - old[rows]).exp()
            per_token = -torch.min(ratio * A, ratio.clamp(1 - a.clip_low, 1 + a.clip_high) * A)
            d = ref[rows] - logp
            kl = d.exp() - d - 1
            per_token = per_token + a.beta * (ratio * kl if a.kl_unbiased else kl)
            loss = ((per_token * mask).sum(1) / mask.sum(1)).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.max_grad_norm)
            for group in optimizer.param_groups:
                group["lr"] = o.lr * factor(step)
            optimizer.step()
            step += 1
    return model


@pytest.mark.parametrize("kl_unbiased, packing", [(False, "auto"), (True, "auto"), (False, "always")])
def test_update_equals_the_grpo_formulas_written_out(config_factory, kl_unbiased, packing):
    """Learner.update (shared-prompt forward, or the packed one with `train.packing: always`; the sampler's log-probs
    as pi_old, micro-batches, fused AdamW) moves the weights as the written-out GRPO step does, two epochs
    over two minibatches (ratios away from 1 after the first optimizer step), to float rounding."""
    algorithm = {"mu": 2, "beta": 0.05, "kl_unbiased": kl_unbiased, "advantage": "grpo", "policy_loss": "clipped",
                 "aggregation": "seq_mean_token_mean"}
    rollout, learner = _roles(config_factory, algorithm=algorithm,
                              train={"mini_batch_size": 8, "micro_batch_size": 4, "packing": packing},
                              optim={"lr": 3e-3, "warmup_steps": 0, "max_grad_norm": 1.0})
    batch = rollout.collect(1)
    before = {k: v.detach().clone() for k, v in learner.policy.named_parameters()}
    expected = dict(_written_out_update(learner.policy, learner.reference, batch, learner.cfg,
                                        learner.pad_id).named_parameters())
    learner.update(batch)
    moved = dict(learner.policy.named_parameters())
    diff = sum(((moved[k] - expected[k]) ** 2).sum() for k in before).sqrt()
    size = sum(((moved[k] - before[k]) ** 2).sum() for k in before).sqrt()
    assert size > 1e-3 and diff < 1e-4 * size, (float(diff), float(size))
