"""PPO pieces: per-token advantages (hand-computed and closed forms), the value model, its loss."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.ppo import (
    TokenAdvantages,
    ValueHead,
    build_value_model,
    forward_with_values,
    sampling_values,
    token_level_advantages,
)
from rlvr.core import kl_k1
from rlvr.models.forward import policy_logprobs
from rlvr.rollout.batch import build_batch
from offline_data import tiny_model, tokenizer


def test_score_only_undiscounted_is_the_score_on_every_token():
    adv, ret = token_level_advantages(torch.tensor([1.0, -2.0]), torch.tensor([[1, 1, 1], [1, 1, 0]]).bool())
    assert adv.tolist() == [[1.0, 1.0, 1.0], [-2.0, -2.0, 0.0]]
    assert ret.tolist() == adv.tolist()  # V = 0


def test_kl_shaped_return_to_go_by_hand():
    # k1 = logp - ref = [0.5, 0, 1]; R = [-0.05, 0, -0.1 + 1] ; A_t = sum_{i>=t} R_i
    adv, _ = token_level_advantages(torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool), None,
                                    torch.tensor([[-1.0, -1.0, -1.0]]), torch.tensor([[-1.5, -1.0, -2.0]]),
                                    kl_coef=0.1)
    torch.testing.assert_close(adv, torch.tensor([[0.85, 0.9, 0.9]]))


def test_gae_with_values_by_hand():
    # rewards [0, 0, 1], V = 0.5, gamma 1, lam 0.5: deltas [0, 0, 0.5]; A = [0.125, 0.25, 0.5]
    adv, ret = token_level_advantages(torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool),
                                      torch.full((1, 3), 0.5), gamma=1.0, lam=0.5)
    torch.testing.assert_close(adv, torch.tensor([[0.125, 0.25, 0.5]]))
    torch.testing.assert_close(ret, torch.tensor([[0.625, 0.75, 1.0]]))


def test_whitened_advantages_have_zero_mean_unit_variance_and_keep_unwhitened_returns():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    adv, ret = token_level_advantages(torch.tensor([1.0, 3.0]), mask, whiten=True)
    valid = adv[mask]
    torch.testing.assert_close(valid.mean(), torch.tensor(0.0), atol=1e-6, rtol=0)
    torch.testing.assert_close(valid.var(), torch.tensor(1.0), atol=1e-4, rtol=0)
    assert adv[0, 2] == 0 and ret[mask].tolist() == [1.0, 1.0, 3.0, 3.0, 3.0]


def test_whitening_uses_the_configured_advantage_eps():
    # it was a hard-coded 1e-8 whatever algorithm.advantage_eps said
    from rlvr.config import load_config
    from rlvr.algorithms.ppo import token_advantages

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]]).bool()
    adv, _ = token_level_advantages(torch.tensor([1.0, 3.0]), mask, whiten=True, eps=1.0)
    raw = torch.tensor([1.0, 1.0, 3.0, 3.0, 3.0])
    torch.testing.assert_close(adv[mask], (raw - raw.mean()) / (raw.var() + 1.0).sqrt())
    for preset in ("ppo", "reinforce_pp"):
        cfg = load_config(None, [f"algorithm.preset={preset}", "algorithm.advantage_eps=0.5"])
        assert token_advantages(cfg).eps == 0.5


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 6), st.floats(0.0, 0.5), st.integers(0, 2**16))
def test_reinforce_pp_closed_form(batch, width, kl_coef, seed):
    """Hu et al. 2025, eq. 8: A_t = score - kl_coef * sum_{i >= t} k1_i (before normalisation)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, generator=g)
    lp, ref = -torch.rand(batch, width, generator=g) * 3, -torch.rand(batch, width, generator=g) * 3
    mask = torch.ones(batch, width, dtype=torch.bool)
    adv, _ = token_level_advantages(scores, mask, None, lp, ref, kl_coef)
    k1 = kl_k1(lp, ref)
    expected = scores[:, None] - kl_coef * k1.flip(1).cumsum(1).flip(1)
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)


def test_kl_coef_needs_logprobs_and_settings_are_checked():
    with pytest.raises(ValueError, match="log-probs"):
        token_level_advantages(torch.ones(1), torch.ones(1, 2, dtype=torch.bool), kl_coef=0.1)
    with pytest.raises(ValueError, match="gamma = lam = 1"):
        TokenAdvantages("reinforce_pp", lam=0.95)
    with pytest.raises(ValueError, match="unknown token-level advantage"):
        TokenAdvantages("grpo")
    assert TokenAdvantages("gae").needs_value_model and not TokenAdvantages("reinforce_pp", lam=1.0).needs_value_model


def test_value_head_is_zero_at_init_and_maps_hidden_to_one_value_per_position():
    head = ValueHead(8)
    out = head(torch.randn(2, 5, 8))
    assert out.shape == (2, 5) and bool((out == 0).all())


def _batch(tok):
    prompts = [tok("sort 3 1=")["input_ids"], tok("sort 21=")["input_ids"]]
    completions = [tok("1 3", add_special_tokens=False)["input_ids"], tok("12", add_special_tokens=False)["input_ids"]]
    return build_batch(prompts, completions, torch.zeros(2), torch.tensor([1.0, 0.0]), tok.pad_token_id)


@pytest.fixture(scope="module")
def model_and_tok():
    tok = tokenizer()
    return tiny_model(tok), tok


def test_shared_forward_gives_the_policy_logprobs_and_trains_both_heads(model_and_tok):
    policy, tok = model_and_tok
    batch = _batch(tok)
    vm = build_value_model("shared", policy)
    with torch.no_grad():
        vm.head.proj.weight.normal_()  # a non-zero head, so the trunk gets a value gradient too
    logprobs, entropy, values = forward_with_values(policy, vm, batch, 0.7, with_entropy=True)
    expected, _ = policy_logprobs(policy, batch, 0.7)
    torch.testing.assert_close(logprobs, expected, atol=1e-5, rtol=1e-5)
    assert values.shape == batch.mask.shape == entropy.shape
    assert sum(p.numel() for p in vm.parameters()) == policy.config.hidden_size + 1  # the head only
    policy.zero_grad()
    values[batch.mask].sum().backward()
    assert vm.head.proj.weight.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.base_model.parameters())
    policy.zero_grad()


@pytest.mark.parametrize("kind", ["shared", "separate"])
def test_packed_forward_with_values_equals_the_padded_one(model_and_tok, tmp_path, kind):
    """train.packing: log-probs, entropies and values from one packed row (no padding), as padded; 0 off
    the completions; the same gradients for both heads and trunks."""
    policy, tok = model_and_tok
    policy.save_pretrained(tmp_path / "critic")
    tok.save_pretrained(tmp_path / "critic")
    vm = build_value_model(kind, policy, tmp_path / "critic")
    with torch.no_grad():
        vm.head.proj.weight.normal_(generator=torch.Generator().manual_seed(0))  # a value gradient reaches the trunk
    prompts = [tok(p)["input_ids"] for p in ("sort 3 1=", "sort 21=", "sort 975=")]
    completions = [tok(c, add_special_tokens=False)["input_ids"] for c in ("1 3", "12 and more", "5")]
    batch = build_batch(prompts, completions, torch.zeros(3), torch.tensor([1.0, 0.0, 1.0]), tok.pad_token_id)
    results, grads = [], []
    for packing in ("always", "never"):
        policy.zero_grad(), vm.zero_grad()
        logprobs, entropy, values = forward_with_values(policy, vm, batch, 0.7, with_entropy=True, packing=packing)
        (logprobs[batch.mask].sum() + values[batch.mask].sum()).backward()
        results.append((logprobs.detach(), entropy, values.detach()))
        grads.append([p.grad.clone() for p in [*policy.parameters(), *vm.parameters()] if p.grad is not None])
    policy.zero_grad(), vm.zero_grad()
    for packed, padded in zip(*results):
        torch.testing.assert_close(packed[batch.mask], padded[batch.mask], atol=1e-5, rtol=1e-5)
        assert not packed[~batch.mask].any()
    assert len(grads[0]) == len(grads[1]) > 0
    for packed, padded in zip(*grads):
        torch.testing.assert_close(packed, padded, atol=1e-5 * float(padded.abs().max()), rtol=1e-4)
    torch.testing.assert_close(sampling_values(policy, vm, batch, 2, packing="always")[batch.mask],
                               sampling_values(policy, vm, batch, 2)[batch.mask], atol=1e-5, rtol=1e-5)


def test_separate_critic_loads_its_own_trunk(model_and_tok, tmp_path):
    policy, tok = model_and_tok
    policy.save_pretrained(tmp_path / "critic")
    tok.save_pretrained(tmp_path / "critic")
    vm = build_value_model("separate", policy, tmp_path / "critic")
    assert not vm.shared and vm.trunk is not policy.base_model
    batch = _batch(tok)
    values = sampling_values(policy, vm, batch, micro_batch_size=1)
    assert values.shape == batch.mask.shape and not values.requires_grad
    with pytest.raises(ValueError, match="critic path"):
        build_value_model("separate", policy)
    with pytest.raises(ValueError, match="unknown value model"):
        build_value_model("tied", policy)


def test_annotate_and_value_loss(model_and_tok):
    policy, tok = model_and_tok
    batch = _batch(tok)
    vm = build_value_model("shared", policy)
    settings_ = TokenAdvantages("gae", gamma=1.0, lam=1.0, whiten=False, value_coef=0.5)
    settings_.annotate(batch, policy, vm, micro_batch_size=2)
    # V = 0 at init and no KL: A = returns = the score on every completion token
    assert batch.advantages[batch.mask].tolist() == [1.0] * int(batch.mask[0].sum()) + [0.0] * int(batch.mask[1].sum())
    values = torch.zeros_like(batch.returns, requires_grad=True)
    loss, metrics = settings_.value_loss(values, batch, "token_mean", None, batch.mask.sum())
    # 0.5 * mean over tokens of (0 - G)^2, times value_coef 0.5
    expected = 0.5 * 0.5 * (batch.returns[batch.mask] ** 2).mean()
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert values.grad.abs().sum() > 0 and "value_clip_frac" in metrics


def test_annotate_without_value_model_is_reinforce_pp():
    batch = SimpleNamespace(rewards=torch.tensor([2.0, 0.0]), mask=torch.ones(2, 2, dtype=torch.bool),
                            old_logprobs=None, ref_logprobs=None)
    TokenAdvantages("reinforce_pp", lam=1.0, whiten=True).annotate(batch, None, None, 2)
    # advantages [[2, 2], [0, 0]]: mean 1, unbiased variance 4/3 -> +-1 / sqrt(4/3 + eps), eps = 1e-4 (the default
    # algorithm.advantage_eps; -4e-5 relative to the exact sqrt(3)/2)
    half = 1 / (4 / 3 + 1e-4) ** 0.5
    torch.testing.assert_close(batch.advantages, torch.tensor([[half, half], [-half, -half]]))
    assert batch.old_values is None


def test_ppo_resume_restores_the_value_model_exactly(tmp_path):
    """A run interrupted after step 2 and resumed ends with the metrics of an uninterrupted one:
    the critic's weights and its optimizer state are part of the checkpoint."""
    from rlvr.config import load_config
    from rlvr.train.loop import train
    from variant_helpers import TINY

    sets = ["algorithm.preset=ppo", *TINY, "algorithm.mu=2", "train.steps=3", "checkpoint.every=1"]
    train(load_config(None, [*sets, f"out_dir={tmp_path / 'straight'}"]))
    train(load_config(None, [*sets, "train.steps=2", f"out_dir={tmp_path / 'cut'}"]))
    train(load_config(None, [*sets, f"out_dir={tmp_path / 'cut'}"]), resume=True)

    def rows(name):  # training metrics (the cut run also evaluated at its last step, 2)
        return [{k: v for k, v in json.loads(line).items() if not k.startswith("eval/")}
                for line in (tmp_path / name / "metrics.jsonl").open()]

    assert rows("cut") == rows("straight") and "value_loss" in rows("cut")[-1]


def test_ppo_update_with_packing_matches_the_padded_one(tmp_path):
    """One PPO step (GAE from the shared value model, mu 2) with `train.packing: always` and `never`: the same
    batch (same seed, same weights when sampled) gives the same losses, values and gradient norm up to float
    rounding; only the layout of the forward passes differs."""
    from rlvr.config import load_config
    from rlvr.train.loop import train
    from variant_helpers import TINY

    rows = {}
    for packing in ("always", "never"):
        out = tmp_path / packing
        train(load_config(None, ["algorithm.preset=ppo", *TINY, "algorithm.mu=2", "train.steps=1",
                                 f"train.packing={packing}", f"out_dir={out}"]))
        rows[packing] = [json.loads(line) for line in (out / "metrics.jsonl").open() if '"loss"' in line][0]
    packed, padded = rows["always"], rows["never"]
    keys = [k for k in padded if k.split("/")[0] in ("loss", "value_loss", "value_mean", "grad_norm", "approx_kl",
                                                       "reward", "completion_length")]
    assert {"loss", "value_loss", "value_mean", "grad_norm"} <= set(keys)
    for key in keys:
        assert packed[key] == pytest.approx(padded[key], rel=1e-4, abs=1e-6), key
