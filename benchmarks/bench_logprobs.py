"""Time and peak memory of `token_logprobs` / `entropy_from_logits` vs plain `log_softmax` + `gather`.

Setting: float32 logits of shape (16, 512, 32000) (1.05 GB), random labels. Two modes:
`no_grad` (scoring old/reference log-probs) and `train` (forward + backward of the summed output
into a leaf `logits`, as in the policy update). The plain references are
    log_softmax(z).gather(-1, y)                 and    -(softmax(z) * log_softmax(z)).sum(-1).

How memory is measured (CPU): each (function, implementation, mode) runs in a fresh subprocess, so no
allocator cache or earlier peak carries over. The number is the kernel's high-water mark of resident
memory (`getrusage(RUSAGE_SELF).ru_maxrss`) minus the resident size just before the first call, with
the logits already allocated and touched: every byte the operation and its autograd graph actually
write, including `logits.grad` in train mode (1.05 GB, the same for both). Python's `tracemalloc`
cannot see torch's allocations, so it is not used. Large torch CPU buffers are `mmap`ed by glibc and
returned to the OS when freed, so RSS follows the tensors' lifetime closely. With `--device cuda`
the script uses `torch.cuda.max_memory_allocated` instead (exact allocator bookkeeping).

Time: median of `--repeats` calls after one warm-up, in the same subprocess. On CPU it is the
process's CPU time (`time.process_time`, all threads), which other jobs sharing the machine barely
disturb, unlike wall time; run with `--threads 1` on a busy machine. On CUDA it is wall time around a
synchronised call.

    .venv/bin/python benchmarks/bench_logprobs.py [--shape 16 512 32000] [--repeats 3] [--threads 1]
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

from rlvr.core import entropy_from_logits, token_logprobs


def plain_logprobs(logits, labels):
    return torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)


def plain_entropy(logits, labels):
    return -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)


VARIANTS = {
    ("token_logprobs", "rlvr"): token_logprobs,
    ("token_logprobs", "plain"): plain_logprobs,
    ("entropy_from_logits", "rlvr"): lambda logits, labels: entropy_from_logits(logits),
    ("entropy_from_logits", "plain"): plain_entropy,
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def worker(fn_name: str, impl: str, mode: str, shape, repeats: int, device: str) -> dict:
    """Runs in its own process; returns seconds (median) and peak extra bytes."""
    fn = VARIANTS[(fn_name, impl)]
    gen = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(*shape, generator=gen, device=device)  # float32, touched
    labels = torch.randint(0, shape[-1], shape[:-1], generator=gen, device=device)
    logits.requires_grad_(mode == "train")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    clock = time.perf_counter if device == "cuda" else time.process_time
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    base_rss = _rss_bytes()

    def call():
        if mode == "train":
            fn(logits, labels).sum().backward()
            logits.grad = None
        else:
            with torch.no_grad():
                fn(logits, labels)
        sync()

    times = []
    for _ in range(repeats + 1):
        start = clock()
        call()
        times.append(clock() - start)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base_rss
    return {"seconds": statistics.median(times[1:]), "peak_bytes": peak}


def run_isolated(args, fn_name: str, impl: str, mode: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", fn_name, impl, mode, "--shape", *map(str, args.shape),
           "--repeats", str(args.repeats), "--threads", str(args.threads), "--device", args.device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[16, 512, 32000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--worker", nargs=3, metavar=("FN", "IMPL", "MODE"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.shape, args.repeats, args.device)))
        return
    gb = 2**30
    clock = "wall" if args.device == "cuda" else "CPU"
    print(f"logits {tuple(args.shape)} float32 = {torch.Size(args.shape).numel() * 4 / gb:.2f} GiB, "
          f"device {args.device}, {args.threads} thread(s), {clock} seconds, median of {args.repeats}")
    header = f"{'function':<20} {'mode':<8} {'plain s':>8} {'rlvr s':>8} {'time x':>7} " \
             f"{'plain GiB':>10} {'rlvr GiB':>9} {'mem x':>6}"
    print(header + "\n" + "-" * len(header))
    for fn_name in ("token_logprobs", "entropy_from_logits"):
        for mode in ("no_grad", "train"):
            plain = run_isolated(args, fn_name, "plain", mode)
            ours = run_isolated(args, fn_name, "rlvr", mode)
            print(f"{fn_name:<20} {mode:<8} {plain['seconds']:>8.3f} {ours['seconds']:>8.3f} "
                  f"{ours['seconds'] / plain['seconds']:>7.2f} {plain['peak_bytes'] / gb:>10.2f} "
                  f"{ours['peak_bytes'] / gb:>9.2f} {ours['peak_bytes'] / plain['peak_bytes']:>6.2f}")
    print("time x, mem x: rlvr / plain (below 1 is better). Peak memory excludes the input logits.")


if __name__ == "__main__":
    main()
