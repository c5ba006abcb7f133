"""The length claims of lecture 17 on the free-length toy (`length_toy`): GRPO's per-sequence
normaliser against Dr. GRPO's constant one, and Kimi k1.5's length reward switched on early or late.

Arms (one seed, so replica k starts from the same policy in every arm; compared with Welch's test):

    per_sequence      GRPO as published: each response's loss divided by its own length
    constant          Dr. GRPO's constant normaliser (the budget, 1 + T tokens)
    kimi_early        per_sequence + Kimi's length reward from the first step
    kimi_late         per_sequence + Kimi's length reward from the middle step
    *_adam            the two normalisers again with Adam instead of SGD (a control, see `length_toy`)
"""

from __future__ import annotations

from pathlib import Path

from rlvr.pipelines.experiments.claims import Claim, fmt
from rlvr.pipelines.experiments.figures import band, pyplot, save
from rlvr.pipelines.experiments.length_toy import LengthToyConfig, LengthToyResult, run_length_toy
from rlvr.pipelines.experiments.stats import above, all_of, direction, paired_test, welch_test

ACCURACY_MARGIN = 0.02  # "without losing accuracy": not lower by 2 points or more


def arms(steps: int) -> dict[str, dict]:
    return {"per_sequence": {}, "constant": {"aggregation": "seq_sum_constant"}, "kimi_early": {"kimi_from": 0},
            "kimi_late": {"kimi_from": steps // 2},
            "per_sequence_adam": {"optimizer": "adam", "lr": 0.05},
            "constant_adam": {"optimizer": "adam", "lr": 0.05, "aggregation": "seq_sum_constant"}}


def run_length_toys(seeds: int, steps: int, seed: int = 0) -> dict[str, LengthToyResult]:
    return {name: run_length_toy(LengthToyConfig(seeds=seeds, steps=steps, seed=seed, **extra))
            for name, extra in arms(steps).items()}


def _setup(cfg: LengthToyConfig) -> str:
    return (f"The free-length toy (`rlvr.pipelines.experiments.length_toy`): {cfg.prompts} prompts, an answer "
            f"token out of {cfg.answers}, then working of free length (at most {cfg.budget} tokens) that sees "
            f"the answer, then the end token; reward 1 when the answer is right and the working has at least "
            f"{cfg.need} tokens. Tabular policy, {cfg.seeds} replicas, {cfg.responses} responses per prompt, GRPO "
            f"advantages, {cfg.steps} on-policy steps of SGD (lr {cfg.lr:g}). Every number is exact (closed form "
            f"over the policy), not sampled. Far smaller than the papers' (LLMs, thousands of tokens).")


def length_bias_claim(res: dict[str, LengthToyResult], out: Path) -> Claim:
    per_seq, const = res["per_sequence"], res["constant"]
    test = welch_test(per_seq.final("wrong_length"), const.final("wrong_length"))
    grow = {name: paired_test(r.final("wrong_length"), r.wrong_length[0]) for name, r in res.items()
            if name in ("per_sequence", "constant")}
    adam = welch_test(res["per_sequence_adam"].final("wrong_length"), res["constant_adam"].final("wrong_length"))
    _plot_length_bias(res, out / "length_bias.png")
    setup = (_setup(per_seq.config) + " Number: the expected length (tokens) of responses whose answer token is "
             f"wrong, at the end. Change over the run: per-sequence {grow['per_sequence'].describe()}; constant "
             f"{grow['constant'].describe()} (end - start). With Adam (lr 0.05) in place of SGD: per-sequence "
             f"{fmt(res['per_sequence_adam'].final('wrong_length'), 2)} vs constant "
             f"{fmt(res['constant_adam'].final('wrong_length'), 2)}, {adam.describe()}: Adam shortens the "
             f"constant normaliser's wrong answers on its own (see `length_toy`). Accuracy at the end: "
             f"per-sequence {fmt(per_seq.final('accuracy'))}, constant {fmt(const.final('accuracy'))} (the "
             f"constant normaliser's steps are smaller under SGD).")
    return Claim("length-bias", "Per-sequence length normalisation lets wrong answers grow longer than Dr. GRPO's "
                 "constant normaliser", f"length of wrong answers at the end: per-sequence "
                 f"{fmt(per_seq.final('wrong_length'), 2)} vs constant {fmt(const.final('wrong_length'), 2)} "
                 f"(start {fmt(per_seq.wrong_length[0], 2)})", direction(test, +1),
                 f"{test.describe()} (per-sequence - constant); holds if > 0 at p < 0.05", per_seq.config.seeds,
                 setup, ["length_bias.png"])


def kimi_claims(res: dict[str, LengthToyResult], out: Path) -> list[Claim]:
    none, early, late = res["per_sequence"], res["kimi_early"], res["kimi_late"]
    switch = late.config.kimi_from
    shorter = welch_test(late.final("length"), none.final("length"))
    kept = welch_test(late.final("accuracy"), none.final("accuracy"))
    slowed = welch_test(early.accuracy[switch], none.accuracy[switch])
    _plot_kimi(res, out / "kimi_length.png", switch)
    setup = (_setup(none.config) + f" Kimi k1.5's group length reward (`rlvr.rewards.kimi_length_reward`, weight 1: "
             f"0.5 - (len - min) / (max - min) for a right answer, min(0, that) for a wrong one) added to the 0/1 "
             f"reward from step 0 (early) or step {switch} (late, dotted line); the arm without it is the "
             f"per-sequence run of the length-bias claim.")
    late_claim = Claim(
        "kimi-late", "Kimi's length reward switched on late shortens responses without losing accuracy",
        f"length at the end: late {fmt(late.final('length'), 2)} vs without {fmt(none.final('length'), 2)}; "
        f"accuracy late {fmt(late.final('accuracy'))} vs without {fmt(none.final('accuracy'))}",
        all_of(direction(shorter, -1), above(kept, -ACCURACY_MARGIN)),
        f"shorter: {shorter.describe()} (late - without); accuracy: {kept.describe()} (late - without), "
        f"non-inferiority: its 90% interval's lower end {kept.interval(0.9)[0]:+.3f} above -{ACCURACY_MARGIN}; "
        f"holds if both pass at level 0.05", none.config.seeds, setup, ["kimi_length.png"])
    early_claim = Claim(
        "kimi-early", "Switched on from the start, the length reward slows learning (why Kimi adds it late)",
        f"accuracy at step {switch}: early {fmt(early.accuracy[switch])} vs without {fmt(none.accuracy[switch])}; "
        f"at the end early {fmt(early.final('accuracy'))} vs without {fmt(none.final('accuracy'))}",
        direction(slowed, -1), f"{slowed.describe()} (early - without, at step {switch}); holds if < 0 at p < 0.05",
        none.config.seeds, setup + " Right answers need working; early on most are too short, and the length "
        "reward penalises the longer of the wrong ones, which pushes against the working they need.",
        ["kimi_length.png"])
    return [late_claim, early_claim]


def _plot_length_bias(res: dict[str, LengthToyResult], path: Path) -> Path:
    fig, axes = pyplot().subplots(1, 3, figsize=(16, 4.2))
    for i, name in enumerate(("per_sequence", "constant", "per_sequence_adam", "constant_adam")):
        r, style = res[name], {"linestyle": "--"} if name.endswith("adam") else {}
        label = f"{name} ({r.config.seeds} replicas)"
        band(axes[0], r.steps, r.wrong_length, f"C{i}", label, **style)
        band(axes[1], r.steps, r.right_length, f"C{i}", label, **style)
        band(axes[2], r.steps, r.accuracy, f"C{i}", label, **style)
    axes[0].set(xlabel="step", ylabel="E[tokens | wrong answer]", title="Length of wrong answers (mean ± 1 s.e.)")
    axes[1].set(xlabel="step", ylabel="E[tokens | right answer]", title="Length of right answers")
    axes[2].set(xlabel="step", ylabel="P(reward 1)", title="Accuracy, exact", ylim=(-0.02, 1.02))
    for ax in axes:
        ax.legend(fontsize=7)
    return save(fig, path)


def _plot_kimi(res: dict[str, LengthToyResult], path: Path, switch: int) -> Path:
    fig, (ax_len, ax_acc) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    for i, name in enumerate(("per_sequence", "kimi_early", "kimi_late")):
        r = res[name]
        label = {"per_sequence": "without length reward"}.get(name, name) + f" ({r.config.seeds} replicas)"
        band(ax_len, r.steps, r.length, f"C{i}", label)
        band(ax_acc, r.steps, r.accuracy, f"C{i}", label)
    ax_len.set(xlabel="step", ylabel="E[tokens]", title="Response length, exact (mean ± 1 s.e.)")
    ax_acc.set(xlabel="step", ylabel="P(reward 1)", title="Accuracy, exact", ylim=(-0.02, 1.02))
    for ax in (ax_len, ax_acc):
        ax.axvline(switch, color="gray", linestyle=":", linewidth=1)
        ax.legend(fontsize=8)
    return save(fig, path)
