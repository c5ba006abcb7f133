"""LoRA's merged weight (Hu et al. 2021, arXiv:2106.09685, eq. 3): W' = W0 + (alpha / r) B A."""

from __future__ import annotations

from torch import Tensor


def lora_merged_weight(weight: Tensor, lora_a: Tensor, lora_b: Tensor, scaling: float) -> Tensor:
    """W0 (out, in) + scaling * B (out, r) @ A (r, in) -> (out, in), in W0's dtype; W0 is not modified.

    `scaling` is alpha / r (or alpha / sqrt(r) for rsLoRA). The product is formed in float32 so a
    half-precision W0 gets one rounding, not two.
    """
    if lora_a.dim() != 2 or lora_b.dim() != 2 or weight.dim() != 2:
        raise ValueError(f"expected 2-d W0, A, B; got {tuple(weight.shape)}, {tuple(lora_a.shape)}, "
                         f"{tuple(lora_b.shape)}")
    if lora_b.shape[1] != lora_a.shape[0] or (lora_b.shape[0], lora_a.shape[1]) != tuple(weight.shape):
        raise ValueError(f"shapes do not compose: W0 {tuple(weight.shape)}, B {tuple(lora_b.shape)} @ "
                         f"A {tuple(lora_a.shape)}")
    delta = lora_b.float() @ lora_a.float()  # (out, in)
    return (weight.float() + scaling * delta).to(weight.dtype)
