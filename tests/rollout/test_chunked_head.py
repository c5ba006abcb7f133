"""`train.logprob_chunk`: the learner's forward scores the output layer chunk by chunk (`rlvr.models.head`), with
the whole-logits forward's log-probs, entropies and gradients, in each layout (padded, shared prompt, packed)."""

import pytest
import torch

from rlvr.models.forward import cached_logprobs, policy_logprobs
from rlvr.models.head import chunks_head, scores_of_hidden
from rlvr.models.placement import autocast_forward

LAYOUTS = {"padded": dict(share_prefix=False), "shared prompt": dict(), "packed": dict(packing="always")}


def _forward(layout, chunk, top_p=1.0):
    def run(model, batch, temperature, with_entropy=False):
        return policy_logprobs(model, batch, temperature, with_entropy, top_p=top_p, chunk=chunk, **LAYOUTS[layout])
    return run


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_chunked_scoring_equals_the_whole_logits(sharp, layout, grouped_batch, same_gradients):
    model, _ = sharp
    batch = grouped_batch(0, [12, 12, 9], n=4, max_completion=8)
    head = model.get_output_embeddings()
    seen = []
    hook = head.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    logp, ent = _forward(layout, 3, top_p=0.9)(model, batch, 0.7, True)
    hook.remove()
    assert seen and all(shape[-1] == 0 for shape in seen[-1:])  # the call that scored returned no logits
    ref, ref_ent = _forward(layout, 0, top_p=0.9)(model, batch, 0.7, True)
    torch.testing.assert_close(logp[batch.mask], ref[batch.mask], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ent[batch.mask], ref_ent[batch.mask], atol=1e-6, rtol=1e-6)
    assert "forward" not in vars(head)  # the output layer's own forward is back
    same_gradients(model, batch, _forward(layout, 5), _forward(layout, 0))


def test_no_grad_passes_and_lora_policies_chunk_too(flat, lora_factory, grouped_batch):
    model, _ = flat
    batch = grouped_batch(3, [10, 7, 10], n=3, max_completion=6)
    torch.testing.assert_close(cached_logprobs(model, batch, 1.0, 4, chunk=7), cached_logprobs(model, batch, 1.0, 4),
                               atol=1e-6, rtol=0)
    lora = lora_factory("llama", seed=5)
    assert chunks_head(lora)
    torch.testing.assert_close(policy_logprobs(lora, batch, 1.0, chunk=4)[0], policy_logprobs(lora, batch, 1.0)[0],
                               atol=1e-6, rtol=0)


def test_half_precision_policy_scores_in_its_compute_dtype(sharp_factory, grouped_batch):
    model, _ = sharp_factory("qwen2", seed=3)
    autocast_forward(model, torch.device("cpu"), torch.bfloat16)  # as model.dtype: bfloat16 runs the policy
    batch = grouped_batch(1, [8, 8], n=3, max_completion=5)
    chunked, _ = policy_logprobs(model, batch, 1.0, share_prefix=False, chunk=2)
    whole, _ = policy_logprobs(model, batch, 1.0, share_prefix=False)
    torch.testing.assert_close(chunked, whole, atol=0, rtol=0)  # the same bf16 products, upcast alike


def test_output_layers_that_are_more_than_a_product_are_scored_from_logits(sharp_factory):
    model, _ = sharp_factory("qwen2", seed=4)
    assert chunks_head(model)
    model.config.final_logit_softcapping = 30.0  # Gemma 2: tanh-capped logits, which the chunks would not apply
    assert not chunks_head(model)
    hidden = torch.randn(2, 3, model.config.hidden_size)
    labels = torch.randint(0, model.config.vocab_size, (2, 3))
    logp, _ = scores_of_hidden(model, hidden, labels, 1.0, chunk=2)  # falls back to the layer's logits
    expected = torch.log_softmax(model.get_output_embeddings()(hidden), -1).gather(-1, labels[..., None])[..., 0]
    torch.testing.assert_close(logp, expected)
