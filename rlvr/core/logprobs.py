"""Log-probabilities of chosen tokens and per-token entropy, from logits `(B, T, V)`.

Why not `log_softmax(logits).gather(...)`: `log_softmax` writes a second `(B, T, V)` tensor that
autograd keeps until backward, and backward adds two more (the scattered gather gradient and the
softmax gradient); at B=16, T=512, V=32000 each is 1 GB. Here both functions run over chunks of rows
in forward *and* backward (custom autograd functions): the only vocabulary-wide temporaries are one
chunk's, autograd saves only the logits (no copy) and `(B, T)` results, and backward writes the
logits' gradient, which any method must produce, directly. The math per row z (Bridle 1990):
    log pi(y) = z_y - logsumexp(z)              d/dz = onehot(y) - softmax(z)
    H = -sum_v p_v log p_v,  p = softmax(z)     dH/dz_v = -p_v (log p_v + H)

Low-precision logits (bf16/fp16) are upcast chunk by chunk and the result is float32: a bf16
log-softmax keeps ~3 significant digits, enough to bias importance ratios.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rlvr.core._checks import check_tensor

# Elements per chunk. On CPU a cache-sized chunk (4 MiB) makes the passes over it cheap: measured
# 2**18-2**20 fastest, 2**24 ~1.3x slower; on GPU fewer, larger chunks (64 MiB) keep the number of
# kernel launches small.
_CHUNK_ELEMENTS = {"cpu": 1 << 20, "other": 1 << 24}
_INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _rows_per_chunk(logits: Tensor, chunk_rows: int | None) -> int:
    if chunk_rows is not None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        return chunk_rows
    budget = _CHUNK_ELEMENTS["cpu" if logits.device.type == "cpu" else "other"]
    return max(1, budget // logits.shape[-1])


def _out_dtype(logits: Tensor) -> torch.dtype:
    return torch.promote_types(logits.dtype, torch.float32)


def _check_logits(logits: Tensor) -> None:
    check_tensor("logits", logits)
    if logits.dim() < 2 or not logits.is_floating_point():
        raise ValueError(
            f"logits must be floating point with shape (..., V), got {logits.dtype} {tuple(logits.shape)}"
        )


def _blocks(logits: Tensor, step: int):
    """(b, row slice) pairs covering a `(B, T, V)` tensor in chunks of at most `step` rows.

    Chunks never cross the batch dimension, so a strided view such as `logits[:, :-1]` (a causal
    LM's shift) is never copied: each `logits[b, rows]` is a plain view."""
    for b in range(logits.shape[0]):
        for s in range(0, logits.shape[1], step):
            yield b, slice(s, s + step)


class _TokenLogprobs(torch.autograd.Function):
    """logits (B, T, V), labels (B, T, 1) -> log softmax(logits)[labels] (B, T), chunked both ways."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, step: int, dtype: torch.dtype) -> Tensor:
        out = logits.new_empty(logits.shape[:-1], dtype=dtype)
        for b, rows in _blocks(logits, step):
            chunk = logits[b, rows].to(dtype)  # (n, V); a copy only when upcasting
            out[b, rows] = torch.log_softmax(chunk, -1).gather(-1, labels[b, rows]).squeeze(-1)
        ctx.save_for_backward(logits, labels)
        ctx.step, ctx.dtype = step, dtype
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, labels = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for b, rows in _blocks(logits, ctx.step):
            g = grad_out[b, rows, None].to(ctx.dtype)  # (n, 1)
            chunk_grad = torch.softmax(logits[b, rows].to(ctx.dtype), -1).mul_(-g)
            grad[b, rows] = chunk_grad.scatter_add_(-1, labels[b, rows], g)
        return grad, None, None, None


class _Entropy(torch.autograd.Function):
    """logits (B, T, V) -> entropy of softmax per row (B, T), chunked both ways."""

    @staticmethod
    def forward(ctx, logits: Tensor, step: int, dtype: torch.dtype) -> Tensor:
        out = logits.new_empty(logits.shape[:-1], dtype=dtype)
        for b, rows in _blocks(logits, step):
            p = torch.softmax(logits[b, rows].to(dtype), -1)  # (n, V)
            out[b, rows] = torch.special.entr(p).sum(-1)  # entr(p) = -p log p, 0 at p = 0
        ctx.save_for_backward(logits, out)
        ctx.step = step
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, entropy = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for b, rows in _blocks(logits, ctx.step):
            logp = torch.log_softmax(logits[b, rows].to(entropy.dtype), -1)  # (n, V)
            p = logp.exp()
            # -p (log p + H); clamping log p = -inf (a -inf logit) to the finite minimum gives 0, not NaN
            logp.clamp_min_(torch.finfo(logp.dtype).min).add_(entropy[b, rows, None])
            grad[b, rows] = logp.mul_(p).mul_(-grad_out[b, rows, None].to(entropy.dtype))
        return grad, None, None


def _as_3d(x: Tensor) -> Tensor:
    """(..., T, V) -> (B, T, V); a view except for inputs of 4+ dims that are not contiguous."""
    return x.unsqueeze(0) if x.dim() == 2 else x.flatten(0, -3) if x.dim() > 3 else x


def token_logprobs(logits: Tensor, labels: Tensor, chunk_rows: int | None = None) -> Tensor:
    """log softmax(logits)[..., labels]: `(B, T, V)`, `(B, T)` int -> `(B, T)` float32 (or float64).

    `labels` must already be aligned with `logits` (for a causal LM: logits[:, :-1], ids[:, 1:]).
    Every label must be a valid index in [0, V); pad with any valid id and mask the result instead.
    Differentiable once (no double backward).
    """
    _check_logits(logits)
    check_tensor("labels", labels)
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"labels shape {tuple(labels.shape)} must equal logits shape without the vocabulary "
            f"dimension {tuple(logits.shape[:-1])}"
        )
    if labels.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"labels must be an integer tensor, got {labels.dtype}")
    vocab = logits.shape[-1]
    if labels.numel() and not bool(((labels >= 0) & (labels < vocab)).all()):
        bad = labels[(labels < 0) | (labels >= vocab)].flatten()[:5].tolist()
        raise ValueError(f"labels must lie in [0, {vocab}), found {bad}")
    step, dtype = _rows_per_chunk(logits, chunk_rows), _out_dtype(logits)
    out = _TokenLogprobs.apply(_as_3d(logits), _as_3d(labels.long().unsqueeze(-1)), step, dtype)
    return out.reshape(labels.shape)


def entropy_from_logits(logits: Tensor, chunk_rows: int | None = None) -> Tensor:
    """Entropy of softmax(logits) per position: `(B, T, V)` -> `(B, T)`. Differentiable once."""
    _check_logits(logits)
    out = _Entropy.apply(_as_3d(logits), _rows_per_chunk(logits, chunk_rows), _out_dtype(logits))
    return out.reshape(logits.shape[:-1])
