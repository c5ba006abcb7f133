"""Rollout throughput: rlvr's HFEngine vs transformers' `model.generate`, side by side, in two modes.

Setting of issue 5: a ~20M-parameter Qwen2 (random init, `PRESETS["bench20m"]`), 16 prompts of 96
tokens, n = 8 samples per prompt, 128 new tokens, temperature 1 (no top-k/top-p), 2 CPU threads.
- "full length": neither side stops at EOS (HFEngine with no EOS ids, `generate` with
  min_new_tokens = max_new_tokens), so every row decodes all 128 tokens: the engine's own speed.
- "with EOS": both stop at EOS and count only real generated tokens (EOS included, padding after EOS
  excluded). A random model emits EOS early, so this mostly measures HFEngine's pruning of finished
  rows, which `generate` lacks: honest, but a different figure from the full-length one.
All four runs of a round are interleaved, so machine load hits them alike; the ratios are the
numbers to read. Throughput is per wall-clock second and per CPU second of this process (the latter
is less sensitive to other processes sharing the cores). `--vocab` pads the model's vocabulary (the
char tokenizer has 101 ids; real models have 32k-150k, where sampling over the vocabulary costs more).

    .venv/bin/python benchmarks/bench_rollout.py [--repeats 3] [--threads 2] [--vocab 16384]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.rollout import HFEngine, SamplingParams


def make_prompts(tokenizer, count: int, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    chars = "0123456789 abcdefghijklmnopqrstuvwxyz+=\n"
    prompts = ["".join(rng.choice(chars) for _ in range(length)) for _ in range(count)]
    assert all(len(tokenizer(p)["input_ids"]) == length for p in prompts)
    return prompts


def run_engine(engine: HFEngine, prompts, n, sampling) -> int:
    completions = engine.generate(prompts, n, sampling)
    return sum(len(c.token_ids) for c in completions)


def run_hf_generate(model, tokenizer, prompts, n, sampling, full_length: bool = False) -> int:
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    extra = {"min_new_tokens": sampling.max_new_tokens} if full_length else {}
    out = model.generate(**batch, do_sample=True, temperature=sampling.temperature, top_p=1.0, top_k=0,
                         max_new_tokens=sampling.max_new_tokens, num_return_sequences=n,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **extra)
    generated = out[:, batch["input_ids"].shape[1]:]  # (B*n, T)
    is_eos = generated == tokenizer.eos_token_id
    # tokens up to and including the first EOS; everything after it is padding
    after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
    return int((~after_eos).sum())


def hf_engine_variants(model, tokenizer) -> dict:
    """name -> (mode, run(prompts, n, sampling) -> tokens) for HFEngine, stopping at EOS or never."""
    with_eos = HFEngine(model, tokenizer)
    full = HFEngine(model, tokenizer)
    full.eos_ids = full.eos_ids[:0]  # no EOS id: every row runs to max_new_tokens
    return {"HFEngine full": ("full length", lambda p, n, s: run_engine(full, p, n, s)),
            "HFEngine eos": ("with EOS", lambda p, n, s: run_engine(with_eos, p, n, s))}


def hf_generate_variants(model, tokenizer) -> dict:
    """name -> (mode, run) for transformers' `model.generate`, forced to full length or stopping at EOS."""
    return {"generate full": ("full length", lambda p, n, s: run_hf_generate(model, tokenizer, p, n, s, True)),
            "generate eos": ("with EOS", lambda p, n, s: run_hf_generate(model, tokenizer, p, n, s))}


def report(wall: dict[str, list[float]], cpu: dict[str, list[float]], modes: dict[str, str]) -> None:
    print(f"\n{'variant':16s} {'mode':12s} {'tok/s (wall)':>13s} {'tok/CPU-s':>10s}   (medians)")
    for name in wall:
        print(f"{name:16s} {modes[name]:12s} {statistics.median(wall[name]):13.1f} {statistics.median(cpu[name]):10.1f}")
    for mode, engine, baseline in (("full length", "HFEngine full", "generate full"),
                                   ("with EOS", "HFEngine eos", "generate eos")):
        for label, table in (("wall", wall), ("CPU", cpu)):
            ratios = [e / h for e, h in zip(table[engine], table[baseline])]
            print(f"ratio HFEngine / generate, {mode:11s} ({label:4s}): median {statistics.median(ratios):.2f}x "
                  f"(per round: {', '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="bench20m", choices=sorted(PRESETS))
    parser.add_argument("--arch", default="qwen2", choices=["qwen2", "llama"])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=96)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=None, help="pad the model's vocabulary to this size")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, arch=args.arch, **PRESETS[args.preset])
    if args.vocab:
        model.resize_token_embeddings(args.vocab)
    params = sum(p.numel() for p in model.parameters())
    prompts = make_prompts(tokenizer, args.prompts, args.prompt_len, seed=0)
    variants = {**hf_engine_variants(model, tokenizer), **hf_generate_variants(model, tokenizer)}
    print(f"model {args.arch}/{args.preset}: {params / 1e6:.1f}M params, vocab {model.config.vocab_size} | "
          f"{args.prompts} prompts x {args.prompt_len} tokens, n={args.n}, {args.new_tokens} new tokens, "
          f"{args.threads} threads; load {os.getloadavg()[0]:.2f}")

    warmup = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)  # first-call allocations, lazy inits
    for _, run in variants.values():
        run(prompts, args.n, warmup)

    wall: dict[str, list[float]] = {name: [] for name in variants}  # tokens per wall second
    cpu: dict[str, list[float]] = {name: [] for name in variants}  # tokens per CPU second
    for rep in range(args.repeats):
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=rep)
        for name, (mode, run) in variants.items():
            torch.manual_seed(rep)
            start, start_cpu = time.perf_counter(), time.process_time()
            tokens = run(prompts, args.n, sampling)
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
            wall[name].append(tokens / seconds)
            cpu[name].append(tokens / cpu_seconds)
            print(f"  round {rep}: {name:15s} {tokens:6d} tokens in {seconds:7.2f} s wall "
                  f"({cpu_seconds:7.2f} s CPU) = {tokens / seconds:7.1f} tok/s")
    report(wall, cpu, {name: mode for name, (mode, _) in variants.items()})
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
