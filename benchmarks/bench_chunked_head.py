"""Peak memory and time of the output layer's log-probs: the whole logits vs chunks (`train.logprob_chunk`).

Setting: the last hidden states of N scored positions (N, d) and an output layer (V, d), both float32 and
requiring grad, Qwen2.5-0.5B's shapes by default (d = 896, V = 151,936); random labels; temperature 0.7 (the
learner divides the logits, so the processed distribution is what is scored). One call is a training pass:
forward and backward of the summed log-probs, with the entropy as the metric, as `policy_logprobs` computes them.
- whole: logits = h W^T (N, V), then `rlvr.models.head.scored_logprobs` (the learner's path with
  `train.logprob_chunk: 0`; its log-softmax already runs in row chunks, `rlvr.core.token_logprobs`);
- chunked: `rlvr.core.head_logprobs` with `--chunk` positions at a time (the learner's path with
  `train.logprob_chunk: C`).
Both end with the same gradients of h and W; W's (V x d float32) is allocated by either and counted in both.

Memory: each variant in a fresh subprocess; the kernel's high-water mark of resident memory (`ru_maxrss`) minus
the resident size just before the first call, inputs allocated and touched (as benchmarks/bench_logprobs.py).
Time: the process's CPU time (all threads), median of `--repeats` after one warm-up. The chunked values and
gradients are compared with the whole computation's (max absolute difference).

    .venv/bin/python benchmarks/bench_chunked_head.py [--positions 1024] [--hidden 896] [--vocab 151936] \
        [--chunk 128] [--repeats 1] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

from rlvr.core import head_logprobs
from rlvr.models.head import scored_logprobs

TEMPERATURE = 0.7


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _inputs(args):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.positions, args.hidden, generator=g).requires_grad_()
    weight = (torch.randn(args.vocab, args.hidden, generator=g) / args.hidden**0.5).requires_grad_()
    labels = torch.randint(0, args.vocab, (args.positions,), generator=g)
    return hidden, weight, labels


def _call(impl: str, hidden, weight, labels, chunk: int):
    if impl == "whole":
        return scored_logprobs(hidden @ weight.T, labels, TEMPERATURE, with_entropy=True)
    return head_logprobs(hidden, weight, labels, TEMPERATURE, chunk_rows=chunk, with_entropy=True)


def worker(impl: str, args) -> dict:
    hidden, weight, labels = _inputs(args)
    base = _rss_bytes()
    times = []
    for _ in range(args.repeats + 1):
        hidden.grad = weight.grad = None
        start = time.process_time()
        logprobs, _ = _call(impl, hidden, weight, labels, args.chunk)
        logprobs.sum().backward()
        times.append(time.process_time() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"seconds": statistics.median(times[1:]), "peak_bytes": peak}


def compare(args) -> dict:
    """Max |chunked - whole| of the log-probs and of both gradients (in one process; memory not measured)."""
    hidden, weight, labels = _inputs(args)
    out = {}
    for impl in ("whole", "chunked"):
        hidden.grad = weight.grad = None
        logprobs, _ = _call(impl, hidden, weight, labels, args.chunk)
        logprobs.sum().backward()
        out[impl] = (logprobs.detach(), hidden.grad.clone(), weight.grad.clone())
    return {name: float((a - b).abs().max()) for name, a, b in zip(("logprobs", "grad_hidden", "grad_weight"),
                                                                    out["chunked"], out["whole"])}


def _isolated(args, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", mode, "--positions", str(args.positions), "--hidden",
           str(args.hidden), "--vocab", str(args.vocab), "--chunk", str(args.chunk), "--repeats", str(args.repeats),
           "--threads", str(args.threads)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--positions", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", choices=["whole", "chunked", "compare"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(compare(args) if args.worker == "compare" else worker(args.worker, args)))
        return
    mib = 2**20
    logits = args.positions * args.vocab * 4 / mib
    print(f"positions {args.positions}, d {args.hidden}, V {args.vocab}: float32 logits {logits:.0f} MiB; "
          f"chunk {args.chunk}; {args.threads} thread(s); CPU seconds, median of {args.repeats}")
    rows = {impl: _isolated(args, impl) for impl in ("whole", "chunked")}
    for impl, r in rows.items():
        print(f"{impl:<8} peak {r['peak_bytes'] / mib:>8.0f} MiB   {r['seconds']:>7.2f} s")
    diff = _isolated(args, "compare")
    print(f"chunked / whole: memory {rows['chunked']['peak_bytes'] / rows['whole']['peak_bytes']:.2f}x, "
          f"time {rows['chunked']['seconds'] / rows['whole']['seconds']:.2f}x; max |difference|: "
          + ", ".join(f"{k} {v:.1e}" for k, v in diff.items()))
    print(json.dumps({"args": vars(args), **rows, "difference": diff}))


if __name__ == "__main__":
    main()
