"""`rlvr doctor RUN_DIR`: read a run folder and say, in plain words with step ranges, what went
wrong or is about to. Each check reads `metrics.jsonl` / `timings.jsonl` (see
`rlvr.logging.sinks`) and returns findings; thresholds are rules of thumb, named below, not laws.
See docs/troubleshooting.md for what each finding means and what to try.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from rlvr.config import ConfigError, OptimConfig
from rlvr.jsonl import read_jsonl
from rlvr.logging.sinks import METRICS, TIMINGS
from rlvr.report.collapse import (Collapse, collapse_signal, first_entropy, guard_settings, likely_cause, number,
                                  vocab_size)

PROBLEM, WARNING = "problem", "warning"
TRUNCATION_WARN, TRUNCATION_PROBLEM = 0.1, 0.5  # share of completions cut at max_new_tokens
LENGTH_BLOWUP = 2.0  # completion length over this many times its early median
ENTROPY_COLLAPSE = 0.1  # entropy under this share of its early median
SOLVED = 0.9  # batch accuracy over which low entropy is convergence, not collapse
SPIKE = 10.0  # KL or grad-norm over this many times its early median
KL_FLOOR, RATIO_MAX, CLIP_SHARE = 0.05, 10.0, 0.2
HACK_REWARD_RISE, HACK_ACCURACY_RISE = 0.1, 0.02  # reward up by this while held-out accuracy is not
SLOW_STEP = 2.0  # s/step over this many times the median
CONFIG = "config.yaml"  # written when a run starts, before its first log record


@dataclass(frozen=True)
class Finding:
    severity: str  # PROBLEM or WARNING
    title: str
    detail: str
    steps: tuple[int, ...] = ()
    hint: str = ""

    def line(self) -> str:
        where = f" (steps {step_ranges(self.steps)})" if self.steps else ""
        return f"[{self.severity}] {self.title}{where}: {self.detail}" + (f"\n    try: {self.hint}" if self.hint else "")


@dataclass
class RunLog:
    metrics: list[dict[str, Any]]
    timings: list[dict[str, Any]]
    config: dict[str, Any] = field(default_factory=dict)  # the run's config.yaml ({} when it has none)
    vocab: int | None = None  # the policy's number of logits (`rlvr.report.collapse.vocab_size`), None: unknown

    def series(self, key: str, rows: list[dict[str, Any]] | None = None) -> list[tuple[int, float]]:
        """(step, value) for each row that has `key` (step 0 holds only the evaluation before RL)."""
        return [(int(row.get("step", 0)), number(row[key])) for row in (self.metrics if rows is None else rows)
                if key in row]


def step_ranges(steps: tuple[int, ...] | list[int], max_parts: int = 6) -> str:
    """(1, 2, 3, 7, 9, 10) -> '1-3, 7, 9-10'; past `max_parts` pieces, '390-600, 152 of them'."""
    steps = sorted(set(steps))
    parts, lo = [], None
    for i, s in enumerate(steps):
        lo = s if lo is None else lo
        if i + 1 == len(steps) or steps[i + 1] != s + 1:
            parts.append(str(s) if s == lo else f"{lo}-{s}")
            lo = None
    if len(parts) > max_parts:
        return f"{steps[0]}-{steps[-1]}, {len(steps)} of them"
    return ", ".join(parts)


def _early_median(points: list[tuple[int, float]]) -> float:
    head = [v for _, v in points[: max(3, len(points) // 5)] if math.isfinite(v)]
    return statistics.median(head) if head else math.nan


COLLAPSE = "policy collapse"


def find_collapse(log: RunLog) -> Collapse | None:
    """The first step whose record shows that an update broke the policy (`rlvr.report.collapse`)."""
    limits, entropy = guard_settings(log.config), first_entropy(log.metrics)
    steps = (collapse_signal(row, entropy, log.vocab, limits) for row in log.metrics if row.get("step", 0) > 0)
    return next((found for found in steps if found), None)


def check_collapse(log: RunLog) -> list[Finding]:
    """The collapse the run's guard stopped it with, or would have (guard.collapse: false), with its likely
    cause from the run's optimizer settings."""
    found, optim = find_collapse(log), log.config.get("optim") or {}
    if found is None:
        return []
    cause = likely_cause(number(optim.get("lr", OptimConfig.lr)), number(optim.get("max_grad_norm",
                                                                                 OptimConfig.max_grad_norm)))
    return [Finding(PROBLEM, COLLAPSE, f"{found.signal}; the update of step {found.culprit} broke the policy, and what "
                    "follows it in the run is its consequence", (found.step,), f"{cause} (the likely cause)")]


def check_nonfinite(log: RunLog) -> list[Finding]:
    bad = {row["step"]: sorted(k for k, v in row.items() if v in ("nan", "inf", "-inf")
                               or isinstance(v, float) and not math.isfinite(v)) for row in log.metrics}
    bad = {s: keys for s, keys in bad.items() if keys}
    skipped = {row["step"]: sum(number(v) for k, v in row.items() if "skipped" in k)
               for row in log.metrics}
    out = []
    if bad:
        keys = sorted({k for ks in bad.values() for k in ks})
        out.append(Finding(PROBLEM, "non-finite values", f"{', '.join(keys[:6])} became NaN or infinite",
                           tuple(bad), "lower optim.lr, keep optim.max_grad_norm > 0, check the reward"))
    steps = tuple(s for s, n in skipped.items() if n > 0)
    if steps:
        out.append(Finding(PROBLEM, "skipped steps", f"{int(sum(skipped.values()))} update(s) skipped for "
                           "non-finite loss or gradients", steps, "lower optim.lr"))
    return out


def check_flat_groups(log: RunLog) -> list[Finding]:
    out = []
    flat = tuple(s for s, v in log.series("reward_std") if v == 0)
    if flat:
        out.append(Finding(PROBLEM, "no learning signal", "every completion of the batch got the same reward, "
                           "so every group-relative advantage is 0", flat,
                           "raise rollout.temperature or train.group_size, or use easier prompts"))
    share, flat_in = log.series("sampling/informative_share"), "reward"
    if share:  # dynamic sampling keeps the groups that vary in its metric (algorithm.dynamic_sampling_metric)
        flat_in = (log.config.get("algorithm") or {}).get("dynamic_sampling_metric", "accuracy")
    else:
        share = [(s, 1 - v) for s, v in log.series("flat_group_share")]
    low = tuple(s for s, v in share if v < 0.5)
    if low:
        worst = min(v for _, v in share)
        out.append(Finding(WARNING, "zero-variance groups", f"over half the sampled groups had one {flat_in} for "
                           f"all their completions (informative share down to {worst:.2f})", low,
                           "prompts are too easy or too hard for the policy: filter them by difficulty"))
    return out


def check_truncation(log: RunLog) -> list[Finding]:
    points = log.series("truncated")
    high = [(s, v) for s, v in points if v > TRUNCATION_WARN]
    if not high:
        return []
    worst = max(v for _, v in high)
    severity = PROBLEM if worst > TRUNCATION_PROBLEM else WARNING
    return [Finding(severity, "truncation", f"up to {worst:.0%} of completions hit rollout.max_new_tokens",
                    tuple(s for s, _ in high), "raise rollout.max_new_tokens or add an overlong penalty")]


def check_length(log: RunLog) -> list[Finding]:
    points = log.series("completion_length")
    base = _early_median(points)
    if not base > 0 or len(points) < 4:
        return []
    long = [(s, v) for s, v in points if v > LENGTH_BLOWUP * base]
    if not long:
        return []
    peak = max(v for _, v in long)
    return [Finding(WARNING, "length blow-up", f"completion length rose to {peak:.1f} tokens from {base:.1f} "
                    "early on", tuple(s for s, _ in long), "a length penalty (kimi_length, overlong) or "
                    "seq_mean_token_sum aggregation")]


def check_entropy(log: RunLog) -> list[Finding]:
    points = log.series("entropy")
    base = _early_median(points)
    if not base > 0 or len(points) < 4:
        return []
    low = [(s, v) for s, v in points if v < ENTROPY_COLLAPSE * base]
    if not low:
        return []
    fell = f"token entropy fell to {min(v for _, v in low):.3g} from {base:.3g}"
    steps = tuple(s for s, _ in low)
    accuracy = [v for s, v in log.series("accuracy") if s in set(steps)]
    if accuracy and statistics.fmean(accuracy) >= SOLVED:
        return [Finding(WARNING, "converged", f"{fell} while the batch accuracy is {statistics.fmean(accuracy):.2f}: "
                        "the policy solves its prompts nearly always the same way, so groups go flat and further "
                        "steps learn little", steps, "stop here, or move to harder prompts")]
    return [Finding(PROBLEM, "entropy collapse", f"{fell}: the policy samples nearly the same completion every "
                    "time", steps, "lower optim.lr, raise algorithm.clip_high (DAPO), add a KL term")]


def _spikes(points: list[tuple[int, float]], floor: float) -> list[tuple[int, float]]:
    if len(points) < 4:
        return []
    base = _early_median(points)
    return [(s, v) for s, v in points if v > max(SPIKE * base, floor)] if math.isfinite(base) else []


def check_spikes(log: RunLog) -> list[Finding]:
    out = []
    for key, floor, what in (("kl", KL_FLOOR, "KL to the reference"), ("approx_kl", KL_FLOOR, "KL to the sampling "
                             "policy"), ("grad_norm", 0.0, "gradient norm")):
        spikes = _spikes(log.series(key), floor)
        if spikes:
            out.append(Finding(WARNING, f"{key} spikes", f"{what} jumped to {max(v for _, v in spikes):.3g}, over "
                               f"{SPIKE:g}x its early median", tuple(s for s, _ in spikes),
                               "lower optim.lr; keep optim.max_grad_norm > 0"))
    ratio = [(s, v) for s, v in log.series("ratio_max") if v > RATIO_MAX]
    if ratio:
        out.append(Finding(WARNING, "ratio spikes", f"the importance ratio reached {max(v for _, v in ratio):.3g}: "
                           "the policy moved far from the one that sampled", tuple(s for s, _ in ratio),
                           "lower optim.lr or algorithm.mu"))
    clip = {s: v for s, v in log.series("clip_frac_low")}
    for s, v in log.series("clip_frac_high"):
        clip[s] = clip.get(s, 0.0) + v
    clipped = tuple(s for s, v in clip.items() if v > CLIP_SHARE)
    if clipped:
        out.append(Finding(WARNING, "heavy clipping", f"over {CLIP_SHARE:.0%} of tokens were clipped: updates "
                           "are larger than the trust region", clipped, "lower optim.lr or algorithm.mu"))
    return out


def _thirds(points: list[tuple[int, float]]) -> tuple[float, float, str]:
    """The means of the first and the last third of the finite points, and those thirds in words:
    'steps 1-13 mean 0.58 -> steps 28-40 mean 0.90'."""
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    k = max(1, len(finite) // 3)
    head, tail = finite[:k], finite[-k:]
    start, end = statistics.fmean(v for _, v in head), statistics.fmean(v for _, v in tail)
    words = (f"steps {step_ranges([s for s, _ in head])} mean {start:.2f} -> "
             f"steps {step_ranges([s for s, _ in tail])} mean {end:.2f}")
    return start, end, words


def check_reward_hacking(log: RunLog) -> list[Finding]:
    """One finding when the reward rose while correctness did not: a problem when held-out accuracy stayed
    flat, else a warning when the batch's accuracy did."""
    reward = log.series("reward")
    if len(reward) < 6:
        return []
    start, end, rose = _thirds(reward)
    if end - start < HACK_REWARD_RISE:
        return []
    flat = []
    held = log.series("eval/greedy_accuracy")
    held_flat = len(held) >= 2 and held[-1][1] - held[0][1] < HACK_ACCURACY_RISE
    if held_flat:
        (s0, v0), (s1, v1) = held[0], held[-1]
        flat.append(f"held-out accuracy {v0:.2f} at step {s0} -> {v1:.2f} at step {s1}")
    accuracy = log.series("accuracy")
    if len(accuracy) >= 6 and (acc := _thirds(accuracy))[1] - acc[0] < HACK_ACCURACY_RISE:
        flat.append(f"training accuracy {acc[2]}")
    if not flat:
        return []
    steps = tuple(s for s, _ in reward)
    if held_flat:
        return [Finding(PROBLEM, "reward hacking", f"reward {rose}, while {' and '.join(flat)}", steps,
                        "read samples.jsonl and each reward term (reward/<term>, plots/reward_terms.png): the "
                        "reward pays for something other than correctness")]
    return [Finding(WARNING, "reward rises, correctness does not", f"reward {rose}, while {flat[0]}", steps,
                    "compare the reward's components (reward/<term>) with the task's correctness")]


def check_reward_collapse(log: RunLog) -> list[Finding]:
    reward = log.series("reward")
    if len(reward) < 6:
        return []
    values = [v for _, v in reward]
    # the highest level held for 3 steps in a row: one lucky batch of a reward near 0 (0.03 once) is no peak
    peak = max(min(values[i : i + 3]) for i in range(len(values) - 2))
    tail = reward[-3:]
    if peak > 0 and all(v < 0.1 * peak for _, v in tail):
        return [Finding(PROBLEM, "reward collapse", f"reward fell to {tail[-1][1]:.3g} after a peak of {peak:.3g}",
                        tuple(s for s, _ in tail), "resume from a checkpoint before the fall with a lower optim.lr")]
    return []


def check_reward_errors(log: RunLog) -> list[Finding]:
    out = []
    for key, what in (("reward/errors", "raised an error or ran past reward.timeout"),
                      ("reward/timeouts", "timed out")):
        points = [(s, v) for s, v in log.series(key) if v > 0]
        if points:
            out.append(Finding(PROBLEM, f"reward {key.split('/')[1]}", f"{int(sum(v for _, v in points))} "
                               f"reward call(s) {what} and scored the fallback", tuple(s for s, _ in points),
                               "the first traceback (or timeout) is in the log; test the reward on samples.jsonl"))
    return out


def check_environment(log: RunLog) -> list[Finding]:
    """Episodes an environment ended by failing (an exception, a call past env.step_timeout, output that is not
    messages or a finite reward: `rlvr.rollout.env_guard`), and observations cut to env.max_observation_tokens."""
    out = []
    for key, what in (("episode/env_errors", "raised an error"), ("episode/env_timeouts", "ran past env.step_timeout"),
                      ("episode/env_bad_output", "returned what is not messages or a finite reward")):
        points = [(s, v) for s, v in log.series(key) if v > 0]
        if points:
            out.append(Finding(PROBLEM, f"environment {key.split('_', 1)[1].replace('_', ' ')}",
                               f"in {int(sum(v for _, v in points))} episode(s) the environment {what}; each ended "
                               "there with the reward it had", tuple(s for s, _ in points),
                               "the first traceback of each kind is in the log; step the environment by hand on "
                               "the episodes of samples.jsonl"))
    cut = [(s, v) for s, v in log.series("episode/truncated_observations") if v > 0]
    if cut:
        out.append(Finding(WARNING, "observations cut", f"{int(sum(v for _, v in cut))} observation(s) were longer "
                           "than env.max_observation_tokens and were cut", tuple(s for s, _ in cut),
                           "raise env.max_observation_tokens, or make the environment say less"))
    return out


def check_throughput(log: RunLog) -> list[Finding]:
    points = log.series("s_per_step", log.timings)
    finite = [v for _, v in points if math.isfinite(v)]
    if len(finite) < 4:
        return []
    median = statistics.median(finite)
    slow = [(s, v) for s, v in points if v > SLOW_STEP * median]
    if not slow:
        return []
    return [Finding(WARNING, "throughput drop", f"steps took up to {max(v for _, v in slow):.1f} s against a median "
                    f"of {median:.1f} s", tuple(s for s, _ in slow),
                    "longer completions, a slow reward, or another job on the machine")]


CHECKS: list[Callable[[RunLog], list[Finding]]] = [
    check_collapse, check_nonfinite, check_reward_errors, check_environment, check_flat_groups, check_truncation, check_length,
    check_entropy, check_spikes, check_reward_hacking, check_reward_collapse, check_throughput,
]


def load_run(run_dir: str | Path) -> RunLog:
    """Raises ConfigError (exit 2) naming the folder or file when it is not a readable run folder; a run that
    has not logged a step yet has empty logs."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a run folder")
    # config.yaml alone: a run that started but has logged nothing yet (it may be in its SFT warm start)
    if not (run_dir / METRICS).is_file() and not (run_dir / CONFIG).is_file():
        runs = sorted({str(m.parent) for depth in ("*", "*/*") for name in (METRICS, CONFIG)  # `rlvr compare`:
                       for m in run_dir.glob(f"{depth}/{name}")})  # OUT/label; `rlvr recipe`: OUT/NN_stage/run
        if len(runs) == 1:
            raise ConfigError(f"{run_dir} is not a run folder; it holds one: name {runs[0]}")
        if runs:
            shown = ", ".join(runs[:6]) + (f" and {len(runs) - 6} more" if len(runs) > 6 else "")
            raise ConfigError(f"{run_dir} holds {len(runs)} runs, not one: name one of {shown}")
        raise ConfigError(f"{run_dir} has no {METRICS} nor {CONFIG}: not a run folder")
    logs = []
    for name in (METRICS, TIMINGS):
        try:  # the run may be writing its next record now
            logs.append(read_jsonl(run_dir / name, missing_ok=True, growing=True))
        except ValueError as e:  # names the file and line
            raise ConfigError(str(e)) from None
    config = _read_config(run_dir / CONFIG)
    return RunLog(*logs, config, vocab_size(run_dir, (config.get("model") or {}).get("path")))


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not readable YAML: {str(e).splitlines()[0]}") from None
    return config if isinstance(config, dict) else {}


def diagnose(run: str | Path | RunLog) -> list[Finding]:
    """Every finding for a run folder (or its loaded logs), problems first. After a policy collapse, what held
    only at later steps (no learning signal, reward collapse, ...) is its consequence, not another cause: left out."""
    log = run if isinstance(run, RunLog) else load_run(run)
    findings = [f for check in CHECKS for f in check(log)]
    collapse = find_collapse(log)
    if collapse is not None:
        findings = [f for f in findings if f.title == COLLAPSE or not f.steps or min(f.steps) <= collapse.culprit]
    return sorted(findings, key=lambda f: f.severity != PROBLEM)
