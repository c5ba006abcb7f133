"""The report of `bench_trl.py`: per-side figures from the children's clocks, the TRL / rlvr ratios,
one table per RL seed and, over several seeds, the ratios per seed and their medians."""

from __future__ import annotations

TARGET = 0.9  # held-out greedy exact-match accuracy the runs are timed to (the demo's bar)


def summarize(result: dict, steps: int, target: float = TARGET, stopped: bool = False) -> dict:
    """s/step and CPU-s/step over steps 2..N (step 1 pays one-off warm-up), training time to `target`.
    `stopped`: the run may have ended before `steps` (--stop-at-target)."""
    clock = {s: rest for s, *rest in result["steps"]}  # step -> (wall, CPU, rollout wall, rollout CPU)
    first, last = min(clock), max(clock)
    if (last != steps and not stopped) or last - first < 1:
        raise SystemExit(f"expected steps 1..{steps} in the result, got {first}..{last}")
    n = last - first
    reached = next(((s, wall) for s, wall, _, acc in result["evals"] if acc >= target), None)
    per_step = [(b - a) / n for a, b in zip(clock[first], clock[last])]
    return {"s_per_step": per_step[0], "cpu_per_step": per_step[1], "rollout_cpu_per_step": per_step[3],
            "update_cpu_per_step": per_step[1] - per_step[3],
            "acc_start": result["evals"][0][3], "acc_final": result["evals"][-1][3], "last_step": last,
            "to_target_s": reached[1] if reached else None, "to_target_step": reached[0] if reached else None,
            "peak_rss_mib": result["peak_rss_mib"]}


def shared_accuracy(rlvr_evals: list, trl_evals: list) -> tuple[float, float, int] | None:
    """Mean held-out accuracy of each side over the evaluations after step 0 that both ran: the curves
    compared where both exist (a run stopped at the target has none later), which the first step at the
    target, one noisy evaluation, cannot show. None when they share no evaluation."""
    r, t = ({s: acc for s, _, _, acc in evals if s > 0} for evals in (rlvr_evals, trl_evals))
    shared = sorted(r.keys() & t.keys())
    if not shared:
        return None
    return sum(r[s] for s in shared) / len(shared), sum(t[s] for s in shared) / len(shared), len(shared)


def ratios(rows: dict[str, dict]) -> dict[str, float | None]:
    """TRL / rlvr per figure (> 1: rlvr faster or leaner); None where a side has no figure."""
    r, t = rows["rlvr"], rows["trl"]
    return {k: t[k] / r[k] if r.get(k) and t.get(k) is not None else None
            for k in ("s_per_step", "cpu_per_step", "rollout_cpu_per_step", "update_cpu_per_step", "to_target_s",
                      "peak_rss_mib")}


def median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _fmt(value, spec: str) -> str:
    return format("-", spec.replace(".2f", "")) if value is None else format(value, spec)


def table(rows: dict[str, dict], steps: int, target: float = TARGET,
          shared: tuple[float, float, int] | None = None) -> str:
    r, t = rows["rlvr"], rows["trl"]
    ratio = ratios(rows).get

    reach = {k: (f"{v['to_target_s']:.0f} s (step {v['to_target_step']})" if v["to_target_s"] is not None
                 else f"not in {steps} steps") for k, v in rows.items()}
    lines = [f"{'':34}{'rlvr':>22}{'TRL GRPOTrainer':>22}{'TRL / rlvr':>12}",
             f"{'s/step (wall, training)':34}{r['s_per_step']:>22.3f}{t['s_per_step']:>22.3f}{_fmt(ratio('s_per_step'), '>12.2f')}",
             f"{'CPU-s/step (training)':34}{r['cpu_per_step']:>22.3f}{t['cpu_per_step']:>22.3f}"
             f"{_fmt(ratio('cpu_per_step'), '>12.2f')}",
             f"{'  rollout: sample + reward':34}{r['rollout_cpu_per_step']:>22.3f}{t['rollout_cpu_per_step']:>22.3f}"
             f"{_fmt(ratio('rollout_cpu_per_step'), '>12.2f')}",
             f"{'  update: log-probs, loss, AdamW':34}{r['update_cpu_per_step']:>22.3f}{t['update_cpu_per_step']:>22.3f}"
             f"{_fmt(ratio('update_cpu_per_step'), '>12.2f')}",
             f"{f'training time to {target} held-out acc':34}{reach['rlvr']:>22}{reach['trl']:>22}"
             f"{_fmt(ratio('to_target_s'), '>12.2f')}",
             f"{'peak RSS (MiB)':34}{r['peak_rss_mib']:>22.0f}{t['peak_rss_mib']:>22.0f}{_fmt(ratio('peak_rss_mib'), '>12.2f')}",
             f"{'held-out acc: warm start -> last':34}{r['acc_start']:>13.3f} -> {r['acc_final']:.3f}"
             f"{t['acc_start']:>13.3f} -> {t['acc_final']:.3f}",
             f"{'last step':34}{r['last_step']:>22}{t['last_step']:>22}"]
    if shared is not None:
        lines.append(f"{f'held-out acc, mean of {shared[2]} shared evals':34}{shared[0]:>22.3f}{shared[1]:>22.3f}")
    return "\n".join(lines)


def report(runs: list[dict], steps: int, target: float = TARGET, stopped: bool = False) -> str:
    """The tables of `runs` ([{"seed", "rlvr", "trl"}] results) and the verdict on the median step."""
    lines, per_seed, curves = [], [], []
    for one in runs:
        rows = {k: summarize(one[k], steps, target, stopped) for k in ("rlvr", "trl")}
        per_seed.append((one["seed"], ratios(rows)))
        shared = shared_accuracy(one["rlvr"]["evals"], one["trl"]["evals"])
        curves += [shared] if shared else []
        lines.append(f"\nRL seed {one['seed']}")
        for side in ("rlvr", "trl"):
            lines.append(f"{side} side: {one[side]['threads']} torch thread(s), malloc: "
                         f"{one[side].get('allocator', 'system')}, {one[side]['versions']}")
        lines.append(table(rows, steps, target, shared))
    if len(per_seed) > 1:
        lines.append(f"\nTRL / rlvr per seed ({', '.join(str(s) for s, _ in per_seed)}) and median:")
        for key, label in (("cpu_per_step", "CPU-s/step"), ("to_target_s", f"training time to {target}"),
                           ("peak_rss_mib", "peak RSS")):
            values = [r[key] for _, r in per_seed]
            cells = "".join(_fmt(v, ">8.2f") for v in values)
            lines.append(f"  {label:30}{cells}  median {_fmt(median(values), '.2f')}")
        if curves:
            lines.append(f"held-out acc over the shared evaluations, mean of {len(curves)} seeds: rlvr "
                         f"{sum(c[0] for c in curves) / len(curves):.3f}, TRL {sum(c[1] for c in curves) / len(curves):.3f}")
    faster = median([r["cpu_per_step"] for _, r in per_seed])
    lines.append(f"\nrlvr is {faster:.2f}x {'faster' if faster >= 1 else 'SLOWER'} than TRL per step in CPU time "
                 f"({'not slower: OK' if faster >= 1 else 'slower: NOT OK'})")
    return "\n".join(lines)
