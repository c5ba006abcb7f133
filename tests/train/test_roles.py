"""The roles the loop is written over: Rollout.collect -> ScoredBatch -> Learner.update, and the
interfaces a remote worker needs (picklable batches, named weights, state round trips)."""

import pickle

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
    for key, value in learner.value_model.state_dict().items():
        torch.testing.assert_close(learner2.value_model.state_dict()[key], value)


def test_entropy_is_measured_in_the_first_epoch_only(config_factory, monkeypatch):
    import rlvr.train.learner as learner_mod

    rollout, learner = _roles(config_factory, "entropy", algorithm={"mu": 3})
    calls, policy_logprobs = [], learner_mod.policy_logprobs

    def recorded(model, batch, temperature, with_entropy=False, **kwargs):
        calls.append(with_entropy)
        return policy_logprobs(model, batch, temperature, with_entropy, **kwargs)

    monkeypatch.setattr(learner_mod, "policy_logprobs", recorded)
    batch = rollout.collect(1)
    metrics = learner.update(batch)
    steps_per_epoch = len(calls) // 3  # micro-steps per epoch (no-grad passes do not go through here)
    assert steps_per_epoch >= 1 and len(calls) == 3 * steps_per_epoch
    assert calls == [True] * steps_per_epoch + [False] * 2 * steps_per_epoch
    assert 0.0 < metrics["entropy"] <= torch.log(torch.tensor(float(learner.policy.config.vocab_size))).item()
