"""GRPO on one GPU with the colocated vLLM engine: rollout and update throughput, MFU, weight sync.

Setting: a Qwen2.5-0.5B-shaped model (24 layers, hidden 896, 14/2 query/KV heads, MLP 4864, vocab
151,936, tied embeddings) with random weights, or the Hugging Face folder given by --model. Each
step: vLLM samples n completions per prompt (bf16, temperature 1), a synthetic verifiable reward
scores them, GRPO advantages (group z-score), one clipped-surrogate update of the float32 master
weights with the forward and backward under bf16 autocast, then the weights go back to vLLM.
Between rollout and weight sync the engine sleeps (KV cache freed, weights offloaded to host).
`--engine hf` samples with rlvr's HFEngine from the trained policy itself instead (bf16 autocast over
the float32 weights, no sleep, nothing to sync): the same update, the rollout for comparison.

What it prints per step and as medians over the steps after the first (warm-up):
- rollout tok/s: generated tokens / rollout seconds;
- update tok/s: processed tokens (prompt + completion, no padding) / update seconds;
- update MFU: 6 N + 12 L d S FLOPs per processed token (PaLM, Chowdhery et al. 2022, app. B;
  N = parameters of the matrix multiplies, S = sequence length) over the card's peak;
- weight sync seconds, peak memory.
Peak: --peak-tflops, else by device name: H100/H200 989 TFLOP/s (bf16 dense, SXM spec sheet;
the 1979 figure assumes 2:4 sparsity), A100 312.

    python benchmarks/gpu/bench_grpo_vllm.py [--model PATH] [--steps 6]       # on the GPU (< 8 min)
    python benchmarks/gpu/bench_grpo_vllm.py --engine hf --steps 3           # rlvr's HFEngine instead
    python benchmarks/gpu/bench_grpo_vllm.py --cpu-smoke [--engine hf]        # CI (vllm: in .venv-vllm)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

from rlvr.core import aggregate_loss, clipped_surrogate_loss, grpo_advantages
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model, load_model, load_tokenizer, save_model
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.models.forward import policy_logprobs
from rlvr.rollout.batch import RolloutBatch, build_batch

QWEN25_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                  intermediate_size=4864, vocab_size=151936, max_position_embeddings=32768,
                  rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}  # bf16 dense


def padded_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """The char tokenizer with its vocabulary padded to `vocab_size` by multi-character tokens that
    encoding never produces but decoding reads, so a random model's samples over the full
    vocabulary decode to text (Qwen2.5's own tokenizer cannot be fetched here)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    base = build_char_tokenizer()
    vocab = dict(base.get_vocab())
    letters = [t for t in vocab if len(t) == 1 and t.isalnum()]
    for a in letters:
        for b in letters:
            for c in letters:
                if len(vocab) >= vocab_size:
                    break
                vocab[a + b + c] = len(vocab)
    backend = Tokenizer(BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>",
                                  eos_token="<eos>", unk_token="<unk>")
    tok.chat_template = base.chat_template
    return tok


def build_model_dir(args, root: Path) -> Path:
    """The folder vLLM loads: --model as given, else a random-init model saved in the rollout dtype."""
    if args.model:
        return Path(args.model)
    if args.cpu_smoke:
        tokenizer = build_char_tokenizer()
        # vLLM's CPU attention needs a head size of at least 32: 64 / 2 heads.
        model = build_tiny_model(tokenizer, arch="qwen2", **{**PRESETS["test"], "num_heads": 2})
    else:
        tokenizer = padded_tokenizer(QWEN25_05B["vocab_size"])
        config = Qwen2Config(**QWEN25_05B, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                             eos_token_id=tokenizer.eos_token_id)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return save_model(model, tokenizer, root / "policy")


class SharedPolicyEngine:
    """HFEngine sampling from the learner's own model: nothing to free during the update, no weights
    to move after it (sync_seconds records 0 so that the report reads the same)."""

    def __init__(self, policy, tokenizer, device, dtype):
        self.hf = HFEngine(policy, tokenizer, device=device, autocast=dtype)
        self.sync_seconds: list[float] = []

    def generate(self, prompts, n, sampling):
        return self.hf.generate(prompts, n, sampling)

    def sleep(self) -> None:
        pass

    def load_weights(self, named_tensors) -> None:
        self.sync_seconds.append(0.0)


def synthetic_reward(completion) -> float:
    """A cheap verifiable score with spread inside a group: the share of distinct tokens."""
    return len(set(completion.token_ids)) / max(len(completion.token_ids), 1)


def flops_per_token(model, seq_len: float) -> float:
    cfg = model.config
    embed = cfg.vocab_size * cfg.hidden_size
    params = sum(p.numel() for p in model.parameters())
    matmul = params - embed + (embed if cfg.tie_word_embeddings else 0)  # the head is a matmul, the lookup not
    return 6 * matmul + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq_len


def update(policy, optimizer, completions, rewards, n, pad_id, micro, device, autocast_dtype) -> dict:
    """One GRPO step (mu = 1: the sampler's log-probs are the old log-probs). Returns the processed tokens
    (no padding), the mean sequence length, the share of padding in the micro-batches, and the seconds
    of the forwards and backwards and of the optimizer (clipping, AdamW, zeroing)."""
    rewards = torch.tensor(rewards)
    batch = build_batch([c.prompt_ids for c in completions], [c.token_ids for c in completions],
                        grpo_advantages(rewards, n), rewards, pad_id)  # advantages (B,)
    old = torch.zeros(batch.mask.shape)  # (B, W)
    old[batch.mask] = torch.tensor([lp for c in completions for lp in c.logprobs])  # row-major, as sampled
    batch.old_logprobs = old
    B = len(batch)
    start = time.perf_counter()
    for first in range(0, B, micro):
        mb = _to_device(batch.select(slice(first, first + micro)), device)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype != torch.float32):
            logp, _ = policy_logprobs(policy, mb, temperature=1.0)  # (b, W)
        per_token, _ = clipped_surrogate_loss(logp.float(), mb.old_logprobs, mb.advantages, mask=mb.mask)
        loss = aggregate_loss(per_token, mb.mask, "seq_mean_token_mean") * (len(mb) / B)
        loss.backward()
    _sync(device)
    passes = time.perf_counter() - start
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    _sync(device)
    tokens = int(batch.attention_mask.sum())
    return dict(tokens=tokens, seq_len=tokens / B, padding=1 - tokens / batch.attention_mask.numel(),
                passes_s=passes, optimizer_s=time.perf_counter() - start - passes)


def _to_device(batch: RolloutBatch, device) -> RolloutBatch:
    return replace(batch, **{f.name: getattr(batch, f.name).to(device) for f in fields(batch)
                             if isinstance(getattr(batch, f.name), torch.Tensor)})


def memory_report(device) -> str:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return (f"torch peak {torch.cuda.max_memory_allocated(device) / 2**30:.1f} GiB, "
                f"device in use now {(total - free) / 2**30:.1f} / {total / 2**30:.0f} GiB")
    return f"process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="Hugging Face causal LM folder (default: random Qwen2.5-0.5B shape)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (GRPO group)")
    parser.add_argument("--prompt-len", type=int, default=128, help="characters of each random prompt")
    parser.add_argument("--new-tokens", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    parser.add_argument("--peak-tflops", type=float, help="the card's bf16 dense peak (default: by name)")
    parser.add_argument("--engine", choices=("vllm", "hf"), default="vllm",
                        help="vllm: colocated vLLM engine; hf: rlvr's HFEngine on the policy itself")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model, float32, CPU, 2 steps (CI)")
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        args.steps, args.prompts, args.n, args.prompt_len, args.new_tokens, args.micro_batch = 2, 4, 4, 12, 16, 8
    return args


def peak_flops(args, device) -> tuple[float | None, str]:
    if args.peak_tflops:
        return args.peak_tflops * 1e12, f"{args.peak_tflops:g} TFLOP/s (--peak-tflops)"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for key, tflops in PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12, f"{tflops:g} TFLOP/s ({name}, bf16 dense spec)"
        return None, f"unknown for {name}; pass --peak-tflops"
    return None, "n/a on CPU"


def random_prompts(count: int, length: int, seed: int) -> list[str]:
    gen = torch.Generator().manual_seed(seed)
    chars = "0123456789 abcdefghijklmnopqrstuvwxyz+=\n"
    picks = torch.randint(len(chars), (count, length), generator=gen).tolist()
    return ["".join(chars[i] for i in row) for row in picks]


def main(argv=None) -> None:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu_smoke else "cpu")
    if device.type == "cpu":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    rollout_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak, peak_label = peak_flops(args, device)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model_dir(args, Path(tmp))
        start = time.perf_counter()
        if args.engine == "vllm":
            from rlvr.rollout.vllm_engine import VLLMEngine

            engine = VLLMEngine(path, dtype=str(rollout_dtype).removeprefix("torch."),
                                gpu_memory_utilization=args.gpu_memory_utilization,
                                enforce_eager=device.type == "cpu")
        policy = load_model(path, dtype=torch.float32, device=device)  # float32 master weights
        if args.engine == "hf":
            engine = SharedPolicyEngine(policy, load_tokenizer(path), device, rollout_dtype)
        print(f"{args.engine} engine up in {time.perf_counter() - start:.1f} s ({device}, "
              f"rollout in {str(rollout_dtype)[6:]})")
        tokenizer = load_tokenizer(path)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0)
        params = sum(p.numel() for p in policy.parameters())
        print(f"model {params / 1e6:.1f}M params | {args.prompts} prompts x {args.n} samples, "
              f"{args.new_tokens} new tokens | update: float32 master weights, "
              f"{'bf16 autocast' if rollout_dtype == torch.bfloat16 else 'float32'} | MFU peak: {peak_label}")
        results = []
        for step in range(args.steps):
            results.append(run_step(args, step, engine, policy, optimizer, tokenizer, device, rollout_dtype, peak))
        summarize(results[1:] or results, peak)
        print(f"peak memory: {memory_report(device)}")


def run_step(args, step, engine, policy, optimizer, tokenizer, device, rollout_dtype, peak) -> dict:
    prompts = random_prompts(args.prompts, args.prompt_len, seed=step)
    # --- rollout ---
    start = time.perf_counter()
    completions = engine.generate(prompts, args.n, SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens,
                                                                  seed=step))
    rollout_s = time.perf_counter() - start
    generated = sum(len(c.token_ids) for c in completions)
    # --- rewards ---
    rewards = [synthetic_reward(c) for c in completions]
    # --- update ---
    engine.sleep()
    _sync(device)
    start = time.perf_counter()
    done = update(policy, optimizer, completions, rewards, args.n, tokenizer.pad_token_id, args.micro_batch, device,
                  rollout_dtype)
    update_s, tokens = time.perf_counter() - start, done["tokens"]
    # --- weight sync ---
    engine.load_weights((name, p.detach().to(rollout_dtype)) for name, p in policy.named_parameters())
    row = dict(rollout=generated / rollout_s, update=tokens / update_s, sync=engine.sync_seconds[-1],
               mfu=tokens * flops_per_token(policy, done["seq_len"]) / update_s / peak if peak else None,
               reward=statistics.fmean(rewards))
    mfu = f"{100 * row['mfu']:.1f}%" if row["mfu"] is not None else "n/a"
    print(f"step {step}: rollout {generated} tokens in {rollout_s:.2f} s = {row['rollout']:.0f} tok/s | update "
          f"{tokens} tokens in {update_s:.2f} s = {row['update']:.0f} tok/s, MFU {mfu} (forward+backward "
          f"{done['passes_s']:.2f} s, optimizer {done['optimizer_s']:.2f} s, padding {100 * done['padding']:.0f}%)"
          f" | weight sync "
          f"{row['sync']:.3f} s | mean reward {row['reward']:.3f}")
    return row


def summarize(rows: list[dict], peak) -> None:
    med = {k: statistics.median(r[k] for r in rows) for k in ("rollout", "update", "sync")}
    mfu = f"{100 * statistics.median(r['mfu'] for r in rows):.1f}%" if peak else "n/a"
    print(f"median over {len(rows)} step(s): rollout {med['rollout']:.0f} tok/s | update {med['update']:.0f} tok/s"
          f" | update MFU {mfu} | weight sync {med['sync']:.3f} s")


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":  # vLLM may start worker processes, which re-import this file
    main()
