"""Per-step throughput, memory and model FLOPs utilisation (MFU), written to timings.jsonl under `perf/`.

What is counted (model FLOPs, PaLM's definition: Chowdhery et al. 2022, appendix B; Kaplan et al. 2020, sec. 2.1):
- N: the parameters that multiply activations, from the start model's folder: every weight but the input
  embedding table (a lookup, no multiply; a tied table is counted, as the output layer multiplies by it).
- update: 6N per token of every row (prompt and completion), once per epoch (`algorithm.mu`), plus attention
  12 L d_attn T per token of a sequence of T tokens (PaLM's 12 L H Q T; the causal mask's half is not taken
  off, as PaLM). Not counted: the forward passes for pi_old, the reference or a value model, recomputed
  activations (gradient checkpointing), LoRA's saving (no weight gradient for the frozen weights).
- rollout: 2N per generated token plus attention 4 L d_attn t, t the context the token attends to (prompt, the
  tokens before it, itself). Not counted: prefilling the prompts, groups that dynamic sampling dropped.
- MFU = those FLOPs / (seconds x the GPU's peak): the dense tensor-core peak in model.dtype from the vendor's
  data sheet (`GPU_PEAKS`), or `log.peak_tflops`. None on a CPU, which has no stated peak.
Memory: the process's peak resident set so far (`ru_maxrss`), and on CUDA the step's peak of allocated tensors.
Under distributed.backend=ray the roles run in other processes: the memory figures are the driver's.
"""

from __future__ import annotations

import json
import re
import resource
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

# (CUDA name pattern, {dtype: dense TFLOP/s}) from NVIDIA's data sheets: tensor cores in bfloat16 and float16
# (without sparsity), CUDA cores in float32 (TF32 off, torch's default for matmuls). The first pattern that matches
# torch.cuda.get_device_name() wins (H100 PCIe and NVL before the SXM H100).
GPU_PEAKS: list[tuple[str, dict[str, float]]] = [
    (r"H200", {"bfloat16": 989.4, "float16": 989.4, "float32": 66.9}),
    (r"H100.*PCIe", {"bfloat16": 756.0, "float16": 756.0, "float32": 51.2}),
    (r"H100.*NVL", {"bfloat16": 835.5, "float16": 835.5, "float32": 60.0}),
    (r"H100", {"bfloat16": 989.4, "float16": 989.4, "float32": 66.9}),
    (r"A100", {"bfloat16": 312.0, "float16": 312.0, "float32": 19.5}),
    (r"L40S", {"bfloat16": 362.1, "float16": 362.1, "float32": 91.6}),
    (r"\bL4\b", {"bfloat16": 121.0, "float16": 121.0, "float32": 30.3}),
    (r"\bA10\b", {"bfloat16": 125.0, "float16": 125.0, "float32": 31.2}),
    (r"RTX 4090", {"bfloat16": 165.2, "float16": 165.2, "float32": 82.6}),
    (r"V100", {"float16": 125.0, "float32": 15.7}),  # no bfloat16 tensor cores
]


def gpu_peak_tflops(device_name: str, dtype: str) -> float | None:
    """The stated dense peak of a GPU (by its CUDA name) in `dtype` (float32, bfloat16, float16), TFLOP/s; None
    for a GPU not in GPU_PEAKS or a dtype it has no peak for."""
    for pattern, peaks in GPU_PEAKS:
        if re.search(pattern, device_name):
            return peaks.get(dtype)
    return None


def train_flops(n_params: float, n_layers: int, d_attn: int, seq_lens: Sequence[int], epochs: int = 1) -> float:
    """Model FLOPs of `epochs` forward+backward passes over sequences of `seq_lens` tokens: per token
    6N + 12 L d_attn T, T its sequence's length (PaLM, appendix B)."""
    return epochs * sum(T * (6 * n_params + 12 * n_layers * d_attn * T) for T in seq_lens)


def generate_flops(n_params: float, n_layers: int, d_attn: int, prompt_lens: Sequence[int],
                   completion_lens: Sequence[int]) -> float:
    """Forward FLOPs of sampling the completions: per generated token 2N + 4 L d_attn t, where the i-th of c
    tokens after a prompt of p attends to t = p + i positions (QK^T and AV, 2 FLOPs a multiply-add); the sum of
    t over i = 1..c is c p + c (c + 1) / 2."""
    return sum(2 * n_params * c + 4 * n_layers * d_attn * (c * p + c * (c + 1) / 2)
               for p, c in zip(prompt_lens, completion_lens))


def utilisation(flops: float, seconds: float, peak_tflops: float) -> float:
    """Achieved FLOP/s over the peak: flops / (seconds x peak_tflops x 1e12); NaN for a phase timed at 0 s."""
    return _rate(flops, seconds * peak_tflops * 1e12)


@dataclass(frozen=True)
class ModelShape:
    n_params: float  # N: weights that multiply activations
    n_layers: int
    d_attn: int  # heads x head size

    @classmethod
    def from_folder(cls, folder: str | Path) -> "ModelShape | None":
        """From a Hugging Face folder's config.json and safetensors headers (no weights read); None when the
        folder does not say (no safetensors, an architecture without these config keys)."""
        folder = Path(folder)
        try:
            config = json.loads((folder / "config.json").read_text())
            config = config.get("text_config", config)
            heads, hidden = config["num_attention_heads"], config["hidden_size"]
            d_attn = heads * (config.get("head_dim") or hidden // heads)
            shapes = safetensors_shapes(folder)
        except (OSError, KeyError, ValueError):
            return None
        if not shapes:
            return None
        total = sum(_numel(shape) for shape in shapes.values())
        embedding = next((_numel(s) for name, s in shapes.items() if name.endswith("embed_tokens.weight")), 0)
        tied = config.get("tie_word_embeddings", True) or not any(n.endswith("lm_head.weight") for n in shapes)
        return cls(float(total - (0 if tied else embedding)), int(config["num_hidden_layers"]), int(d_attn))


def _numel(shape: Sequence[int]) -> int:
    out = 1
    for size in shape:
        out *= size
    return out


def safetensors_shapes(folder: Path) -> dict[str, list[int]]:
    """{tensor name: shape} of every *.safetensors file in `folder`, read from their JSON headers."""
    shapes: dict[str, list[int]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with file.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        shapes.update({k: v["shape"] for k, v in header.items() if k != "__metadata__"})
    return shapes


def peak_rss_mib() -> float:
    """This process's peak resident set so far, MiB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


class Throughput:
    """`measure(batch, timings)` -> the step's `perf/` record. `shape`: None leaves the FLOPs out; `peak_tflops`:
    None leaves MFU out; `cuda`: the device whose peak memory to read (None: no GPU in this process)."""

    def __init__(self, shape: ModelShape | None, epochs: int, peak_tflops: float | None,
                 cuda: torch.device | None) -> None:
        self.shape, self.epochs, self.peak, self.cuda = shape, epochs, peak_tflops, cuda

    def measure(self, prompt_lens: Sequence[int], completion_lens: Sequence[int],
                timings: dict[str, float]) -> dict[str, float]:
        rollout_s, update_s, step_s = timings["rollout_s"], timings["update_s"], timings["s_per_step"]
        tokens = [p + c for p, c in zip(prompt_lens, completion_lens)]
        out = {"perf/rollout_tokens_per_s": _rate(sum(completion_lens), rollout_s),
               "perf/update_tokens_per_s": _rate(self.epochs * sum(tokens), update_s),
               "perf/samples_per_s": _rate(len(tokens), step_s), "perf/peak_rss_mib": peak_rss_mib()}
        if self.cuda is not None:
            out["perf/gpu_peak_mib"] = torch.cuda.max_memory_allocated(self.cuda) / 2**20
            torch.cuda.reset_peak_memory_stats(self.cuda)
        if self.shape is not None:
            s = self.shape
            rollout = generate_flops(s.n_params, s.n_layers, s.d_attn, prompt_lens, completion_lens)
            update = train_flops(s.n_params, s.n_layers, s.d_attn, tokens, self.epochs)
            out["perf/tflops_per_s"] = _rate(rollout + update, step_s) / 1e12
            if self.peak:
                out.update({"perf/mfu": utilisation(rollout + update, step_s, self.peak),
                            "perf/mfu_rollout": utilisation(rollout, rollout_s, self.peak),
                            "perf/mfu_update": utilisation(update, update_s, self.peak)})
        return {k: v for k, v in out.items() if v == v}  # a phase timed at 0 s has no rate


def _rate(amount: float, seconds: float) -> float:
    return amount / seconds if seconds > 0 else float("nan")
