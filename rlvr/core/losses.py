"""Per-token policy losses and the PPO value loss. Each returns `(loss (B, T), metrics)`.

`loss` is per token and still unreduced: pick the reduction with `masking.aggregate_loss`. Metrics are
0-d detached tensors, averaged over valid tokens (over sequences for sequence-level quantities).
Advantages may be per sequence, `(B,)` or `(B, 1)`, or per token, `(B, T)`; nothing else broadcasts.
Old log-probs, advantages and returns are detached here: they must be constants for the gradient.
Padding positions may hold any finite value (`token_logprobs` always gives finite ones).

Registry signature (`POLICY_LOSSES`, one for every entry, so callers never sniff kwargs):
    fn(logprobs, old_logprobs, advantages, mask, *, clip_low=None, clip_high=None, tau=None)
        -> (loss (B, T), metrics)
A hyper-parameter left at None takes that loss's paper default (clipped: 0.2; gspo: 3e-4 / 4e-4), and
`clip_high=None` with a given `clip_low` means symmetric clipping. A loss ignores the ones it does not
use ("pg" ignores all three, "clipped"/"gspo" ignore `tau`, "kimi" ignores the clips and needs `tau`).
For "kimi", `advantages` must already be group-centered (r - r_bar, the `centered` estimator) and are
used as given: re-centering a shuffled micro-batch would subtract the wrong mean.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from rlvr.core._checks import as_bool_mask, check_ndim, check_same_shape
from rlvr.core.masking import masked_mean, masked_row_mean, masked_sum

Metrics = dict[str, Tensor]
PolicyLoss = Callable[..., tuple[Tensor, Metrics]]


def _per_token(name: str, x: Tensor, like: Tensor) -> Tensor:
    """`(B,)`, `(B, 1)` or `(B, T)` -> detached `(B, T)` view; any other shape is an error."""
    b, t = like.shape
    if tuple(x.shape) in ((b,), (b, 1)):
        return x.detach().reshape(b, 1).expand(b, t)
    if tuple(x.shape) == (b, t):
        return x.detach()
    raise ValueError(f"{name} must be ({b},), ({b}, 1) or ({b}, {t}) for logprobs {(b, t)}, "
                     f"got {tuple(x.shape)}")


def _mask_or_all(mask: Tensor | None, like: Tensor) -> Tensor:
    if mask is None:
        return torch.ones_like(like, dtype=torch.bool)
    return as_bool_mask(mask, like, like_name="logprobs")


def _check_clips(clip_low: float, clip_high: float) -> None:
    # clip_low >= 1 is allowed: 1 - clip_low <= 0 < ratio, so it switches the lower clip off.
    if not clip_low >= 0 or not clip_high >= 0:
        raise ValueError(f"need clip_low >= 0 and clip_high >= 0, got {clip_low}, {clip_high}")


def _clipped_objective(ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """-min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A), elementwise (Schulman et al. 2017)."""
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(-adv * ratio, -adv * clipped)


def pg_loss(logprobs: Tensor, advantages: Tensor) -> tuple[Tensor, Metrics]:
    """-A * log pi(a|s): the REINFORCE policy-gradient loss (Williams 1992)."""
    check_ndim("logprobs", logprobs, 2)
    adv = _per_token("advantages", advantages, logprobs)  # (B, T)
    return -adv * logprobs, {}


def clipped_surrogate_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    mask: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """PPO's clipped surrogate, rho = pi / pi_old per token (Schulman et al. 2017, eq. 7).

    `clip_high=None` is symmetric PPO; a larger `clip_high` is DAPO's clip-higher (Yu et al. 2025:
    0.2 / 0.28). Metrics over valid tokens (`mask`, default all): `clip_frac_low` / `clip_frac_high`
    (tokens whose clipped branch is active, so their gradient is 0), `approx_kl` (k3 estimate of
    KL(pi_old || pi)), `ratio_mean`, `ratio_max`.
    """
    check_ndim("logprobs", logprobs, 2)
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs)
    clip_high = clip_low if clip_high is None else clip_high
    _check_clips(clip_low, clip_high)
    adv = _per_token("advantages", advantages, logprobs)  # (B, T)
    m = _mask_or_all(mask, logprobs)
    log_ratio = logprobs - old_logprobs.detach()  # (B, T)
    ratio = log_ratio.exp()  # (B, T)
    loss = _clipped_objective(ratio, adv, clip_low, clip_high)
    with torch.no_grad():
        metrics = _ratio_metrics(ratio, log_ratio, m)
        metrics |= _clip_fractions(ratio, adv, m, clip_low, clip_high)
    return loss, metrics


def _clip_fractions(ratio: Tensor, adv: Tensor, m: Tensor, clip_low: float, clip_high: float) -> Metrics:
    """Fractions of valid tokens whose clipped branch is active (their gradient is 0)."""
    return {
        "clip_frac_low": masked_mean(((ratio < 1 - clip_low) & (adv < 0)).to(ratio.dtype), m),
        "clip_frac_high": masked_mean(((ratio > 1 + clip_high) & (adv > 0)).to(ratio.dtype), m),
    }


def _ratio_metrics(ratio: Tensor, log_ratio: Tensor, m: Tensor) -> Metrics:
    """Token-level diagnostics (call under no_grad): k3 estimate of KL(pi_old || pi), ratio mean/max."""
    neg_inf = torch.full((), float("-inf"), dtype=ratio.dtype, device=ratio.device)
    return {
        "approx_kl": masked_mean((ratio - 1) - log_ratio, m),
        "ratio_mean": masked_mean(ratio, m),
        "ratio_max": torch.where(m, ratio, neg_inf).max(),
    }


def sequence_clipped_surrogate_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> tuple[Tensor, Metrics]:
    """GSPO (Zheng et al. 2025): one length-normalised ratio per sequence,
        s_b = (pi(y_b) / pi_old(y_b)) ** (1 / |y_b|) = exp(mean_t log(pi / pi_old)),
    clipped as in PPO with the paper's eps_low = 3e-4, eps_high = 4e-4.

    Written per token as the paper's GSPO-token: s_bt = sg[s_b] * pi_bt / sg[pi_bt] has value s_b
    and gradient s_b * grad log pi_bt. With per-sequence advantages and `seq_mean_token_mean`
    aggregation this is exactly GSPO's loss and gradient. Metrics: `clip_frac_low/high` and
    `approx_kl` over valid tokens, `seq_ratio_mean/max` over sequences.
    """
    check_ndim("logprobs", logprobs, 2)
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs)
    _check_clips(clip_low, clip_high)
    adv = _per_token("advantages", advantages, logprobs)  # (B, T)
    m = as_bool_mask(mask, logprobs, like_name="logprobs")
    log_ratio = logprobs - old_logprobs.detach()  # (B, T)
    valid = m.any(dim=-1)  # a row with no token left (the overlong filter's) has s_b = 1, not 0/0 (a NaN gradient)
    seq_log_ratio = masked_row_mean(log_ratio, m)  # (B,)
    token_ratio = (seq_log_ratio.detach()[:, None] + logprobs - logprobs.detach()).exp()  # (B, T)
    loss = _clipped_objective(token_ratio, adv, clip_low, clip_high)
    with torch.no_grad():
        seq_ratio = seq_log_ratio[valid].exp()  # over the sequences that have tokens
        metrics = _clip_fractions(token_ratio, adv, m, clip_low, clip_high)
        metrics["approx_kl"] = _ratio_metrics(log_ratio.exp(), log_ratio, m)["approx_kl"]
        metrics["seq_ratio_mean"] = seq_ratio.mean()
        metrics["seq_ratio_max"] = seq_ratio.max() if seq_ratio.numel() else seq_ratio.new_tensor(float("nan"))
    return loss, metrics


def kimi_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    rewards: Tensor,
    mask: Tensor,
    tau: float,
    group_size: int | None = None,
) -> tuple[Tensor, Metrics]:
    """Kimi k1.5 online mirror descent (Kimi Team 2025, policy optimization):
        per sample  -(r - r_bar) * log pi(y) + (tau / 2) * (log pi(y) / pi_old(y))^2,
    r_bar the mean reward of the prompt's samples (no std scaling). `group_size` G: samples of one
    prompt are contiguous; None uses the batch mean (one prompt, or advantages already centered).

    Per token: -(r - r_bar) * log pi_t + (tau / 2) * S_b * (log pi_t - log pi_old_t), with
    S_b = sum_t (log pi_t - log pi_old_t) (not detached). Summed over a sequence's tokens
    (`seq_mean_token_sum`) it gives the per-sample loss above exactly, in value and in gradient.
    """
    m, r = _check_kimi(logprobs, old_logprobs, rewards, "rewards", mask, tau)  # r (B,)
    groups = r.reshape(1, -1) if group_size is None else _grouped(r, group_size)  # (B/G, G)
    centered = (groups - groups.mean(dim=1, keepdim=True)).reshape(-1)  # (B,) r - r_bar
    return _kimi_per_token(logprobs, old_logprobs, centered, m, tau)


def _check_kimi(logprobs: Tensor, old_logprobs: Tensor, per_seq: Tensor, name: str, mask: Tensor,
                tau: float) -> tuple[Tensor, Tensor]:
    """Validate Kimi's inputs; returns the bool mask (B, T) and `per_seq` detached as (B,)."""
    check_ndim("logprobs", logprobs, 2)
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs)
    if not tau >= 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    m = as_bool_mask(mask, logprobs, like_name="logprobs")
    if tuple(per_seq.shape) not in ((logprobs.shape[0],), (logprobs.shape[0], 1)):
        raise ValueError(f"{name} must be ({logprobs.shape[0]},) or ({logprobs.shape[0]}, 1), "
                         f"got {tuple(per_seq.shape)}")
    return m, per_seq.detach().reshape(-1)


def _kimi_per_token(logprobs: Tensor, old_logprobs: Tensor, centered: Tensor, m: Tensor,
                    tau: float) -> tuple[Tensor, Metrics]:
    """Kimi's per-token loss from rewards already centred, `centered (B,)` = r - r_bar."""
    log_ratio = logprobs - old_logprobs.detach()  # (B, T)
    seq_log_ratio = masked_sum(log_ratio, m, dim=-1)  # (B,) S_b
    loss = -centered[:, None] * logprobs + 0.5 * tau * seq_log_ratio[:, None] * log_ratio
    with torch.no_grad():
        metrics = {
            "seq_log_ratio_sq": (seq_log_ratio**2).mean(),
            "approx_kl": _ratio_metrics(log_ratio.exp(), log_ratio, m)["approx_kl"],
        }
    return loss, metrics


def _grouped(r: Tensor, group_size: int) -> Tensor:
    if not isinstance(group_size, int) or group_size < 1 or r.shape[0] % group_size:
        raise ValueError(f"group_size {group_size!r} does not divide the batch size {r.shape[0]}")
    return r.reshape(-1, group_size)


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, clip: float, mask: Tensor | None = None
) -> tuple[Tensor, Metrics]:
    """PPO value loss with the value change clipped to +-clip (OpenAI baselines ppo2; Andrychowicz
    et al. 2021 discuss when it helps): 0.5 * max((V - R)^2, (V_old + clip(V - V_old) - R)^2).
    Metrics: `value_clip_frac` (valid tokens where |V - V_old| > clip and the max takes the clipped branch;
    tokens inside the clip range never count, although `old + (V - old)` may round away from V)."""
    check_ndim("values", values, 2)
    check_same_shape(values=values, old_values=old_values, returns=returns)
    if not clip > 0:
        raise ValueError(f"clip must be > 0, got {clip}")
    old, target = old_values.detach(), returns.detach()
    clipped_values = old + (values - old).clamp(-clip, clip)
    unclipped_sq, clipped_sq = (values - target) ** 2, (clipped_values - target) ** 2  # (B, T)
    loss = 0.5 * torch.maximum(unclipped_sq, clipped_sq)
    with torch.no_grad():
        active = ((values - old).abs() > clip) & (clipped_sq > unclipped_sq)  # (B, T)
        frac = masked_mean(active.to(values.dtype), _mask_or_all(mask, values))
    return loss, {"value_clip_frac": frac}


def _pg(logprobs, old_logprobs, advantages, mask, *, clip_low=None, clip_high=None, tau=None):
    check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs)
    as_bool_mask(mask, logprobs, like_name="logprobs")
    return pg_loss(logprobs, advantages)


def _clipped(logprobs, old_logprobs, advantages, mask, *, clip_low=None, clip_high=None, tau=None):
    clip_low = 0.2 if clip_low is None else clip_low
    return clipped_surrogate_loss(logprobs, old_logprobs, advantages, clip_low, clip_high, mask)


def _gspo(logprobs, old_logprobs, advantages, mask, *, clip_low=None, clip_high=None, tau=None):
    if clip_low is None:
        clip_low, clip_high = 3e-4, 4e-4 if clip_high is None else clip_high
    clip_high = clip_low if clip_high is None else clip_high
    return sequence_clipped_surrogate_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)


def _kimi(logprobs, old_logprobs, advantages, mask, *, clip_low=None, clip_high=None, tau=None):
    if tau is None:
        raise ValueError("policy loss 'kimi' needs tau (the Kimi k1.5 KL-regulariser weight)")
    # The loop's advantage estimator has already subtracted the per-prompt mean; centring again here
    # would use the mean of whatever (shuffled) micro-batch arrives, not the prompt's group.
    m, centered = _check_kimi(logprobs, old_logprobs, advantages, "kimi advantages", mask, tau)
    return _kimi_per_token(logprobs, old_logprobs, centered, m, tau)


POLICY_LOSSES: dict[str, PolicyLoss] = {"pg": _pg, "clipped": _clipped, "gspo": _gspo, "kimi": _kimi}


def get_policy_loss(name: str) -> PolicyLoss:
    """`POLICY_LOSSES[name]`, or a ValueError listing the valid names."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; choose from {sorted(POLICY_LOSSES)}")
    return POLICY_LOSSES[name]
