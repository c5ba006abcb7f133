"""The distribution a policy samples from: temperature, then top-k, then top-p, as one pure function.

One rule for the sampler and the learner (docs/core.md, "What the learner scores"): the sampler draws
each token from `process_logits(z, T, k, p)` and reports its log-prob there; the learner scores the
same processed distribution, so at equal weights the importance ratio pi / pi_sampler is exactly 1.
Scoring the raw or the temperature-only distribution instead (TRL's and verl's learners divide by the
temperature but apply no filter) leaves a ratio of Z = the nucleus's mass under top-p (measured 0.79-1.24
at T = 0.7 before the rule), and the policy gradient of an objective sampled from the filtered
distribution q is E_q[A grad log q], q's normaliser included.

`keep` (the tokens actually sampled) stays in the support whatever the filters say: at the sampling
weights it is there already, so nothing changes; after an update a sampled token that has left the
nucleus keeps a finite log-prob (else pi = 0, a ratio of 0 and a KL of inf) and the clipped ratio
bounds its weight. The order temperature -> top-k -> top-p is vLLM's and Hugging Face `generate`'s.
"""

from __future__ import annotations

import torch
from torch import Tensor

# Rows per chunk of the filters' sort, as elements: (B, T, V) learner logits are filtered a slice of rows at a
# time, so the sort's values and int64 indices never hold the whole tensor.
_CHUNK_ELEMENTS = 1 << 22


def top_k_drop(logits: Tensor, k: int) -> Tensor | None:
    """bool (..., V): the tokens outside the k largest logits of their row (ties with the k-th kept);
    None where the filter is off (k <= 0 or k >= V)."""
    if k <= 0 or k >= logits.shape[-1]:
        return None
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
    return logits < kth


def top_p_drop(logits: Tensor, p: float) -> Tensor | None:
    """bool (..., V): the tokens outside the nucleus (Holtzman et al. 2020, "The Curious Case of Neural Text
    Degeneration"), the smallest set of most likely tokens whose mass reaches p; None where p >= 1. The most
    likely token is always kept; equal logits are ordered by index (a stable sort), so every caller cuts ties
    alike."""
    if p >= 1.0:
        return None
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)  # (..., V)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # (..., V) mass of the strictly earlier tokens
    drop_sorted = mass_before >= p  # position 0 has mass_before == 0 < p, so it is always kept
    return torch.empty_like(drop_sorted).scatter_(-1, order, drop_sorted)


@torch.no_grad()
def filtered_out(logits: Tensor, top_k: int, top_p: float) -> Tensor | None:
    """bool (..., V): the tokens top-k and then top-p (on the top-k renormalised distribution) remove from
    temperature-scaled `logits`; None where neither filters. A constant for the gradient (no autograd)."""
    if (top_k <= 0 or top_k >= logits.shape[-1]) and top_p >= 1.0:
        return None
    flat = logits.reshape(-1, logits.shape[-1])  # (N, V)
    drop = torch.empty(flat.shape, dtype=torch.bool, device=logits.device)
    step = max(1, _CHUNK_ELEMENTS // flat.shape[-1])
    for lo in range(0, flat.shape[0], step):
        chunk = flat[lo : lo + step]
        out = top_k_drop(chunk, top_k)
        if out is not None:
            chunk = chunk.masked_fill(out, float("-inf"))
        by_p = top_p_drop(chunk, top_p)
        drop[lo : lo + step] = by_p if out is None else out if by_p is None else out | by_p
    return drop.view(logits.shape)


def process_logits(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0,
                   keep: Tensor | None = None) -> Tensor:
    """The logits of the distribution sampled from: logits / T, then top-k, then top-p (filtered -> -inf).

    logits: (..., V) float; temperature > 0 (greedy decoding, T = 0, takes the raw logits: nothing is
    processed). keep: integer (...) token ids that stay in the support (module docstring). Differentiable
    in `logits`; which tokens are filtered is not (a step function of the logits, almost everywhere locally
    constant, so the gradient of log softmax over the kept set is the exact gradient of log q).
    """
    if temperature <= 0:
        return logits
    scaled = logits / temperature if temperature != 1.0 else logits
    drop = filtered_out(scaled.detach(), top_k, top_p)
    if drop is None:
        return scaled
    if keep is not None:
        drop.scatter_(-1, keep.long().unsqueeze(-1), False)
    return scaled.masked_fill(drop, float("-inf"))


def apply_top_k(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row (ties with the k-th kept), the rest -> -inf; k <= 0 or k >= V
    leaves the logits as they are."""
    return process_logits(logits, 1.0, k, 1.0)


def apply_top_p(logits: Tensor, p: float) -> Tensor:
    """Keep the nucleus of mass p (`top_p_drop`), the rest -> -inf; p >= 1 leaves the logits as they are."""
    return process_logits(logits, 1.0, 0, p)
