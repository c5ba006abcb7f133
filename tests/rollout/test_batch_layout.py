"""The one prompt + completion layout (`rlvr.rollout.batch`) recomputes exactly what the engine sampled."""

import torch

from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.batch import build_batch, policy_logprobs


def test_policy_logprobs_recompute_the_sampler_logprobs(flat):
    model, tokenizer = flat
    completions = HFEngine(model, tokenizer).generate(["sort 3 1\n", "1+1=", "a"], 2,
                                                      SamplingParams(max_new_tokens=12, seed=3))
    batch = build_batch([c.prompt_ids for c in completions], [c.token_ids for c in completions], None,
                        torch.zeros(len(completions)), tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = policy_logprobs(model, batch, temperature=1.0)  # (B, W)
    for row, c in enumerate(completions):
        got = logp[row][batch.mask[row]]  # completion tokens of this row, in order
        torch.testing.assert_close(got, torch.tensor(c.logprobs), atol=2e-5, rtol=0)
