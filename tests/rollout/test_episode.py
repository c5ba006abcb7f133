"""The episode runner: turns and observations laid out token by token as the chat template renders them, only the
model's tokens in the loss mask, the limits (turns, tokens, observation size), and the first turn of a group sampled
as one prompt with n samples."""

import contextlib

import pytest
import torch

from episode_fakes import BOS, EOS, ITEM, SAMPLING, TOK, Echo, ScriptedEngine, ids
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.chat import ChatRenderer, TemplateError
from rlvr.rollout.environment import StepResult
from rlvr.rollout.episode import EpisodeLimits, episode_metrics, model_tokens, run_episodes
from rlvr.tasks import Example

def test_an_episode_token_by_token():
    engine = ScriptedEngine(["ab", "stop"])
    [c] = run_episodes(engine, TOK, Echo, [ITEM], 1, SAMPLING, EpisodeLimits(max_turns=4, max_tokens=64))
    # <bos>q: | ab<eos> | AB | stop<eos>: the model's <eos> is its own, the template writes none after it
    assert c.prompt_ids == [BOS, *ids("q:")]
    assert c.token_ids == [*ids("ab"), EOS, *ids("AB"), *ids("stop"), EOS]
    assert c.loss_mask == [1, 1, 1, 0, 0, 1, 1, 1, 1, 1]
    assert c.logprobs == [-0.5] * 3 + [0.0] * 2 + [-0.5] * 5
    assert model_tokens(c.logprobs, c.loss_mask) == [-0.5] * 8
    episode = c.extra["episode"]
    assert episode["reward"] == 1.25 and episode["correct"] and episode["end"] == "done"
    assert [t["assistant"] for t in episode["turns"]] == ["ab", "stop"]
    assert episode["turns"][0]["observations"] == [{"role": "user", "content": "AB"}]
    assert episode["turns"][0]["observation_tokens"] == 2 and c.finish_reason == "stop"
    # turn 2 saw exactly the history: prompt + the first turn + the observation
    assert engine.calls[1][0] == [c.prompt_ids + c.token_ids[:5]]


def test_a_turn_without_eos_gets_the_templates_end_of_turn_as_an_environment_token():
    engine = ScriptedEngine(["ab~", "stop"])
    [c] = run_episodes(engine, TOK, Echo, [ITEM], 1, SAMPLING, EpisodeLimits(max_turns=4, max_tokens=64))
    assert c.token_ids == [*ids("ab"), EOS, *ids("AB"), *ids("stop"), EOS]
    assert c.loss_mask == [1, 1, 0, 0, 0, 1, 1, 1, 1, 1]  # the <eos> is the template's here, not sampled


def test_the_first_turn_of_a_group_is_one_prompt_with_n_samples():
    engine = ScriptedEngine(["ab", "stop"])
    items = [ITEM, Example("r:", "")]
    out = run_episodes(engine, TOK, Echo, items, 3, SAMPLING, EpisodeLimits())
    assert len(out) == 6 and [c.prompt_ids for c in out[:3]] == [[BOS, *ids("q:")]] * 3
    (first, n, _), (later, m, _) = engine.calls
    assert (n, m) == (3, 1) and len(first) == 2 and len(later) == 6
    assert engine.calls[1][2].seed != SAMPLING.seed  # each turn its own seed, derived from the call's


def test_limits_end_episodes():
    out = run_episodes(ScriptedEngine(["ab"]), TOK, Echo, [ITEM], 1, SAMPLING, EpisodeLimits(max_turns=3))
    episode = out[0].extra["episode"]
    assert episode["end"] == "max_turns" and len(episode["turns"]) == 3 and episode["reward"] == 0.75
    assert out[0].token_ids[-3:] == [*ids("ab"), EOS]  # nothing is fed back after the last turn
    # 9 tokens: ab<eos>AB (5), then 4 left: a turn of at most 4 tokens, cut there
    [c] = run_episodes(ScriptedEngine(["ab", "xyzzy"]), TOK, Echo, [ITEM], 1, SAMPLING,
                       EpisodeLimits(max_turns=5, max_tokens=9))
    assert len(c.token_ids) == 9 and c.finish_reason == "length" and c.extra["episode"]["end"] == "max_tokens"
    assert c.extra["episode"]["turns"][-1] == {**c.extra["episode"]["turns"][-1], "tokens": 4, "finish": "length"}


class Loud(Echo):
    def step(self, message):
        return StepResult([{"role": "user", "content": "x" * 1000}], 0.0, False)


def test_an_oversized_observation_is_cut_and_counted():
    [c] = run_episodes(ScriptedEngine(["ab"]), TOK, Loud, [ITEM], 1, SAMPLING,
                       EpisodeLimits(max_turns=2, max_tokens=200, max_observation_tokens=10))
    text = c.extra["episode"]["turns"][0]["observations"][0]["content"]
    assert text.startswith("x" * 10 + " ...(truncated)") and c.extra["episode"]["cut_observations"] == 2  # the last too
    assert episode_metrics([c])["episode/truncated_observations"] == 2.0


def test_metrics_of_a_batch_of_episodes():
    out = run_episodes(ScriptedEngine(["ab", "stop"]), TOK, Echo, [ITEM], 2, SAMPLING, EpisodeLimits())
    m = episode_metrics(out)
    assert m["episode/turns"] == 2 and m["episode/turns_solved"] == 2 and m["episode/length"] == 10
    assert m["episode/masked_share"] == pytest.approx(2 / 10) and m["episode/env_errors"] == 0


class Rewriting:
    """A chat template that drops earlier assistant turns (as Qwen3's drops past <think> blocks)."""

    chat_template = "x"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        kept = [m for i, m in enumerate(messages) if m["role"] != "assistant" or i == len(messages) - 1]
        return "|".join(m["content"] for m in kept) + ("|A:" if add_generation_prompt else "")


def test_a_template_that_rewrites_earlier_turns_is_refused():
    renderer = ChatRenderer(Rewriting())
    seen = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "o"}]
    with pytest.raises(TemplateError, match="not prefix-stable"):
        renderer.suffix_ids(seen, "b", None, [{"role": "user", "content": "p"}])
    with pytest.raises(TemplateError, match="has none"):
        ChatRenderer(type("NoTemplate", (), {"chat_template": None})())


def test_real_model_log_probs_of_an_episode_are_the_training_forwards(sharp):
    """The ids an episode feeds back are the ones the engine conditioned on: the training forward over the episode
    (its environment tokens out of the loss mask) gives back the sampler's log-probs of the model's tokens."""
    from rlvr.models.forward import policy_logprobs
    from rlvr.rollout.batch import build_batch, completion_values
    from rlvr.rollout.hf_engine import HFEngine

    model, tokenizer = sharp
    engine = HFEngine(model, tokenizer)
    out = run_episodes(engine, tokenizer, Echo, [ITEM, Example("zz", "")], 2, SamplingParams(max_new_tokens=5, seed=0),
                       EpisodeLimits(max_turns=3, max_tokens=30))
    assert any(0 in c.loss_mask for c in out)
    batch = build_batch([c.prompt_ids for c in out], [c.token_ids for c in out], None, torch.zeros(4), 0,
                        [c.loss_mask for c in out])
    with torch.no_grad():
        logprobs, _ = policy_logprobs(model, batch, temperature=1.0)
    sampled = completion_values(batch.mask, [model_tokens(c.logprobs, c.loss_mask) for c in out])
    torch.testing.assert_close(logprobs[batch.mask], sampled[batch.mask], atol=1e-4, rtol=1e-4)
    again = run_episodes(engine, tokenizer, Echo, [ITEM, Example("zz", "")], 2,
                         SamplingParams(max_new_tokens=5, seed=0), EpisodeLimits(max_turns=3, max_tokens=30))
    assert [c.token_ids for c in again] == [c.token_ids for c in out]  # a seeded call plays the same episodes


class Demonstrating(Echo):
    def demonstration(self, item, rng):
        return ["ab", "stop", "never played"]


def test_demonstration_episodes_are_rendered_as_sampled_ones():
    from rlvr.rollout.episode import demonstration_episodes

    [(prompt, tokens, mask)] = demonstration_episodes(TOK, Demonstrating, [ITEM], EpisodeLimits(), seed=0)
    sampled = run_episodes(ScriptedEngine(["ab", "stop"]), TOK, Echo, [ITEM], 1, SAMPLING, EpisodeLimits())[0]
    assert (prompt, tokens, mask) == (sampled.prompt_ids, sampled.token_ids, sampled.loss_mask)


def test_without_a_demonstration_the_items_answer_is_a_one_turn_episode():
    from rlvr.rollout.episode import demonstration_episodes

    [(prompt, tokens, mask)] = demonstration_episodes(TOK, Echo, [Example("q:", "ab")], EpisodeLimits(), seed=0)
    assert (prompt, tokens, mask) == ([BOS, *ids("q:")], [*ids("ab"), EOS], [1, 1, 1])


@pytest.mark.parametrize("cascade", [True, False])
def test_the_engine_prefills_only_what_a_turn_adds(sharp, cascade, monkeypatch):
    """Inside an episode batch rlvr's engine keeps each sequence's keys/values (`reuse_histories`): a later turn's
    forward runs the observation, not the history again, and the episodes are those of a full prefill (the first
    turn's keys kept from the group's shared prompt with cascade attention, or from each row's copy). The cache's
    fresh memory is NaN here (`torch.empty` may hand back anything): no column that was never written is read."""
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.rollout.kv_cache import PreallocatedKVCache

    allocate = PreallocatedKVCache._allocate

    def poisoned(cache, layer, key, value):
        allocate(cache, layer, key, value)
        cache.keys[layer].fill_(float("nan"))
        cache.values[layer].fill_(float("nan"))

    monkeypatch.setattr(PreallocatedKVCache, "_allocate", poisoned)
    model, tokenizer = sharp
    engine, widths = HFEngine(model, tokenizer, cascade=cascade), []
    forward = engine._forward
    engine._forward = lambda ids, *a, **k: widths.append(ids.shape[1]) or forward(ids, *a, **k)
    items, greedy = [ITEM, Example("zz", "")], SamplingParams(temperature=0, max_new_tokens=5)
    limits = EpisodeLimits(max_turns=3, max_tokens=40)
    kept = run_episodes(engine, tokenizer, Echo, items, 2, greedy, limits)
    prefills = [w for w in widths if w > 1]  # the decoding steps run one token
    assert prefills[0] == 3 and all(w < 3 + 5 for w in prefills[1:])  # <bos>q: then an observation, not a history
    engine._forward = forward
    engine.reuse_histories = contextlib.nullcontext  # the runner then prefills every history whole
    full = run_episodes(engine, tokenizer, Echo, items, 2, greedy, limits)
    assert [c.token_ids for c in kept] == [c.token_ids for c in full]
    assert any(len(c.extra["episode"]["turns"]) > 1 for c in kept)
    for a, b in zip(kept, full):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)


def test_past_its_cap_the_engine_keeps_no_history_and_the_episodes_are_the_same(sharp):
    """`env.kv_cache_mb`: with a cap the kept keys/values pass, a call keeps none (what it had kept is freed) and the
    next turn prefills each history whole; the episodes are those of an uncapped run."""
    from rlvr.rollout.hf_engine import HFEngine
    from rlvr.rollout.histories import Histories

    model, tokenizer = sharp
    items, greedy = [ITEM, Example("zz", "")], SamplingParams(temperature=0, max_new_tokens=5)
    c = model.config
    token = c.num_hidden_layers * 2 * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 4  # bytes
    runs, tight_mb = {}, 10 * token / 2**20  # one sequence of the first turn fits (3 + 4 tokens), not the batch's 4
    for cap_mb in (1024.0, 0.0, tight_mb):  # uncapped here, none kept, a cap passed mid-call
        engine, widths = HFEngine(model, tokenizer), []
        forward = engine._forward
        engine._forward = lambda ids, *a, forward=forward, **k: widths.append(ids.shape[1]) or forward(ids, *a, **k)
        out = run_episodes(engine, tokenizer, Echo, items, 2, greedy, EpisodeLimits(max_turns=3, max_tokens=40,
                                                                                   kv_cache_mb=cap_mb))
        runs[cap_mb] = (out, [w for w in widths if w > 1])
    kept, full, tight = runs[1024.0], runs[0.0], runs[tight_mb]
    assert any(len(c.extra["episode"]["turns"]) > 1 for c in kept[0])
    assert kept[1][1:] and all(w < 8 for w in kept[1][1:])  # an observation's tokens, not a history
    assert full[1] == tight[1] and all(w >= 8 for w in full[1][1:])  # every later turn prefills a whole history
    for out, _ in (full, tight):
        assert [c.token_ids for c in out] == [c.token_ids for c in kept[0]]
        for a, b in zip(out, kept[0]):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
    store = Histories(max_bytes=100)
    kv = [(torch.zeros(1, 3, 4), torch.zeros(1, 3, 4))]  # 2 x 12 float32: 96 bytes
    store.add([1, 2, 3], kv)
    assert store.longest([1, 2, 3, 4]) == (3, kv) and not store.dropped
    store.add([5, 6, 7], kv)  # 192 bytes: past the cap, nothing kept
    assert store.dropped and store.longest([1, 2, 3, 4]) == (0, None) and not store.kept
    store.add([8], [(torch.zeros(1, 1, 1), torch.zeros(1, 1, 1))])
    assert not store.kept
