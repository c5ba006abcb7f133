"""The padding-free training forward (`train.packing`, `rlvr.models.forward.packed_logprobs`): the plain
forward's log-probs, entropies and gradients from one packed row of the batch's real tokens."""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.models.varlen import segment_bounds, uses_varlen
from rlvr.models import PRESETS, build_char_tokenizer, tiny_config
from rlvr.models.forward import cached_logprobs, completion_index, forward_flops, packs, policy_logprobs, to_completions
from rlvr.rollout.batch import build_batch
from rlvr.models.prefix import plan_shared_prefix


def _plain(model, batch, temperature, with_entropy=False):
    return policy_logprobs(model, batch, temperature, with_entropy, share_prefix=False)


def _packed(model, batch, temperature, with_entropy=False):
    return policy_logprobs(model, batch, temperature, with_entropy, packing="always")


def test_completion_index_by_hand():
    # row 0: prompt 1 2 3, completion 4 (length 4, one pad); row 1: prompt 6 7, completion 8 9 10 (length 5)
    batch = build_batch([[1, 2, 3], [6, 7]], [[4], [8, 9, 10]], None, torch.zeros(2), pad_id=0)
    assert batch.start == 1 and batch.mask.tolist() == [[False, True, False], [True, True, True]]
    # packed row: 1 2 3 4 | 6 7 8 9 10; index 2 (token 3) predicts 4, 5 (7) predicts 8, 6 -> 9, 7 -> 10
    assert completion_index(batch).tolist() == [2, 5, 6, 7]
    assert to_completions(torch.tensor([0.5, 1.0, 2.0, 3.0]), batch.mask).tolist() == [[0, 0.5, 0], [1, 2, 3]]


def test_varlen_by_implementation(flat):
    model, _ = flat
    positions = torch.tensor([0, 1, 2, 0, 1])
    assert uses_varlen(model) and segment_bounds(positions) == [0, 3, 5]  # sdpa: swapped for varlen sdpa
    previous = model.config._attn_implementation
    model.config._attn_implementation = "flash_attention_2"  # not run here: only the decision
    try:
        assert not uses_varlen(model)  # transformers' own varlen, from the position ids
    finally:
        model.config._attn_implementation = previous


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_forward_equals_the_plain_one(sharp, attn, grouped_batch, same_gradients):
    model, _ = sharp
    batch = grouped_batch(0, [6, 14, 9], n=4, max_completion=11)
    previous = model.config._attn_implementation
    model.config._attn_implementation = attn
    try:
        calls = []
        hook = model.register_forward_pre_hook(
            lambda m, a, kwargs: calls.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
        logp, ent = _packed(model, batch, 0.7, with_entropy=True)
        hook.remove()
        assert calls == [(1, int(batch.attention_mask.sum()))]  # one row of the real tokens, no padding
        ref, ref_ent = _plain(model, batch, 0.7, with_entropy=True)
        torch.testing.assert_close(logp[batch.mask], ref[batch.mask], atol=2e-5, rtol=0)
        torch.testing.assert_close(ent[batch.mask], ref_ent[batch.mask], atol=2e-5, rtol=0)
        assert not logp[~batch.mask].any() and not ent[~batch.mask].any()  # outside the completions: 0
        assert model.config._attn_implementation == attn  # restored after the packed call
        same_gradients(model, batch, _packed, _plain)
    finally:
        model.config._attn_implementation = previous


def test_gradient_checkpointed_policy_recomputes_packed_rows_with_varlen(tmp_path, grouped_batch, same_gradients):
    """`load_policy` with model.gradient_checkpointing: the backward recomputes each layer of a packed row with
    the varlen attention its forward ran with (`same_attention_on_recompute`), so packed gradients equal the
    plain forward's. With checkpointing alone the recomputation would use the model's own sdpa over the whole
    packed row, and torch refuses (a different number of saved tensors): that is shown first."""
    from torch.utils.checkpoint import CheckpointError

    from rlvr.config import ModelConfig
    from rlvr.models import make_tiny_model_dir
    from rlvr.models.placement import load_policy

    folder = make_tiny_model_dir(tmp_path / "model", preset="test", seed=0)
    batch = grouped_batch(2, [6, 14, 9], n=4, max_completion=11)
    bare = load_policy(ModelConfig(path=str(folder)), folder).train()
    bare.activation_checkpointing_enable({"use_reentrant": False})
    with pytest.raises(CheckpointError):
        _packed(bare, batch, 0.7)[0].sum().backward()
    policy = load_policy(ModelConfig(path=str(folder), gradient_checkpointing=True), folder).train()
    assert policy.is_activation_checkpointing and policy.config._attn_implementation == "sdpa"
    same_gradients(policy, batch, _packed, _plain)
    # and the packed, checkpointed gradients are those of the same weights without checkpointing
    plain = load_policy(ModelConfig(path=str(folder)), folder).train()
    weights = torch.randn(batch.mask.shape, generator=torch.Generator().manual_seed(3))
    for model, forward in ((policy, _packed), (plain, _plain)):
        model.zero_grad()
        (forward(model, batch, 0.7)[0] * weights * batch.mask).sum().backward()
    for (name, got), expected in zip(policy.named_parameters(), plain.parameters()):
        torch.testing.assert_close(got.grad, expected.grad, atol=1e-5 * float(expected.grad.abs().max()), rtol=1e-4,
                                   msg=name)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(5, 90), min_size=1, max_size=9),
                          st.lists(st.lists(st.integers(5, 90), min_size=1, max_size=9), min_size=1, max_size=3)),
                min_size=1, max_size=4),
       st.sampled_from([1.0, 0.6]))
def test_packed_equals_plain_on_any_ragged_batch(flat, groups, temperature):
    """Any prompt and completion lengths (a one-token prompt included): the same log-probs on the
    completions, 0 elsewhere."""
    model, _ = flat
    prompts = [p for p, completions in groups for _ in completions]
    completions = [c for _, cs in groups for c in cs]
    batch = build_batch(prompts, completions, None, torch.zeros(len(prompts)), pad_id=0)
    with torch.no_grad():
        packed, _ = _packed(model, batch, temperature)
        plain, _ = _plain(model, batch, temperature)
    torch.testing.assert_close(packed[batch.mask], plain[batch.mask], atol=2e-5, rtol=0)
    assert not packed[~batch.mask].any()
    assert int(batch.mask.sum()) == sum(len(c) for c in completions)


def test_cached_logprobs_packed_in_micro_batches(flat, grouped_batch):
    model, _ = flat
    batch = grouped_batch(3, [10, 7, 12], n=4, max_completion=9)
    torch.testing.assert_close(cached_logprobs(model, batch, 1.0, 5, packing="always")[batch.mask],
                               _plain(model, batch, 1.0)[0][batch.mask].detach(), atol=2e-5, rtol=0)


def test_a_batch_without_completion_tokens_falls_back(flat, grouped_batch):
    """A micro-batch whose loss mask is empty (every row cleared by DAPO's overlong mask) has no position
    to keep; it runs the plain forward rather than an empty packed one."""
    model, _ = flat
    batch = grouped_batch(4, [6], n=2, max_completion=4)
    batch.mask = torch.zeros_like(batch.mask)
    with torch.no_grad():
        assert torch.equal(_packed(model, batch, 1.0)[0], _plain(model, batch, 1.0)[0])


def test_lora_policy_and_its_disabled_adapters_pack_too(lora_factory, grouped_batch):
    """PEFT passes the position ids, the kept positions and the segments through; the LoRA reference
    (the policy with its adapters disabled) runs the packed forward as well."""
    from rlvr.models.lora import AdaptersDisabled

    lora = lora_factory("qwen2", seed=6)
    batch = grouped_batch(5, [9, 4], n=3, max_completion=7)
    for m in (lora, AdaptersDisabled(lora)):
        torch.testing.assert_close(_packed(m, batch, 1.0)[0][batch.mask], _plain(m, batch, 1.0)[0][batch.mask],
                                   atol=2e-5, rtol=0)
    assert not torch.allclose(_packed(lora, batch, 1.0)[0], _packed(AdaptersDisabled(lora), batch, 1.0)[0])


def _config(**sizes):
    base = dict(hidden_size=8, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=16)
    return SimpleNamespace(**{**base, **sizes})


def test_forward_flops_by_hand():
    # head width 4; per token 2 x (q, o: 2 x 8 x 8 + k, v: 2 x 8 x 4 + MLP: 3 x 8 x 16) = 1152; per score 4 x 8 = 32
    assert forward_flops(_config(), 10, 100) == 2 * (10 * 1152 + 100 * 32)
    assert forward_flops(_config(head_dim=2), 1, 1) == 2 * (2 * (2 * 8 * 4 + 2 * 8 * 2 + 3 * 8 * 16) + 4 * 4)


def test_packs_by_hand():
    spread = build_batch([[5, 6], [7]], [[8] * 8, [9]], None, torch.zeros(2), pad_id=0)  # rows of 10 and 2 tokens
    even = build_batch([[5, 6], [7]], [[8] * 8, [9] * 8], None, torch.zeros(2), pad_id=0)  # 10 and 9
    # padded: 20 tokens, 200 scores = 58,880; packed: 12 tokens, 55 + 3 causal scores = 31,360 (0.53x) -> pack
    assert packs(_config(), spread, "auto")
    # packed: 19 tokens, 55 + 45 scores = 50,176 (0.85x the padded 58,880): not under 0.8x -> padded
    assert not packs(_config(), even, "auto")
    assert packs(_config(), even, "always") and not packs(_config(), spread, "never")
    spread.mask = torch.zeros_like(spread.mask)
    assert not packs(_config(), spread, "always")  # no completion token: nothing to pack


def test_auto_keeps_the_shared_prompt_for_short_even_completions_and_packs_spread_ones(flat, grouped_batch):
    """The two shapes measured in benchmarks/bench_learner.py: the demo's (13-token prompts shared by 8,
    answers of 7-9 tokens; packing measured 0.70x) and a GSM8K-like one (long prompts, completions of 100-600
    tokens; packing measured 2.0x)."""
    model, _ = flat
    g = torch.Generator().manual_seed(0)
    demo = grouped_batch(0, [13] * 4, n=8, max_completion=9)
    plan = plan_shared_prefix(demo.input_ids, demo.attention_mask, demo.mask, demo.start)
    assert plan is not None and not packs(model.config, demo, "auto", plan)
    prompts = [[5] * 250 for _ in range(8) for _ in range(4)]
    completions = [[6] * int(k) for k in torch.randint(100, 601, (32,), generator=g)]
    gsm8k = build_batch(prompts, completions, None, torch.zeros(32), pad_id=0)
    plan = plan_shared_prefix(gsm8k.input_ids, gsm8k.attention_mask, gsm8k.mask, gsm8k.start)
    assert plan is not None and packs(tiny_config(build_char_tokenizer(), **PRESETS["demo"]), gsm8k, "auto", plan)


@pytest.mark.parametrize("kind", ["recurrent", "sliding"])
def test_no_packing_where_sequences_would_see_each_other(kind):
    """A state-space model carries its state across a packed row's sequences, and a sliding window shorter than
    a sequence is not what varlen attention implements: auto keeps the padded forward, always says why."""
    spread = build_batch([[5, 6], [7]], [[8] * 8, [9]], None, torch.zeros(2), pad_id=0)  # packs at 0.53x otherwise
    config = _config(model_type="mamba") if kind == "recurrent" else _config(sliding_window=4)
    assert packs(_config(sliding_window=16), spread, "auto")  # a window longer than every sequence is no limit
    assert not packs(config, spread, "auto")
    with pytest.raises(ValueError, match="train.packing=always"):
        packs(config, spread, "always")
