"""What the vLLM test modules share (tests/rollout/test_vllm_*.py): the tiny policy saved as a folder, the prompts,
the log-prob tolerance, a plain forward's log-probs, and engines closed after their module. Each module builds its
own engines (a start-up costs seconds and its first batch tens of seconds on a CPU), so each engine kind lives in
the one module that needs it."""

import os

import pytest
import torch

from rlvr.core import process_logits
from rlvr.models import save_model
from rlvr.rollout import SamplingParams

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default takes a share of all RAM
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # cores are shared with other jobs

PROMPTS = ["sort 3 9 1 4\n", "37+85=", "a", "<bos>a much longer prompt, to pad the others\n"]
# vLLM's CPU attention supports head sizes of 32 and up: 64 / 2 heads.
SIZES = dict(num_heads=2)
# Log-probs against a float32 forward on the CPU: within 1e-4 where vLLM runs in float32 on the CPU too; vLLM's
# CUDA float32 path differed by 1.4e-4 to 1.2e-2 on an H200 (vLLM 0.26, 2026-12-04; cause not traced), so on a
# GPU these tests check the same semantics to that precision.
LOGPROB_ATOL = 2e-2 if torch.cuda.is_available() else 1e-4


def recomputed_logprobs(model, completion, temperature=1.0, top_k=0, top_p=1.0):
    """Log-probs of the completion's tokens from one plain forward pass over prompt + completion,
    under the distribution processed by temperature, top-k and top-p (defaults: the raw model)."""
    ids = torch.tensor([completion.prompt_ids + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(completion.prompt_ids) - 1: -1].float()  # (T, V)
    if (temperature, top_k, top_p) != (1.0, 0, 1.0):
        logits = process_logits(logits, temperature, top_k, top_p)
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion.token_ids)[:, None])[:, 0]


@pytest.fixture(scope="module")
def policy(tmp_path_factory, sharp_factory):
    model, tokenizer = sharp_factory("qwen2", **SIZES)
    path = save_model(model, tokenizer, tmp_path_factory.mktemp("vllm") / "policy")
    return model, tokenizer, path


@pytest.fixture(scope="module", autouse=True)
def own_engines_only():
    """This module builds engines of its own: the process's shared one (an earlier module's `rlvr eval`) is
    shut down first, since shutting down any in-process engine tears down the distributed state of all."""
    from rlvr.rollout.vllm_engine import release_shared

    release_shared()


def closed_after(engine):
    """Yield the engine, then shut it down: an engine left to the garbage collector tears down the process's
    distributed state whenever it is collected, under whichever engine runs then (the train tests')."""
    yield engine
    engine.close()


GREEDY = SamplingParams(temperature=0, max_new_tokens=24)
