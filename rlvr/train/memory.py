"""What a learner holds per device, estimated from the model's shape and the run's shapes before anything is
loaded, and the preflight that refuses a set-up that cannot fit (one line naming the setting that shrinks its
largest part). The sizing rules are docs/sizing.md's; the arithmetic is pure (`learner_memory`, `advice`), the
check (`check_learner_memory`) reads the config and the device.

Per device, in bytes, for N parameters of which T train, over S ranks that shard them (S = 1 unsharded):
- weights 4N/S (float32 master weights; sharded ranks also hold the unit being gathered: its largest, in the
  dtype the gather runs in); gradients 4T/S; AdamW's two moments 8T/S (Loshchilov & Hutter 2019); with CPU
  offload the three live in host memory (16T/S there) and the device holds only the unit being gathered;
- the KL reference: N/S in the compute dtype (2 bytes in bfloat16), when the objective has a KL term;
- activations of one micro-batch (b rows of t tokens, L layers, width d, MLP width f, query width q, key/value
  width k, compute dtype of c bytes): per token and layer, what autograd keeps: the two norms' float32
  inputs (8d) and, in the compute dtype, the attention's and the MLP's inputs (2d), queries, keys, values and
  the attention output (2q + 2k), the MLP's gate, up, activation and product (4f): b t L (8d + c (2d + 2q +
  2k + 4f)). With gradient checkpointing: each layer's float32 input (4d) for every layer, plus one layer's
  whole set while it is recomputed;
- the output layer's logits for the b (max_new_tokens + 1) positions scored: the logits
  and their gradient, LOGIT_COPIES x 4 bytes x V each (benchmarks/bench_chunked_head.py measured 1.2); with
  `train.logprob_chunk: C`, C rows of them instead;
- a vLLM engine colocated on the same GPU (one process): `rollout.gpu_memory_utilization` of the device while
  awake, 0 while asleep during the update (`rollout.enable_sleep_mode`, level 1 frees its cache and weights).
These are estimates (the allocator's fragmentation, CUDA's context and kernels' workspaces come on top): the
preflight refuses only what its estimate does not fit, and names what to change.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.algorithms.objective import build_objective
from rlvr.config import Config, ConfigError
from rlvr.core import head_chunk_rows
from rlvr.logging.throughput import safetensors_shapes
from rlvr.models import resolve_placement
from rlvr.models.hf import attention_heads
from rlvr.rollout.engines import engine_spec
from rlvr.train.preflight import completion_budget

GIB = 2**30
LOGIT_COPIES = 2.0  # float32 (positions, V) tensors at the peak of the whole-logits pass: the logits and their gradient


@dataclass(frozen=True)
class Dims:
    """A decoder's shape: parameters, layers, widths (`from_config`)."""

    params: float  # N, every parameter (a tied output layer counted once)
    layers: int
    hidden: int  # d
    vocab: int  # V
    ffn: int  # f, the MLP's inner width
    q_width: int  # heads x head size
    kv_width: int  # key/value heads x head size
    unit: float  # parameters of the largest unit FSDP2 gathers at once (a block, or the embedding and output layer)

    @classmethod
    def from_config(cls, config: Any, params: float | None = None) -> "Dims":
        """From a transformers config; `params` (counted from the weights' headers) or else counted from the
        config (embedding, attention with biases, SwiGLU MLP, norms, an untied output layer)."""
        d, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
        heads, kv_heads, head = attention_heads(config)
        q, kv = heads * head, kv_heads * head
        f = getattr(config, "intermediate_size", None) or 4 * d
        block = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d + (q + 2 * kv)  # + biases (Qwen2's q, k, v)
        tied = getattr(config, "tie_word_embeddings", True)
        counted = vocab * d * (1 if tied else 2) + layers * block + d
        root = vocab * d * (1 if tied else 2) + d  # embedding, output layer, final norm: the root unit
        return cls(float(params or counted), layers, d, vocab, f, q, kv, float(max(block, root)))


@dataclass(frozen=True)
class LearnerSetup:
    """How one learner rank holds and runs the model."""

    trainable: float  # T: parameters that train (N, or LoRA's adapters)
    ranks: int = 1  # S: ranks the weights, gradients and moments are sharded over (1: a whole copy)
    compute_bytes: int = 4  # bytes per element in the compute dtype (model.dtype)
    gather_bytes: int = 4  # bytes per parameter as FSDP2 gathers them (2 with mixed precision)
    offload: bool = False  # FSDP2 CPU offload: weights, gradients and moments in host memory
    reference: bool = False  # a frozen KL reference
    rows: int = 1  # micro-batch rows
    tokens: int = 1  # tokens per row (longest prompt + max_new_tokens)
    scored: int = 1  # positions scored per row (max_new_tokens + 1)
    checkpointing: bool = False
    logprob_chunk: int = 0
    engine: float = 0.0  # bytes a colocated engine holds on the device during the update


def learner_memory(dims: Dims, s: LearnerSetup) -> dict[str, float]:
    """Bytes per device by part (module docstring); `host` is what CPU offload puts in host memory."""
    n, t, S = dims.params, s.trainable, s.ranks
    gathered = dims.unit * s.gather_bytes if S > 1 else 0.0
    per_layer = 8 * dims.hidden + s.compute_bytes * (2 * dims.hidden + 2 * dims.q_width + 2 * dims.kv_width
                                                     + 4 * dims.ffn)
    tokens = s.rows * s.tokens
    activations = tokens * (dims.layers * 4 * dims.hidden + per_layer) if s.checkpointing \
        else tokens * dims.layers * per_layer
    positions = s.rows * s.scored if s.logprob_chunk <= 0 else min(s.logprob_chunk, s.rows * s.scored)
    parts = {"weights": (0.0 if s.offload else 4 * n / S) + gathered,
             "gradients": 0.0 if s.offload else 4 * t / S, "optimizer": 0.0 if s.offload else 8 * t / S,
             "reference": n / S * s.compute_bytes if s.reference else 0.0, "activations": float(activations),
             "logits": LOGIT_COPIES * 4 * positions * dims.vocab, "engine": s.engine}
    parts["host"] = (4 * n + 12 * t) / S if s.offload else 0.0
    return parts


def advice(part: str, cfg: Config, dims: Dims) -> str:
    """The setting that shrinks `part` (a key of `learner_memory`) most, given what `cfg` already does."""
    d, on_gpu = cfg.distributed, resolve_placement(cfg.model).device.type == "cuda"
    more = f"distributed.learners={max(2, 2 * d.learners)}"
    if part == "logits":
        if cfg.train.logprob_chunk <= 0:
            return f"train.logprob_chunk={head_chunk_rows(dims.vocab)}"
        return f"a smaller train.logprob_chunk (now {cfg.train.logprob_chunk})"
    if part == "activations":
        if not cfg.model.gradient_checkpointing:
            return "model.gradient_checkpointing=true"
        return f"a smaller train.micro_batch_size (now {cfg.micro_batch_size})"
    if part == "engine":
        return "rollout.enable_sleep_mode=true"
    if not d.shard:
        return f"distributed.shard=true and {more}"
    if part in ("weights", "gradients", "optimizer") and on_gpu and not d.cpu_offload:
        return "distributed.cpu_offload=true"
    if part == "reference" and cfg.model.dtype == "float32":
        return "model.dtype=bfloat16"
    return more


def fits(parts: dict[str, float], capacity: float) -> bool:
    return sum(v for k, v in parts.items() if k != "host") <= capacity


def refusal(parts: dict[str, float], capacity: float, where: str, cfg: Config, dims: Dims) -> str:
    """The one line of a set-up that does not fit: need, capacity, the largest parts, the setting that shrinks the
    largest (`advice`)."""
    device = {k: v for k, v in parts.items() if k != "host" and v > 0}
    largest = sorted(device, key=device.get, reverse=True)
    shown = ", ".join(f"{k} {device[k] / GIB:.1f}" for k in largest[:4])
    return (f"the learner needs about {sum(device.values()) / GIB:.1f} GiB per device ({shown} GiB) and {where} "
            f"has {capacity / GIB:.1f} GiB; the largest part, {largest[0]}, shrinks with "
            f"{advice(largest[0], cfg, dims)} (docs/sizing.md)")


def setup_of(cfg: Config, dims: Dims, prompt_tokens: int) -> LearnerSetup:
    """The config's learner rank, its rows `prompt_tokens` + max_new_tokens long."""
    p, d, m = resolve_placement(cfg.model), cfg.distributed, cfg.model
    half = 2 if p.dtype != torch.float32 else 4
    sharded = d.shard and d.learners > 1
    lora = m.lora.r * dims.layers * (2 * dims.hidden + dims.q_width + 2 * dims.kv_width + dims.ffn) * 3 \
        if m.lora.r > 0 else 0.0  # an upper bound: every projection of every layer adapted
    engine = 0.0  # an engine with its own copy of the weights beside the learner on its GPU, awake in the update
    spec = engine_spec(cfg)
    if not spec.samples_policy and p.device.type == "cuda" and d.backend == "none" \
            and not (spec.sleeps and cfg.rollout.enable_sleep_mode):
        engine = cfg.rollout.gpu_memory_utilization * device_capacity(p.device)
    new = completion_budget(cfg)[1]
    return LearnerSetup(trainable=lora or dims.params, ranks=d.learners if sharded else 1, compute_bytes=half,
                        gather_bytes=half if sharded and d.mixed_precision else 4,
                        offload=sharded and d.cpu_offload, reference=build_objective(cfg).needs_reference and not lora,
                        rows=cfg.micro_batch_size, tokens=prompt_tokens + new, scored=new + 1,
                        checkpointing=m.gradient_checkpointing,
                        logprob_chunk=cfg.train.logprob_chunk, engine=engine)


def device_capacity(device: torch.device) -> float:
    """Bytes of `device`: a GPU's total memory, the host's physical memory for the CPU."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def model_dims(config: Any, folder: Path | None) -> Dims:
    shapes = safetensors_shapes(folder) if folder is not None else {}
    params = sum(torch.Size(s).numel() for s in shapes.values()) if shapes else None
    return Dims.from_config(getattr(config, "text_config", config), params)


def check_learner_memory(cfg: Config, config: Any, folder: Path | None, prompt_tokens: int) -> dict[str, float]:
    """ConfigError (one line) when a learner rank cannot fit its device; its parts (bytes) otherwise. Learners on
    the CPU of this machine share it (M ranks); a GPU is checked where this process sees one like it."""
    dims = model_dims(config, folder)
    parts = learner_memory(dims, setup_of(cfg, dims, prompt_tokens))
    device = resolve_placement(cfg.model).device
    d = cfg.distributed
    if device.type == "cpu" and d.backend == "ray" and d.address != "local":
        return parts  # learners on other machines: their memory is not known here
    capacity = device_capacity(device)
    sharing = d.learners if device.type == "cpu" and d.backend == "ray" else 1
    if not fits(parts, capacity / sharing):
        where = (f"each of the {sharing} learners on this machine's CPU" if sharing > 1 else
                 "this machine's memory" if device.type == "cpu" else str(device))
        raise ConfigError(refusal(parts, capacity / sharing, where, cfg, dims))
    return parts
