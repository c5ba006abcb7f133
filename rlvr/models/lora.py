"""LoRA adapters through PEFT (the `peft` extra; this is the only module that imports it).

The policy is the base model with adapters: only the adapters train and are checkpointed, the KL
reference is the same model with the adapters disabled (no second copy in memory), and an engine that
holds its own weights receives the merged ones, W0 + (alpha / r) B A, or, serving LoRA itself (vLLM),
the adapter tensors alone.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch

from rlvr.config import ConfigError, LoRAConfig
from rlvr.core import lora_merged_weight
from rlvr.models.hf import save_model

try:
    import peft
    from peft.tuners.lora import LoraLayer
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ConfigError("model.lora.r > 0 needs PEFT: pip install 'rlvr[peft]'") from err


def add_lora(model: torch.nn.Module, lora: LoRAConfig, adapter: str | Path | None = None) -> Any:
    """Wrap `model` with trainable adapters: fresh (B = 0, so the policy starts equal to the base) or,
    for a resume, those saved in the folder `adapter`. Every base weight is frozen."""
    try:
        with warnings.catch_warnings():  # PEFT reads transformers' deprecated is_gradient_checkpointing: a
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            if adapter is not None:  # FutureWarning on every LoRA run's stderr, about code that is not ours
                return peft.PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
            config = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                     target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
            return peft.get_peft_model(model, config)
    except ValueError as err:  # e.g. no module matches target_modules
        raise ConfigError(f"model.lora: {str(err).splitlines()[0]}") from None


class AdaptersDisabled:
    """The base model under a LoRA policy, as a callable model: each call runs the policy with its
    adapters disabled and without gradient. Used as the KL reference instead of a second copy."""

    def __init__(self, model: Any):
        self.model = model

    def __call__(self, *args, **kwargs):
        with torch.no_grad(), self.model.disable_adapter():
            return self.model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # config, device, ...: the policy's (the same base model)
        return getattr(self.model, name)


def _adapter_name(layer: LoraLayer) -> str:
    names = layer.active_adapters
    if len(names) != 1:
        raise ValueError(f"expected one active adapter, got {names}")
    return names[0]


@torch.no_grad()
def merged_named_weights(model: Any) -> dict[str, torch.Tensor]:
    """The base model's state dict (names as in the plain HF model) with every adapter merged in; the
    trained model is not modified. This is what an engine holding the plain model loads."""
    base = model.get_base_model()
    out = {key.replace(".base_layer.", "."): tensor for key, tensor in base.state_dict().items()
           if ".lora_" not in key}
    for name, layer in base.named_modules():
        if isinstance(layer, LoraLayer):
            a, weight = _adapter_name(layer), layer.get_base_layer().weight
            flip = getattr(layer, "fan_in_fan_out", False)  # GPT-2's Conv1D stores W0 as (in, out)
            merged = lora_merged_weight(weight.T if flip else weight, layer.lora_A[a].weight,
                                        layer.lora_B[a].weight, layer.scaling[a])
            out[f"{name}.weight"] = merged.T if flip else merged
    return out


@torch.no_grad()
def adapter_named_weights(model: Any) -> dict[str, torch.Tensor]:
    """The adapter tensors alone, named as PEFT saves them (`base_model.model.<module>.lora_A.weight`):
    what `adapter_model.safetensors` holds and a LoRA-serving engine (vLLM) loads."""
    return peft.get_peft_model_state_dict(model)


def save_lora(model: Any, tokenizer, merged_path: str | Path, adapter_path: str | Path) -> None:
    """Save the adapter folder (loadable with `peft.PeftModel.from_pretrained` on the base) and a merged
    plain HF folder. The merge runs on a copy, so the trained model stays as it is."""
    save_model(model, tokenizer, adapter_path)
    merged = copy.deepcopy(model).merge_and_unload()
    save_model(merged, tokenizer, merged_path)
