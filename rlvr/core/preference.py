"""Offline preference losses on per-sequence log-probs of a chosen (w) and a rejected (l) response.

Inputs are summed log-probs `log pi(y|x)` of each response under the policy and the reference, `(P,)`
for P pairs, and response lengths `(P,)` in tokens. Each loss returns `(loss (P,), metrics)` with 0-d
detached metrics: `chosen_reward`, `rejected_reward` (the implicit rewards, batch means), `accuracy`
(fraction of pairs with chosen reward > rejected reward) and `margin` (mean chosen - rejected).

Registry signature (`PREFERENCE_LOSSES`, one for every entry):
    fn(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
       chosen_lengths, rejected_lengths, beta, *, gamma=None, label_smoothing=None)
A loss ignores the inputs it does not use (DPO/IPO: lengths; SimPO: the reference, which may be None;
`gamma` is SimPO's margin, `label_smoothing` DPO's); None takes the paper default.
"""

from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor

from rlvr.core._checks import check_ndim, check_positive, check_same_shape

Metrics = dict[str, Tensor]
PreferenceLoss = Callable[..., tuple[Tensor, Metrics]]


def _check_pairs(**logps: Tensor) -> None:
    check_same_shape(**logps)
    name, first = next(iter(logps.items()))
    check_ndim(name, first, 1)


def _lengths(chosen_lengths: Tensor, rejected_lengths: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
    check_same_shape(policy_logps=like, chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths)
    for name, n in (("chosen_lengths", chosen_lengths), ("rejected_lengths", rejected_lengths)):
        if not bool((n > 0).all()):
            raise ValueError(f"{name} must all be > 0, found {n[n <= 0].tolist()[:5]}")
    return chosen_lengths.to(like.dtype), rejected_lengths.to(like.dtype)


def _metrics(chosen_reward: Tensor, rejected_reward: Tensor) -> Metrics:
    chosen, rejected = chosen_reward.detach(), rejected_reward.detach()
    return {
        "chosen_reward": chosen.mean(),
        "rejected_reward": rejected.mean(),
        "accuracy": (chosen > rejected).to(chosen.dtype).mean(),
        "margin": (chosen - rejected).mean(),
    }


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Metrics]:
    """DPO (Rafailov et al. 2023, eq. 7): -log sigmoid(r_w - r_l), implicit reward
    r = beta * (log pi(y|x) - log pi_ref(y|x)). `label_smoothing` eps > 0 is conservative DPO
    (Mitchell 2023): -(1 - eps) log sigmoid(r_w - r_l) - eps log sigmoid(r_l - r_w)."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    check_positive("beta", beta)
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    chosen_reward = beta * (policy_chosen_logps - ref_chosen_logps)  # (P,)
    rejected_reward = beta * (policy_rejected_logps - ref_rejected_logps)  # (P,)
    logits = chosen_reward - rejected_reward
    loss = -(1 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)
    return loss, _metrics(chosen_reward, rejected_reward)


def ipo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
) -> tuple[Tensor, Metrics]:
    """IPO (Azar et al. 2023, with tau = beta): (h - 1 / (2 beta))^2 with
    h = log(pi(y_w) / pi_ref(y_w)) - log(pi(y_l) / pi_ref(y_l)) on summed log-probs, as in the paper
    (TRL averages over tokens instead). Metrics use the DPO implicit reward beta * log-ratio."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    check_positive("beta", beta)
    chosen_log_ratio = policy_chosen_logps - ref_chosen_logps  # (P,)
    rejected_log_ratio = policy_rejected_logps - ref_rejected_logps  # (P,)
    loss = (chosen_log_ratio - rejected_log_ratio - 1 / (2 * beta)) ** 2
    return loss, _metrics(beta * chosen_log_ratio, beta * rejected_log_ratio)


def simpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    beta: float = 2.0,
    gamma: float = 1.0,
) -> tuple[Tensor, Metrics]:
    """SimPO (Meng et al. 2024): -log sigmoid(beta/|y_w| log pi(y_w) - beta/|y_l| log pi(y_l)
    - gamma): length-averaged log-prob as the reward, no reference model, target margin gamma
    (defaults: the paper's beta = 2, gamma / beta = 0.5)."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps)
    check_positive("beta", beta)
    n_w, n_l = _lengths(chosen_lengths, rejected_lengths, policy_chosen_logps)
    chosen_reward = beta * policy_chosen_logps / n_w  # (P,)
    rejected_reward = beta * policy_rejected_logps / n_l  # (P,)
    loss = -F.logsigmoid(chosen_reward - rejected_reward - gamma)
    return loss, _metrics(chosen_reward, rejected_reward)


def ln_dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    beta: float,
) -> tuple[Tensor, Metrics]:
    """Length-normalised DPO (LN-DPO, the ablation in Meng et al. 2024): DPO with each
    log-ratio divided by its response length, r = beta / |y| * (log pi(y) - log pi_ref(y)), keeping
    the reference. No default beta: the normalised margins are ~|y| times smaller than DPO's."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    check_positive("beta", beta)
    n_w, n_l = _lengths(chosen_lengths, rejected_lengths, policy_chosen_logps)
    chosen_reward = beta * (policy_chosen_logps - ref_chosen_logps) / n_w  # (P,)
    rejected_reward = beta * (policy_rejected_logps - ref_rejected_logps) / n_l  # (P,)
    return -F.logsigmoid(chosen_reward - rejected_reward), _metrics(chosen_reward, rejected_reward)


# Paper defaults of beta: DPO (Rafailov et al. 2023) 0.1; IPO (Azar et al. 2023) tau 0.1; SimPO (Meng et al.
# 2024) 2.0. LN-DPO has none: its per-token log-ratios are ~|y| times smaller than DPO's.
DEFAULT_BETA = {"dpo": 0.1, "ipo": 0.1, "simpo": 2.0}
DEFAULT_GAMMA = 1.0  # SimPO's target margin: the paper's gamma / beta = 0.5 at beta = 2


def _beta(name: str, beta: float | None) -> float:
    if beta is not None:
        return beta
    if name not in DEFAULT_BETA:
        raise ValueError(f"loss {name!r} has no default beta; set beta (e.g. 0.1 * mean response length)")
    return DEFAULT_BETA[name]


def _dpo(pw, pl, rw, rl, nw, nl, beta, *, gamma=None, label_smoothing=None):
    return dpo_loss(pw, pl, rw, rl, _beta("dpo", beta), 0.0 if label_smoothing is None else label_smoothing)


def _ipo(pw, pl, rw, rl, nw, nl, beta, *, gamma=None, label_smoothing=None):
    return ipo_loss(pw, pl, rw, rl, _beta("ipo", beta))


def _simpo(pw, pl, rw, rl, nw, nl, beta, *, gamma=None, label_smoothing=None):
    return simpo_loss(pw, pl, nw, nl, _beta("simpo", beta), DEFAULT_GAMMA if gamma is None else gamma)


def _ln_dpo(pw, pl, rw, rl, nw, nl, beta, *, gamma=None, label_smoothing=None):
    return ln_dpo_loss(pw, pl, rw, rl, nw, nl, _beta("ln_dpo", beta))


PREFERENCE_LOSSES: dict[str, PreferenceLoss] = {
    "dpo": _dpo, "ipo": _ipo, "simpo": _simpo, "ln_dpo": _ln_dpo,
}


def get_preference_loss(name: str) -> PreferenceLoss:
    """`PREFERENCE_LOSSES[name]`, or a ValueError listing the valid names."""
    if name not in PREFERENCE_LOSSES:
        raise ValueError(f"unknown preference loss {name!r}; choose from {sorted(PREFERENCE_LOSSES)}")
    return PREFERENCE_LOSSES[name]
