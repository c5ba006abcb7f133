import pytest
import torch

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.rollout.batch import build_batch


def sharpened_model(arch: str, seed: int = 0, **sizes: int):
    """A tiny random model with larger weights: its greedy outputs vary from token to token (a
    0.02-std init repeats one character), so engine-vs-reference comparisons mean something.
    `sizes` override PRESETS["test"] (build_tiny_model's keywords)."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, arch=arch, seed=seed, **{**PRESETS["test"], **sizes})
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.3)
    return model, tokenizer


@pytest.fixture(scope="session")
def sharp_factory():
    """`sharpened_model` itself, for tests that need other seeds or sizes."""
    return sharpened_model


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def sharp(request):
    return sharpened_model(request.param)


@pytest.fixture(scope="module")
def flat():
    """The plain random init: near-uniform next-token distributions, so EOS (1 of 101 tokens) ends
    some samples early and others run to the length limit."""
    tokenizer = build_char_tokenizer()
    return build_tiny_model(tokenizer, arch="qwen2", seed=0, **PRESETS["test"]), tokenizer


def groups_of_completions(seed: int, prompt_lengths: list[int], n: int, max_completion: int):
    """A RolloutBatch of GRPO groups: per prompt length, a random prompt with `n` random completions
    of 1..max_completion tokens (ids 5..89, pad 0)."""
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for length in prompt_lengths:
        prompt = torch.randint(5, 90, (length,), generator=g).tolist()
        for _ in range(n):
            prompts.append(prompt)
            k = int(torch.randint(1, max_completion + 1, (1,), generator=g))
            completions.append(torch.randint(5, 90, (k,), generator=g).tolist())
    return build_batch(prompts, completions, None, torch.zeros(len(prompts)), pad_id=0)


@pytest.fixture(scope="session")
def grouped_batch():
    """`groups_of_completions` itself."""
    return groups_of_completions


def assert_same_gradients(model, batch, forward, reference, temperature: float = 0.7) -> None:
    """`forward` and `reference` (model, batch, temperature -> (log-probs (B, W), _)) give the same parameter
    gradients for a fixed random weighting of the completion log-probs: float32 sums in another order,
    so close relative to each gradient tensor's scale."""
    weights = torch.randn(batch.mask.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for fn in (forward, reference):
        model.zero_grad()
        out, _ = fn(model, batch, temperature)
        (out * weights * batch.mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    model.zero_grad()
    for got, expected in zip(*grads):
        torch.testing.assert_close(got, expected, atol=1e-5 * float(expected.abs().max()), rtol=1e-4)


@pytest.fixture(scope="session")
def same_gradients():
    """`assert_same_gradients` itself."""
    return assert_same_gradients


def lora_sharpened(arch: str, seed: int):
    """A PEFT LoRA policy (r 4 on q_proj, v_proj) on its own `sharpened_model`, with non-zero B matrices so
    the adapters change the outputs."""
    from rlvr.config import LoRAConfig
    from rlvr.models.lora import add_lora

    model, _ = sharpened_model(arch, seed=seed)  # its own copy: PEFT wraps the modules in place
    lora = add_lora(model, LoRAConfig(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(2))
    return lora


@pytest.fixture(scope="session")
def lora_factory():
    """`lora_sharpened` itself."""
    return lora_sharpened
