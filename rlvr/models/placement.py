"""Where and in what precision the policy runs: the one place that reads `model.device`, `model.dtype`,
`model.attn_implementation`, `model.gradient_checkpointing` and `model.lora`.

Precision: weights and optimizer state stay float32 ("master weights"); bfloat16/float16 run the
forward (and so generation and the backward's matmuls) under `torch.autocast`. Why not half-precision
weights with a float32 master copy: with autocast the optimizer updates the very tensors the model
uses, so there is no copy to keep in sync, no precision lost by small AdamW steps, and float32 stays
exactly the CPU path of before. The memory cost (4 instead of 2 bytes per weight) is smaller than
AdamW's 8 bytes per trainable weight, and with LoRA only the adapters train.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from rlvr.config import ConfigError, ModelConfig
from rlvr.models.hf import disable_dropout, load_model, save_model
from rlvr.models.varlen import same_attention_on_recompute

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ATTENTION = ("sdpa", "eager", "flash_attention_2")


@dataclass(frozen=True)
class Placement:
    device: torch.device
    dtype: torch.dtype  # compute dtype under autocast; weights stay float32
    attn_implementation: str
    gradient_checkpointing: bool


def cuda_device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_supports_bf16() -> bool:
    """oneDNN's own check: the CPU has native bfloat16 (AVX512-BF16 or AMX); without it bf16 is emulated
    and slower than float32."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_device(name: str) -> torch.device:
    """auto | cpu | cuda | cuda:<i> -> torch.device; ConfigError (one line) when it cannot be used here."""
    count = cuda_device_count()
    if name == "auto":
        return torch.device("cuda" if count else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    kind, _, index = name.partition(":")
    if kind != "cuda" or (index and not index.isdigit()):
        raise ConfigError(f"model.device: unknown device {name!r}; choose auto, cpu, cuda or cuda:<index>")
    if count == 0:
        raise ConfigError(f"model.device={name}: torch sees no CUDA device here; use model.device=cpu (or auto)")
    if index and int(index) >= count:
        raise ConfigError(f"model.device={name}: only {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """float32 | bfloat16 | float16 -> torch.dtype, checked against what `device` can run."""
    if name not in DTYPES:
        raise ConfigError(f"model.dtype: unknown dtype {name!r}; choose from {list(DTYPES)}")
    if name == "bfloat16" and device.type == "cpu" and not cpu_supports_bf16():
        raise ConfigError("model.dtype=bfloat16: this CPU has no native bfloat16 (AVX512-BF16/AMX); use float32")
    if name == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"model.dtype=bfloat16: {device} does not support bfloat16; use float16 or float32")
    if name == "float16" and device.type != "cuda":
        raise ConfigError("model.dtype=float16 needs a CUDA device (model.device=cuda); on CPU use bfloat16")
    return DTYPES[name]


def check_attention(name: str, device: torch.device) -> str:
    if name not in ATTENTION:
        raise ConfigError(f"model.attn_implementation: unknown {name!r}; choose from {list(ATTENTION)}")
    if name == "flash_attention_2":
        if importlib.util.find_spec("flash_attn") is None:
            raise ConfigError("model.attn_implementation=flash_attention_2 needs the flash-attn package "
                              "(pip install flash-attn); or use sdpa")
        if device.type != "cuda":
            raise ConfigError("model.attn_implementation=flash_attention_2 needs model.device=cuda")
    return name


def check_lora(m: ModelConfig) -> None:
    lora = m.lora
    if lora.r < 0:
        raise ConfigError(f"model.lora.r must be >= 0 (0 = off), got {lora.r}")
    if lora.r == 0:
        return
    if lora.alpha <= 0:
        raise ConfigError(f"model.lora.alpha must be > 0, got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        raise ConfigError(f"model.lora.dropout must be in [0, 1), got {lora.dropout}")
    if not lora.target_modules or not all(isinstance(t, str) and t for t in lora.target_modules):
        raise ConfigError(f"model.lora.target_modules must be a non-empty list of module names, "
                          f"got {lora.target_modules!r}")
    if importlib.util.find_spec("peft") is None:
        raise ConfigError("model.lora.r > 0 needs PEFT: pip install 'rlvr[peft]'")


def resolve_placement(m: ModelConfig) -> Placement:
    """Every check of the model section, before any work; ConfigError names the key."""
    device = resolve_device(m.device)
    placement = Placement(device, resolve_dtype(m.dtype, device), check_attention(m.attn_implementation, device),
                          m.gradient_checkpointing)
    check_lora(m)
    return placement


def autocast_forward(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """Run `model`'s trunk and output head under autocast(dtype), in place; float32 leaves it untouched.

    Hooks sit on the causal LM's trunk (`base_model`) and output head rather than on `model.forward`:
    `generate`, PEFT's forward and plain calls all reach those two through `__call__`, while PEFT calls
    the wrapped model's `forward` directly.
    """
    if dtype == torch.float32:
        return model
    contexts: list[torch.autocast] = []

    def enter(module, args):
        contexts.append(torch.autocast(device.type, dtype=dtype))
        contexts[-1].__enter__()

    def leave(module, args, output):
        contexts.pop().__exit__(None, None, None)

    inner = model.get_base_model() if hasattr(model, "peft_config") else model  # the HF causal LM
    targets = {id(m): m for m in (inner.base_model, inner.get_output_embeddings()) if m is not None}
    for module in targets.values():
        module.register_forward_pre_hook(enter)
        module.register_forward_hook(leave, always_call=True)
    return model


def load_policy(m: ModelConfig, path: str | Path, adapter: str | Path | None = None,
                lora: bool = True) -> torch.nn.Module:
    """The trainable policy from the HF folder `path`: float32 weights on the configured device, dropout
    off, optional gradient checkpointing, LoRA adapters when `m.lora.r > 0` and `lora` (restored from the
    adapter folder `adapter` when given, else fresh), forward under autocast in the configured dtype.
    `lora=False`: full fine-tuning whatever `m.lora` (the SFT warm start, a recipe's SFT and DPO stages)."""
    p = resolve_placement(m)
    model = disable_dropout(load_model(path, torch.float32, p.device, p.attn_implementation))
    if p.gradient_checkpointing:
        # non-reentrant: correct with frozen inputs (LoRA) and keeps the autocast state on recompute; packed rows
        # (varlen attention, swapped in per forward call) are recomputed with the attention they ran with
        kwargs = {"use_reentrant": False, "context_fn": same_attention_on_recompute(model)}
        if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5.2x
            model.activation_checkpointing_enable(kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if lora and m.lora.r > 0:
        from rlvr.models.lora import add_lora  # PEFT is optional: imported only when LoRA is asked for

        model = add_lora(model, m.lora, adapter)
    return autocast_forward(model, p.device, p.dtype)


def load_reference(m: ModelConfig, policy: torch.nn.Module, path: str | Path) -> Any:
    """The frozen KL reference: for a LoRA policy, the policy itself with adapters disabled (no second
    copy in memory); otherwise the model in `path`, placed like the policy, its weights in the compute dtype:
    frozen, it needs no float32 master copy (half the bytes in bfloat16; its matmuls run in that dtype under
    autocast either way)."""
    if hasattr(policy, "peft_config"):
        from rlvr.models.lora import AdaptersDisabled

        return AdaptersDisabled(policy)
    return load_policy(m, path).requires_grad_(False).to(resolve_placement(m).dtype)


def save_policy(model: torch.nn.Module, tokenizer, path: str | Path, adapter_path: str | Path) -> None:
    """Save the policy as a full HF folder at `path`; a LoRA policy is saved merged there, and as its
    adapter folder at `adapter_path`."""
    if not hasattr(model, "peft_config"):
        save_model(model, tokenizer, path)
        return
    from rlvr.models.lora import save_lora

    save_lora(model, tokenizer, path, adapter_path)


def engine_weights(model: torch.nn.Module, adapters: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs under the plain model's names, as an engine holding the plain model loads
    them: a LoRA policy's adapters merged in (computed lazily, only when an engine iterates them). With
    `adapters`, a LoRA policy's adapter tensors alone, under PEFT's saved names, for an engine that
    applies LoRA itself."""
    if not hasattr(model, "peft_config"):
        yield from model.named_parameters()
        return
    from rlvr.models.lora import adapter_named_weights, merged_named_weights

    yield from (adapter_named_weights if adapters else merged_named_weights)(model).items()
