"""The guess-the-number environment learns on a CPU: `rlvr train environments/guess` for several seeds, the
held-out success and turns before and after RL, mean and standard error over the seeds.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python benchmarks/env_guess.py --seeds 0 1 2 \
        --out /tmp/env_guess --results benchmarks/results/env_guess.jsonl

Each seed is one `rlvr train` process (run side by side, `--jobs`); its metrics.jsonl gives the step-0 evaluation
(after the SFT warm start, before RL) and the last one. Every run's row (seed, before, after, wall and CPU seconds,
the date, the machine and its load) is appended to `--results`; the table printed is what docs/environments.md
shows, with the command that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS = {"greedy success": "eval/greedy_accuracy", "sampled success": "eval/sampled_accuracy",
           "turns per episode (sampled)": "eval/sampled_turns",
           "turns per solved episode (sampled)": "eval/sampled_turns_solved",
           "turns per solved episode (greedy)": "eval/greedy_turns_solved"}


def run(seed: int, out: Path, sets: list[str]) -> dict:
    """One seed's run: its first and last held-out evaluation, wall and CPU seconds."""
    folder = out / f"seed{seed}"
    argv = [sys.executable, "-m", "rlvr", "train", "environments/guess", "--set", f"seed={seed}", "--set",
            f"out_dir={folder}", "--set", "log.progress=false"]
    for value in sets:
        argv += ["--set", value]
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"seed {seed} failed: {done.stderr[-2000:]}")
    evals = [r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())
             if "eval/greedy_accuracy" in r]
    return {"seed": seed, "steps": evals[-1]["step"], "wall_s": round(time.perf_counter() - start, 1),
            "before": {k: evals[0].get(v) for k, v in METRICS.items()},
            "after": {k: evals[-1].get(v) for k, v in METRICS.items()}}


def mean_se(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):.3f} +- {se:.3f}"


def table(rows: list[dict]) -> str:
    lines = ["| held-out, over the 7 hidden numbers | after SFT (step 0) | after RL | per seed (before -> after) |",
             "|---|---|---|---|"]
    for key in METRICS:
        per_seed = ", ".join(f"{r['before'][key]:.2f} -> {r['after'][key]:.2f}" for r in rows
                             if r["before"][key] is not None and r["after"][key] is not None)
        lines.append(f"| {key} | {mean_se([r['before'][key] for r in rows])} | "
                     f"{mean_se([r['after'][key] for r in rows])} | {per_seed} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("/tmp/env_guess"))
    parser.add_argument("--jobs", type=int, default=3, help="runs side by side")
    parser.add_argument("--results", type=Path, default=None, help="append each run's row to this jsonl")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="a config override, as rlvr train")
    parser.add_argument("--run", default=None, help="the rows' run id (default env-guess-<date>-<time>)")
    parser.add_argument("--machine", default="epyc-avx2-image2",
                        help="the machine's name in benchmarks/results/machines.jsonl")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda s: run(s, args.out, args.sets), args.seeds))
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    stamp = {"run": args.run or time.strftime("env-guess-%Y-%m-%d-%H%M", time.gmtime()),
             "date": time.strftime("%Y-%m-%d"), "machine": args.machine,
             "command": "OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python " + shlex.join(sys.argv),
             "cpu": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "load_at_start": round(load, 1), "load_at_end": round(os.getloadavg()[0], 1),
             "cpu_s_all_runs": round(cpu.ru_utime + cpu.ru_stime, 1), "sets": args.sets}
    if args.results:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        with args.results.open("a") as f:
            for row in rows:
                f.write(json.dumps({**stamp, **row}) + "\n")
    print(table(rows))
    print(f"\n{stamp['date']}, {stamp['machine']}, load {stamp['load_at_start']} -> {stamp['load_at_end']}; "
          f"{len(rows)} runs, {stamp['cpu_s_all_runs']:.0f} CPU-s in all, wall per run "
          f"{', '.join(str(r['wall_s']) for r in rows)} s")


if __name__ == "__main__":
    main()
