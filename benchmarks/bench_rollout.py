"""Rollout throughput: rlvr's HFEngine vs transformers' `model.generate` (and vLLM), side by side.

Setting of issue 5: a ~20M-parameter Qwen2 (random init, `PRESETS["bench20m"]`), 16 prompts of 96
tokens, n = 8 samples per prompt, 128 new tokens, temperature 1 (no top-k/top-p), 2 CPU threads.
Both variants sample the same distribution, stop at EOS, and count only real generated tokens (EOS
included, padding after EOS excluded). The two run interleaved, so machine load hits both alike;
the ratio is the number to read. Throughput is reported per wall-clock second and per CPU second of
this process (the latter is less sensitive to other processes sharing the cores).

    .venv/bin/python benchmarks/bench_rollout.py [--repeats 3] [--threads 2] [--ignore-eos]

From .venv-vllm (scripts/setup_vllm.sh) the vLLM engine runs alongside, on the same weights:

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind PYTHONPATH=. .venv-vllm/bin/python \
        benchmarks/bench_rollout.py --repeats 3 [--ignore-eos]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model, save_model
from rlvr.rollout import HFEngine, SamplingParams


def make_prompts(tokenizer, count: int, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    chars = "0123456789 abcdefghijklmnopqrstuvwxyz+=\n"
    prompts = ["".join(rng.choice(chars) for _ in range(length)) for _ in range(count)]
    assert all(len(tokenizer(p)["input_ids"]) == length for p in prompts)
    return prompts


def run_engine(engine, prompts, n, sampling) -> int:
    completions = engine.generate(prompts, n, sampling)
    return sum(len(c.token_ids) for c in completions)


def run_hf_generate(model, tokenizer, prompts, n, sampling) -> int:
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    # ignore_eos: min_new_tokens masks EOS until the limit, so every row runs to full length.
    forced = {"min_new_tokens": sampling.max_new_tokens} if sampling.ignore_eos else {}
    out = model.generate(**batch, do_sample=True, temperature=sampling.temperature, top_p=1.0, top_k=0,
                         max_new_tokens=sampling.max_new_tokens, num_return_sequences=n,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **forced)
    generated = out[:, batch["input_ids"].shape[1]:]  # (B*n, T)
    is_eos = generated == tokenizer.eos_token_id
    # tokens up to and including the first EOS; everything after it is padding
    after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
    return int((~after_eos).sum())


def build_variants(args, model, tokenizer, tmp: str) -> dict:
    """name -> function(prompts, n, sampling) -> generated tokens. vLLM joins when importable
    (run from .venv-vllm); it loads the same weights from a saved copy, in float32."""
    engine = HFEngine(model, tokenizer)
    variants = {"rlvr HFEngine": lambda *a: run_engine(engine, *a)}
    if not args.no_generate:
        variants["model.generate"] = lambda *a: run_hf_generate(model, tokenizer, *a)
    if importlib.util.find_spec("vllm") is not None and not args.no_vllm:
        from rlvr.rollout.vllm_engine import VLLMEngine

        start = time.perf_counter()
        vllm_engine = VLLMEngine(save_model(model, tokenizer, Path(tmp) / "model"), dtype="float32",
                                 enforce_eager=args.vllm_eager)
        print(f"vLLM engine up in {time.perf_counter() - start:.1f} s (enforce_eager={args.vllm_eager})")
        variants["vLLM"] = lambda *a: run_engine(vllm_engine, *a)
    return variants


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
    parser.add_argument("--ignore-eos", action="store_true", help="every completion runs to --new-tokens")
    parser.add_argument("--no-generate", action="store_true", help="leave model.generate out (the slowest)")
    parser.add_argument("--no-vllm", action="store_true", help="leave vLLM out even where it is installed")
    parser.add_argument("--vllm-eager", action="store_true", help="vLLM without torch.compile")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, arch=args.arch, **PRESETS[args.preset])
    params = sum(p.numel() for p in model.parameters())
    prompts = make_prompts(tokenizer, args.prompts, args.prompt_len, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        variants = build_variants(args, model, tokenizer, tmp)
        print(f"model {args.arch}/{args.preset}: {params / 1e6:.1f}M params | {args.prompts} prompts x "
              f"{args.prompt_len} tokens, n={args.n}, {args.new_tokens} new tokens"
              f"{' (EOS ignored)' if args.ignore_eos else ''}, {args.threads} threads")
        measure(variants, prompts, args)


def measure(variants: dict, prompts, args) -> None:
    warmup = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)  # first-call allocations, lazy inits
    for run in variants.values():
        run(prompts, args.n, warmup)
    wall: dict[str, list[float]] = {name: [] for name in variants}  # tokens per wall second
    cpu: dict[str, list[float]] = {name: [] for name in variants}  # tokens per CPU second
    for rep in range(args.repeats):
        sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=rep,
                                  ignore_eos=args.ignore_eos)
        for name, run in variants.items():
            torch.manual_seed(rep)
            start, start_cpu = time.perf_counter(), time.process_time()
            tokens = run(prompts, args.n, sampling)
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
            wall[name].append(tokens / seconds)
            cpu[name].append(tokens / cpu_seconds)
            print(f"  rep {rep}: {name:15s} {tokens:6d} tokens in {seconds:7.2f} s wall "
                  f"({cpu_seconds:7.2f} s CPU) = {tokens / seconds:7.1f} tok/s")

    print(f"\n{'variant':16s} {'tok/s (wall)':>13s} {'tok/CPU-s':>10s}   (medians)")
    for name in variants:
        print(f"{name:16s} {statistics.median(wall[name]):13.1f} {statistics.median(cpu[name]):10.1f}")
    base = "model.generate" if "model.generate" in variants else "rlvr HFEngine"
    for other in [name for name in variants if name != base]:
        for label, table in (("wall", wall), ("CPU", cpu)):
            ratios = [e / h for e, h in zip(table[other], table[base])]
            print(f"ratio {other} / {base} ({label:4s}): median {statistics.median(ratios):.2f}x "
                  f"(per repeat: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":  # vLLM may start worker processes, which re-import this file
    main()
