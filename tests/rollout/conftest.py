import pytest
import torch

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model


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
