"""model.device / dtype / attn_implementation / gradient_checkpointing: resolved and checked in one place."""

import pytest
import torch

from rlvr.config import ConfigError, ModelConfig
from rlvr.models import load_model, load_tokenizer
from rlvr.models import placement
from rlvr.models.placement import (autocast_forward, check_attention, load_policy, resolve_device, resolve_dtype,
                                   resolve_placement)

CPU = torch.device("cpu")


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(placement, "cuda_device_count", lambda: 2)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(placement, "cuda_device_count", lambda: 0)


def test_devices(no_gpu):
    assert resolve_device("auto") == CPU and resolve_device("cpu") == CPU


def test_cuda_devices_when_present(two_gpus):
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ConfigError, match=r"only 2 CUDA device\(s\)"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("name, message", [
    ("cuda", "torch sees no CUDA device here"), ("cuda:0", "torch sees no CUDA device here"),
    ("xpu", "unknown device 'xpu'"), ("cuda:x", "unknown device 'cuda:x'"), ("CPU", "unknown device"),
])
def test_bad_devices_are_one_line(no_gpu, name, message):
    with pytest.raises(ConfigError, match=message) as err:
        resolve_device(name)
    assert "\n" not in str(err.value) and str(err.value).startswith("model.device")


def test_dtypes(monkeypatch):
    assert resolve_dtype("float32", CPU) == torch.float32
    monkeypatch.setattr(placement, "cpu_supports_bf16", lambda: True)
    assert resolve_dtype("bfloat16", CPU) == torch.bfloat16
    monkeypatch.setattr(placement, "cpu_supports_bf16", lambda: False)
    with pytest.raises(ConfigError, match="no native bfloat16"):
        resolve_dtype("bfloat16", CPU)
    with pytest.raises(ConfigError, match="float16 needs a CUDA device"):
        resolve_dtype("float16", CPU)
    with pytest.raises(ConfigError, match=r"unknown dtype 'fp8'; choose from \['float32', 'bfloat16', 'float16'\]"):
        resolve_dtype("fp8", CPU)


def test_attention(monkeypatch):
    assert check_attention("sdpa", CPU) == "sdpa" and check_attention("eager", CPU) == "eager"
    with pytest.raises(ConfigError, match="unknown 'flash'"):
        check_attention("flash", CPU)
    monkeypatch.setattr(placement.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="needs the flash-attn package"):
        check_attention("flash_attention_2", torch.device("cuda"))
    monkeypatch.setattr(placement.importlib.util, "find_spec", lambda name: object())
    with pytest.raises(ConfigError, match="needs model.device=cuda"):
        check_attention("flash_attention_2", CPU)


@pytest.mark.parametrize("lora, message", [
    ({"r": -1}, "model.lora.r must be >= 0"), ({"r": 4, "alpha": 0}, "model.lora.alpha must be > 0"),
    ({"r": 4, "dropout": 1.0}, "model.lora.dropout must be in"), ({"r": 4, "target_modules": []}, "non-empty list"),
])
def test_bad_lora_settings(lora, message):
    m = ModelConfig()
    for key, value in lora.items():
        setattr(m.lora, key, value)
    with pytest.raises(ConfigError, match=message):
        resolve_placement(m)


def test_float32_default_is_the_plain_model(model_dir):
    """CPU default behaviour unchanged: same weights, same logits, no hooks."""
    policy, plain = load_policy(ModelConfig(), model_dir), load_model(model_dir)
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    assert torch.equal(policy(input_ids=ids).logits, plain(input_ids=ids).logits)
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    assert not any(m._forward_pre_hooks for m in policy.modules())


def test_bfloat16_autocast_keeps_float32_master_weights(model_dir):
    model = autocast_forward(load_model(model_dir), CPU, torch.bfloat16)
    ids = torch.tensor([[1, 5, 9, 12, 7]])
    logits = model(input_ids=ids).logits
    assert logits.dtype == torch.bfloat16
    logits.float().sum().backward()
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters()
               if p.grad is not None)
    reference = load_model(model_dir)(input_ids=ids).logits
    torch.testing.assert_close(logits.float(), reference, atol=0.1, rtol=0.05)  # bf16 has 8 mantissa bits
    tokenizer = load_tokenizer(model_dir)
    out = model.generate(input_ids=ids, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape == (1, 8)
    assert not torch.is_autocast_enabled("cpu")  # every hook left its context


def test_gradient_checkpointing_same_gradients(model_dir):
    ids = torch.tensor([[1, 5, 9, 12, 7, 4]])
    grads = []
    for checkpointing in (False, True):
        model = load_policy(ModelConfig(gradient_checkpointing=checkpointing), model_dir).train()
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append([p.grad for p in model.parameters()])
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)
