"""One sampling step: `torch.multinomial` vs rlvr's inverse-CDF sampler, on (rows, vocab) probabilities.

`torch.multinomial` on CPU draws one random number per vocabulary entry; `sample_inverse_cdf` draws
one per row and binary-searches the cumulative sum. Also timed: the same with a float64 cumulative
sum (tried for its finer resolution of tiny probabilities; it did not pay) and the softmax that
produces the probabilities, for scale. CPU seconds (`time.process_time`), median of --repeats.

    .venv/bin/python benchmarks/bench_sampling.py [--rows 128] [--vocab 16384] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from rlvr.rollout.sampling import invert_cdf, sample_inverse_cdf


def cpu_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(args.rows, args.vocab, generator=gen)
    probs = logits.softmax(-1)
    variants = {
        "softmax (for scale)": lambda: logits.softmax(-1),
        "torch.multinomial": lambda: torch.multinomial(probs, 1, generator=gen),
        "inverse CDF (rlvr, float32)": lambda: sample_inverse_cdf(probs, gen),
        "inverse CDF, float64 sum": lambda: invert_cdf(probs.double(), torch.rand(args.rows, generator=gen,
                                                                                  dtype=torch.float64)),
    }
    print(f"{args.rows} x {args.vocab} probabilities, {args.threads} thread(s); load {os.getloadavg()[0]:.2f}")
    times = {name: cpu_ms(fn, args.repeats) for name, fn in variants.items()}
    for name, ms in times.items():
        print(f"{name:30s} {ms:8.2f} ms")
    print(f"multinomial / inverse CDF: {times['torch.multinomial'] / times['inverse CDF (rlvr, float32)']:.1f}x")


if __name__ == "__main__":
    main()
