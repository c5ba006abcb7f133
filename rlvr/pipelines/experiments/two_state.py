"""The two-state baseline example, computed exactly by enumeration.

Source: Stanford CS336 (Spring 2025), lecture 17, "Baselines": state s1 has actions rewarded 11 and 9,
state s2 has actions rewarded 0 and 2. Raw rewards say "s1 -> a2 (9) is better than s2 -> a2 (2)",
yet a2 is the worse action in s1 and the better one in s2. A baseline b(s) = E[R | s] (10 and 1) keeps
only what each action adds over its state, which leaves the expected gradient unchanged and shrinks
its variance (Williams 1992; Sutton & Barto 2018, sec. 13.4).

The lecture simplifies with |grad pi| = 1; here the policy is concrete: a tabular softmax,
pi(a|s) = softmax(theta_s)_a, at theta = 0 (uniform), states uniform. Then
grad_theta log pi(a|s) = e_{s,a} - sum_a' pi(a'|s) e_{s,a'}, and the single-sample estimator
g(s, a) = grad log pi(a|s) (R(s, a) - b(s)) is enumerated over the 4 equally likely (s, a):
E[g] and the total variance tr Cov[g] = E||g||^2 - ||E g||^2, in exact fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch

from rlvr.core import aggregate_loss, centered_advantages, pg_loss, raw_advantages

LECTURE_REWARDS: tuple[tuple[int, ...], ...] = ((11, 9), (0, 2))  # R[s][a]


@dataclass(frozen=True)
class Estimator:
    gradients: tuple[tuple[Fraction, ...], ...]  # g(s, a) for each (s, a), flattened over theta (S*A,)
    mean: tuple[Fraction, ...]  # E[g], (S*A,)
    variance: Fraction  # tr Cov[g] = E||g||^2 - ||E g||^2
    coordinate_variance: tuple[Fraction, ...]  # Var[g_i] per parameter theta_i, (S*A,)


@dataclass(frozen=True)
class TwoStateResult:
    rewards: tuple[tuple[int, ...], ...]
    baseline: tuple[Fraction, ...]  # b(s) = E[R | s] under the uniform policy
    no_baseline: Estimator
    with_baseline: Estimator
    scalar_variance: tuple[Fraction, Fraction]  # the lecture's |grad pi| = 1 simplification: Var[R], Var[R - b]
    # the same, Bessel-corrected (n - 1), as the lecture's torch.std figures: their square roots are 5.32 -> 1.15
    scalar_unbiased_variance: tuple[Fraction, Fraction]

    @property
    def scalar_std(self) -> tuple[float, float]:
        """Unbiased standard deviations of R and R - b(s): the numbers the lecture prints."""
        return (float(self.scalar_unbiased_variance[0]) ** 0.5, float(self.scalar_unbiased_variance[1]) ** 0.5)


def _score(n_states: int, n_actions: int, s: int, a: int) -> list[Fraction]:
    """grad_theta log softmax(theta_s)_a at theta = 0, flattened over (state, action)."""
    g = [Fraction(0)] * (n_states * n_actions)
    for a2 in range(n_actions):
        g[s * n_actions + a2] = Fraction(int(a == a2)) - Fraction(1, n_actions)
    return g


def _estimator(rewards: tuple[tuple[int, ...], ...], baseline: list[Fraction]) -> Estimator:
    n_s, n_a = len(rewards), len(rewards[0])
    prob = Fraction(1, n_s * n_a)  # uniform states, uniform policy
    grads = [tuple(x * (rewards[s][a] - baseline[s]) for x in _score(n_s, n_a, s, a))
             for s in range(n_s) for a in range(n_a)]
    mean = tuple(prob * sum(col) for col in zip(*grads))
    coord_var = tuple(prob * sum(x * x for x in col) - m * m for col, m in zip(zip(*grads), mean))
    return Estimator(tuple(grads), mean, sum(coord_var, Fraction(0)), coord_var)


def two_state_example(rewards: tuple[tuple[int, ...], ...] = LECTURE_REWARDS) -> TwoStateResult:
    if len({len(r) for r in rewards}) != 1 or len(rewards[0]) < 2:
        raise ValueError(f"need the same number (>= 2) of actions in every state, got {rewards}")
    baseline = [Fraction(sum(r), len(r)) for r in rewards]
    flat = [Fraction(x) for r in rewards for x in r]
    n_a = len(rewards[0])
    centered = [x - baseline[i // n_a] for i, x in enumerate(flat)]
    scalar = (_variance(flat), _variance(centered))
    unbiased = (_variance(flat, ddof=1), _variance(centered, ddof=1))
    return TwoStateResult(tuple(rewards), tuple(baseline), _estimator(rewards, [Fraction(0)] * len(rewards)),
                          _estimator(rewards, baseline), scalar, unbiased)


def _variance(xs: list[Fraction], ddof: int = 0) -> Fraction:
    """Population variance (ddof 0) or the Bessel-corrected one (ddof 1, as torch.std)."""
    mean = sum(xs, Fraction(0)) / len(xs)
    return sum(((x - mean) ** 2 for x in xs), Fraction(0)) / (len(xs) - ddof)


def check_against_core(result: TwoStateResult) -> float:
    """Recompute every g(s, a) with autograd through `rlvr.core` (deltas from `raw_advantages` /
    `centered_advantages` with one group per state, loss from `pg_loss`) in float64, and return the
    largest absolute difference from the exact values."""
    rewards = torch.tensor(result.rewards, dtype=torch.float64)  # (S, A)
    n_s, n_a = rewards.shape
    worst = 0.0
    for fn, est in ((raw_advantages, result.no_baseline), (centered_advantages, result.with_baseline)):
        deltas = fn(rewards.reshape(-1), n_a)  # (S*A,) one group = one state's actions
        for i, exact in enumerate(est.gradients):
            theta = torch.zeros(n_s, n_a, dtype=torch.float64, requires_grad=True)
            s, a = divmod(i, n_a)
            logprob = torch.log_softmax(theta[s], dim=0)[a].reshape(1, 1)  # (B=1, T=1)
            per_token, _ = pg_loss(logprob, deltas[i : i + 1])
            loss = aggregate_loss(per_token, torch.ones(1, 1, dtype=torch.bool), "token_mean")
            (grad,) = torch.autograd.grad(-loss, theta)  # ascent direction: -grad of the loss
            worst = max(worst, max(abs(float(g) - float(x)) for g, x in zip(grad.reshape(-1).tolist(), exact)))
    return worst


def _vec(xs: tuple[Fraction, ...]) -> str:
    return "(" + ", ".join(str(x) for x in xs) + ")"


def format_two_state(result: TwoStateResult, core_error: float | None = None) -> str:
    n_a = len(result.rewards[0])
    params = ", ".join(f"theta[s{s + 1},a{a + 1}]" for s in range(len(result.rewards)) for a in range(n_a))
    rows = "\n".join(f"  s{s + 1}: " + ", ".join(f"a{a + 1} -> {r}" for a, r in enumerate(rs))
                     + f"   baseline b(s{s + 1}) = E[R|s{s + 1}] = {result.baseline[s]}"
                     for s, rs in enumerate(result.rewards))
    nb, wb = result.no_baseline, result.with_baseline
    lines = [
        "Two-state example (CS336 lecture 17): uniform states, uniform softmax policy (theta = 0)",
        rows,
        f"parameters: {params}",
        "",
        "                      E[g] (expected gradient)        tr Cov[g] (variance)   per-parameter variance",
        f"  no baseline         {_vec(nb.mean):<31} {str(nb.variance):<22} {_vec(nb.coordinate_variance)}",
        f"  baseline b(s)       {_vec(wb.mean):<31} {str(wb.variance):<22} {_vec(wb.coordinate_variance)}",
        "",
        f"expected gradients equal: {nb.mean == wb.mean};  variance ratio: {nb.variance / wb.variance} "
        f"({float(nb.variance):g} -> {float(wb.variance):g})",
        f"lecture's |grad pi| = 1 simplification, exact population variance: Var[R] = {result.scalar_variance[0]} "
        f"-> Var[R - b(s)] = {result.scalar_variance[1]}",
        f"the lecture's figures, unbiased standard deviation (torch.std, n - 1): std[R] = {result.scalar_std[0]:.2f} "
        f"-> std[R - b(s)] = {result.scalar_std[1]:.2f}",
    ]
    if core_error is not None:
        lines.append(f"rlvr.core check (autograd through pg_loss, raw/centered advantages): "
                     f"max |difference| = {core_error:.2e}")
    return "\n".join(lines)
