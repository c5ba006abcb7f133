"""The claims of CS336 lecture 17 that need no language model: the sorting toy's deltas and rewards,
the two-state baseline example and the KL estimators.

Each function runs its experiment, draws its figure into `out` and returns `Claim`s whose direction is
computed from the measured numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rlvr.core import kl_k1, kl_k3
from rlvr.pipelines.experiments.claims import Claim, fmt, mean_sd, se_of_difference
from rlvr.pipelines.experiments.sort_rewards import REPEATED_PROMPTS
from rlvr.pipelines.experiments.sort_toy import plot_sort_toy, run_deltas, run_rewards
from rlvr.pipelines.experiments.two_state import two_state_example


def delta_claims(out: Path, seeds: int, epochs: int, seed: int = 0) -> list[Claim]:
    """Sorting toy, lecture's prompts and inclusion reward: raw vs centered vs normalized vs max-only."""
    res = run_deltas(["raw", "centered", "normalized", "max_only"], seed=seed, seeds=seeds, epochs=epochs)
    plot_sort_toy(res, out / "sort_toy_deltas.png")
    final = {d: r.final_expected_reward for d, r in res.items()}
    start = res["raw"].expected_reward[0]  # same seed: every delta starts from the same policies
    setup = (f"The lecture's sorting toy (prompts [1 0 2], [3 2 4], [1 2 3], vocabulary 5, 10 responses per "
             f"prompt, {epochs} epochs x 10 Adam steps, lr 1e-3, inclusion reward, maximum 5). Number: the exact "
             f"expected reward of the final policy (all 5^3 responses enumerated), over {seeds} independently "
             f"initialised replicas (seed {seed}). " + ("" if epochs == 100 else "Smaller than the lecture's 100 "
                                                         "epochs. ") + "Figure: reward, exact match and loss.")
    c, r, n, m = final["centered"], final["raw"], final["normalized"], final["max_only"]
    se_cn = se_of_difference(c, n)
    return [
        Claim("centered-beats-raw", "Centered deltas (R - group mean) beat raw rewards",
              f"final E[R] centered {fmt(c)} vs raw {fmt(r)}", mean_sd(c)[0] > mean_sd(r)[0], seeds, setup,
              ["sort_toy_deltas.png"]),
        Claim("normalized-close-to-centered", "Normalized deltas ((R - mean) / (std + 1e-4)) end close to centered",
              f"normalized {fmt(n)} vs centered {fmt(c)}; |difference| {abs(mean_sd(n)[0] - mean_sd(c)[0]):.3f} "
              f"against 2 standard errors {2 * se_cn:.3f}", abs(mean_sd(n)[0] - mean_sd(c)[0]) <= 2 * se_cn, seeds,
              setup + " Close = within 2 standard errors of the difference of the means."),
        Claim("max-only", "Max-only deltas (keep R only where it equals the group maximum) learn, but less than "
              "centered", f"max-only {fmt(m)}; start {fmt(start)}; centered {fmt(c)}",
              mean_sd(start)[0] < mean_sd(m)[0] < mean_sd(c)[0], seeds,
              setup + " Ties at the maximum all keep their reward, as the lecture's `max_rewards`."),
    ]


def hack_claim(out: Path, seeds: int, epochs: int, seed: int = 0) -> Claim:
    """Repeated-token prompts: the inclusion reward climbs while exact match does not."""
    res = run_rewards(["exact", "position", "inclusion"], delta="normalized", prompts=REPEATED_PROMPTS, seed=seed,
                      seeds=seeds, epochs=epochs)
    plot_sort_toy(res, out / "sort_toy_reward_hack.png")
    inc = res["inclusion"]
    gain = [(f - s) / inc.max_reward for f, s in zip(inc.final_expected_reward, inc.expected_reward[0])]
    exact_gain = [f - s for f, s in zip(inc.final_exact_match, inc.exact_match[0])]
    unsorted_at_max = [a - e for a, e in zip(inc.final_at_max, inc.final_exact_match)]
    holds = mean_sd(gain)[0] > mean_sd(exact_gain)[0] + 2 * se_of_difference(gain, exact_gain)
    setup = (f"The toy on prompts that repeat a token ([1 0 2 2], [3 2 4 3], [1 2 3 1]: five responses score the "
             f"maximum 7, one is sorted), normalized deltas, {epochs} epochs, {seeds} replicas. Reward gain is "
             f"measured as a share of the maximum; exact match is the exact probability of the sorted answer. "
             f"P(reward at its maximum but not sorted) at the end: {fmt(unsorted_at_max)}. "
             f"Final exact match under the other designs: exact {fmt(res['exact'].final_exact_match)}, "
             f"position {fmt(res['position'].final_exact_match)}. Holds = the reward gain exceeds the "
             f"exact-match gain by more than 2 standard errors.")
    return Claim("inclusion-hacked", "The inclusion reward is hacked when a prompt repeats a token (reward up, "
                 "exact match flat)", f"inclusion reward gain {fmt(gain)} of its maximum; exact-match gain "
                 f"{fmt(exact_gain)}", holds, seeds, setup, ["sort_toy_reward_hack.png"])


def baseline_claim() -> Claim:
    """Two-state example, exact: the baseline keeps E[g] and cuts its variance."""
    r = two_state_example()
    nb, wb = r.no_baseline, r.with_baseline
    std = r.scalar_std
    measured = (f"E[g] equal: {nb.mean == wb.mean}; tr Cov[g] {nb.variance} -> {wb.variance} "
                f"({float(nb.variance / wb.variance):g}x lower); the lecture's figures, unbiased std of the "
                f"delta: {std[0]:.2f} -> {std[1]:.2f}")
    setup = ("States s1 (rewards 11, 9) and s2 (0, 2), uniform, a tabular softmax policy at theta = 0, baseline "
             "b(s) = E[R|s]; every (s, a) enumerated in exact fractions (`rlvr experiment two-state`), so no "
             "seed is involved.")
    return Claim("baseline-variance", "A baseline keeps the expected gradient and cuts its variance (two-state)",
                 measured, nb.mean == wb.mean and wb.variance < nb.variance, 0, setup)


def kl_claim(seeds: int, samples: int, vocab: int = 32) -> Claim:
    """Monte Carlo k1 and k3 against the exact KL(pi || pi_ref) of two categorical distributions."""
    bias1, bias3, sd1, sd3, exact = [], [], [], [], []
    for s in range(seeds):
        g = torch.Generator().manual_seed(s)
        logits = torch.randn(vocab, generator=g, dtype=torch.float64)
        logp = torch.log_softmax(logits, 0)  # pi, the policy that samples
        logq = torch.log_softmax(logits + 0.3 * torch.randn(vocab, generator=g, dtype=torch.float64), 0)  # pi_ref
        kl = float((logp.exp() * (logp - logq)).sum())
        x = torch.multinomial(logp.exp(), samples, replacement=True, generator=g)  # (N,) tokens from pi
        k1, k3 = kl_k1(logp[x][None], logq[x][None])[0], kl_k3(logp[x][None], logq[x][None])[0]  # (N,)
        exact.append(kl)
        bias1.append(float(k1.mean()) - kl)
        bias3.append(float(k3.mean()) - kl)
        sd1.append(float(k1.std()))
        sd3.append(float(k3.std()))
    se3 = [sd / math.sqrt(samples) for sd in sd3]
    unbiased = abs(mean_sd(bias3)[0]) <= 3 * math.sqrt(sum(se ** 2 for se in se3)) / seeds
    setup = (f"pi = softmax(z), pi_ref = softmax(z + 0.3 e) over {vocab} tokens (z, e standard normal, a new pair "
             f"per seed); {samples} tokens drawn from pi per seed; exact KL(pi || pi_ref) = {fmt(exact, 4)}. "
             f"k1 = log pi - log pi_ref, k3 = r - 1 - log r with r = pi_ref / pi (`rlvr.core.kl_k1`, `kl_k3`). "
             f"Unbiased = |mean bias| within 3 standard errors; lower variance = per-sample sd of k3 below "
             f"k1's in every seed. k1 bias {fmt(bias1, 5)}.")
    return Claim("k3-unbiased-low-variance", "k3 is unbiased with lower variance than k1 (Monte Carlo vs exact KL)",
                 f"k3 bias {fmt(bias3, 5)}; per-sample sd k1 {fmt(sd1)} vs k3 {fmt(sd3)}",
                 unbiased and all(a < b for a, b in zip(sd3, sd1)), seeds, setup)
