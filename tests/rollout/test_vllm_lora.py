"""LoRA served by vLLM (rollout.vllm_lora=adapter): the engine receives the adapter tensors alone after each step
and samples as the merged PEFT model does. Runs in .venv-vllm: `bash scripts/test_vllm.sh`."""

import copy

import pytest
import torch

from rlvr.config import LoRAConfig
from rlvr.models import engine_weights
from rlvr.rollout import HFEngine, SamplingParams
from vllm_helpers import (GREEDY, LOGPROB_ATOL, PROMPTS, closed_after, own_engines_only, policy,  # noqa: F401
                          recomputed_logprobs)

pytestmark = pytest.mark.vllm


LORA = dict(r=8, alpha=16.0)


@pytest.fixture(scope="module")
def lora_engine(policy):
    from rlvr.rollout.vllm_engine import VLLMEngine

    adapter = {"r": LORA["r"], "lora_alpha": LORA["alpha"], "target_modules": list(LoRAConfig().target_modules)}
    yield from closed_after(VLLMEngine(policy[2], dtype="float32", enforce_eager=True, enable_sleep_mode=False,
                                        lora_adapter=adapter))  # no sleep mode: on a GPU vLLM allows one engine with it per process


def random_adapters(model, seed):
    """The policy with PEFT adapters whose A and B are both random (B = 0 would leave the base model)."""
    from rlvr.models.lora import add_lora

    peft_model = add_lora(copy.deepcopy(model), LoRAConfig(**LORA))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if ".lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
    return peft_model


def sync(engine, peft_model):
    """What the Learner hands a LoRA-serving engine after a step: the adapter tensors alone."""
    engine.load_weights(engine_weights(peft_model, adapters=True))
    return copy.deepcopy(peft_model).merge_and_unload()


def test_lora_adapter_greedy_and_logprobs_equal_the_merged_peft_model(policy, lora_engine):
    model, tokenizer, _ = policy
    base = lora_engine.generate(PROMPTS, 1, GREEDY)  # no adapter loaded yet: B = 0 in a fresh policy
    assert [c.token_ids for c in base] == [c.token_ids for c in HFEngine(model, tokenizer).generate(PROMPTS, 1, GREEDY)]
    merged = sync(lora_engine, random_adapters(model, seed=1))
    ours, reference = lora_engine.generate(PROMPTS, 1, GREEDY), HFEngine(merged, tokenizer).generate(PROMPTS, 1, GREEDY)
    assert [c.token_ids for c in ours] == [c.token_ids for c in reference]
    assert [c.token_ids for c in ours] != [c.token_ids for c in base]  # the adapters change the policy
    # vLLM adds the adapters' product x A B to x W; the reference multiplies by the merged W + A B: float32
    # sums in another order, so up to rounding relative to the log-prob (1.08e-4 at -1.83 on an AVX2 CPU)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=LOGPROB_ATOL, rtol=1e-4)
    for c in lora_engine.generate(PROMPTS, 3, SamplingParams(temperature=1.0, max_new_tokens=16, seed=0)):
        torch.testing.assert_close(torch.tensor(c.logprobs), recomputed_logprobs(merged, c),
                                   atol=LOGPROB_ATOL, rtol=1e-4)


def test_a_second_lora_adapter_replaces_the_first(policy, lora_engine):
    model, tokenizer, _ = policy
    first = sync(lora_engine, random_adapters(model, seed=2))
    before, old_id, syncs = lora_engine.generate(PROMPTS, 1, GREEDY), lora_engine.lora_request.lora_int_id, len(
        lora_engine.sync_seconds)
    second = sync(lora_engine, random_adapters(model, seed=3))
    after = lora_engine.generate(PROMPTS, 1, GREEDY)
    assert [c.token_ids for c in before] == [c.token_ids for c in HFEngine(first, tokenizer).generate(PROMPTS, 1,
                                                                                                     GREEDY)]
    assert [c.token_ids for c in after] == [c.token_ids for c in HFEngine(second, tokenizer).generate(PROMPTS, 1,
                                                                                                     GREEDY)]
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    # a new id per version, the previous adapter dropped: vLLM holds one adapter whatever the step count
    assert lora_engine.lora_request.lora_int_id == old_id + 1
    assert lora_engine.llm.llm_engine.list_loras() == {old_id + 1}
    assert len(lora_engine.sync_seconds) == syncs + 1 and lora_engine.sync_seconds[-1] > 0
    with pytest.raises(KeyError, match="not a LoRA adapter tensor"):
        lora_engine.load_weights(model.named_parameters())


def test_lora_rank_bound_is_the_smallest_size_vllm_accepts():
    from rlvr.rollout.vllm_engine import _lora_rank_bound

    assert [_lora_rank_bound(r) for r in (1, 2, 8, 9, 512)] == [1, 8, 8, 16, 512]
    with pytest.raises(ValueError, match="rollout.vllm_lora=merge"):
        _lora_rank_bound(513)
