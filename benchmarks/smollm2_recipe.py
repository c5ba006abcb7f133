"""The shipped SmolLM2 recipes measured: `rlvr train smollm2_full` (and `smollm2_lora`), each over seeds, on this
machine: held-out greedy accuracy before and after RL on the training families and on the held-out family of
phrasings, the format share and the well-formatted-but-wrong share beside it, GSM8K accuracy on a fixed subset
before and after, and each run's wall-clock and CPU seconds with the machine's load while it ran. One row per run
goes to benchmarks/results/smollm2_recipe.jsonl; benchmarks/tables.py renders the newest batch, with the mean and
standard error over its seeds, into docs/real_model.md.

    python benchmarks/smollm2_recipe.py --seeds 0 1 2                          # smollm2_full, 3 seeds
    python benchmarks/smollm2_recipe.py --variants lora --seeds 0 1 2          # the LoRA recipe
    python benchmarks/smollm2_recipe.py --seeds 0 --set train.steps=2 --no-gsm8k --dry   # a quick look, no row
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "smollm2_recipe.jsonl"
MACHINE = "epyc-avx2-image2"  # benchmarks/results/machines.jsonl
METRICS = {"accuracy": "eval/greedy_accuracy", "format": "eval/greedy_format",
           "formatted_wrong": "eval/greedy_formatted_wrong",
           "family_accuracy": "eval/heldout_family/greedy_accuracy",
           "family_format": "eval/heldout_family/greedy_format",
           "family_formatted_wrong": "eval/heldout_family/greedy_formatted_wrong"}
# the fixed GSM8K subset: 30 test problems (selection seed 0), greedy, graded as the recipe grades (last number)
GSM8K = ["--task", "gsm8k", "--task-option", "answer_extraction=last_number", "--num-examples", "30", "--n", "0",
         "--max-new-tokens", "256", "--seed", "0"]


# this invocation, as the results rows give it
COMMAND = " ".join([*(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS",) if k in os.environ), "python",
                    *map(shlex.quote, sys.argv)])


def run_timed(argv: list[str]) -> float:
    """Run `argv` (stdout dropped); its CPU seconds (user + system, its own children's included)."""
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, argv)
    return usage.ru_utime + usage.ru_stime


class LoadSampler:
    """The 1-minute load average every 30 s while a run goes (the machine is shared): its mean and range."""

    def __init__(self) -> None:
        self.samples, self.stop = [os.getloadavg()[0]], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(30):
            self.samples.append(os.getloadavg()[0])

    def finish(self) -> str:
        self.stop.set()
        self.thread.join()
        s = self.samples
        return f"{sum(s) / len(s):.1f} mean ({min(s):.1f}-{max(s):.1f}), 1-min average every 30 s"


def evals(run_dir: Path) -> tuple[dict, dict]:
    """The first and last held-out evaluations in the run's metrics.jsonl."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "eval/greedy_accuracy" in r]
    return rows[0], rows[-1]


def gsm8k_accuracy(model: str | Path, out: Path, skip: bool = False) -> float | None:
    """Greedy GSM8K accuracy of `model` on the fixed subset (`GSM8K`), by `rlvr eval`; None when `skip`."""
    if skip:
        return None
    argv = [sys.executable, "-m", "rlvr", "eval", "--model", str(model), *GSM8K, "--out", str(out)]
    subprocess.run(argv, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return round(sum(r["correct"] for r in rows) / len(rows), 4)


def run_one(variant: str, seed: int, out: Path, sets: list[str], jobs: int = 1, no_gsm8k: bool = False) -> dict:
    """`rlvr train smollm2_VARIANT` at `seed`, timed (wall and CPU seconds, the load while it ran), then its
    final model on the GSM8K subset. `jobs`: how many such runs went at once (recorded)."""
    run_dir = out / f"{variant}-seed{seed}"
    args = [f"seed={seed}", f"out_dir={run_dir}", "log.progress=false", *sets]
    command = ["rlvr", "train", f"smollm2_{variant}", *[a for kv in args for a in ("--set", kv)]]
    load, start, clock = LoadSampler(), time.perf_counter(), time.strftime("%H:%M")
    cpu = run_timed([sys.executable, "-m", "rlvr", *command[1:]])
    wall = time.perf_counter() - start
    row = {"variant": variant, "seed": seed, "date": time.strftime("%Y-%m-%d"),
           "time_utc": f"{clock}-{time.strftime('%H:%M')}", "machine": MACHINE,
           "train_command": " ".join(command), "load": load.finish(),
           "wall_min": round(wall / 60, 2), "cpu_s": round(cpu), "jobs": jobs}
    first, last = evals(run_dir)
    for name, key in METRICS.items():
        row[f"{name}_before"], row[f"{name}_after"] = first.get(key), last.get(key)
    row["gsm8k_after"] = gsm8k_accuracy(run_dir / "final_model", out / f"gsm8k-{variant}-seed{seed}.jsonl", no_gsm8k)
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=["full"], choices=["full", "lora"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--out", default="runs/smollm2_recipe", help="folder of the runs")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to every `rlvr train` (repeatable)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each one process; threads as the recipe's "
                   "`threads` or a --set)")
    p.add_argument("--no-gsm8k", action="store_true", help="leave out the GSM8K subset before and after")
    p.add_argument("--dry", action="store_true", help="print the rows only (a quick look: no results row)")
    args = p.parse_args(argv)
    out, run = Path(args.out), "smollm2-recipe-" + time.strftime("%Y%m%d-%H%M")
    out.mkdir(parents=True, exist_ok=True)
    before = gsm8k_accuracy("smollm2-135m-instruct", out / "gsm8k-before.jsonl", args.no_gsm8k)
    todo = [(variant, seed) for variant in args.variants for seed in args.seeds]
    lock = threading.Lock()

    def one(job: tuple[str, int]) -> None:
        measured = run_one(*job, out, args.sets, args.jobs, args.no_gsm8k)
        row = {"run": run, "command": COMMAND, **measured, "gsm8k_before": before}
        with lock:
            print(json.dumps(row), flush=True)
            if not args.dry:
                with RESULTS.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(row) + "\n")

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))


if __name__ == "__main__":
    main()
