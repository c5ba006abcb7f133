"""Log-probs and entropies of the output layer without its logits: hidden states in, chunk by chunk.

A causal LM's last step is z = h W^T over the whole vocabulary: (N, V) logits for N scored positions, held by
autograd until the backward, which writes their gradient, another (N, V). For Qwen's V = 151,936 that is 608 KB
per position and tensor in float32: 1.2 GB for the two at N = 1,024, more than the 0.5B model's weights. Here the
logits exist one chunk of rows at a time, in the forward and again (recomputed) in the backward; autograd saves
only h, W and the labels (references, no copies), and the backward writes dL/dh and dL/dW directly
(the fused linear + cross-entropy of Liger-Kernel, Hsu et al. 2024, and of Wijmans et al. 2025, "Cut your losses
in large-vocabulary language models"; here with the learner's processed distribution).

Per row, with q = softmax(process(z)) the distribution the sampler drew from (logits / T, top-k, top-p:
`rlvr.core.process_logits`, the label always kept):
    log q(y) = process(z)_y - logsumexp(process(z))       dlog q(y)/dz = (onehot(y) - q) / T
    dL/dh = (dL/dz) W          dL/dW = sum over rows of (dL/dz)^T h
Filtered tokens have q = 0 and a gradient of 0, as `process_logits`' masked fill gives them. The entropy of q is a
metric: computed in the same pass, without gradient.

The products run in `compute_dtype` (the autocast dtype of a half-precision policy, as its output layer would);
the softmax and everything after it in float32, like `rlvr.core.token_logprobs`.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rlvr.core._checks import check_tensor
from rlvr.core.logprobs import _entropy
from rlvr.core.processing import process_logits

# Logit elements per chunk (rows x V): 2**24 float32 elements are 64 MiB per (rows, V) temporary, of which a
# chunk holds about four (logits, processed logits, softmax, their gradient); at V = 151,936, 110 rows a chunk.
CHUNK_ELEMENTS = 1 << 24


def head_chunk_rows(vocab: int, chunk_elements: int = CHUNK_ELEMENTS) -> int:
    """Rows per chunk so that a chunk's (rows, V) logits hold about `chunk_elements` elements (at least 1 row)."""
    return max(1, chunk_elements // max(vocab, 1))


def _logits(hidden: Tensor, weight: Tensor, compute_dtype: torch.dtype) -> Tensor:
    """(n, d), (V, d) -> (n, V) float32: the output layer's product in `compute_dtype`, upcast for the softmax."""
    return (hidden.to(compute_dtype) @ weight.to(compute_dtype).T).float()


class _HeadLogprobs(torch.autograd.Function):
    """hidden (N, d), weight (V, d), labels (N,) -> log q(labels) (N,), entropy of q (N,) or an empty tensor."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, labels: Tensor, step: int, temperature: float, top_k: int,
                top_p: float, compute_dtype: torch.dtype, with_entropy: bool) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(hidden, weight, labels)
        ctx.settings = (step, temperature, top_k, top_p, compute_dtype)
        n = hidden.shape[0]
        out = hidden.new_empty(n, dtype=torch.float32)  # (N,)
        entropy = hidden.new_empty(n if with_entropy else 0, dtype=torch.float32)
        with torch.autocast(hidden.device.type, enabled=False):  # the dtypes are chosen here, not by autocast
            for lo in range(0, n, step):
                y = labels[lo : lo + step]  # (n,)
                q = process_logits(_logits(hidden[lo : lo + step], weight, compute_dtype), temperature, top_k, top_p,
                                   keep=y)  # (n, V)
                out[lo : lo + step] = torch.log_softmax(q, -1).gather(-1, y[:, None]).squeeze(-1)
                if with_entropy:
                    entropy[lo : lo + step] = _entropy(q, torch.float32)
        ctx.mark_non_differentiable(entropy)
        return out, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor, _grad_entropy: Tensor):
        hidden, weight, labels = ctx.saved_tensors
        step, temperature, top_k, top_p, compute_dtype = ctx.settings
        scale = 1.0 / temperature if temperature > 0 else 1.0  # greedy (T = 0) scores the raw logits
        grad_hidden = torch.empty_like(hidden)  # (N, d)
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)  # (V, d), accumulated
        w = weight.to(compute_dtype)
        with torch.autocast(hidden.device.type, enabled=False):
            for lo in range(0, hidden.shape[0], step):
                h, y, g = hidden[lo : lo + step], labels[lo : lo + step], grad_out[lo : lo + step].float()  # (n, d)
                q = torch.softmax(process_logits(_logits(h, weight, compute_dtype), temperature, top_k, top_p,
                                                 keep=y), -1)  # (n, V), 0 where filtered
                dz = q.mul_(-g[:, None]).scatter_add_(-1, y[:, None], g[:, None])  # g (onehot(y) - q)
                if scale != 1.0:
                    dz.mul_(scale)
                dz = dz.to(compute_dtype)
                grad_hidden[lo : lo + step] = (dz @ w).to(hidden.dtype)
                if compute_dtype == torch.float32:
                    grad_weight.addmm_(dz.T, h.float())  # no (V, d) temporary
                else:  # the chunks' half-precision products summed in float32
                    grad_weight.add_(dz.T @ h.to(compute_dtype))
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None, None, None, None, None


def head_logprobs(hidden: Tensor, weight: Tensor, labels: Tensor, temperature: float = 1.0, top_k: int = 0,
                  top_p: float = 1.0, chunk_rows: int | None = None, with_entropy: bool = False,
                  compute_dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor | None]:
    """log q(labels) (...) float32 of the output layer `weight` (V, d) on `hidden` (..., d), q the processed
    distribution (module docstring), and q's entropy (...) without gradient when `with_entropy` (else None).

    Equal to `token_logprobs(process_logits(hidden @ weight.T, T, k, p, keep=labels), labels)` and
    `entropy_from_logits` of the same logits, in value and in the gradients of `hidden` and `weight`, up to float
    rounding; never holds more than `chunk_rows` rows of logits (default `head_chunk_rows(V)`). `compute_dtype`:
    the products' dtype (default the weight's). Differentiable once (no double backward)."""
    check_tensor("hidden", hidden)
    check_tensor("labels", labels)
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(f"weight must be (V, d) with d = hidden's last dimension {hidden.shape[-1]}, "
                         f"got {tuple(weight.shape)}")
    if tuple(labels.shape) != tuple(hidden.shape[:-1]):
        raise ValueError(f"labels shape {tuple(labels.shape)} must equal hidden's without d {tuple(hidden.shape[:-1])}")
    vocab = weight.shape[0]
    if labels.numel() and not bool(((labels >= 0) & (labels < vocab)).all()):
        raise ValueError(f"labels must lie in [0, {vocab})")
    step = head_chunk_rows(vocab) if chunk_rows is None else chunk_rows
    if step < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {step}")
    flat = hidden.reshape(-1, hidden.shape[-1])  # (N, d)
    out, entropy = _HeadLogprobs.apply(flat, weight, labels.reshape(-1).long(), step, temperature, top_k, top_p,
                                       compute_dtype or weight.dtype, with_entropy)
    return out.view(labels.shape), entropy.view(labels.shape) if with_entropy else None
