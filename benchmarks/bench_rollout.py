"""Rollout throughput: rlvr's HFEngine vs transformers' `model.generate`, side by side.

Setting of issue 5: a ~20M-parameter Qwen2 (random init, `PRESETS["bench20m"]`), 16 prompts of 96
tokens, n = 8 samples per prompt, 128 new tokens, temperature 1 (no top-k/top-p), 2 CPU threads.
Both variants sample the same distribution, stop at EOS, and count only real generated tokens (EOS
included, padding after EOS excluded). The two run interleaved, so machine load hits both alike;
the ratio is the number to read. Throughput is reported per wall-clock second and per CPU second of
this process (the latter is less sensitive to other processes sharing the cores).

    .venv/bin/python benchmarks/bench_rollout.py [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
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


def run_hf_generate(model, tokenizer, prompts, n, sampling) -> int:
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    out = model.generate(**batch, do_sample=True, temperature=sampling.temperature, top_p=1.0, top_k=0,
                         max_new_tokens=sampling.max_new_tokens, num_return_sequences=n,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    generated = out[:, batch["input_ids"].shape[1]:]  # (B*n, T)
    is_eos = generated == tokenizer.eos_token_id
    # tokens up to and including the first EOS; everything after it is padding
    after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
    return int((~after_eos).sum())


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
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, arch=args.arch, **PRESETS[args.preset])
    params = sum(p.numel() for p in model.parameters())
    prompts = make_prompts(tokenizer, args.prompts, args.prompt_len, seed=0)
    engine = HFEngine(model, tokenizer)
    print(f"model {args.arch}/{args.preset}: {params / 1e6:.1f}M params | {args.prompts} prompts x "
          f"{args.prompt_len} tokens, n={args.n}, {args.new_tokens} new tokens, {args.threads} threads")

    warmup = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)  # first-call allocations, lazy inits
    run_engine(engine, prompts, args.n, warmup)
    run_hf_generate(model, tokenizer, prompts, args.n, warmup)

    names = ("rlvr HFEngine", "model.generate")
    wall: dict[str, list[float]] = {name: [] for name in names}  # tokens per wall second
    cpu: dict[str, list[float]] = {name: [] for name in names}  # tokens per CPU second
    for rep in range(args.repeats):
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=rep)
        for name in names:
            torch.manual_seed(rep)
            start, start_cpu = time.perf_counter(), time.process_time()
            if name == "rlvr HFEngine":
                tokens = run_engine(engine, prompts, args.n, sampling)
            else:
                tokens = run_hf_generate(model, tokenizer, prompts, args.n, sampling)
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
            wall[name].append(tokens / seconds)
            cpu[name].append(tokens / cpu_seconds)
            print(f"  rep {rep}: {name:15s} {tokens:6d} tokens in {seconds:7.2f} s wall "
                  f"({cpu_seconds:7.2f} s CPU) = {tokens / seconds:7.1f} tok/s")

    print(f"\n{'variant':16s} {'tok/s (wall)':>13s} {'tok/CPU-s':>10s}   (medians)")
    for name in reversed(names):
        print(f"{name:16s} {statistics.median(wall[name]):13.1f} {statistics.median(cpu[name]):10.1f}")
    for label, table in (("wall", wall), ("CPU", cpu)):
        ratios = [e / h for e, h in zip(table[names[0]], table[names[1]])]
        print(f"ratio HFEngine / generate ({label:4s}): median {statistics.median(ratios):.2f}x "
              f"(per repeat: {', '.join(f'{r:.2f}' for r in ratios)}; bar: 2.2x)")


if __name__ == "__main__":
    main()
