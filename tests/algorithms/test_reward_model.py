"""Bradley-Terry reward model: the loss, pooling, save/load, training, and its use as an RL reward."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_data import TEST_SIZES, sort_pairs, tiny_model, tokenizer
from rlvr.algorithms.reward_model import RewardModelConfig, bradley_terry_loss, train_reward_model
from rlvr.rewards.reward_model import (
    ProxyGoldReward, RewardModelReward, load_reward_model, proxy_and_gold_scores, reward_model_from_lm, reward_scores,
    score_texts, sequence_rewards,
)
from rlvr.rollout.batch import encode_prompt_completion, pad_right
from rlvr.models import build_tiny_model, save_model
from rlvr.rewards.base import BatchContext, RewardBatch, RewardOutput
from rlvr.tasks import get_task
from rlvr.config import OptimConfig

finite = st.floats(-20, 20, allow_nan=False)


def test_bradley_terry_loss_by_hand():
    loss, metrics = bradley_terry_loss(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0]))
    expected = [math.log(1 + math.exp(-1.0)), math.log(1 + math.exp(2.0))]  # -log sigmoid(r_w - r_l)
    torch.testing.assert_close(loss, torch.tensor(expected))
    assert metrics["accuracy"].item() == 0.5 and metrics["margin"].item() == pytest.approx(-0.5)
    centred, _ = bradley_terry_loss(torch.tensor([1.0]), torch.tensor([0.0]), center_coef=0.1)
    assert centred.item() == pytest.approx(expected[0] + 0.1 * 1.0 ** 2)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=8), finite)
def test_bradley_terry_properties(pairs, shift):
    w = torch.tensor([a for a, _ in pairs], dtype=torch.float64, requires_grad=True)
    l = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    loss, _ = bradley_terry_loss(w, l)
    swapped, _ = bradley_terry_loss(l, w.detach())
    torch.testing.assert_close(loss - swapped, -(w.detach() - l))  # -log s(x) + log s(-x) = -x
    shifted, _ = bradley_terry_loss(w.detach() + shift, l + shift)
    torch.testing.assert_close(shifted, loss.detach())  # BT sees only reward differences
    loss.sum().backward()
    torch.testing.assert_close(w.grad, -torch.sigmoid(l - w.detach()))  # d/dr_w = -sigmoid(r_l - r_w)


def test_bradley_terry_bad_input():
    with pytest.raises(ValueError, match=r"both be \(P,\)"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(3))
    with pytest.raises(ValueError, match="center_coef"):
        bradley_terry_loss(torch.zeros(2), torch.zeros(2), center_coef=-1.0)


def test_reward_model_from_lm_copies_the_backbone():
    tok = tokenizer()
    lm = tiny_model(tok)
    rm = reward_model_from_lm(lm)
    for (name, p), q in zip(lm.model.state_dict().items(), rm.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert rm.score.weight.shape == (1, lm.config.hidden_size)


def _encode(tok, texts):
    seqs = [sum(encode_prompt_completion(tok, p, c), []) for p, c in texts]
    return seqs, *pad_right(seqs, tok.pad_token_id)


TEXTS = [("sort 3 1 2=", "1 2 3"), ("sort 9 0=", "0 9 9 9 9"), ("sort 5 1=", "1")]


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_pooling_reads_the_last_real_token_even_when_pad_is_eos(arch):
    tok = tokenizer()
    rm = reward_model_from_lm(tiny_model(tok, arch))
    seqs, ids, attn = _encode(tok, TEXTS)
    with torch.no_grad():
        batched = sequence_rewards(rm, ids, attn)
        alone = torch.cat([sequence_rewards(rm, torch.tensor([s]), torch.ones(1, len(s), dtype=torch.bool))
                           for s in seqs])
        torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)
        # pad != eos: the HF forward pools the same token
        torch.testing.assert_close(rm(input_ids=ids, attention_mask=attn.long()).logits.squeeze(-1), batched,
                                   rtol=0, atol=1e-5)
        # pad == eos: HF's "rightmost non-pad token" rule skips the closing EOS; ours does not change
        rm.config.pad_token_id = tok.eos_token_id
        eos_padded = ids.masked_fill(~attn, tok.eos_token_id)
        torch.testing.assert_close(sequence_rewards(rm, eos_padded, attn), batched, rtol=0, atol=1e-5)
        assert not torch.allclose(rm(input_ids=eos_padded, attention_mask=attn.long()).logits.squeeze(-1), batched)


def test_sequence_rewards_requires_right_padding():
    tok = tokenizer()
    rm = reward_model_from_lm(tiny_model(tok))
    with pytest.raises(ValueError, match="right padding"):
        sequence_rewards(rm, torch.ones(1, 3, dtype=torch.long), torch.tensor([[False, True, True]]))
    with pytest.raises(ValueError, match="no `score` head"):
        sequence_rewards(tiny_model(tok), torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.bool))


def test_save_and_load_round_trip(tmp_path):
    tok = tokenizer()
    lm = tiny_model(tok)
    rm = reward_model_from_lm(lm, seed=1)
    save_model(rm, tok, tmp_path / "rm")
    save_model(lm, tok, tmp_path / "lm")
    loaded = load_reward_model(tmp_path / "rm")
    prompts, completions = [p for p, _ in TEXTS], [c for _, c in TEXTS]
    for (name, p), q in zip(rm.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(p, q), name  # bit-identical weights
    with torch.no_grad():  # scores agree up to float32 kernel rounding (the loaded tensors are laid out anew)
        torch.testing.assert_close(score_texts(loaded, tok, prompts, completions),
                                   score_texts(rm, tok, prompts, completions), rtol=0, atol=1e-6)
    from_lm = load_reward_model(tmp_path / "lm", from_lm=True)  # a causal LM folder: same backbone, new head
    assert torch.equal(from_lm.model.embed_tokens.weight, rm.model.embed_tokens.weight)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_reward_model(tmp_path)


@pytest.mark.slow
def test_training_lifts_held_out_accuracy_above_chance():
    torch.manual_seed(0)
    tok = tokenizer()
    rm = reward_model_from_lm(tiny_model(tok))
    train, held_out = sort_pairs(128, seed=0), sort_pairs(64, seed=1, held_out=True)
    result = train_reward_model(rm, tok, train, RewardModelConfig(optim=OptimConfig(lr=1e-3), epochs=3, batch_size=16),
                                eval_pairs=held_out)
    before, after = result["eval_before"], result["eval_after"]
    assert after["accuracy"] >= 0.85 and after["accuracy"] > before["accuracy"]
    assert after["loss"] < before["loss"] < math.log(2) + 0.1  # small initial head: BT starts near log 2


@pytest.mark.parametrize("max_length, limit", [
    (None, r"which exceeds the model's max_position_embeddings \(32\)"),
    (30, "more than max_length=30"),  # `rlvr dpo`'s --max-length, which the reward model had not
])
def test_a_pair_too_long_is_refused_before_training(max_length, limit):
    tok = tokenizer()
    rm = reward_model_from_lm(build_tiny_model(tok, **TEST_SIZES, max_position_embeddings=32))
    start = {k: v.clone() for k, v in rm.state_dict().items()}
    pairs = sort_pairs(12, seed=0)
    pairs[5] = {**pairs[5], "chosen": " ".join("1" * 20)}
    with pytest.raises(ValueError, match=rf"^pair 5: prompt \+ chosen is 53 tokens \(13 \+ 40\), {limit}"):
        train_reward_model(rm, tok, pairs, RewardModelConfig(optim=OptimConfig(lr=1e-2), max_length=max_length))
    assert all(torch.equal(start[k], v) for k, v in rm.state_dict().items())


def test_center_coef_pulls_rewards_towards_zero():
    tok = tokenizer()
    train = sort_pairs(32, seed=0)
    means = []
    for coef in (0.0, 1.0):
        torch.manual_seed(0)
        rm = reward_model_from_lm(tiny_model(tok))
        cfg = RewardModelConfig(optim=OptimConfig(lr=3e-3), epochs=2, batch_size=8, center_coef=coef,
                                eval_fraction=0.25)
        result = train_reward_model(rm, tok, train, cfg)
        after = result["eval_after"]
        means.append(abs(after["chosen_reward"] + after["rejected_reward"]))
    assert means[1] < means[0]


def test_reward_model_reward_matches_batch_scoring():
    tok = tokenizer()
    rm = reward_model_from_lm(tiny_model(tok))
    prompts, completions = [p for p, _ in TEXTS], [c for _, c in TEXTS]
    reward = RewardModelReward(rm, tok, batch_size=2, shift=0.5, scale=2.0)
    with torch.no_grad():
        raw = score_texts(rm, tok, prompts, completions)
    expected = ((raw - 0.5) * 2.0).tolist()
    batch = reward.score_batch(prompts, completions, [{}] * 3)
    assert isinstance(batch, RewardBatch) and batch.scores == pytest.approx(expected, abs=1e-5)
    single = [reward(p, c, {}) for p, c in zip(prompts, completions)]
    assert all(isinstance(o, RewardOutput) for o in single)
    assert [o.score for o in single] == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="batch_size"):
        RewardModelReward(rm, tok, batch_size=0)


def test_proxy_and_gold_scores_by_hand():
    proxy = lambda prompt, completion, example: float(len(completion))  # a gameable proxy: longer is better
    task = get_task("sort", length=2)
    gold = task.reward_fn()
    examples = [{"digits": [2, 1]}] * 2
    scores = proxy_and_gold_scores(["sort 2 1="] * 2, ["1 2", "1 2 2 2"], examples, proxy, gold)
    assert scores == {"proxy": [3.0, 7.0], "gold": [1.0, 0.0]}  # the proxy prefers the wrong answer
    combined = ProxyGoldReward(proxy, gold)
    out = combined("sort 2 1=", "1 2 2 2", examples[0])
    assert out.score == 7.0 and out.components == {"proxy": 7.0, "gold": 0.0}
    batch = combined.score_batch(["sort 2 1="] * 2, ["1 2", "1 2 2 2"], examples, BatchContext(group_size=2))
    assert batch.scores == [3.0, 7.0] and batch.metrics() == {"reward/proxy": 5.0, "reward/gold": 0.5,
                                                             "reward/errors": 0.0, "reward/timeouts": 0.0}
    with pytest.raises(ValueError, match="got 1 prompts, 2 completions"):
        proxy_and_gold_scores(["p"], ["a", "b"], examples, proxy, gold)


def test_reward_scores_prefers_score_batch():
    class Batched:
        def score_batch(self, prompts, completions, examples, ctx=None):
            return RewardBatch([float(len(prompts))] * len(prompts))

        def __call__(self, prompt, completion, example):
            raise AssertionError("the batched path must be used")

    assert reward_scores(Batched(), ["a", "b"], ["x", "y"], [{}, {}]) == [2.0, 2.0]
