"""Rollout throughput: rlvr's HFEngine vs transformers' `model.generate` (and vLLM), in two modes.

Setting: a ~20M-parameter Qwen2 (random init, `PRESETS["bench20m"]`), 16 prompts of 96
tokens, n = 8 samples per prompt, 128 new tokens, temperature 1 (no top-k/top-p), 2 CPU threads.
- "full length": no side stops at EOS (`SamplingParams.ignore_eos`; `generate` with
  min_new_tokens = max_new_tokens), so every row decodes all 128 tokens: the engine's own speed.
- "with EOS": all stop at EOS and count only real generated tokens (EOS included, padding after EOS
  excluded). A random model emits EOS early, so this mostly measures HFEngine's pruning of finished
  rows, which `generate` lacks: honest, but a different figure from the full-length one.
From .venv-vllm (scripts/setup_vllm.sh) the vLLM engine joins, on the same weights saved to a temporary
folder and loaded in float32; its engine core runs in this process, so its CPU time is counted.
All runs of a round are interleaved, so machine load hits them alike; the ratios are the numbers to
read. Throughput is per wall-clock second and per CPU second of this process (the latter is less
sensitive to other processes sharing the cores). `--vocab` pads the model's vocabulary (the char
tokenizer has 101 ids; real models have 32k-150k, where sampling over the vocabulary costs more).
`--dtype bfloat16` places the model as `model.dtype: bfloat16` does (float32 weights, autocast forward)
and runs HFEngine with its one autocast region and `generate` inside one region too (its best setting:
with only the policy's per-forward hooks it would cast every weight at every token). `--lora R` wraps the
model in fresh LoRA adapters as `model.lora.r: R` does (vLLM is then left out) and adds "HFEngine/step
casts", the same engine casting the frozen base at every decoding step (as before it cast them once per
call, `rlvr.rollout.hf_engine.frozen_linear_casts`). `--copied-prompt` adds "HFEngine/copied prompt", the same
engine with cascade attention off (each prompt's keys/values copied to the n rows of its group, as before).

    .venv/bin/python benchmarks/bench_rollout.py [--repeats 3] [--threads 2] [--vocab 16384]
    VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind PYTHONPATH=. .venv-vllm/bin/python \
        benchmarks/bench_rollout.py [--no-generate] [--vllm-eager]

`--model M` measures a real model instead (a folder, a .gguf file or an embedded model's name, as `model.path`
takes): the prompts are the first training prompts of `--config`'s task (default: benchmarks/configs/
smollm2_add.yaml, issue 37's starting point, through the model's chat template) and the shape is the config's (train.batch_size / train.group_size prompts x group_size
samples, rollout.max_new_tokens, its temperature), HFEngine built as `rlvr train` builds it (processed log-probs,
entropies). Where vLLM is not importable here, it runs in a child process of `--vllm-python` (default
.venv-vllm/bin/python, when it exists), in float32 with torch.compile (`--vllm-eager`: without, as `rlvr train`
builds it on a CPU): each request is timed inside the child, in its own CPU seconds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_rollout.py --model smollm2-135m-instruct [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model, load_model, load_tokenizer, save_model
from rlvr.models.placement import autocast_forward
import rlvr.rollout.hf_engine as hf_engine
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.rollout.sampling import SCORED_LOGPROBS

from _vllm_child import VLLMChild

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2_CONFIG = ROOT / "benchmarks" / "configs" / "smollm2_add.yaml"  # the real model's recorded rows

MODES = {"full length": True, "with EOS": False}  # mode -> SamplingParams.ignore_eos
RATIOS = (("HFEngine", "generate"), ("vLLM", "HFEngine"), ("vLLM", "generate"), ("HFEngine", "HFEngine/step casts"),
          ("HFEngine", "HFEngine/copied prompt"))


def make_prompts(tokenizer, count: int, length: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    chars = "0123456789 abcdefghijklmnopqrstuvwxyz+=\n"
    prompts = ["".join(rng.choice(chars) for _ in range(length)) for _ in range(count)]
    assert all(len(tokenizer(p)["input_ids"]) == length for p in prompts)
    return prompts


def run_engine(engine, prompts, n, sampling) -> int:
    completions = engine.generate(prompts, n, sampling)
    return sum(len(c.token_ids) for c in completions)


def run_per_step_casts(engine, prompts, n, sampling) -> int:
    """The engine as it was before the frozen weights were cast once per call."""
    cast_once = hf_engine.frozen_linear_casts
    hf_engine.frozen_linear_casts = lambda model, dtype: {}
    try:
        return run_engine(engine, prompts, n, sampling)
    finally:
        hf_engine.frozen_linear_casts = cast_once


def run_hf_generate(model, tokenizer, prompts, n, sampling, dtype=torch.float32) -> int:
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    # generate has no ignore_eos: min_new_tokens masks EOS until the limit instead
    forced = {"min_new_tokens": sampling.max_new_tokens} if sampling.ignore_eos else {}
    region = nullcontext() if dtype == torch.float32 else torch.autocast("cpu", dtype)
    with region:
        out = model.generate(**batch, do_sample=True, temperature=sampling.temperature, top_p=1.0, top_k=0,
                             max_new_tokens=sampling.max_new_tokens, num_return_sequences=n,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **forced)
    generated = out[:, batch["input_ids"].shape[1]:]  # (B*n, T)
    is_eos = generated == tokenizer.eos_token_id
    # tokens up to and including the first EOS; everything after it is padding
    after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
    return int((~after_eos).sum())


def recipe_prompts(config: Path, folder: Path, count: int | None) -> tuple[list[str], dict]:
    """The first training prompts of `config`'s task, rendered for the model in `folder` (its chat template), and
    the config's rollout shape: {"prompts", "n", "new_tokens", "temperature"}."""
    from rlvr.config import load_config
    from rlvr.train.preflight import run_task

    cfg = load_config(config, [f"model.path={folder}"])
    shape = {"prompts": cfg.train.batch_size // cfg.train.group_size, "n": cfg.train.group_size,
             "new_tokens": cfg.rollout.max_new_tokens, "temperature": cfg.rollout.temperature}
    examples = run_task(cfg).train_examples(count or shape["prompts"], cfg.seed)  # as `rlvr train` draws them
    return [ex.prompt for ex in examples], shape


def vllm_child(args, model, tokenizer, tmp: str, folder: Path | None):
    """vLLM in a child process of `--vllm-python` (`_vllm_child.VLLMChild`), on `folder` or the model saved."""
    folder = folder or save_model(model, tokenizer, Path(tmp) / "model")
    child = VLLMChild(args.vllm_python, folder, args.threads, Path(tmp) / "vllm.log", eager=args.vllm_eager)
    print(f"vLLM engine up in {child.ready['load_s']:.1f} s in a child process of {args.vllm_python} "
          f"(enforce_eager={args.vllm_eager})")
    return child


def build_engines(args, model, tokenizer, tmp: str, folder: Path | None = None) -> dict:
    """engine name -> run(prompts, n, sampling) -> generated tokens, or (tokens, wall s, CPU s) where timed
    elsewhere. vLLM joins when importable, here or in `--vllm-python`'s child process. `folder`: the real model's."""
    dtype = getattr(torch, args.dtype)
    # a real model's engine as `rlvr train` builds it (the log-probs it trains with, entropies); the tiny one's
    # settings as its recorded history was measured
    training = {"entropies": True, "logprobs_mode": SCORED_LOGPROBS} if folder else {}
    engine = HFEngine(model, tokenizer, autocast=dtype, **training)
    engines = {"HFEngine": lambda *a: run_engine(engine, *a)}
    if args.lora and dtype != torch.float32:
        engines["HFEngine/step casts"] = lambda *a: run_per_step_casts(engine, *a)
    if args.copied_prompt:
        copied = HFEngine(model, tokenizer, autocast=dtype, cascade=False)
        engines["HFEngine/copied prompt"] = lambda *a: run_engine(copied, *a)
    if not args.no_generate:
        engines["generate"] = lambda *a: run_hf_generate(model, tokenizer, *a, dtype=dtype)
    if args.lora or dtype != torch.float32:
        print("vLLM left out: --lora / --dtype measure rlvr's engine on a LoRA or bfloat16 policy")
    elif importlib.util.find_spec("vllm") is not None and not args.no_vllm:
        from rlvr.rollout.vllm_engine import VLLMEngine

        start = time.perf_counter()
        vllm_engine = VLLMEngine(folder or save_model(model, tokenizer, Path(tmp) / "model"), dtype="float32",
                                 enforce_eager=args.vllm_eager, **({"logprobs_mode": SCORED_LOGPROBS} if folder else {}))
        print(f"vLLM engine up in {time.perf_counter() - start:.1f} s (enforce_eager={args.vllm_eager})")
        engines["vLLM"] = lambda *a: run_engine(vllm_engine, *a)
    elif not args.no_vllm and args.vllm_python and Path(args.vllm_python).exists():
        engines["vLLM"] = vllm_child(args, model, tokenizer, tmp, folder)
    return engines


def measure(engines: dict, prompts, args) -> tuple[dict, dict]:
    """Interleaved rounds over every (engine, mode); returns tok/s per wall and per CPU second."""
    warmup = SamplingParams(temperature=1.0, max_new_tokens=4, seed=0)  # first-call allocations, lazy inits
    for run in engines.values():
        run(prompts, args.n, warmup)
        run(prompts, args.n, replace(warmup, max_new_tokens=args.new_tokens))  # the full shape's allocations
    keys = [(engine, mode) for mode in MODES for engine in engines]
    wall: dict[tuple, list[float]] = {key: [] for key in keys}
    cpu: dict[tuple, list[float]] = {key: [] for key in keys}
    for rep in range(args.repeats):
        base = SamplingParams(temperature=args.temperature, max_new_tokens=args.new_tokens, seed=rep)
        for engine, mode in keys:
            torch.manual_seed(rep)
            start, start_cpu = time.perf_counter(), time.process_time()
            tokens = engines[engine](prompts, args.n, replace(base, ignore_eos=MODES[mode]))
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - start_cpu
            if isinstance(tokens, tuple):  # timed where it ran (vLLM's child process)
                tokens, seconds, cpu_seconds = tokens
            wall[engine, mode].append(tokens / seconds)
            cpu[engine, mode].append(tokens / cpu_seconds)
            print(f"  round {rep}: {engine:8s} {mode:11s} {tokens:6d} tokens in {seconds:7.2f} s wall "
                  f"({cpu_seconds:7.2f} s CPU) = {tokens / seconds:7.1f} tok/s")
    return wall, cpu


def report(wall: dict, cpu: dict) -> None:
    print(f"\n{'engine':8s} {'mode':11s} {'tok/s (wall)':>13s} {'tok/CPU-s':>10s}   (medians)")
    for engine, mode in wall:
        print(f"{engine:8s} {mode:11s} {statistics.median(wall[engine, mode]):13.1f} "
              f"{statistics.median(cpu[engine, mode]):10.1f}")
    for mode in MODES:
        for top, bottom in RATIOS:
            if (top, mode) not in wall or (bottom, mode) not in wall:
                continue
            for label, table in (("CPU", cpu), ("wall", wall)):
                ratios = [a / b for a, b in zip(table[top, mode], table[bottom, mode])]
                print(f"ratio {top + ' / ' + bottom:19s} {mode:11s} ({label:4s}): median "
                      f"{statistics.median(ratios):.2f}x (per round: {', '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="bench20m", choices=sorted(PRESETS))
    parser.add_argument("--arch", default="qwen2", choices=["qwen2", "llama"])
    parser.add_argument("--model", help="a real model (folder, .gguf or embedded name) instead of the tiny one")
    parser.add_argument("--config", type=Path, default=SMOLLM2_CONFIG,
                        help="with --model: the config whose task's prompts and rollout shape are measured")
    parser.add_argument("--prompts", type=int, default=None, help="prompts per call (16; --model: the config's)")
    parser.add_argument("--prompt-len", type=int, default=96, help="the tiny model's prompt length")
    parser.add_argument("--n", type=int, default=None, help="samples per prompt (8; --model: the config's)")
    parser.add_argument("--new-tokens", type=int, default=None, help="new tokens (128; --model: the config's)")
    parser.add_argument("--temperature", type=float, default=None, help="(1.0; --model: the config's)")
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"),
                        help="where vLLM is not importable here: the interpreter of a venv that has it")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=None, help="pad the model's vocabulary to this size")
    parser.add_argument("--no-generate", action="store_true", help="leave model.generate out (the slowest)")
    parser.add_argument("--no-vllm", action="store_true", help="leave vLLM out even where it is installed")
    parser.add_argument("--vllm-eager", action="store_true", help="vLLM without torch.compile")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="compute dtype, as model.dtype (float32 weights, autocast)")
    parser.add_argument("--copied-prompt", action="store_true",
                        help="add HFEngine without cascade attention (prompts copied to every row)")
    parser.add_argument("--lora", type=int, default=0, metavar="R", help="wrap the model in LoRA adapters of rank R")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    folder = prompts = None
    if args.model:
        from rlvr.models.sources import resolve_model

        folder = resolve_model(args.model, "--model")
        model, tokenizer = load_model(folder), load_tokenizer(folder)
        prompts, shape = recipe_prompts(args.config, folder, args.prompts)
        name = f"{args.model} ({folder.name}), prompts of {args.config.name}'s task"
    else:
        tokenizer = build_char_tokenizer()
        model = build_tiny_model(tokenizer, arch=args.arch, **PRESETS[args.preset])
        if args.vocab:
            model.resize_token_embeddings(args.vocab)
        shape = {"prompts": 16, "n": 8, "new_tokens": 128, "temperature": 1.0}
        name = f"{args.arch}/{args.preset}"
    for key in ("prompts", "n", "new_tokens", "temperature"):
        setattr(args, key, shape[key] if getattr(args, key) is None else getattr(args, key))
    params = sum(p.numel() for p in model.parameters())
    if args.lora:
        from rlvr.config.sections import LoRAConfig
        from rlvr.models.lora import add_lora

        model = add_lora(model, LoRAConfig(r=args.lora))
    model = autocast_forward(model, torch.device("cpu"), getattr(torch, args.dtype))
    prompts = prompts or make_prompts(tokenizer, args.prompts, args.prompt_len, seed=0)
    lengths = [len(tokenizer(p, add_special_tokens=True)["input_ids"]) for p in prompts]
    with tempfile.TemporaryDirectory() as tmp:
        engines = build_engines(args, model, tokenizer, tmp, folder)
        print(f"model {name}: {params / 1e6:.1f}M params, vocab {model.config.vocab_size} | "
              f"{args.prompts} prompts x {min(lengths)}-{max(lengths)} tokens, n={args.n}, {args.new_tokens} new "
              f"tokens, T={args.temperature}, {args.threads} threads, {args.dtype}"
              f"{f', LoRA r={args.lora}' if args.lora else ''}; load {os.getloadavg()[0]:.2f}")
        try:
            report(*measure(engines, prompts, args))
        finally:
            for run in engines.values():
                getattr(run, "close", lambda: None)()
    print(f"load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":  # vLLM may start worker processes, which re-import this file
    main()
