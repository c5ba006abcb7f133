import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlvr.rollout import HFEngine, RolloutEngine, SamplingParams

# Cached incremental decoding and one full forward differ by float32 rounding that grows with |log-prob|
# (2.05e-5 measured on a token of log-prob -5.8), hence a relative term next to the absolute one.
LOGPROB_TOL = dict(atol=2e-5, rtol=1e-5)
PROMPTS = ["sort 3 9 1 4\n", "37+85=", "a", "<bos>a much longer prompt, to pad the others\n"]


def reference_logprobs(model, completion, temperature=1.0):
    """Log-probs of the completion's tokens from one plain forward pass over prompt + completion."""
    ids = torch.tensor([completion.prompt_ids + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(completion.prompt_ids) - 1: -1] / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion.token_ids)[:, None])[:, 0]


def hf_greedy(model, tokenizer, prompts, max_new):
    """transformers' own greedy `generate` on the left-padded batch, cut after the first EOS."""
    enc = [tokenizer(p)["input_ids"] for p in prompts]
    width = max(map(len, enc))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(e)) + e for e in enc])
    mask = (ids != tokenizer.pad_token_id).long()
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    result = []
    for row in out[:, width:].tolist():
        result.append(row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row)
    return result


def test_is_a_rollout_engine(sharp):
    assert isinstance(HFEngine(*sharp), RolloutEngine)


def test_greedy_matches_transformers_generate(sharp):
    model, tokenizer = sharp
    completions = HFEngine(model, tokenizer).generate(PROMPTS, 1, SamplingParams(temperature=0, max_new_tokens=24))
    assert [c.token_ids for c in completions] == hf_greedy(model, tokenizer, PROMPTS, 24)
    assert len({tuple(c.token_ids) for c in completions}) == len(PROMPTS)
    assert all(len(set(c.token_ids)) > 3 for c in completions)  # not a degenerate repetition


@pytest.mark.parametrize("max_batch_size", [1, 3, None])
def test_sampler_logprobs_equal_recomputed_logprobs(sharp, max_batch_size):
    """T = 1, no top-k/top-p: each returned log-prob is the model's log-prob of the token. Groups
    share a prefilled prompt and prompts of mixed length are left-padded; a mistake in either would
    change these numbers."""
    model, tokenizer = sharp
    engine = HFEngine(model, tokenizer, max_batch_size=max_batch_size)
    completions = engine.generate(PROMPTS, 3, SamplingParams(temperature=1.0, max_new_tokens=16, seed=0))
    assert len(completions) == 12
    for i, c in enumerate(completions):
        assert c.prompt == PROMPTS[i // 3] and c.prompt_ids == tokenizer(c.prompt)["input_ids"]
        assert len(c.logprobs) == len(c.token_ids)
        torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(model, c), **LOGPROB_TOL)


def _entropies_checked(model, tokenizer, sampling, max_batch_size=None):
    """Completions of HFEngine(entropies=True), checked: the samples are those without it, and each position's
    entropy is -sum_v p_v log p_v of the model's raw distribution there (before temperature and top-k, as the
    raw log-probs), from one plain forward."""
    plain = HFEngine(model, tokenizer, max_batch_size=max_batch_size).generate(PROMPTS, 3, sampling)
    engine = HFEngine(model, tokenizer, max_batch_size=max_batch_size, entropies=True)
    completions = engine.generate(PROMPTS, 3, sampling)
    assert [c.token_ids for c in completions] == [c.token_ids for c in plain] and plain[0].entropies is None
    for c in completions:
        ids = torch.tensor([c.prompt_ids + c.token_ids])
        with torch.no_grad():
            logp = model(ids).logits[0, len(c.prompt_ids) - 1: -1].log_softmax(-1)  # (T, V)
        assert len(c.entropies) == len(c.token_ids)
        torch.testing.assert_close(torch.tensor(c.entropies), -(logp.exp() * logp).sum(-1), **LOGPROB_TOL)
    return completions


@pytest.mark.parametrize("max_batch_size", [1, None])
def test_sampler_entropies_equal_the_recomputed_entropy_of_the_raw_distribution(sharp, max_batch_size):
    _entropies_checked(*sharp, SamplingParams(temperature=0.8, top_k=20, max_new_tokens=16, seed=0), max_batch_size)


def test_sampler_entropies_follow_their_rows_when_finished_rows_leave(flat):
    completions = _entropies_checked(*flat, SamplingParams(max_new_tokens=40, seed=0))
    assert any(c.finish_reason == "stop" for c in completions) and any(len(c.token_ids) == 40 for c in completions)


def test_processed_logprobs_are_under_the_tempered_distribution(sharp):
    model, tokenizer = sharp
    engine = HFEngine(model, tokenizer, logprobs_mode="processed_logprobs")
    for c in engine.generate(PROMPTS[:2], 2, SamplingParams(temperature=0.7, max_new_tokens=10, seed=1)):
        torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(model, c, 0.7), **LOGPROB_TOL)
    raw = HFEngine(model, tokenizer).generate(PROMPTS[:1], 2, SamplingParams(temperature=0.7, max_new_tokens=10,
                                                                            seed=1))
    for c in raw:  # the default mode ignores the temperature
        torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(model, c), **LOGPROB_TOL)


def test_top_k_one_and_tiny_top_p_are_greedy(sharp):
    engine = HFEngine(*sharp)
    greedy = engine.generate(PROMPTS, 1, SamplingParams(temperature=0, max_new_tokens=12))
    top_k = engine.generate(PROMPTS, 1, SamplingParams(temperature=1.3, top_k=1, max_new_tokens=12, seed=4))
    top_p = engine.generate(PROMPTS, 1, SamplingParams(temperature=1.3, top_p=1e-6, max_new_tokens=12, seed=5))
    assert [c.token_ids for c in greedy] == [c.token_ids for c in top_k] == [c.token_ids for c in top_p]


def test_group_gives_distinct_samples(flat):
    completions = HFEngine(*flat).generate(PROMPTS[:2], 8, SamplingParams(max_new_tokens=20, seed=7))
    for group in (completions[:8], completions[8:]):
        assert len({tuple(c.token_ids) for c in group}) == 8


def test_seed_reproduces(sharp):
    engine = HFEngine(*sharp)
    params = SamplingParams(temperature=1.0, max_new_tokens=20, seed=7)
    first = engine.generate(PROMPTS[:2], 8, params)
    again = engine.generate(PROMPTS[:2], 8, params)
    assert [(c.token_ids, c.logprobs) for c in first] == [(c.token_ids, c.logprobs) for c in again]
    other = engine.generate(PROMPTS[:2], 8, SamplingParams(temperature=1.0, max_new_tokens=20, seed=8))
    assert [c.token_ids for c in other] != [c.token_ids for c in first]


def test_unseeded_follows_torch_global_seed(sharp):
    engine = HFEngine(*sharp)
    params = SamplingParams(max_new_tokens=10)
    torch.manual_seed(11)
    a = engine.generate(PROMPTS[:1], 4, params)
    torch.manual_seed(11)
    b = engine.generate(PROMPTS[:1], 4, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


def test_eos_ends_a_completion_and_its_row_leaves_the_batch(flat):
    """Rows that emit EOS are dropped mid-batch (the last live row moves into their cache slot); the
    log-prob check proves every surviving row kept its own cache."""
    model, tokenizer = flat
    completions = HFEngine(model, tokenizer).generate(PROMPTS, 4, SamplingParams(max_new_tokens=40, seed=0))
    eos = tokenizer.eos_token_id
    ended = [c for c in completions if c.finish_reason == "stop"]
    assert ended and len(ended) < len(completions)
    for c in completions:
        torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(model, c), **LOGPROB_TOL)
        assert eos not in c.token_ids[:-1]
        assert (c.token_ids[-1] == eos) == (c.finish_reason == "stop")
        assert c.finish_reason == "stop" or len(c.token_ids) == 40
        assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True) and "<eos>" not in c.text


def test_ignore_eos_decodes_to_the_length_limit(flat):
    """EOS is then an ordinary token: kept in the middle of a completion, and the log-probs still
    equal a plain forward pass over it."""
    model, tokenizer = flat
    params = SamplingParams(max_new_tokens=40, seed=0, ignore_eos=True)
    completions = HFEngine(model, tokenizer).generate(PROMPTS, 4, params)
    assert all(len(c.token_ids) == 40 and c.finish_reason == "length" for c in completions)
    assert any(tokenizer.eos_token_id in c.token_ids[:-1] for c in completions)
    for c in completions:
        torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(model, c), atol=2e-5, rtol=0)


def test_length_limit(sharp):
    completions = HFEngine(*sharp).generate(PROMPTS, 2, SamplingParams(max_new_tokens=3, seed=0))
    for c in completions:
        assert len(c.token_ids) == 3 or c.finish_reason == "stop"
        assert c.finish_reason == "length" or c.token_ids[-1] == sharp[1].eos_token_id


def test_stop_string_cuts_text_and_keeps_tokens_through_the_stop(sharp):
    model, tokenizer = sharp
    engine = HFEngine(model, tokenizer)
    full = engine.generate(PROMPTS[:1], 1, SamplingParams(temperature=0, max_new_tokens=30))[0]
    stop = full.text[10:12]  # a two-character string that completes at token 12 (or earlier)
    first = full.text.find(stop)
    done = engine.generate(PROMPTS[:1], 1, SamplingParams(temperature=0, max_new_tokens=30, stop=("zzz", stop)))[0]
    assert done.finish_reason == "stop" and done.extra["stop_reason"] == stop
    assert done.text == full.text[:first]
    assert done.token_ids == full.token_ids[: first + len(stop)]  # through the token completing the stop
    assert done.logprobs == full.logprobs[: first + len(stop)]


def test_engine_on_the_trainer_module_shares_weights(sharp):
    model, tokenizer = copy.deepcopy(sharp[0]), sharp[1]
    engine = HFEngine(model, tokenizer)
    params = SamplingParams(temperature=0, max_new_tokens=8)
    before = engine.generate(PROMPTS, 1, params)
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # the "optimizer step"
    engine.load_weights(model.named_parameters())  # nothing to copy, must not fail
    after = engine.generate(PROMPTS, 1, params)
    assert [c.token_ids for c in before] != [c.token_ids for c in after]


def test_load_weights_copies_into_a_separate_model(sharp):
    trainer_model, tokenizer = sharp
    engine_model = copy.deepcopy(trainer_model)
    with torch.no_grad():
        for param in engine_model.parameters():
            param.zero_()
    engine = HFEngine(engine_model, tokenizer)
    engine.load_weights(trainer_model.state_dict().items())
    params = SamplingParams(temperature=0, max_new_tokens=10)
    assert ([c.token_ids for c in engine.generate(PROMPTS, 1, params)]
            == [c.token_ids for c in HFEngine(trainer_model, tokenizer).generate(PROMPTS, 1, params)])
    with pytest.raises(KeyError, match="no tensor named"):
        engine.load_weights([("not.a.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        engine.load_weights([("lm_head.weight", torch.zeros(2, 2))])


def test_training_mode_is_restored(sharp):
    model, tokenizer = sharp
    model.train()
    HFEngine(model, tokenizer).generate(PROMPTS[:1], 1, SamplingParams(max_new_tokens=2, seed=0))
    assert model.training
    model.eval()


@pytest.mark.parametrize("prompts, n, error, match", [
    (PROMPTS, 0, ValueError, "n"), (PROMPTS, -2, ValueError, "n"), (PROMPTS, 1.5, ValueError, "n"),
    ([], 1, ValueError, "non-empty"), ("a prompt", 1, ValueError, "non-empty"),
    ([1, 2], 1, TypeError, "strings"), ([""], 1, ValueError, "no tokens"),
    (["x" * 600], 1, ValueError, "max_position_embeddings"),
])
def test_bad_input(sharp, prompts, n, error, match):
    with pytest.raises(error, match=match):
        HFEngine(*sharp).generate(prompts, n, SamplingParams(max_new_tokens=4))


def test_bad_engine_arguments(sharp):
    with pytest.raises(ValueError, match="max_batch_size"):
        HFEngine(*sharp, max_batch_size=0)
    with pytest.raises(ValueError, match="logprobs_mode"):
        HFEngine(*sharp, logprobs_mode="logits")
    with pytest.raises(TypeError, match="SamplingParams"):
        HFEngine(*sharp).generate(PROMPTS, 1, {"temperature": 1.0})
    with pytest.raises(ValueError, match="stop strings"):
        HFEngine(*sharp).generate(PROMPTS, 1, SamplingParams(stop=("",)))


def test_eager_attention_gets_an_additive_mask_and_the_same_logprobs(sharp):
    """Eager attention adds a 4D mask to the scores (a boolean one would mask nothing): the engine
    converts it, so with eager attention the log-probs still equal a plain forward pass."""
    model, tokenizer = copy.deepcopy(sharp[0]), sharp[1]
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    completions = HFEngine(model, tokenizer).generate(PROMPTS, 2, SamplingParams(max_new_tokens=12, seed=3))
    for c in completions:
        torch.testing.assert_close(torch.tensor(c.logprobs), reference_logprobs(model, c), **LOGPROB_TOL)


class WeightCasts(TorchDispatchMode):
    """Counts float32 -> bfloat16 casts of a model's weights (autocast's `_to_copy` calls)."""

    def __init__(self, model):
        super().__init__()
        self.weights = {p.data_ptr() for p in model.parameters()}
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16 \
                and args[0].data_ptr() in self.weights:
            self.count += 1
        return func(*args, **kwargs)


def casts_and_samples(engines: dict) -> tuple[dict, dict]:
    """Per (engine name, decoding steps 3 and 6): the weight casts counted and the (tokens, log-probs) drawn."""
    casts, samples = {}, {}
    for name, engine in engines.items():
        for steps in (3, 6):
            with WeightCasts(engine.model) as counter:
                completions = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=steps, ignore_eos=True, seed=3))
            casts[name, steps] = counter.count
            samples[name, steps] = [(c.token_ids, c.logprobs) for c in completions]
            assert all(len(c.token_ids) == steps for c in completions)
    return casts, samples


def test_bfloat16_weights_are_cast_once_per_call_and_sample_as_the_policy(sharp_factory):
    """`model.dtype: bfloat16`: the policy's own autocast hooks cast every weight at every decoding
    step; the engine's region keeps the casts for the whole call and samples the same tokens and
    log-probs. A plain float32 copy of the model (a Ray rollout worker's) samples them too."""
    from rlvr.models.placement import autocast_forward

    plain, tokenizer = sharp_factory("qwen2")
    policy = autocast_forward(copy.deepcopy(plain), torch.device("cpu"), torch.bfloat16)
    engines = {"hooks alone": HFEngine(policy, tokenizer),
               "region": HFEngine(policy, tokenizer, autocast=torch.bfloat16),
               "plain copy": HFEngine(plain, tokenizer, autocast=torch.bfloat16)}
    casts, samples = casts_and_samples(engines)
    weights = len(list(policy.parameters()))
    assert 0 < casts["region", 3] == casts["region", 6] <= weights  # once per call, whatever the length
    assert casts["plain copy", 3] == casts["plain copy", 6] == casts["region", 3]
    assert casts["hooks alone", 6] > casts["hooks alone", 3] > casts["region", 3]  # again at every step
    for steps in (3, 6):
        assert samples["region", steps] == samples["hooks alone", steps] == samples["plain copy", steps]
    float32 = HFEngine(plain, tokenizer).generate(PROMPTS, 2, SamplingParams(max_new_tokens=6, ignore_eos=True, seed=3))
    assert [c.logprobs for c in float32] != [lp for _, lp in samples["region", 6]]  # bfloat16 is not float32


def test_a_lora_policys_frozen_base_is_cast_once_per_call(sharp_factory):
    """A LoRA policy in bfloat16: autocast keeps the casts of the adapters (they require grad) but not of
    the frozen base weights, which the engine casts itself once per call; the same tokens and log-probs
    as casting them at every step (the policy's hooks alone), and not those of the base alone."""
    from rlvr.config.sections import LoRAConfig
    from rlvr.models.lora import add_lora
    from rlvr.models.placement import autocast_forward
    from rlvr.rollout.hf_engine import frozen_linear_casts

    plain, tokenizer = sharp_factory("qwen2")
    policy = add_lora(copy.deepcopy(plain), LoRAConfig(r=4))
    with torch.no_grad():  # fresh adapters add nothing (B = 0): make them matter
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(name)))
    policy = autocast_forward(policy, torch.device("cpu"), torch.bfloat16)
    frozen = frozen_linear_casts(policy, torch.bfloat16)
    assert frozen and all(t.dtype == torch.bfloat16 for t in frozen.values())
    assert not any("lora_" in name for name in frozen)  # adapters train: autocast keeps their casts
    assert any(name.endswith("base_layer.weight") for name in frozen)
    engines = {"hooks alone": HFEngine(policy, tokenizer), "region": HFEngine(policy, tokenizer, autocast=torch.bfloat16)}
    casts, samples = casts_and_samples(engines)
    assert 0 < casts["region", 3] == casts["region", 6] <= len(list(policy.parameters()))
    assert casts["hooks alone", 6] > casts["hooks alone", 3] > casts["region", 3]
    for steps in (3, 6):
        assert samples["region", steps] == samples["hooks alone", steps]
    with policy.disable_adapter():
        base = HFEngine(policy, tokenizer, autocast=torch.bfloat16).generate(
            PROMPTS, 2, SamplingParams(max_new_tokens=6, ignore_eos=True, seed=3))
    assert [c.logprobs for c in base] != [lp for _, lp in samples["region", 6]]  # the adapters took part
    assert not engines["region"]._casts  # the casts are dropped when the call ends


def test_frozen_linear_casts_leave_trainable_and_non_linear_weights(sharp):
    """Only float32 linear weights and biases that do not require grad; a tied output layer's weight is
    named by the output layer (so the embedding, which autocast leaves in float32, is not replaced)."""
    from rlvr.rollout.hf_engine import frozen_linear_casts

    model = copy.deepcopy(sharp[0])
    assert frozen_linear_casts(model, torch.bfloat16) == {}  # everything trains
    model.requires_grad_(False)
    casts = frozen_linear_casts(model, torch.bfloat16)
    linear = {f"{prefix}.{name}" for prefix, m in model.named_modules() if isinstance(m, torch.nn.Linear)
              for name, _ in m.named_parameters(recurse=False)}
    assert set(casts) == linear
    assert not any("embed" in name or "norm" in name for name in casts)
    for name, tensor in casts.items():
        torch.testing.assert_close(tensor, model.get_parameter(name).to(torch.bfloat16), rtol=0, atol=0)


def test_a_float32_autocast_opens_no_region(sharp):
    assert HFEngine(*sharp, autocast=torch.float32).autocast is None
