"""vLLM on the real model: the embedded SmolLM2-135M-Instruct (llama, 49,152-token BPE, chat template), served by
VLLMEngine from its converted folder, decodes the recipe's prompts as rlvr's own engine does and reports the
log-probs of a plain forward pass. Runs in .venv-vllm (`bash scripts/test_vllm.sh`), where setup_vllm.sh installs
the model's package too; the tiny models of test_vllm_engine.py cannot show a real tokenizer's or a real
checkpoint's mismatch."""

import os

import pytest
import torch

from rlvr.config import load_config
from rlvr.models import load_model, load_tokenizer
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.train.preflight import run_task

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default takes a share of all RAM
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # cores are shared with other jobs

pytestmark = [pytest.mark.vllm, pytest.mark.real_model]

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=24)
LOGPROB_ATOL = 2e-2 if torch.cuda.is_available() else 1e-4  # as test_vllm_engine.py: float32 on a CPU


@pytest.fixture(scope="module")
def prompts():
    task = run_task(load_config("smollm2_full"))
    return [e.prompt for e in task.eval_examples(2, seed=0)]  # two training-family and two held-out questions


@pytest.fixture(scope="module")
def real(smollm2_folder):
    from rlvr.rollout.vllm_engine import VLLMEngine, release_shared

    release_shared()  # an earlier module's shared engine: one engine at a time
    engine = VLLMEngine(smollm2_folder, dtype="float32", enforce_eager=True, enable_sleep_mode=False)
    yield load_model(smollm2_folder), load_tokenizer(smollm2_folder), engine
    engine.close()


def test_greedy_decodes_the_real_model_as_rlvrs_engine(real, prompts):
    model, tokenizer, engine = real
    ours, reference = engine.generate(prompts, 1, GREEDY), HFEngine(model, tokenizer).generate(prompts, 1, GREEDY)
    for a, b in zip(ours, reference):
        assert a.prompt_ids == b.prompt_ids == tokenizer(a.prompt)["input_ids"]
        assert (a.token_ids, a.text, a.finish_reason) == (b.token_ids, b.text, b.finish_reason)
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=LOGPROB_ATOL, rtol=0)


def test_sampled_log_probs_are_a_plain_forward_passes(real, prompts):
    model, _, engine = real
    for c in engine.generate(prompts[:2], 2, SamplingParams(temperature=1.0, max_new_tokens=16, seed=0)):
        ids = torch.tensor([c.prompt_ids + c.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(c.prompt_ids) - 1: -1].float()  # (T, V)
        recomputed = logits.log_softmax(-1).gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(c.logprobs), recomputed, atol=LOGPROB_ATOL, rtol=0)
