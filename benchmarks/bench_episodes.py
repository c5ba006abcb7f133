"""Multi-turn episodes on rlvr's engine, side by side: each turn prefilling only what it adds to the kept keys/values
of the history (`HFEngine.reuse_histories`, what the runner does) against prefilling the whole history every turn.

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_episodes.py --repeats 5 \
        --results benchmarks/results/bench_episodes.jsonl

The guess environment (`configs/environments/guess.yaml`'s settings: hidden numbers 1..7, 8 turns, 4 new tokens a
turn, 48 in all) on the tiny model of that config, random weights sharpened so that episodes run long; both ways play
the same episodes (same seed: greedy-equal in tests/rollout/test_episode.py; sampled, the share that came out the
same is recorded). Repeats alternate the two; the median CPU seconds of each (one thread) and their ratio are
printed and, with --results, appended as a row (docs/performance.md's table, benchmarks/tables.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from rlvr.environments import environment_factory
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.episode import EpisodeLimits, episode_metrics, run_episodes
from rlvr.rollout.hf_engine import HFEngine
from rlvr.tasks import get_task

KEPT, WHOLE = "kept keys/values", "whole history"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=256, help="per call: items x 8")
    parser.add_argument("--preset", default="test", choices=sorted(PRESETS), help="the tiny model's size")
    parser.add_argument("--results", type=Path, default=None, help="append the row to this jsonl")
    parser.add_argument("--machine", default="epyc-avx2-image2",
                        help="the machine's name in benchmarks/results/machines.jsonl")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, arch="qwen2", seed=0, **PRESETS[args.preset])
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.3)
    task = get_task("guess", low=1, high=7)
    make = environment_factory("guess", {"higher": "+", "lower": "-", "invalid": "?"}, task)
    items = task.train_examples(args.episodes // 8, 0)
    sampling, limits = SamplingParams(max_new_tokens=4, seed=0), EpisodeLimits(max_turns=8, max_tokens=48)
    engine = HFEngine(model, tokenizer)
    reuse = engine.reuse_histories
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {KEPT: [], WHOLE: []}
    played: dict[str, list] = {}
    for _ in range(args.repeats):
        for name in times:
            engine.reuse_histories = reuse if name == KEPT else contextlib.nullcontext
            start = time.process_time()
            episodes = run_episodes(engine, tokenizer, make, items, 8, sampling, limits)
            times[name].append(time.process_time() - start)
            played[name] = [c.token_ids for c in episodes]
    # sampled, the two forwards' last-bit differences can flip a token whose uniform lies on a boundary
    same = sum(a == b for a, b in zip(played[KEPT], played[WHOLE])) / len(episodes)
    metrics = episode_metrics(episodes)
    kept, whole = statistics.median(times[KEPT]), statistics.median(times[WHOLE])
    row = {"run": time.strftime("episodes-%Y-%m-%d-%H%M", time.gmtime()), "date": time.strftime("%Y-%m-%d"),
           "time_utc": time.strftime("%H:%M", time.gmtime()), "machine": args.machine,
           "load": f"{load:.1f}-{os.getloadavg()[0]:.1f}",
           "command": "OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python " + shlex.join(sys.argv),
           "preset": args.preset, "episodes": len(episodes), "turns": round(metrics["episode/turns"], 2),
           "tokens": round(metrics["episode/length"], 1), "kept_s": round(kept, 3), "whole_s": round(whole, 3),
           "ratio": round(whole / kept, 2), "same_episodes": round(same, 3),
           "rounds": ", ".join(f"{w / k:.2f}" for k, w in zip(times[KEPT], times[WHOLE])),
           "note": f"median CPU seconds of {args.repeats} alternating repeats, 1 thread"}
    print(f"{row['episodes']} episodes, {row['turns']} turns, {row['tokens']} tokens after the prompt each, "
          f"{same:.1%} of them the same both ways; load {row['load']}")
    print(f"{KEPT}: {kept:.3f} CPU-s, {WHOLE}: {whole:.3f} CPU-s (median of {args.repeats}): {row['ratio']:.2f}x "
          f"({row['rounds']})")
    if args.results:
        with args.results.open("a") as handle:
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
