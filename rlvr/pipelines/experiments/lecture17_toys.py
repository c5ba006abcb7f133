"""The claims of CS336 lecture 17 that need no language model: the sorting toy's deltas, rewards,
flat groups and loss, the two-state baseline example and the KL estimators.

Each function runs (or reads) its experiment, draws its figure into `out` and returns `Claim`s whose
verdict is read from a stated test (`rlvr.pipelines.experiments.stats`): arms (deltas, rewards) are
compared with Welch's test, a run against its own start with the paired test.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from rlvr.core import kl_k1, kl_k3
from rlvr.pipelines.experiments.claims import Claim, fmt
from rlvr.pipelines.experiments.figures import band, pyplot, save
from rlvr.pipelines.experiments.sort_rewards import REPEATED_PROMPTS
from rlvr.pipelines.experiments.sort_toy import SortToyResult, plot_sort_toy, run_deltas, run_rewards
from rlvr.pipelines.experiments.stats import (CONTRADICTED, HOLDS, UNDECIDED, above, all_of, direction, fisher_z,
                                              one_sample_test, paired_test, pearson, welch_test, within)
from rlvr.pipelines.experiments.two_state import two_state_example

CLOSE_MARGIN = 0.25  # "close": within 5% of the toy's maximum reward (5)


def toy_setup(seeds: int, epochs: int, seed: int) -> str:
    return (f"The lecture's sorting toy (prompts [1 0 2], [3 2 4], [1 2 3], vocabulary 5, 10 responses per "
            f"prompt, {epochs} epochs x 10 Adam steps, lr 1e-3, inclusion reward, maximum 5), {seeds} "
            f"independently initialised replicas (seed {seed}). Number: the exact expected reward of the final "
            f"policy (all 5^3 responses enumerated)." + ("" if epochs == 100 else " Fewer epochs than the "
                                                          "lecture's 100."))


def run_delta_toys(seeds: int, epochs: int, seed: int = 0) -> dict[str, SortToyResult]:
    return run_deltas(["raw", "centered", "normalized", "max_only"], seed=seed, seeds=seeds, epochs=epochs)


def delta_claims(res: dict[str, SortToyResult], out: Path, seed: int = 0) -> list[Claim]:
    """Raw vs centered vs normalized vs max-only deltas on the lecture's prompts."""
    plot_sort_toy(res, out / "sort_toy_deltas.png")
    cfg = res["raw"].config
    final = {d: r.final_expected_reward for d, r in res.items()}
    start = res["raw"].expected_reward[0]
    c, r, n, m = final["centered"], final["raw"], final["normalized"], final["max_only"]
    setup = toy_setup(cfg.seeds, cfg.epochs, seed) + " Figure: reward, exact match and loss, mean ± 1 s.e."
    beats, close = welch_test(c, r), welch_test(n, c)
    learns, below = paired_test(m, start), welch_test(m, c)
    return [
        Claim("centered-beats-raw", "Centered deltas (R - group mean) beat raw rewards",
              f"final E[R] centered {fmt(c)} vs raw {fmt(r)}", direction(beats, +1),
              f"{beats.describe()} (centered - raw); holds if > 0 at p < 0.05", cfg.seeds, setup,
              ["sort_toy_deltas.png"]),
        Claim("normalized-close-to-centered", "Normalized deltas ((R - mean) / (std + 1e-4)) end close to centered",
              f"normalized {fmt(n)} vs centered {fmt(c)}", within(close, CLOSE_MARGIN),
              f"{close.describe()} (normalized - centered); equivalence (two one-sided tests at 0.05): holds if "
              f"the 90% interval [{close.interval(0.9)[0]:+.3f}, {close.interval(0.9)[1]:+.3f}] lies inside "
              f"±{CLOSE_MARGIN} (5% of the maximum reward), contradicted if it lies outside", cfg.seeds, setup),
        Claim("max-only", "Max-only deltas (keep R only where it equals the group maximum) learn, but less than "
              "centered", f"max-only {fmt(m)}; start {fmt(start)}; centered {fmt(c)}",
              all_of(direction(learns, +1), direction(below, -1)),
              f"learns: {learns.describe()} (final - start); less: {below.describe()} (max-only - centered); "
              f"holds if both reject at p < 0.05 in the claimed direction", cfg.seeds,
              setup + " Ties at the maximum all keep their reward, as the lecture's `max_rewards`."),
    ]


def _windows(series: list[list[float]], inner: int, epochs: int) -> tuple[list[float], list[float]]:
    """(K,) mean over the first and over the last tenth of the epochs of a per-step series."""
    per_epoch = series[::inner]  # (epochs, K) one value per sampling round
    w = max(1, epochs // 10)
    k = len(per_epoch[0])
    return ([sum(row[i] for row in per_epoch[:w]) / w for i in range(k)],
            [sum(row[i] for row in per_epoch[-w:]) / w for i in range(k)])


def flat_claim(res: dict[str, SortToyResult], lm_flat: list[list[float]], out: Path) -> Claim:
    """The share of groups whose responses all score alike (every group-relative delta 0) over training."""
    cfg = res["normalized"].config
    tests = {}
    for delta in ("centered", "normalized"):
        early, late = _windows(res[delta].flat_share, cfg.inner_steps, cfg.epochs)
        tests[delta] = (early, late, paired_test(late, early))
    lm_line = "no trainer runs"
    if lm_flat and len(lm_flat) >= 2 and len(lm_flat[0]) >= 2:
        w = max(1, len(lm_flat[0]) // 10)
        lm_early, lm_late = [sum(s[:w]) / w for s in lm_flat], [sum(s[-w:]) / w for s in lm_flat]
        lm_line = (f"first {w} RL steps {fmt(lm_early)}, last {w} {fmt(lm_late)}; "
                   f"{paired_test(lm_late, lm_early).describe()}")
    _plot_flat(res, lm_flat, out / "flat_groups.png")
    e, lt, _ = tests["normalized"]
    w = max(1, cfg.epochs // 10)
    setup = (f"The deltas' toy runs ({cfg.seeds} replicas). At every sampling round, the share of the 3 "
             f"prompts whose 10 rewards are all equal (`rlvr.core.flat_group_share`): their centered and "
             f"normalized deltas are exactly 0, so those prompts stop teaching. Number: the share over the first "
             f"and over the last {w} epochs (a tenth of the run), per replica. In the trainer (the language-model "
             f"runs of the std-scaling claim, GRPO, batch share of flat groups): {lm_line}; the trainer's runs "
             f"start from a model that answers about half the prompts, so both all-right and all-wrong groups "
             f"are rare there.")
    verdict = all_of(*(direction(t, +1) for _, _, t in tests.values()))
    test = "; ".join(f"{d}: {t.describe()} (last - first)" for d, (_, _, t) in tests.items())
    return Claim("flat-groups", "As the policy sharpens, more prompts give all deltas 0 (flat groups): no signal "
                 "from them", f"share of flat groups, normalized deltas: first tenth {fmt(e)}, last tenth {fmt(lt)}",
                 verdict, f"{test}; holds if both rise at p < 0.05", cfg.seeds, setup, ["flat_groups.png"])


def _plot_flat(res: dict[str, SortToyResult], lm_flat: list[list[float]], path: Path) -> Path:
    fig, (ax, ax_lm) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    for i, (delta, r) in enumerate(res.items()):
        band(ax, r.steps, r.flat_share, f"C{i}", f"{delta} ({r.config.seeds} replicas)")
    ax.set(xlabel="Adam step (10 per sampling round)", ylabel="share of flat groups",
           title="Sorting toy: groups with one reward (mean ± 1 s.e.)", ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)
    if lm_flat:
        steps = list(range(1, len(lm_flat[0]) + 1))
        band(ax_lm, steps, [list(col) for col in zip(*lm_flat)], "C2", f"GRPO, {len(lm_flat)} seeds")
        ax_lm.legend(fontsize=8)
    ax_lm.set(xlabel="RL step", ylabel="share of flat groups", title="Trainer, tiny LM on sort-4 (mean ± 1 s.e.)",
              ylim=(-0.02, 1.02))
    return save(fig, path)


def hack_claim(out: Path, seeds: int, epochs: int, seed: int = 0) -> Claim:
    """Repeated-token prompts: the probability of a maximum-reward answer that is not sorted, per reward."""
    res = run_rewards(["exact", "position", "inclusion"], delta="normalized", prompts=REPEATED_PROMPTS, seed=seed,
                      seeds=seeds, epochs=epochs)
    _plot_hack(res, out / "sort_toy_reward_hack.png")
    tests = {name: paired_test(r.hacked[-1], r.hacked[0]) for name, r in res.items()}
    inclusion, position = direction(tests["inclusion"], +1), direction(tests["position"], +1)
    verdict = CONTRADICTED if inclusion == CONTRADICTED else HOLDS if (inclusion, position) == (HOLDS, UNDECIDED) \
        else UNDECIDED
    inc = res["inclusion"]
    setup = (f"The toy on prompts that repeat a token ([1 0 2 2], [3 2 4 3], [1 2 3 1]: under the inclusion reward "
             f"five responses score the maximum 7, one of them sorted), normalized deltas, {epochs} epochs, {seeds} "
             f"replicas. The hack figure: the exact probability that the policy answers with the reward's maximum "
             f"while not sorted, at the start and at the end of training. Under the position reward only the "
             f"sorted answer scores its maximum, so the same figure stays 0: honest learning does not pass the "
             f"test (position: {tests['position'].describe()}; exact: {tests['exact'].describe()}). Final "
             f"exact match: inclusion {fmt(inc.final_exact_match)}, position "
             f"{fmt(res['position'].final_exact_match)}, exact {fmt(res['exact'].final_exact_match)}.")
    return Claim("inclusion-hacked", "The inclusion reward is hacked when a prompt repeats a token: the policy "
                 "learns maximum-reward answers that are not sorted", f"P(max reward, unsorted) under inclusion: "
                 f"start {fmt(inc.hacked[0])}, end {fmt(inc.hacked[-1])}; under position: end "
                 f"{fmt(res['position'].hacked[-1])}", verdict,
                 f"inclusion: {tests['inclusion'].describe()} (end - start); holds if it rises at p < 0.05 and "
                 f"the position reward's figure does not", seeds, setup, ["sort_toy_reward_hack.png"])


def _plot_hack(res: dict[str, SortToyResult], path: Path) -> Path:
    fig, (ax_h, ax_x) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    for i, (name, r) in enumerate(res.items()):
        band(ax_h, r.steps, r.hacked, f"C{i}", f"{name} reward")
        band(ax_x, r.steps, r.exact_match, f"C{i}", f"{name} reward")
    k = next(iter(res.values())).config.seeds
    ax_h.set(xlabel="Adam step", ylabel="P(reward at its maximum, not sorted)",
             title=f"The hack, exact (mean ± 1 s.e., {k} replicas)")
    ax_x.set(xlabel="Adam step", ylabel="P(response = sorted prompt)", title="Exact match, exact")
    for ax in (ax_h, ax_x):
        ax.legend(fontsize=8)
    return save(fig, path)


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
    ok = nb.mean == wb.mean and wb.variance < nb.variance
    return Claim("baseline-variance", "A baseline keeps the expected gradient and cuts its variance (two-state)",
                 measured, HOLDS if ok else CONTRADICTED, "exact enumeration in fractions, no sampling: holds if "
                 "the expected gradients are equal and the variance is lower", 0, setup)


def kl_claim(pairs: int, vocab: int = 32, scale: float = 0.3) -> Claim:
    """k1 and k3 against the exact KL(pi || pi_ref) of two categorical distributions, in expectation and
    variance under pi, computed exactly by summing over the vocabulary (no sampling)."""
    bias1, bias3, sd1, sd3, exact = [], [], [], [], []
    for s in range(pairs):
        g = torch.Generator().manual_seed(s)
        logits = torch.randn(vocab, generator=g, dtype=torch.float64)
        logp = torch.log_softmax(logits, 0)  # pi, the policy that samples
        logq = torch.log_softmax(logits + scale * torch.randn(vocab, generator=g, dtype=torch.float64), 0)  # pi_ref
        p = logp.exp()
        kl = float((p * (logp - logq)).sum())
        for est, bias, sd in ((kl_k1, bias1, sd1), (kl_k3, bias3, sd3)):
            k = est(logp[None], logq[None])[0]  # (V,) the estimator's value on every token
            mean = float((p * k).sum())
            bias.append(mean - kl)
            sd.append(math.sqrt(float((p * (k - mean) ** 2).sum())))
        exact.append(kl)
    unbiased = all(abs(b) <= 1e-6 * kl for b, kl in zip(bias3, exact))
    lower = all(a < b for a, b in zip(sd3, sd1))
    setup = (f"pi = softmax(z), pi_ref = softmax(z + {scale} e) over {vocab} tokens (z, e standard normal, a new "
             f"pair per seed); exact KL(pi || pi_ref) = {fmt(exact, 4)}. k1 = log pi - log pi_ref, k3 = r - 1 - "
             f"log r with r = pi_ref / pi (`rlvr.core.kl_k1`, `kl_k3`), each evaluated on every token and weighted "
             f"by pi: the exact mean and standard deviation of a one-sample estimate. k1 is unbiased too (largest "
             f"bias {max(abs(b) for b in bias1):.1e}), but it takes negative values; k3 never does.")
    return Claim("k3-unbiased-low-variance", "k3 is unbiased with lower variance than k1",
                 f"largest k3 bias abs(E[k3] - KL) {max(abs(b) for b in bias3):.1e}; per-sample sd k1 {fmt(sd1)} "
                 f"vs k3 {fmt(sd3)}",
                 HOLDS if unbiased and lower else CONTRADICTED,
                 f"exact expectations over the vocabulary, {pairs} distribution pairs: holds if |E[k3] - KL| <= "
                 f"1e-6 KL and sd(k3) < sd(k1) in every pair", 0, setup)


TRACKS = -0.5  # a loss that tracked progress would fall as the reward rises: correlation at or below this


def _correlation_test(pairs: list[tuple[list[float], list[float]]]) -> tuple[list[float], str, str]:
    """Per run, the correlation of loss and reward over its steps; tested on Fisher's z against TRACKS."""
    rs = [r for loss, reward in pairs if not math.isnan(r := pearson(loss, reward))]
    if len(rs) < 2:
        return rs, UNDECIDED, f"{len(rs)} defined correlations: too few to test"
    test = one_sample_test([fisher_z(r) for r in rs], mu=fisher_z(TRACKS))
    return rs, above(test, 0.0), f"{test.describe()} (mean atanh(r) - atanh({TRACKS}))"


def loss_claim(res: dict[str, SortToyResult], lm_runs: list[list[dict]], out: Path) -> Claim:
    """Over a run, does the loss track the reward? Per run, Pearson's r between the two series."""
    def columns(r: SortToyResult, k: int) -> tuple[list[float], list[float]]:
        return [row[k] for row in r.loss], [row[k] for row in r.expected_reward]

    toy = {d: _correlation_test([columns(r, k) for k in range(r.config.seeds)]) for d, r in res.items()}
    lm_pairs = [([row["loss"] for row in rows if "loss" in row], [row["reward"] for row in rows if "loss" in row])
                for rows in lm_runs]
    lm = _correlation_test([p for p in lm_pairs if len(p[0]) >= 2])
    _plot_loss(res["normalized"], lm_runs, out / "loss_vs_reward.png")
    others = "; ".join(f"{d} r = {fmt(rs, 2)}" for d, (rs, _, _) in toy.items() if d != "normalized")
    largest = max((abs(x) for loss, _ in lm_pairs for x in loss), default=float("nan"))
    setup = (f"Per run, Pearson's r between the loss and the reward over all its steps: the sorting toy's replicas "
             f"with normalized deltas, GRPO's (loss and exact expected reward at every Adam step), and the "
             f"trainer's GRPO runs of the tiny LM (logged `loss` and batch `reward` at every RL step). A loss that "
             f"measured progress would fall as the reward rises, r near -1; the test asks whether r is above "
             f"{TRACKS} (the loss explains under a quarter of the reward's variation in that direction). In the toy "
             f"the loss rises toward 0 while the reward rises. The trainer's on-policy GRPO loss is -mean(A) over "
             f"centred advantages, 0 up to float rounding at every step whatever the reward (largest magnitude "
             f"{largest:.1e}). Other deltas of the toy: {others}. Raw deltas are all >= 0, so their loss does fall "
             f"as the reward rises: it falls toward 0 as the policy turns deterministic, whether or not the reward "
             f"it settles on is high; the claim is the lecture's for its GRPO-style deltas.")
    (toy_r, toy_v, toy_t), (lm_r, lm_v, lm_t) = toy["normalized"], lm
    return Claim("loss-vs-reward", "The loss is not a progress signal: over a GRPO run it does not track the reward "
                 "(watch the reward)", f"r(loss, reward) over a run: toy, normalized deltas {fmt(toy_r, 2)}; "
                 f"trainer, GRPO {fmt(lm_r, 2)}", all_of(toy_v, lm_v),
                 f"toy: {toy_t}; trainer: {lm_t}; holds if both are above at one-sided level 0.05", len(toy_r),
                 setup, ["loss_vs_reward.png"])


def _plot_loss(toy: SortToyResult, lm_runs: list[list[dict]], path: Path) -> Path:
    fig, axes = pyplot().subplots(1, 2, figsize=(12, 4.2))
    panels = [(axes[0], toy.steps, toy.loss, toy.expected_reward, "Adam step", "exact E[R]",
               f"Sorting toy, normalized deltas ({toy.config.seeds} replicas)")]
    if lm_runs:
        rows = [[r for r in run if "loss" in r] for run in lm_runs]
        panels.append((axes[1], [r["step"] for r in rows[0]], [list(c) for c in zip(*[[r["loss"] for r in run]
                       for run in rows])], [list(c) for c in zip(*[[r["reward"] for r in run] for run in rows])],
                       "RL step", "batch reward", f"Trainer, GRPO on the tiny LM ({len(rows)} seeds)"))
    for ax, x, loss, reward, xlabel, rlabel, title in panels:
        band(ax, x, loss, "C3", "loss")
        ax.set(xlabel=xlabel, ylabel="loss", title=title)
        twin = ax.twinx()
        band(twin, x, reward, "C0", rlabel)
        twin.set_ylabel(rlabel)
        lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        ax.legend(lines, [h.get_label() for h in lines], fontsize=8, loc="center right")
    return save(fig, path)
