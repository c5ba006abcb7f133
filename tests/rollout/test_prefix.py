"""The shared-prompt training forward (`rlvr.models.prefix`): the plain forward's log-probs, entropies
and gradients, with each distinct prompt computed once."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.models.forward import cached_logprobs, policy_logprobs
from rlvr.rollout.batch import pack
from rlvr.models.prefix import plan_shared_prefix, shares_prefix


def test_plan_by_hand():
    # two groups: prompt [5, 6, 7] twice, prompt [8, 9] twice; completions of 2, 1, 3, 2 tokens
    prompts = [[5, 6, 7], [5, 6, 7], [8, 9], [8, 9]]
    ids, attn, mask, start = pack(prompts, [[1, 2], [3], [4, 4, 2], [3, 1]], pad_id=0)
    assert start == 1 and ids.shape == (4, 5)  # rows of 5, 4, 5, 4 tokens
    plan = plan_shared_prefix(ids, attn, mask, start, min_saving=0.0)
    # prefixes: the prompts minus their last token, distinct ones once (torch.unique sorts them)
    assert plan.prefix_ids.tolist() == [[5, 6], [8, 0]] and plan.prefix_mask.tolist() == [[True, True], [True, False]]
    assert plan.rows.tolist() == [0, 0, 1, 1]
    # suffix: last prompt token + completion, positions continue each prompt
    assert plan.suffix_ids[plan.suffix_mask].tolist() == [7, 1, 2, 7, 3, 9, 4, 4, 2, 9, 3, 1]
    assert plan.positions.tolist() == [[2, 3, 4, 5], [2, 3, 4, 5], [1, 2, 3, 4], [1, 2, 3, 4]]
    # batch label column w (token w + 2) <- suffix label w + 1 - prefix_len, clamped where unused
    assert plan.columns.tolist() == [[0, 0, 1], [0, 0, 1], [0, 1, 2], [0, 1, 2]]
    # 2 x 2 prefix + 4 x 4 suffix slots = 20 against 4 x 5 = 20: no saving, so the default declines
    assert plan_shared_prefix(ids, attn, mask, start) is None


def test_no_plan_for_one_token_prompts_or_distinct_prompts():
    ids, attn, mask, start = pack([[5], [5]], [[1, 2, 3], [4, 2, 1]], pad_id=0)
    assert plan_shared_prefix(ids, attn, mask, start, min_saving=0.0) is None  # empty prefix
    ids, attn, mask, start = pack([[5, 6, 7, 8], [9, 6, 7, 8]], [[1], [2]], pad_id=0)
    assert plan_shared_prefix(ids, attn, mask, start) is None  # nothing shared


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(3, 9), min_size=2, max_size=7), st.integers(1, 4)),
                min_size=1, max_size=4),
       st.data())
def test_plan_puts_every_label_where_the_plain_layout_has_it(groups, data):
    prompts, completions = [], []
    for prompt, n in groups:
        for _ in range(n):
            prompts.append(prompt)
            completions.append(data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=6)))
    ids, attn, mask, start = pack(prompts, completions, pad_id=0)
    plan = plan_shared_prefix(ids, attn, mask, start, min_saving=-10.0)  # always plan
    labels = ids[:, start + 1 :]
    assert torch.equal(plan.suffix_ids[:, 1:].gather(1, plan.columns)[mask], labels[mask])
    # each suffix label's position is its token's position in the row
    pos = plan.positions[:, 1:].gather(1, plan.columns)[mask]
    assert torch.equal(pos, (torch.arange(labels.shape[1]) + start + 1).expand_as(labels)[mask])
    assert plan.prefix_ids.shape[0] == len({tuple(p[:-1]) for p in prompts})
    # a row's prefix is its prompt minus the last token
    for i, p in enumerate(prompts):
        row = plan.prefix_ids[plan.rows[i]][plan.prefix_mask[plan.rows[i]]]
        assert row.tolist() == p[:-1]


def _plain(model, batch, temperature, with_entropy=False):
    return policy_logprobs(model, batch, temperature, with_entropy, share_prefix=False)


@pytest.mark.parametrize("lengths", [[12, 12, 12], [6, 14, 9]])  # equal prompt lengths, and mixed
def test_shared_forward_equals_the_plain_one(sharp, lengths, grouped_batch, same_gradients):
    model, _ = sharp
    batch = grouped_batch(0, lengths, n=6, max_completion=8)
    assert plan_shared_prefix(batch.input_ids, batch.attention_mask, batch.mask, batch.start) is not None
    calls = []
    hook = model.register_forward_pre_hook(lambda m, a, kwargs: calls.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    logp, ent = policy_logprobs(model, batch, 0.7, with_entropy=True)
    hook.remove()
    longest = int((batch.attention_mask.sum(-1) - batch.start - batch.mask.int().argmax(-1)).max())
    assert calls == [(3, max(lengths) - 1), (18, longest)]  # 3 prompts once, then 18 suffixes
    ref, ref_ent = _plain(model, batch, 0.7, with_entropy=True)
    torch.testing.assert_close(logp[batch.mask], ref[batch.mask], atol=2e-5, rtol=0)
    torch.testing.assert_close(ent[batch.mask], ref_ent[batch.mask], atol=2e-5, rtol=0)
    assert not logp[~batch.mask].any()  # outside the completions: 0
    same_gradients(model, batch, policy_logprobs, _plain)  # the shared prompt receives every row's contribution


def test_cached_logprobs_in_micro_batches_match(flat, grouped_batch):
    model, _ = flat
    batch = grouped_batch(3, [10, 7, 10, 12], n=4, max_completion=6)
    torch.testing.assert_close(cached_logprobs(model, batch, 1.0, 5)[batch.mask],
                               _plain(model, batch, 1.0)[0][batch.mask].detach(), atol=2e-5, rtol=0)


def test_lora_policy_shares_too(lora_factory, grouped_batch):
    lora = lora_factory("llama", seed=5)
    batch = grouped_batch(4, [9, 9], n=5, max_completion=5)
    torch.testing.assert_close(policy_logprobs(lora, batch, 1.0)[0][batch.mask],
                               _plain(lora, batch, 1.0)[0][batch.mask], atol=2e-5, rtol=0)


def test_shares_prefix_only_where_the_cache_allows(sharp_factory):
    model, _ = sharp_factory("qwen2")
    assert shares_prefix(model)
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable()  # turns the cache off in training
    assert not shares_prefix(model)
    model.config.layer_types = ["sliding_attention"] * model.config.num_hidden_layers
    assert not shares_prefix(model)


def test_no_sharing_under_fsdp(sharp_factory):
    """FSDP2 runs collectives per module call: ranks deciding per micro-batch could deadlock."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model, _ = sharp_factory("qwen2", seed=7)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        assert not shares_prefix(model)
    finally:
        dist.destroy_process_group()
