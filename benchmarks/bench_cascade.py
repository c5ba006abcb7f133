"""Where cascade attention pays: HFEngine with cascade attention against the same engine with each prompt's
keys/values copied to the rows of its group (`cascade=False`), over model widths, prompt widths and group sizes.

Each setting builds a tiny Qwen2 (`PRESETS`: "test" 64 wide / 2 layers, "demo" 128 / 4, "bench20m" 512 / 6),
random prompts of exactly that many tokens (no padding), and times whole `generate` calls at forced full length,
the two layouts interleaved call by call (the order alternating), in CPU seconds of this process. Printed per
setting: the median time of each, the median of the per-pair ratios (copied / cascade: above 1, cascade is
faster), the entries per row and layer cascade saves (`hf_engine.cascade_saving`) and which layout
`cascade="auto"` picks (`CASCADE_MIN_SAVED`). Run it with the allocator `rlvr` runs with:

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 OMP_NUM_THREADS=1 \\
        .venv/bin/python benchmarks/bench_cascade.py [--repeats 15] [--only 0 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

import rlvr.rollout.hf_engine as hf_engine
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.rollout import HFEngine, SamplingParams

# (model preset, prompt tokens, new tokens, group size n, prompts)
SETTINGS = [
    ("test", 13, 10, 8, 32), ("test", 16, 10, 8, 32), ("test", 20, 10, 8, 32), ("test", 32, 10, 8, 32),
    ("test", 96, 10, 8, 32), ("test", 13, 10, 2, 64), ("test", 32, 10, 4, 64), ("test", 48, 10, 4, 64),
    ("demo", 8, 10, 8, 32), ("demo", 13, 10, 8, 32), ("demo", 13, 10, 4, 64),
    ("bench20m", 13, 10, 8, 16), ("bench20m", 32, 10, 2, 32),
]
CHARS = "0123456789 abcdefghijklmnopqrstuvwxyz+="


def measure(preset: str, width: int, new: int, n: int, count: int, repeats: int) -> dict:
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, **PRESETS[preset])
    rng = random.Random(0)
    prompts = ["".join(rng.choice(CHARS) for _ in range(width)) for _ in range(count)]
    assert {len(tokenizer(p)["input_ids"]) for p in prompts} == {width}
    params = SamplingParams(max_new_tokens=new, ignore_eos=True, seed=1)
    engines = {True: HFEngine(model, tokenizer, cascade=True), False: HFEngine(model, tokenizer, cascade=False)}
    for engine in engines.values():  # warm-up
        engine.generate(prompts, n, params)
    times: dict[bool, list[float]] = {True: [], False: []}
    for r in range(repeats):
        for layout in ((True, False) if r % 2 else (False, True)):
            start = time.process_time()
            engines[layout].generate(prompts, n, params)
            times[layout].append(time.process_time() - start)
    saving = hf_engine.cascade_saving(model.config, n, width)
    return {"cascade": statistics.median(times[True]), "copied": statistics.median(times[False]),
            "ratio": statistics.median(c / a for a, c in zip(times[True], times[False])), "saving": saving,
            "auto": "cascade" if saving >= hf_engine.CASCADE_MIN_SAVED else "copied"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15, help="calls of each layout per setting")
    parser.add_argument("--only", type=int, nargs="+", help="indices into SETTINGS (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    chosen = [SETTINGS[i] for i in args.only] if args.only else SETTINGS
    print(f"{'model':9s} {'prompt':>6s} {'new':>4s} {'n':>3s} {'rows':>5s} {'cascade ms':>10s} {'copied ms':>10s} "
          f"{'copied/cascade':>14s} {'saved/row/layer':>15s} auto")
    for preset, width, new, n, count in chosen:
        m = measure(preset, width, new, n, count, args.repeats)
        print(f"{preset:9s} {width:6d} {new:4d} {n:3d} {n * count:5d} {m['cascade'] * 1e3:10.1f} "
              f"{m['copied'] * 1e3:10.1f} {m['ratio']:14.3f} {m['saving']:15.0f} {m['auto']}", flush=True)


if __name__ == "__main__":
    main()
