"""The policy update's fraction of the GEMM peak, per memory allocator and optimizer variant.

One update step = forward of a ~20M Qwen2 (`PRESETS["bench20m"]`) on `rows` x 224 tokens (96 prompt +
128 completion), `token_logprobs` of the completion, PPO's clipped surrogate and `aggregate_loss`
(rlvr.core's loss path), backward, AdamW step. Model FLOPs per step follow PaLM's accounting
(Chowdhery et al. 2022, app. B): 6 N tokens for the matmul parameters N (the tied LM head included,
the embedding lookup not) + 12 L d T per token for attention, with the full T x T score matrix.

The GEMM peak is measured in the same process, with the same threads and allocator: the best
GFLOP/s of `torch.mm` over the model's own matmul shapes and a square 1024 one. Each variant runs in a
fresh subprocess (the allocator is chosen by LD_PRELOAD at exec), the variants interleaved over
`--repeats` rounds so machine load hits all alike. Times are CPU seconds of the process
(`time.process_time`), which other jobs on the cores barely disturb; wall seconds are printed too.

    .venv/bin/python benchmarks/bench_update.py [--rows 16] [--threads 1] [--repeats 2]
        [--variants system tcmalloc jemalloc mimalloc tcmalloc+fused tcmalloc+compile tcmalloc+fused+bf16]

A `+bf16` variant runs the forward under bfloat16 autocast as `model.dtype: bfloat16` does (float32
weights and AdamW); its GEMM peak is measured in bfloat16 (on CPUs with AMX or AVX512-BF16).

`--model M` measures a real model instead (a folder, a .gguf file or an embedded model's name, as `model.path`
takes), at `--rows` x (`--prompt-len` + `--completion-len`) tokens: for SmolLM2 at 8 prompts x 8 (57-75
prompt tokens, 40-48 new ones) a step is 64 rows in micro-batches of `train.micro_batch_size`; 16 rows give the
per-token rate at a quarter of the memory and time.

    .venv/bin/python benchmarks/bench_update.py --model smollm2-135m-instruct --rows 16 --prompt-len 64 \
        --completion-len 48 --threads 2 --variants tcmalloc
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

from rlvr.allocator import LIBRARIES, find_library, loaded_allocator
from rlvr.core import aggregate_loss, clipped_surrogate_loss, token_logprobs
from rlvr.logging.throughput import train_flops
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model, load_model
from rlvr.models.placement import DTYPES, autocast_forward

PROMPT, COMPLETION = 96, 128  # the tiny model's shape (its recorded history)


def gemm_peak(shapes: list[tuple[int, int, int]], repeats: int = 7, dtype: torch.dtype = torch.float32) -> float:
    """Best GFLOP/s of torch.mm in `dtype` over (m, k, n) shapes and `repeats` CPU-timed calls each (a
    peak: the fastest call, which a busy machine slows least)."""
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            start = time.process_time()
            torch.mm(a, b)
            times.append(time.process_time() - start)
        best = max(best, 2 * m * k * n / min(times) / 1e9)
    return best


def model_flops(model, rows: int, seq: int) -> float:
    """Training FLOPs of one step (forward + backward = 3 x forward), PaLM's formula as `rlvr train` logs it
    (`rlvr.logging.throughput.train_flops`): N the matmul weights, the input embedding lookup not, the LM head
    (tied to the embedding or not) yes."""
    cfg = model.config
    named = dict(model.named_parameters())  # a tied head is the embedding's tensor, listed once
    matmul = sum(p.numel() for name, p in named.items() if p.dim() == 2 and "embed" not in name)
    if not any(name.startswith("lm_head") for name in named):
        matmul += cfg.vocab_size * cfg.hidden_size  # the tied LM head is a matmul too
    d_attn = cfg.num_attention_heads * (getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    return train_flops(matmul, cfg.num_hidden_layers, d_attn, [seq] * rows)


def update_step(model, optimizer, ids, old, advantages, mask) -> None:
    prompt = ids.shape[1] - mask.shape[1]
    logits = model(input_ids=ids).logits  # (R, S, V)
    logprobs = token_logprobs(logits[:, prompt - 1:-1], ids[:, prompt:])  # (R, C)
    per_token, _ = clipped_surrogate_loss(logprobs, old, advantages, 0.2, 0.2, mask)
    loss = aggregate_loss(per_token, mask, "token_mean")
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def worker(args) -> dict:
    rows, threads, steps, optimizer_kind, compile_forward, dtype = (
        args.rows, args.threads, args.steps, args.optimizer, args.compile, args.dtype)
    torch.set_num_threads(threads)
    if args.model:
        from rlvr.models.sources import resolve_model

        model = load_model(resolve_model(args.model, "--model")).train()
        vocab = model.config.vocab_size
    else:
        vocab = len(build_char_tokenizer())
        model = build_tiny_model(build_char_tokenizer(), **PRESETS["bench20m"]).train()
    gen = torch.Generator().manual_seed(0)
    completion = args.completion_len
    seq = args.prompt_len + completion
    ids = torch.randint(4, vocab, (rows, seq), generator=gen)
    old = -torch.rand(rows, completion, generator=gen) * 4  # (R, C) plausible log-probs
    advantages = torch.randn(rows, generator=gen)
    mask = torch.ones(rows, completion, dtype=torch.bool)
    kwargs = {"fused": True} if optimizer_kind == "fused" else {"foreach": optimizer_kind == "foreach"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, **kwargs)
    if compile_forward:
        model.forward = torch.compile(model.forward)
    compute = DTYPES[dtype]
    autocast_forward(model, torch.device("cpu"), compute)  # as model.dtype runs it: float32 weights
    d, f = model.config.hidden_size, model.config.intermediate_size
    peak = gemm_peak([(rows * seq, d, d), (rows * seq, d, f), (rows * seq, f, d), (1024, 1024, 1024)],
                     dtype=compute)  # the peak of the dtype the matmuls run in
    start = time.process_time()
    update_step(model, optimizer, ids, old, advantages, mask)  # warm-up (and compilation)
    first = time.process_time() - start
    cpu, wall = [], []
    for _ in range(steps):
        start, start_wall = time.process_time(), time.perf_counter()
        update_step(model, optimizer, ids, old, advantages, mask)
        cpu.append(time.process_time() - start)
        wall.append(time.perf_counter() - start_wall)
    flops = model_flops(model, rows, seq)
    with open("/proc/self/maps") as maps:
        allocator = loaded_allocator(maps.read()) or "system"
    return {"allocator": allocator, "gemm_gflops": peak, "cpu_s": statistics.median(cpu),
            "wall_s": statistics.median(wall), "first_s": first, "gflop": flops / 1e9, "tokens": rows * seq,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def run_variant(args, variant: str) -> dict:
    allocator, *extras = variant.split("+")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if allocator != "system":
        env["LD_PRELOAD"] = find_library(allocator)
    cmd = [sys.executable, __file__, "--worker", "--rows", str(args.rows), "--threads", str(args.threads),
           "--steps", str(args.steps), "--optimizer", "fused" if "fused" in extras else "forloop",
           "--dtype", "bfloat16" if "bf16" in extras else "float32", "--prompt-len", str(args.prompt_len),
           "--completion-len", str(args.completion_len), *(["--model", args.model] if args.model else [])]
    cmd += ["--compile"] if "compile" in extras else []
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["allocator"] != allocator:
        raise RuntimeError(f"{variant}: the worker runs {result['allocator']}, not {allocator}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run (median), after one warm-up")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved rounds over the variants")
    parser.add_argument("--variants", nargs="+", default=["system", *LIBRARIES, "tcmalloc+fused"])
    parser.add_argument("--model", help="a real model (folder, .gguf or embedded name) instead of bench20m")
    parser.add_argument("--prompt-len", type=int, default=PROMPT, help="prompt tokens of each row")
    parser.add_argument("--completion-len", type=int, default=COMPLETION, help="completion tokens of each row")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--optimizer", default="forloop", choices=["forloop", "foreach", "fused"])
    parser.add_argument("--compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    variants = [v for v in args.variants if v.partition("+")[0] == "system" or find_library(v.partition("+")[0])]
    missing = sorted(set(args.variants) - set(variants))
    print(f"update: {args.model or 'bench20m qwen2'}, {args.rows} x ({args.prompt_len} + {args.completion_len}) "
          f"tokens, {args.threads} thread(s); "
          f"load {os.getloadavg()[0]:.2f}" + (f"; not installed: {missing}" if missing else ""))
    results: dict[str, list[dict]] = {v: [] for v in variants}
    for rep in range(args.repeats):
        for variant in variants:
            r = run_variant(args, variant)
            results[variant].append(r)
            frac = r["gflop"] / r["cpu_s"] / r["gemm_gflops"]
            print(f"  round {rep}: {variant:18s} step {r['cpu_s']:6.2f} CPU-s ({r['wall_s']:6.2f} wall), "
                  f"GEMM peak {r['gemm_gflops']:6.1f} GFLOP/s, {frac:6.1%} of peak, first step {r['first_s']:.1f} s")
    base = statistics.median(r["cpu_s"] for r in results[variants[0]])
    print(f"\n{'variant':18s} {'CPU-s/step':>10s} {'tok/CPU-s':>9s} {'tok/s':>7s} {'GFLOP/s':>8s} {'GEMM peak':>9s} "
          f"{'of peak':>8s} {'vs ' + variants[0]:>12s} {'peak RSS':>9s}   (medians)")
    for variant, runs in results.items():
        cpu = statistics.median(r["cpu_s"] for r in runs)
        peak = statistics.median(r["gemm_gflops"] for r in runs)
        gflops = runs[0]["gflop"] / cpu
        rss = max(r["peak_rss_gib"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        print(f"{variant:18s} {cpu:10.2f} {runs[0]['tokens'] / cpu:9.0f} {runs[0]['tokens'] / wall:7.0f} "
              f"{gflops:8.1f} {peak:9.1f} {gflops / peak:8.1%} {base / cpu:11.2f}x "
              f"{rss:8.2f}G")
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
