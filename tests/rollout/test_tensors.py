import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rollout import Completion, HFEngine, SamplingParams, completions_to_tensors


def completion(prompt_ids, token_ids, logprobs=None):
    logprobs = logprobs if logprobs is not None else [-0.5] * len(token_ids)
    return Completion(prompt="", prompt_ids=prompt_ids, token_ids=token_ids, logprobs=logprobs, text="",
                      finish_reason="length")


def test_layout_by_hand():
    batch = completions_to_tensors(
        [completion([5, 6], [7, 8, 9], [-1.0, -2.0, -3.0]), completion([4, 5, 6], [2], [-0.25])], pad_id=0)
    assert batch["prompt_length"] == 3
    assert batch["input_ids"].tolist() == [[0, 5, 6, 7, 8, 9], [4, 5, 6, 2, 0, 0]]
    assert batch["attention_mask"].tolist() == [[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 3, 3]]
    assert batch["completion_ids"].tolist() == [[7, 8, 9], [2, 0, 0]]
    assert batch["completion_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["old_logprobs"].tolist() == [[-1.0, -2.0, -3.0], [-0.25, 0.0, 0.0]]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(1, 50), min_size=1, max_size=6),
                          st.lists(st.integers(1, 50), max_size=6)), min_size=1, max_size=5))
def test_tokens_and_masks_reconstruct_every_completion(pairs):
    batch = completions_to_tensors([completion(p, t) for p, t in pairs], pad_id=0)
    width = batch["prompt_length"]
    for b, (prompt, tokens) in enumerate(pairs):
        row = batch["input_ids"][b]
        assert row[width - len(prompt): width].tolist() == prompt
        assert batch["completion_ids"][b][: len(tokens)].tolist() == tokens
        assert batch["completion_mask"][b].sum().item() == len(tokens)
        assert batch["attention_mask"][b].sum().item() == len(prompt) + len(tokens)
        real = batch["attention_mask"][b].bool()
        assert batch["position_ids"][b][real].tolist() == list(range(len(prompt) + len(tokens)))


def test_documented_recipe_recomputes_the_sampler_logprobs(flat):
    model, tokenizer = flat
    completions = HFEngine(model, tokenizer).generate(["sort 3 1\n", "1+1=", "a"], 2,
                                                      SamplingParams(max_new_tokens=12, seed=3))
    batch = completions_to_tensors(completions, tokenizer.pad_token_id)
    width = batch["prompt_length"]
    with torch.no_grad():
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    logp = logits[:, width - 1: -1].log_softmax(-1).gather(-1, batch["completion_ids"][..., None])[..., 0]
    mask = batch["completion_mask"].bool()
    torch.testing.assert_close(torch.where(mask, logp, 0.0), batch["old_logprobs"], atol=2e-5, rtol=0)


def test_bad_input():
    with pytest.raises(ValueError, match="non-empty"):
        completions_to_tensors([], pad_id=0)
    with pytest.raises(ValueError, match="logprob count"):
        completions_to_tensors([completion([1], [2, 3], [-1.0])], pad_id=0)
    with pytest.raises(ValueError, match="empty prompt"):
        completions_to_tensors([completion([], [2])], pad_id=0)
