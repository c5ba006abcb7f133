"""The calculator environment measured (`rlvr train environments/tools`, SmolLM2-135M-Instruct, word problems): held-out
greedy accuracy and tool use at three points, the model as shipped (base), after the SFT warm start on demonstrated
calls (step 0 of a run) and after RL (its last step), on the training families (held-out numbers) and on the held-out
`measure` family. One `rlvr train` process per seed (side by side with `--jobs`), timed (its own CPU seconds, the
load every 30 s); the base model is evaluated once (greedy, on the same held-out set for every seed). One row per
seed goes to benchmarks/results/env_tools.jsonl; benchmarks/tables.py renders the newest run into
docs/environments.md with the mean ± SE over seeds and Welch's t-test of after-RL against after-SFT.

    OMP_NUM_THREADS=1 python benchmarks/env_tools.py --seeds 0 1 2 --jobs 3
    OMP_NUM_THREADS=1 python benchmarks/env_tools.py --seeds 0 --set train.steps=1 --dry   # a quick look, no row

The code environment (`rlvr train environments/code`: a function written, its failing tests fed back, up to 3
attempts) is measured the same way with `--config environments/code` (rows in benchmarks/results/env_code.jsonl):
it has no warm start, so a run's step 0 is the model as shipped and no base evaluation runs; its accuracy is the
share of episodes whose final attempt passed every test, its reward the final attempt's mean pass fraction.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2_recipe import COMMAND, MACHINE, ROOT, LoadSampler, evals, run_timed  # noqa: E402

RESULTS = {"environments/tools": "env_tools.jsonl", "environments/code": "env_code.jsonl"}
GROUPS = {"": "eval/", "family_": "eval/heldout_family/"}  # the training families' held-out numbers, `measure`
METRICS = {"accuracy": "greedy_accuracy", "reward": "greedy_reward", "call_share": "greedy_tool_call_episodes",
           "correct_calls": "greedy_tool_calls_correct", "call_errors": "greedy_tool_call_errors",
           "turns": "greedy_turns"}


def picked(metrics: dict, point: str) -> dict:
    """The row's fields of one point: each metric of each group (None where it was not logged: no call made)."""
    return {f"{point}_{group}{name}": metrics.get(prefix + key)
            for group, prefix in GROUPS.items() for name, key in METRICS.items()}


def base_eval(config: str, out: Path, sets: list[str]) -> None:
    """In this process: the shipped model's held-out evaluation, as a run's step 0 without the warm start."""
    from rlvr.config import load_config
    from rlvr.seeds import EVAL_SAMPLING, derive_seed
    from rlvr.train.setup import prepare_run

    cfg = load_config(config, [*sets, f"out_dir={out / 'base'}", "sft.steps=0", "log.progress=false"])
    run = prepare_run(cfg)
    metrics, _ = run.rollout.evaluate(run.eval_examples, derive_seed(cfg.seed, 0, EVAL_SAMPLING))
    (out / "base.json").write_text(json.dumps(metrics))


def run_one(config: str, seed: int, out: Path, sets: list[str], jobs: int, first_point: str) -> dict:
    """`rlvr train CONFIG` at `seed`, timed: its first (after the warm start, if any) and last (after RL)
    evaluations."""
    run_dir = out / f"seed{seed}"
    args = [f"seed={seed}", f"out_dir={run_dir}", "log.progress=false", *sets]
    command = ["rlvr", "train", config, *[a for kv in args for a in ("--set", kv)]]
    load, start, clock = LoadSampler(), time.perf_counter(), time.strftime("%H:%M")
    cpu = run_timed([sys.executable, "-m", "rlvr", *command[1:]])
    first, last = evals(run_dir)
    row = {"seed": seed, "date": time.strftime("%Y-%m-%d"), "time_utc": f"{clock}-{time.strftime('%H:%M')}",
            "machine": MACHINE, "train_command": " ".join(command), "load": load.finish(),
            "wall_min": round((time.perf_counter() - start) / 60, 2), "cpu_s": round(cpu), "jobs": jobs,
            "rl_steps": last["step"], **picked(first, first_point), **picked(last, "rl")}
    (out / f"seed{seed}.json").write_text(json.dumps(row))  # kept should another seed's run fail
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="environments/tools", choices=sorted(RESULTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=Path("runs/env_tools"), help="folder of the runs")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to every run and the base evaluation (repeatable)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, one process each")
    p.add_argument("--dry", action="store_true", help="print the rows only (a quick look: no results row)")
    p.add_argument("--base-only", action="store_true", help=argparse.SUPPRESS)  # the child that evaluates the base
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.base_only:
        return base_eval(args.config, args.out, args.sets)
    run = f"env-{Path(args.config).name}-" + time.strftime("%Y%m%d-%H%M")
    base_argv = [sys.executable, __file__, "--base-only", "--config", args.config, "--out", str(args.out),
                 *[a for kv in args.sets for a in ("--set", kv)]]
    warm = args.config == "environments/tools"  # the code environment has no warm start: its step 0 is the base
    with ThreadPoolExecutor(args.jobs) as pool:  # the base evaluation is one of the jobs
        base_cpu = pool.submit(run_timed, base_argv) if warm else None
        rows = list(pool.map(lambda seed: run_one(args.config, seed, args.out, args.sets, args.jobs,
                                                  "sft" if warm else "base"), args.seeds))
        base = {**picked(json.loads((args.out / "base.json").read_text()), "base"),
                "base_cpu_s": round(base_cpu.result())} if warm else {}
    for row in rows:
        row = {"run": run, "command": COMMAND, **row, **base}
        print(json.dumps(row), flush=True)
        if not args.dry:
            with (ROOT / "benchmarks" / "results" / RESULTS[args.config]).open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
