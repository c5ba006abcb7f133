"""Offline preference training (DPO, IPO, SimPO, LN-DPO) on the tiny model."""

import copy
import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_data import TEST_SIZES, sort_pairs, tiny_model, tokenizer
from rlvr.algorithms.common import completion_logprobs
from rlvr.algorithms.preference import (
    PreferenceConfig, PreferencePair, as_pairs, encode_pairs, evaluate_preference, cache_reference,
    load_preference_pairs, pairs_and_holdout, train_preference,
)
from rlvr.models import build_tiny_model
from rlvr.config import OptimConfig

PAD = 0


def test_load_preference_pairs(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "a", "chosen": "b", "rejected": "c", "source": 1}) + "\n")
    assert load_preference_pairs(path) == [PreferencePair("a", "b", "c")]


@pytest.mark.parametrize("content, message", [
    ("", "preference data file .* is empty"),
    (json.dumps({"prompt": "a", "chosen": "b"}), r"p.jsonl:1: missing field\(s\) \['rejected'\]"),
])
def test_load_preference_pairs_errors(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_preference_pairs(path)


def test_as_pairs_checks_dicts():
    assert as_pairs([{"prompt": "a", "chosen": "b", "rejected": "c"}]) == [PreferencePair("a", "b", "c")]
    with pytest.raises(ValueError, match=r"pair 1: missing field\(s\) \['chosen'\]"):
        as_pairs([PreferencePair("a", "b", "c"), {"prompt": "a", "rejected": "c"}])
    with pytest.raises(ValueError, match="no preference pairs"):
        as_pairs([])
    with pytest.raises(ValueError, match="pair 0: chosen and rejected are identical"):
        as_pairs([PreferencePair("a", "b", "b")])


@pytest.mark.parametrize("kwargs, message", [
    (dict(loss="kto"), r"^loss: unknown 'kto'; choose from \['dpo', 'ipo', 'simpo', 'ln_dpo'\]$"),
    (dict(loss="ln_dpo"), "has no default beta"),
    (dict(beta=-1.0), "beta must be > 0"),
    (dict(gamma=0.5), "gamma is SimPO's margin"),
    (dict(loss="ipo", label_smoothing=0.1), "label_smoothing applies to dpo only"),
    (dict(max_length=0), r"^max_length must be > 0, got 0$"),
])
def test_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PreferenceConfig(**kwargs).validate()


def test_max_length_is_an_error_not_a_truncation():
    tok = tokenizer()
    tokens = len("sort 3 1 2=") + len("1 2 3") + 1  # one token per character, plus EOS
    with pytest.raises(ValueError, match=rf"pair 0: prompt \+ chosen is {tokens} tokens \(11 \+ 6\), more than "
                                         r"max_length=10"):
        encode_pairs(tok, [PreferencePair("sort 3 1 2=", "1 2 3", "3 1 2")], max_length=10)


def _pairs_file(path, line: int, **change):
    """40 sorting pairs as jsonl, the one on `line` (from 1) changed."""
    rows = sort_pairs(40, seed=0)
    rows[line - 1] = {**rows[line - 1], **change}
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_row_errors_name_the_file_and_line_whatever_the_split(tmp_path):
    """The errors said `pair 29` (0-based) for line 30, or `pair 3` (the position after the held-out split and the
    shuffle) for a long pair on line 30: every row error names `file:LINE`."""
    tok = tokenizer()
    same = _pairs_file(tmp_path / "same.jsonl", 30, rejected=sort_pairs(40, seed=0)[29]["chosen"])
    with pytest.raises(ValueError, match=r"same.jsonl:30: chosen and rejected are identical"):
        load_preference_pairs(same)  # on reading, before any model is loaded
    pairs = load_preference_pairs(_pairs_file(tmp_path / "long.jsonl", 30, chosen=" ".join("1" * 25)))
    assert [p.where for p in pairs[:2]] == [f"{tmp_path / 'long.jsonl'}:1", f"{tmp_path / 'long.jsonl'}:2"]
    for eval_pairs in (None, pairs[:5]):  # long pair held out, or trained on
        with pytest.raises(ValueError, match=r"long.jsonl:30: prompt \+ chosen is 63 tokens \(13 \+ 50\), more than "
                                             r"max_length=30"):
            train_preference(tiny_model(tok), tok, pairs, PreferenceConfig(max_length=30), eval_pairs=eval_pairs)
    held_out = load_preference_pairs(_pairs_file(tmp_path / "eval.jsonl", 7, chosen=" ".join("1" * 25)))
    with pytest.raises(ValueError, match=r"eval.jsonl:7: prompt \+ chosen is 63 tokens"):
        train_preference(tiny_model(tok), tok, sort_pairs(8, seed=0), PreferenceConfig(max_length=30),
                         eval_pairs=held_out)
    row = {"prompt": "a", "chosen": "b", "rejected": "c"}
    with pytest.raises(ValueError, match="eval pair 1: chosen and rejected are identical"):
        pairs_and_holdout([row], [row, {**row, "rejected": "b"}], 0.0, 0)


def test_a_pair_longer_than_the_models_context_is_refused_before_training():
    """A chosen or rejected past max_position_embeddings trained (only transformers' warning said so)."""
    tok = tokenizer()
    model = build_tiny_model(tok, **TEST_SIZES, max_position_embeddings=32)
    start = copy.deepcopy(model.state_dict())
    pairs = sort_pairs(12, seed=0)
    pairs[5] = {**pairs[5], "rejected": " ".join("1" * 20)}
    with pytest.raises(ValueError, match=r"^pair 5: prompt \+ rejected is 53 tokens \(13 \+ 40\), which exceeds the "
                                         r"model's max_position_embeddings \(32\)"):
        train_preference(model, tok, pairs, PreferenceConfig(optim=OptimConfig(lr=1e-2)))
    assert all(torch.equal(start[k], v) for k, v in model.state_dict().items())


def _setup(n=24, seed=0):
    tok = tokenizer()
    pairs = as_pairs(sort_pairs(n, seed))
    return tok, tiny_model(tok), encode_pairs(tok, pairs, None)


def test_cached_reference_equals_reference_logprobs():
    tok, model, enc = _setup(8)
    cache_reference(model, enc, PAD, batch_size=3)
    for i in range(len(enc.prompt)):
        logp, _ = completion_logprobs(model, [enc.prompt[i]] * 2, [enc.chosen[i], enc.rejected[i]], PAD)
        torch.testing.assert_close(torch.stack([enc.ref_chosen[i], enc.ref_rejected[i]]), logp.detach(),
                                   rtol=0, atol=1e-5)


def test_at_the_reference_dpo_loss_is_log2_and_ipo_loss_is_closed_form():
    tok, model, enc = _setup(10)
    cache_reference(model, enc, PAD, batch_size=4)
    dpo = evaluate_preference(model, enc, PreferenceConfig(loss="dpo", batch_size=4), PAD)
    assert dpo["loss"] == pytest.approx(math.log(2), abs=1e-6)  # -log sigmoid(0)
    assert dpo["margin"] == pytest.approx(0.0, abs=1e-6) and dpo["accuracy"] == 0.0
    ipo = evaluate_preference(model, enc, PreferenceConfig(loss="ipo", beta=0.1, batch_size=4), PAD)
    assert ipo["loss"] == pytest.approx((1 / (2 * 0.1)) ** 2, rel=1e-5)  # (0 - 1/(2 tau))^2


@settings(max_examples=8, deadline=None)
@given(st.text("0123456789 ", min_size=1, max_size=8), st.text("0123456789 ", min_size=1, max_size=8))
def test_policy_equal_to_reference_gives_zero_margin(chosen, rejected):
    tok = tokenizer()
    model = tiny_model(tok)
    enc = encode_pairs(tok, [PreferencePair("sort 1 2=", chosen, rejected)], None)
    cache_reference(model, enc, PAD, 1)
    for loss in ("dpo", "ln_dpo"):
        metrics = evaluate_preference(model, enc, PreferenceConfig(loss=loss, beta=0.5), PAD)
        assert metrics["margin"] == pytest.approx(0.0, abs=1e-6)
        assert metrics["loss"] == pytest.approx(math.log(2), abs=1e-6)


def test_simpo_reward_is_length_averaged_logprob():
    tok, model, enc = _setup(6)
    metrics = evaluate_preference(model, enc, PreferenceConfig(loss="simpo", beta=2.0, batch_size=6), PAD)
    logp_c, n_c = completion_logprobs(model, enc.prompt, enc.chosen, PAD)
    assert metrics["chosen_reward"] == pytest.approx((2.0 * logp_c / n_c).mean().item(), rel=1e-5)
    assert enc.ref_chosen is None  # SimPO needs no reference


def test_explicit_reference_model_matches_precomputed_initial_policy():
    tok = tokenizer()
    pairs = sort_pairs(24, seed=0)
    a, b = tiny_model(tok), tiny_model(tok)
    reference = copy.deepcopy(b)
    cfg = PreferenceConfig(optim=OptimConfig(lr=1e-3), batch_size=8, epochs=1)
    ra = train_preference(a, tok, pairs, cfg)
    rb = train_preference(b, tok, pairs, cfg, ref_model=reference)
    assert ra["eval_after"] == pytest.approx(rb["eval_after"], abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("loss, beta", [("dpo", 0.1), ("ipo", 0.1), ("simpo", 2.0), ("ln_dpo", 0.1)])
def test_training_raises_held_out_preference_accuracy(loss, beta):
    torch.manual_seed(0)
    tok = tokenizer()
    model = tiny_model(tok)
    initial = copy.deepcopy(model)
    train, held_out = sort_pairs(64, seed=0), sort_pairs(32, seed=1, held_out=True)
    cfg = PreferenceConfig(loss=loss, beta=beta, optim=OptimConfig(lr=3e-3), epochs=3, batch_size=16)
    result = train_preference(model, tok, train, cfg, eval_pairs=held_out)
    before, after = result["eval_before"], result["eval_after"]
    assert result["num_eval"] == len(held_out) and len(result["history"]) == 3 * 4
    assert after["accuracy"] >= 0.85 and after["accuracy"] > before["accuracy"]
    assert after["loss"] < before["loss"] and after["margin"] > before["margin"]
    # the policy itself now prefers the sorted answers: log pi(chosen) - log pi(rejected) rose
    enc = encode_pairs(tok, as_pairs(held_out), None)
    gaps = []
    for m in (initial, model):
        with torch.no_grad():
            c, _ = completion_logprobs(m, enc.prompt, enc.chosen, PAD)
            r, _ = completion_logprobs(m, enc.prompt, enc.rejected, PAD)
        gaps.append((c - r).mean().item())
    assert gaps[1] > gaps[0]


def test_eval_fraction_split_and_history(tmp_path):
    tok = tokenizer()
    pairs = sort_pairs(20, seed=2)
    steps = []
    cfg = PreferenceConfig(optim=OptimConfig(lr=1e-4), batch_size=6, eval_fraction=0.25)
    result = train_preference(tiny_model(tok), tok, pairs, cfg, on_step=steps.append)
    assert result["num_eval"] == round(0.25 * len(pairs)) and result["num_train"] == len(pairs) - result["num_eval"]
    assert steps == result["history"] and len(steps) == math.ceil(result["num_train"] / 6)
    assert all(math.isfinite(row["loss"]) and "grad_norm" in row for row in steps)
