"""Rejection-sampling fine-tuning and expert iteration."""

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_data import tiny_model, tokenizer
from rlvr.algorithms.packing import PackedSFTConfig, train_sft_packed
from rlvr.algorithms.rft import RFTConfig, filter_correct, greedy_accuracy, rejection_sample, train_rft
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.tasks import get_task
from rlvr.tasks.base import Example
from rlvr.config import OptimConfig


def _completion(prompt, text):
    return Completion(prompt=prompt, prompt_ids=[], token_ids=[], logprobs=[], text=text, finish_reason="stop")


class ScriptedEngine:
    """Returns fixed completion texts per prompt, and records how it was called."""

    def __init__(self, script):
        self.script, self.calls, self.loaded = script, [], 0

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), n, sampling))
        return [_completion(p, t) for p in prompts for t in self.script[p][:n]]

    def load_weights(self, named_tensors):
        self.loaded += 1


EXAMPLES = [Example("sort 2 1=", "1 2", {"digits": [2, 1]}), Example("sort 3 3=", "3 3", {"digits": [3, 3]}),
            Example("sort 5 4=", "4 5", {"digits": [5, 4]})]
SCRIPT = {"sort 2 1=": ["1 2", "2 1", "1 2", "1  2"],  # two duplicates; "1  2" parses to the right answer
          "sort 3 3=": ["3", "3 3 3", "x", ""],  # nothing correct
          "sort 5 4=": ["4 5", "5 4", "5 4", "5 4"]}
VERIFY = get_task("sort", length=2).is_correct


def test_rejection_sample_by_hand():
    engine = ScriptedEngine(SCRIPT)
    cfg = RFTConfig(num_samples=4, seed=7, temperature=0.8, max_new_tokens=5)
    pairs, stats = rejection_sample(engine, EXAMPLES, VERIFY, cfg, round_index=2)
    assert pairs == [("sort 2 1=", "1 2"), ("sort 2 1=", "1  2"), ("sort 5 4=", "4 5")]
    assert stats == {"sample_accuracy": 4 / 12, "coverage": 2 / 3, "kept": 3.0}
    (prompts, n, sampling), = engine.calls
    assert prompts == [ex.prompt for ex in EXAMPLES] and n == 4
    assert sampling == SamplingParams(temperature=0.8, max_new_tokens=5, seed=9)  # a fresh seed per round


def test_rejection_sample_without_dedup_and_with_a_cap():
    cfg = RFTConfig(num_samples=4, dedup=False)
    pairs, _ = rejection_sample(ScriptedEngine(SCRIPT), EXAMPLES, VERIFY, cfg)
    assert [c for p, c in pairs if p == "sort 2 1="] == ["1 2", "1 2", "1  2"]
    cfg = RFTConfig(num_samples=4, max_per_prompt=1)
    capped, stats = rejection_sample(ScriptedEngine(SCRIPT), EXAMPLES, VERIFY, cfg)
    assert capped == [("sort 2 1=", "1 2"), ("sort 5 4=", "4 5")] and stats["kept"] == 2.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["1 2", "2 1", "1 2 ", "12", "1 2 2"]), min_size=1, max_size=10),
       st.booleans(), st.one_of(st.none(), st.integers(1, 4)))
def test_filter_correct_properties(texts, dedup, cap):
    ex = EXAMPLES[0]
    kept = filter_correct([_completion(ex.prompt, t) for t in texts], ex, VERIFY, dedup, cap)
    correct = [t for t in texts if VERIFY(t, ex)]
    assert all(VERIFY(t, ex) for t in kept)  # only verified samples survive
    expected = list(dict.fromkeys(correct)) if dedup else correct  # sampling order kept
    assert kept == (expected if cap is None else expected[:cap])


def test_greedy_accuracy_samples_once_at_temperature_zero():
    engine = ScriptedEngine(SCRIPT)
    assert greedy_accuracy(engine, EXAMPLES, VERIFY, max_new_tokens=6) == 2 / 3  # "1 2", "3", "4 5"
    (_, n, sampling), = engine.calls
    assert n == 1 and sampling.temperature == 0.0 and sampling.max_new_tokens == 6


def test_engine_returning_the_wrong_count_is_an_error():
    class Short(ScriptedEngine):
        def generate(self, prompts, n, sampling):
            return super().generate(prompts, n, sampling)[:-1]

    with pytest.raises(ValueError, match="returned 11 completions, expected 12"):
        rejection_sample(Short(SCRIPT), EXAMPLES, VERIFY, RFTConfig(num_samples=4))


@pytest.mark.parametrize("kwargs, message", [
    (dict(rounds=0), "^rounds must be > 0, got 0$"), (dict(num_samples=0), "^num_samples must be > 0, got 0$"),
    (dict(max_per_prompt=0), "max_per_prompt"), (dict(optim=OptimConfig(lr=-1.0)), "^optim.lr must be > 0"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RFTConfig(**kwargs).validate()


def test_round_without_correct_samples_trains_nothing():
    tok = tokenizer()
    model = tiny_model(tok)
    before = copy.deepcopy(model.state_dict())
    engine = ScriptedEngine({ex.prompt: ["9 9", "x"] for ex in EXAMPLES})
    result = train_rft(model, tok, engine, EXAMPLES, VERIFY, RFTConfig(num_samples=2, rounds=2))
    assert [r["skipped"] for r in result["rounds"]] == ["no correct samples: nothing to train on"] * 2
    assert engine.loaded == 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_train_rft_on_scripted_samples_fits_the_kept_ones():
    tok = tokenizer()
    model = tiny_model(tok)
    engine = ScriptedEngine(SCRIPT)
    cfg = RFTConfig(num_samples=4, rounds=1, epochs=20, batch_size=3, optim=OptimConfig(lr=3e-3), max_len=64)
    (row,) = train_rft(model, tok, engine, EXAMPLES, VERIFY, cfg)["rounds"]
    assert row["kept"] == 3.0 and row["sft_steps"] == 20 and engine.loaded == 1
    assert row["sft_loss_last"] < 0.2 * row["sft_loss_first"]


@pytest.mark.slow
def test_expert_iteration_improves_a_warm_started_model():
    torch.manual_seed(0)
    tok = tokenizer()
    model = tiny_model(tok)
    task = get_task("sort", length=3)
    demos = [(ex.prompt, ex.answer) for ex in task.train_examples(512, seed=1)]
    # 4 epochs: rejection sampling needs a warm start that already solves ~10% greedily; after 3 the
    # tiny model sits at that edge and whether it passes depends on the batch order (measured 6-11%)
    train_sft_packed(model, tok, demos, PackedSFTConfig(optim=OptimConfig(lr=3e-3), epochs=4, batch_size=32,
                                                        max_len=256))
    engine = HFEngine(model, tok)
    # 3 epochs a round (measured: greedy 0.14 -> 0.16, 0.30, 0.45; with 2 the gain after round 3 was 0.11)
    cfg = RFTConfig(rounds=3, num_samples=8, max_new_tokens=8, optim=OptimConfig(lr=1e-3), batch_size=16, epochs=3,
                    max_len=256)
    prompts = task.train_examples(256, seed=2)
    result = train_rft(model, tok, engine, prompts, task.is_correct, cfg, eval_examples=task.eval_examples(64, seed=0))
    rounds = result["rounds"]
    for r in rounds:  # kept: at least one per covered prompt, at most every correct sample
        assert len(prompts) * r["coverage"] <= r["kept"] <= len(prompts) * cfg.num_samples * r["sample_accuracy"]
        # first/last are single mini-batch losses: in later rounds, on an already fitted model, they
        # differ by less than batch-to-batch noise (0.4077 vs 0.4092 measured), so every round is
        # compared with where SFT on samples began, and only the first round with itself
        assert r["sft_loss_last"] < rounds[0]["sft_loss_first"]
    assert rounds[0]["sft_loss_last"] < rounds[0]["sft_loss_first"]
    assert rounds[-1]["sample_accuracy"] > rounds[0]["sample_accuracy"]  # on-policy samples get better
    assert rounds[-1]["eval_accuracy"] >= result["eval_accuracy_before"] + 0.15
