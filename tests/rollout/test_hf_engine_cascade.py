"""HFEngine's cascade attention (prompt keys/values stored once per group) samples what the copy-to-every-row
layout with the model's own attention kernel samples: same seed, same tokens, log-probs to float rounding."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

import rlvr.rollout.cascade as cascade
import rlvr.rollout.hf_engine as hf_engine
from rlvr.models import PRESETS, build_char_tokenizer
from rlvr.models.tiny import tiny_config
from rlvr.rollout import HFEngine, SamplingParams

# Both layouts compute float32 softmax attention, summed in another order: the log-probs differ by rounding.
LOGPROB_TOL = dict(atol=2e-5, rtol=1e-5)
PROMPTS = ["sort 3 9 1 4\n", "37+85=", "a", "<bos>a much longer prompt, to pad the others\n"]  # left padding


@pytest.fixture
def cascade_calls(monkeypatch):
    """Rows per call of the cascade kernel: which layout ran."""
    calls, real = [], cascade.cascade_attention

    def counting(q, *args, **kwargs):
        calls.append(q.shape[0])
        return real(q, *args, **kwargs)

    monkeypatch.setattr(cascade, "cascade_attention", counting)
    return calls


def both_layouts(model, tokenizer, calls, n, params, **engine):
    """Completions of the cascade engine and of the copy-to-every-row one; the first must have run the
    cascade kernel (`calls` keeps its calls) and the second must not."""
    got = HFEngine(model, tokenizer, cascade=True, **engine).generate(PROMPTS, n, params)
    ran = list(calls)
    expected = HFEngine(model, tokenizer, cascade=False, **engine).generate(PROMPTS, n, params)
    assert ran and calls == ran
    return got, expected


def assert_same_samples(got, expected):
    assert [c.token_ids for c in got] == [c.token_ids for c in expected]
    assert [c.finish_reason for c in got] == [c.finish_reason for c in expected]
    for a, b in zip(got, expected):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), **LOGPROB_TOL)


def test_prompts_of_different_lengths(sharp, cascade_calls):
    model, tokenizer = sharp
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=0)
    assert_same_samples(*both_layouts(model, tokenizer, cascade_calls, 3, params))


def test_rows_finishing_at_different_steps(flat, cascade_calls):
    """EOS ends rows at different steps; the batch is compacted each time (rows move, groups scatter)."""
    model, tokenizer = flat
    got, expected = both_layouts(model, tokenizer, cascade_calls, 4, SamplingParams(max_new_tokens=40, seed=0))
    ended = {len(c.token_ids) for c in got if c.finish_reason == "stop"}
    assert len(ended) > 2 and any(c.finish_reason == "length" for c in got)
    assert len(set(cascade_calls)) > 2  # the batch shrank
    assert_same_samples(got, expected)


def test_max_batch_size_splits_groups(sharp, cascade_calls):
    """Batches of 5 rows, groups of 3: groups split across batches (a piece's prompt is prefilled again)."""
    model, tokenizer = sharp
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=2)
    assert_same_samples(*both_layouts(model, tokenizer, cascade_calls, 3, params, max_batch_size=5))
    assert max(cascade_calls) <= 5


def gqa_model(kv_heads: int = 2):
    """A sharpened tiny Qwen2 with 4 query heads sharing `kv_heads` key/value heads."""
    tokenizer = build_char_tokenizer()
    config = tiny_config(tokenizer, "qwen2", **PRESETS["test"])
    config.num_key_value_heads = kv_heads
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param), alpha=0.3)
    return model, tokenizer


def test_grouped_query_attention(cascade_calls):
    model, tokenizer = gqa_model()
    assert model.model.layers[0].self_attn.num_key_value_groups == 2
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    assert_same_samples(*both_layouts(model, tokenizer, cascade_calls, 4, params))


def assert_same_bfloat16_samples(got, expected):
    """In bfloat16 the layouts round differently (sdpa rounds its output once, the cascade its two parts, then
    merges in float32), so a near-tie may flip a greedy token, and the rest of its row with it. Up to and including
    each row's first difference the log-probs agree within bfloat16 rounding (a flip picks one of two near-equal
    top tokens), and most tokens agree. Measured on 7 sharpened models and LoRA policies: log-probs within 0.093
    (their bfloat16 and float32 log-probs differ by up to 0.13), 75-100% of tokens; with the merge weights swapped
    or the prompt padding unmasked: 0.20-1.2 apart, 6-32%."""
    agree = 0
    for a, b in zip(got, expected):
        same = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), len(a.token_ids))
        through = min(same + 1, len(a.token_ids), len(b.token_ids))
        torch.testing.assert_close(torch.tensor(a.logprobs[:through]), torch.tensor(b.logprobs[:through]),
                                   atol=0.15, rtol=0)
        agree += same
    assert agree >= 0.5 * sum(len(c.token_ids) for c in expected)


def test_bfloat16_autocast(sharp_factory, cascade_calls):
    model, tokenizer = sharp_factory("qwen2")
    params = SamplingParams(temperature=0, max_new_tokens=16)
    assert_same_bfloat16_samples(*both_layouts(model, tokenizer, cascade_calls, 3, params, autocast=torch.bfloat16))


def test_lora_policy(lora_factory, cascade_calls):
    """A PEFT LoRA model, in float32 and in bfloat16 (its frozen base then cast once per call and passed to the
    forward by functional_call)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # PEFT draws the A matrices from the global generator
        model, tokenizer = lora_factory("qwen2", 3), build_char_tokenizer()
    params = SamplingParams(temperature=1.0, max_new_tokens=12, seed=5)
    assert_same_samples(*both_layouts(model, tokenizer, cascade_calls, 3, params))
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    assert_same_bfloat16_samples(*both_layouts(model, tokenizer, cascade_calls, 3, greedy, autocast=torch.bfloat16))


def test_the_training_model_keeps_its_attention_kernel(sharp, monkeypatch):
    """The cascade kernel is switched in for the decoding steps only: back after the call, and after a call
    that fails mid-decoding."""
    model, tokenizer = copy.deepcopy(sharp[0]), sharp[1]
    engine = HFEngine(model, tokenizer, cascade=True)
    engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=4, seed=0))
    assert model.config._attn_implementation == "sdpa"
    real, seen = hf_engine.sample_next, []

    def failing(*args, **kwargs):
        seen.append(model.config._attn_implementation)
        if len(seen) == 3:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(hf_engine, "sample_next", failing)
    with pytest.raises(RuntimeError, match="boom"):
        engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=8, seed=0))
    assert seen == [cascade.CASCADE] * 3 and model.config._attn_implementation == "sdpa"


class RemoteCausalLM(torch.nn.Module):
    """Stands for a model class of its own (trust_remote_code), whose attention need not be transformers'."""

    def __init__(self, config):
        super().__init__()
        self.config = config


def test_where_cascade_cannot_apply_the_rows_hold_the_prompt(sharp_factory, cascade_calls):
    """A model with a sliding-window layer (its window longer than any sequence here, so full attention in
    effect) and single-row groups decode, even with `cascade=True`, as `cascade=False` does with the model's
    own kernel; a model on another device, with another kernel or of a class of its own would too."""
    model, tokenizer = sharp_factory("qwen2")
    cpu = torch.device("cpu")
    assert hf_engine.cascade_applies(model, cpu)
    config = copy.deepcopy(model.config)
    config.layer_types, config.use_sliding_window = ["full_attention", "sliding_attention"], True
    config.sliding_window = 512
    windowed = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa").eval()
    windowed.load_state_dict(model.state_dict())
    assert not hf_engine.cascade_applies(windowed, cpu)
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=6)
    expected = HFEngine(model, tokenizer, cascade=False).generate(PROMPTS, 3, params)
    assert_same_samples(HFEngine(windowed, tokenizer, cascade=True).generate(PROMPTS, 3, params), expected)
    HFEngine(model, tokenizer, max_batch_size=1, cascade=True).generate(PROMPTS, 3, params)
    HFEngine(model, tokenizer, cascade=True).generate(PROMPTS, 1, params)
    assert cascade_calls == []
    assert not hf_engine.cascade_applies(model, torch.device("meta"))
    other_kernel = copy.deepcopy(model)
    other_kernel.config._attn_implementation = "flex_attention"
    assert not hf_engine.cascade_applies(other_kernel, cpu)
    assert not hf_engine.cascade_applies(RemoteCausalLM(model.config), cpu)


def test_cascade_saving_by_hand():
    """(1 - 1/n) * prompt width * key/value heads * head size: 4 query heads of 16 sharing 2 key/value heads, groups
    of 4, prompts 10 wide -> 0.75 * 10 * 32 = 240 entries per row and layer."""
    config = tiny_config(build_char_tokenizer(), "qwen2", **PRESETS["test"])
    config.num_key_value_heads = 2
    assert hf_engine.cascade_saving(config, 4, 10) == 240
    assert hf_engine.cascade_saving(config, 1, 10) == 0  # a group of one saves nothing


def test_auto_uses_cascade_where_it_saves_enough_and_same_samples_either_way(sharp, cascade_calls):
    """`cascade="auto"` (the default): on the 64-wide test model, 13-token prompts in groups of 8 save 728 entries
    per row and layer (under CASCADE_MIN_SAVED: measured slower with cascade) and keep the copied layout; 40-token
    prompts save 2,240 and decode with cascade. Either way the samples are the copied layout's."""
    assert hf_engine.cascade_saving(sharp[0].config, 8, 13) < hf_engine.CASCADE_MIN_SAVED
    model, tokenizer = sharp
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=4)
    for prompts, runs in ((["sort 3 9 1 4="] * 2, False), (["sort 3 9 1 4 7 2 8 5 0 6 1 3 9 4=" + "x" * 7] * 2, True)):
        assert {len(tokenizer(p)["input_ids"]) for p in prompts} == {13 if not runs else 40}
        cascade_calls.clear()
        got = HFEngine(model, tokenizer).generate(prompts, 8, params)
        assert bool(cascade_calls) == runs
        assert_same_samples(got, HFEngine(model, tokenizer, cascade=False).generate(prompts, 8, params))
    with pytest.raises(ValueError, match="cascade must be True, False or 'auto'"):
        HFEngine(model, tokenizer, cascade="yes")
