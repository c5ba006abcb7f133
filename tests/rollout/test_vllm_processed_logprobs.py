"""VLLMEngine in `processed_logprobs` mode (rollout.temperature/top-k/top-p): its log-probs are those of the
distribution the tokens were sampled from, equal to a plain forward's processed by rlvr.core.process_logits.
Runs in .venv-vllm: `bash scripts/test_vllm.sh`."""

import pytest
import torch

from rlvr.rollout import SamplingParams
from vllm_helpers import LOGPROB_ATOL, PROMPTS, closed_after, own_engines_only, policy, recomputed_logprobs  # noqa: F401

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def processed_engine(policy):
    from rlvr.rollout.vllm_engine import VLLMEngine

    # no sleep mode: on a GPU vLLM allows one engine with it per process (test_vllm_engine's `engine` has it)
    yield from closed_after(VLLMEngine(policy[2], dtype="float32", enforce_eager=True, enable_sleep_mode=False,
                                        logprobs_mode="processed_logprobs"))


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.8)])
def test_processed_logprobs_are_under_the_sampled_distribution(policy, processed_engine, temperature, top_k, top_p):
    model = policy[0]
    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=10, seed=1)
    for c in processed_engine.generate(PROMPTS[:2], 2, sampling):
        expected = recomputed_logprobs(model, c, temperature, top_k, top_p)
        assert torch.isfinite(expected).all()  # every sampled token survived the filters
        torch.testing.assert_close(torch.tensor(c.logprobs), expected, atol=LOGPROB_ATOL, rtol=0)
    if (top_k, top_p) == (0, 1.0):  # tempering moves the log-probs away from the raw ones
        raw = recomputed_logprobs(model, c)
        assert not torch.allclose(torch.tensor(c.logprobs), raw, atol=1e-3)
