"""Best-of-N difficulty filtering: sample N answers per prompt, verify them, drop what is already solved.

Prompts the policy solves almost always give a group of equal rewards, hence zero group-relative
advantage and no gradient (DAPO, Yu et al. 2025, Sec. 3.2), so they waste rollout compute. Kimi k1.5
(Kimi Team 2025, Sec. 2.1) samples N = 8 answers per prompt and keeps a prompt only if all fail
(`mode="all_fail"`, i.e. k = 1); Qwen3 (Yang et al. 2025, Sec. 4.2) likewise drops queries the model
already answers. The general rule here: drop a prompt solved in >= k of N samples; optionally also
drop prompts never solved (possibly unsolvable or mislabeled).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.data.report import CurationResult, Removal, make_result
from rlvr.data.text import TextKey, get_text
from rlvr.rollout.base import RolloutEngine, SamplingParams

Verifier = Callable[[str, Any], bool]  # (completion text, item) -> correct?  (Task.is_correct fits)

MODES = ("drop_solved", "all_fail")


def solve_counts(
    engine: RolloutEngine,
    items: Sequence[Any],
    is_correct: Verifier,
    *,
    n: int = 8,
    sampling: SamplingParams | None = None,
    text: TextKey = "prompt",
    batch_size: int = 64,
) -> list[int]:
    """How many of `n` sampled completions of each item's prompt `is_correct` accepts."""
    if n < 1 or batch_size < 1:
        raise ValueError(f"n and batch_size must be >= 1, got n={n}, batch_size={batch_size}")
    sampling = sampling or SamplingParams(temperature=1.0)
    counts: list[int] = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        completions = engine.generate([get_text(item, text) for item in chunk], n, sampling)
        if len(completions) != len(chunk) * n:
            raise ValueError(f"engine returned {len(completions)} completions for {len(chunk)} prompts x n={n}")
        for i, item in enumerate(chunk):
            counts.append(sum(bool(is_correct(c.text, item)) for c in completions[i * n : (i + 1) * n]))
    return counts


def filter_threshold(n: int, k: int | None, mode: str, drop_unsolved: bool) -> int:
    """The solve count k at which an item is dropped, checked against the n samples: "drop_solved" needs
    1 <= k <= n; "all_fail" is k = 1 (Kimi k1.5's rule); drop_unsolved with k = 1 would drop everything."""
    if mode not in MODES:
        raise ValueError(f"unknown difficulty mode {mode!r}; choose from {list(MODES)}")
    if mode == "all_fail":
        if k not in (None, 1):
            raise ValueError(f"mode='all_fail' means k=1; got k={k}")
        k = 1
    if k is None or not 1 <= k <= n:
        raise ValueError(f"k must be in 1..n={n} for mode 'drop_solved', got {k}")
    if drop_unsolved and k == 1:
        raise ValueError("drop_unsolved with k=1 would drop every item")
    return k


def difficulty_filter(
    items: Sequence[Any],
    solved: Sequence[int],
    n: int,
    *,
    k: int | None = None,
    mode: str = "drop_solved",
    drop_unsolved: bool = False,
    text: TextKey = "prompt",
    report_dir: str | Path | None = None,
) -> CurationResult:
    """Drop items solved in >= k of n samples (`mode="all_fail"`: k = 1, Kimi k1.5's rule).

    `solved[i]` is item i's count of correct samples (from `solve_counts` or any earlier run). With
    `drop_unsolved`, items solved 0 times are dropped too (reason "never_solved").
    """
    k = filter_threshold(n, k, mode, drop_unsolved)
    if len(solved) != len(items):
        raise ValueError(f"got {len(solved)} solve counts for {len(items)} items")
    removed = []
    for i, (item, s) in enumerate(zip(items, solved)):
        if not 0 <= s <= n:
            raise ValueError(f"solve count of item {i} is {s}, outside 0..n={n}")
        detail = {"solved": int(s), "n": n, "pass_rate": s / n}
        if s >= k:
            removed.append(Removal(i, "too_easy", {**detail, "k": k}, get_text(item, text)))
        elif drop_unsolved and s == 0:
            removed.append(Removal(i, "never_solved", detail, get_text(item, text)))
    stats = {"n": n, "k": k, "mode": mode, "drop_unsolved": drop_unsolved,
             "mean_pass_rate": sum(solved) / (n * len(solved)) if solved else float("nan")}
    result = make_result("difficulty_filter", list(items), removed, stats)
    result.scores = [s / n for s in solved]  # pass rates, for a curriculum or a sampler's prior
    if report_dir is not None:
        result.write_report(report_dir)
    return result


def best_of_n_filter(
    items: Sequence[Any],
    engine: RolloutEngine,
    is_correct: Verifier,
    *,
    n: int = 8,
    k: int | None = None,
    mode: str = "drop_solved",
    drop_unsolved: bool = False,
    sampling: SamplingParams | None = None,
    text: TextKey = "prompt",
    batch_size: int = 64,
    report_dir: str | Path | None = None,
) -> CurationResult:
    """`solve_counts` then `difficulty_filter`: one call from data + engine + verifier to kept items.

    Example (Kimi k1.5): `best_of_n_filter(examples, engine, task.is_correct, n=8, mode="all_fail")`.
    """
    solved = solve_counts(engine, items, is_correct, n=n, sampling=sampling, text=text, batch_size=batch_size)
    return difficulty_filter(items, solved, n, k=k, mode=mode, drop_unsolved=drop_unsolved, text=text,
                             report_dir=report_dir)
