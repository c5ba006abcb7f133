"""Log-probabilities of chosen tokens and per-token entropy, from logits `(B, T, V)`.

Why not `log_softmax(logits).gather(...)`: `log_softmax` writes a second `(B, T, V)` tensor that
autograd keeps until backward, and backward adds two more (the scattered gather gradient and the
softmax gradient); at B=16, T=512, V=32000 each is 1 GB. Here both functions run over chunks of
the flattened (B*T) rows in forward *and* backward (custom autograd functions): the only
vocabulary-wide temporaries are one chunk's, autograd saves only the logits (no copy) and `(B, T)`
results, and backward writes the logits' gradient, which any method must produce, directly.
The math per row z (Bridle 1990):
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


def _one_chunk(logits: Tensor, step: int) -> bool:
    """Whether all B*T rows of a `(B, T, V)` tensor fit in one chunk of `step` rows: then the functions
    work on the tensor as it is (a strided view too), with no flattening copy and no Python loop."""
    return logits.shape[0] * logits.shape[1] <= step


def _flat_chunks(logits: Tensor, step: int):
    """(row slice, (n, V) chunk) pairs covering the B*T rows of a `(B, T, V)` tensor, `step` rows at a
    time, across batch boundaries (one Python iteration per chunk, not per sequence).

    When (B, T) fold into one dimension the chunks are views; a strided view such as `logits[:, :-1]`
    (a causal LM's shift) cannot fold, and then only the chunk's rows are gathered (a chunk-sized
    copy), never the whole tensor."""
    batch, time, vocab = logits.shape
    folds = batch <= 1 or logits.stride(0) == time * logits.stride(1)
    flat = logits.view(batch * time, vocab) if folds and logits.stride(-1) == 1 else None
    for start in range(0, batch * time, step):
        rows = slice(start, min(start + step, batch * time))
        if flat is not None:
            yield rows, flat[rows]
        else:
            index = torch.arange(rows.start, rows.stop, device=logits.device)
            yield rows, logits[index // time, index % time]


def _chosen_logprobs(logits: Tensor, labels: Tensor, dtype: torch.dtype) -> Tensor:
    """(..., V), (..., 1) -> log softmax(logits)[label] (...): a chunk or a whole tensor alike."""
    return torch.log_softmax(logits.to(dtype), -1).gather(-1, labels).squeeze(-1)


def _chosen_logprobs_grad(logits: Tensor, labels: Tensor, grad_out: Tensor, dtype: torch.dtype) -> Tensor:
    """d/dz of grad_out * log softmax(z)[label] = grad_out * (onehot(label) - softmax(z)); grad_out (..., 1)."""
    g = grad_out.to(dtype)
    return torch.softmax(logits.to(dtype), -1).mul_(-g).scatter_add_(-1, labels, g)


def _entropy(logits: Tensor, dtype: torch.dtype) -> Tensor:
    """(..., V) -> entropy of softmax (...): -sum p log p, with log p from log_softmax; a -inf logit (p = 0)
    clamped to the finite minimum adds 0 x finite = 0, not NaN. (torch.special.entr of the softmax: the same
    values, 2.3x the time on a CPU at V = 101.)"""
    logp = torch.log_softmax(logits.to(dtype), -1).clamp_min_(torch.finfo(dtype).min)
    return -(logp.exp() * logp).sum(-1)


class _TokenLogprobs(torch.autograd.Function):
    """logits (B, T, V), labels (B, T, 1) -> log softmax(logits)[labels] (B, T), chunked both ways."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, step: int, dtype: torch.dtype) -> Tensor:
        ctx.save_for_backward(logits, labels)
        ctx.step, ctx.dtype = step, dtype
        if _one_chunk(logits, step):  # the whole tensor at once, strided views included: no copy
            return _chosen_logprobs(logits, labels, dtype)
        out = logits.new_empty(logits.shape[0] * logits.shape[1], dtype=dtype)  # (B*T,)
        flat_labels = labels.reshape(-1, 1)  # (B*T, 1)
        for rows, chunk in _flat_chunks(logits, step):
            out[rows] = _chosen_logprobs(chunk, flat_labels[rows], dtype)
        return out.view(logits.shape[:-1])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, labels = ctx.saved_tensors
        if _one_chunk(logits, ctx.step):
            grad = _chosen_logprobs_grad(logits, labels, grad_out.unsqueeze(-1), ctx.dtype)
            return grad.to(logits.dtype), None, None, None
        flat_labels = labels.reshape(-1, 1)  # (B*T, 1)
        grad = logits.new_empty(logits.shape)  # contiguous, so it folds to (B*T, V)
        flat_grad, flat_out = grad.view(-1, logits.shape[-1]), grad_out.reshape(-1, 1)
        for rows, chunk in _flat_chunks(logits, ctx.step):
            flat_grad[rows] = _chosen_logprobs_grad(chunk, flat_labels[rows], flat_out[rows], ctx.dtype)
        return grad, None, None, None


class _Entropy(torch.autograd.Function):
    """logits (B, T, V) -> entropy of softmax per row (B, T), chunked both ways."""

    @staticmethod
    def forward(ctx, logits: Tensor, step: int, dtype: torch.dtype) -> Tensor:
        if _one_chunk(logits, step):
            out = _entropy(logits, dtype).flatten()  # (B*T,)
        else:
            out = logits.new_empty(logits.shape[0] * logits.shape[1], dtype=dtype)  # (B*T,)
            for rows, chunk in _flat_chunks(logits, step):
                out[rows] = _entropy(chunk, dtype)
        ctx.save_for_backward(logits, out)
        ctx.step = step
        return out.view(logits.shape[:-1])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        logits, entropy = ctx.saved_tensors  # entropy: (B*T,)
        grad = logits.new_empty(logits.shape)
        flat_grad, flat_out = grad.view(-1, logits.shape[-1]), grad_out.reshape(-1, 1)
        for rows, chunk in _flat_chunks(logits, ctx.step):
            logp = torch.log_softmax(chunk.to(entropy.dtype), -1)  # (n, V)
            p = logp.exp()
            # -p (log p + H); clamping log p = -inf (a -inf logit) to the finite minimum gives 0, not NaN
            logp.clamp_min_(torch.finfo(logp.dtype).min).add_(entropy[rows, None])
            flat_grad[rows] = logp.mul_(p).mul_(-flat_out[rows].to(entropy.dtype))
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
    step, dtype = _rows_per_chunk(logits, chunk_rows), _out_dtype(logits)
    if not (torch.is_grad_enabled() and logits.requires_grad) and _one_chunk(_as_3d(logits), step):
        return _entropy(logits, dtype)  # nothing to save for a backward (a sampler's step): no Function
    out = _Entropy.apply(_as_3d(logits), step, dtype)
    return out.reshape(logits.shape[:-1])
