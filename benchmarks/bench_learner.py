"""CPU seconds of one `Learner.update` for each update-path option: the demo's shape, the sort task's (no KL
term), a 20M model, and a GSM8K-shaped batch.

    .venv/bin/python benchmarks/bench_learner.py                  # every size, every variant
    .venv/bin/python benchmarks/bench_learner.py --sizes demo --repeats 5
    .venv/bin/python benchmarks/bench_learner.py --sizes gsm8k --variants sampler tokens packed
    .venv/bin/python benchmarks/bench_learner.py --sizes sort --variants sampler allrows --flat-share 0.25

The batch is synthetic (random tokens, completion lengths drawn uniformly from [len/4, len]) so the
sizes run without a rollout: the update does not care where the tokens came from. `gsm8k` takes its
lengths from real data instead: 8 GSM8K questions (char tokenizer) as prompts, each with 8 worked answers
of other training problems as completions, the spread of lengths a reasoning batch has. Each variant builds
its own Learner from the same folder, and their `update`s are timed interleaved, one of each per round, with
`time.process_time` (CPU seconds of this process, one thread): on a shared, loaded machine wall time measures
the neighbours, and one variant after the other read the process's drift (measured: the same variant 0.144 and
0.172 CPU-s, first and third of five). The padding
fraction printed is the most a padding-free packing of the batch could save in the forward/backward.

Variants: `recompute` (the no-grad pi_old pass), `sampler` (the sampler's log-probs as pi_old);
the others start from `sampler`: `foreach` and `fused` AdamW (torch's CPU implementations), `tokens` (micro-batches by a token budget of
half a minibatch's padded size), `packed` (`train.packing: always`: each micro-batch as one row of
packed sequences, no padding, no shared prompt), `auto` (`train.packing: auto`, the default: packed
where the FLOP estimate says it pays), `compile` (`torch.compile` of the policy's forward, compile time
out), `allrows` (`train.zero_advantage_rows: train`: rows with advantage 0 trained too; every other variant
leaves them out, the default), `measured` (the entropy metric computed by the first epoch's forwards; every
other variant but `recompute` reads the sampler's entropies, as the loop does where the engine hands them). `--flat-share F` gives the first F of the groups one reward each (advantage 0);
the synthetic rewards are random 0/1 otherwise, so almost no group is flat.
Every variant but `packed` and `auto` runs `train.packing: never`, the layout before packing existed.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlvr.algorithms.optim import build_scheduler  # noqa: E402
from rlvr.config import load_config  # noqa: E402
from rlvr.jsonl import read_jsonl  # noqa: E402
from rlvr.models import build_char_tokenizer, make_tiny_model_dir  # noqa: E402
from rlvr.models.forward import policy_logprobs  # noqa: E402
from rlvr.rollout.batch import encode_prompt_completion  # noqa: E402
from rlvr.rollout.scored import ScoredBatch  # noqa: E402
from rlvr.tasks.data import shared_file  # noqa: E402
from rlvr.algorithms.objective import optimizer_steps  # noqa: E402
from rlvr.train.learner import Learner  # noqa: E402

# name: (preset, batch, group, minibatch, mu, prompt tokens, completion tokens, beta)
SIZES = {
    "demo": ("test", 256, 8, 128, 2, 14, 10, 0.01),  # configs/demo.yaml's GRPO phase
    "sort": ("test", 256, 8, 128, 2, 16, 12, 0.0),  # configs/sort.yaml: no KL term, so no reference pass
    "20m": ("bench20m", 16, 8, 8, 1, 64, 128, 0.0),
    "gsm8k": ("demo", 64, 8, 32, 1, 0, 1024, 0.04),  # lengths from GSM8K (gsm8k_batch), mu 1, two minibatches
}
VARIANTS = ("recompute", "sampler", "foreach", "fused", "tokens", "packed", "auto", "compile", "allrows", "measured")


def synthetic_batch(vocab: int, n: int, group: int, prompt_len: int, max_new: int, seed: int) -> ScoredBatch:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, max_new // 4), max_new + 1, (n,), generator=g).tolist()
    prompts = [torch.randint(3, vocab, (prompt_len,), generator=g).tolist() for _ in range(n // group)]
    prompt_ids = [p for p in prompts for _ in range(group)]
    completions = [torch.randint(3, vocab, (k,), generator=g).tolist() for k in lengths]
    logprobs = [[-1.0] * k for k in lengths]  # replaced by the recomputed ones before timing
    return ScoredBatch(prompts=[""] * n, prompt_ids=prompt_ids, completion_ids=completions,
                       sampler_logprobs=logprobs, rewards=torch.randint(0, 2, (n,), generator=g).float(),
                       correct=[False] * n, finish_reasons=["stop"] * n, group_size=group)


def gsm8k_batch(n: int, group: int, max_new: int, seed: int) -> ScoredBatch:
    """n // group GSM8K questions as prompts, each with `group` answers of other problems (char ids)."""
    tok = build_char_tokenizer()
    rows = read_jsonl(shared_file("gsm8k_train.jsonl"), ["question", "answer"], "GSM8K")[: n // group + n]
    prompt_ids = [encode_prompt_completion(tok, r["question"] + "\n", "")[0] for r in rows[: n // group]]
    answers = [encode_prompt_completion(tok, "", r["answer"])[1][:max_new] for r in rows[n // group :]]
    g = torch.Generator().manual_seed(seed)
    return ScoredBatch(prompts=[""] * n, prompt_ids=[p for p in prompt_ids for _ in range(group)],
                       completion_ids=answers, sampler_logprobs=[[-1.0] * len(a) for a in answers],
                       rewards=torch.randint(0, 2, (n,), generator=g).float(), correct=[False] * n,
                       finish_reasons=["stop"] * n, group_size=group)


def make_learner(folder: Path, size: str, variant: str, longest: int) -> Learner:
    """`longest`: the batch's longest prompt + completion, for the `tokens` variant's budget."""
    _, batch, group, mini, mu, _, max_new, beta = SIZES[size]
    train = {"steps": 10, "batch_size": batch, "group_size": group, "mini_batch_size": mini,
             "old_logprobs": "auto" if variant != "recompute" else "recompute",
             "zero_advantage_rows": "train" if variant == "allrows" else "auto"}
    if variant == "tokens":
        train["micro_batch_tokens"] = mini * longest // 2
    train["packing"] = {"packed": "always", "auto": "auto"}.get(variant, "never")
    cfg = load_config(base={"model": {"path": str(folder)}, "rollout": {"max_new_tokens": max_new},
                            "algorithm": {"mu": mu, "beta": beta}, "train": train, "optim": {"lr": 1e-4}})
    learner = Learner(cfg, folder, folder)
    if variant in ("foreach", "fused"):
        groups = [{k: v for k, v in g.items() if k != "initial_lr"} for g in learner.optimizer.param_groups]
        learner.optimizer = torch.optim.AdamW(groups, **{variant: True})
        o = cfg.optim
        learner.scheduler = build_scheduler(learner.optimizer, o.schedule, o.warmup_steps, optimizer_steps(cfg),
                                            o.min_lr_ratio)
    if variant == "compile":
        learner.policy.forward = torch.compile(learner.policy.forward, dynamic=True)
    return learner


def as_sampled(learner: Learner, batch: ScoredBatch, entropies: bool = True) -> ScoredBatch:
    """`batch` with the sampler's log-probs (and, where they stand in and `entropies`, its entropies) as the
    engine would hand them at `learner`'s weights."""
    rows = learner.tensors(batch)
    with torch.no_grad():
        logprobs, entropy = policy_logprobs(learner.policy, rows, 1.0, with_entropy=True)  # (N, W) each
    return replace(batch, sampler_logprobs=[lp[m].tolist() for lp, m in zip(logprobs, rows.mask)],
                   sampler_entropies=[e[m].tolist() for e, m in zip(entropy, rows.mask)]
                   if learner.sampler_is_old and entropies else None)


def time_updates(learners: dict[str, Learner], batches: dict[str, ScoredBatch], repeats: int) -> dict[str, float]:
    """Mean CPU seconds of each learner's `update`, after one untimed warm-up each (compilation, allocator
    growth), interleaved: round r times every variant once, in reverse order every other round, so a drift of
    the machine or the process over the run falls on every variant alike."""
    times: dict[str, list[float]] = {name: [] for name in learners}
    names = list(learners)
    for r in range(repeats + 1):
        for name in names if r % 2 == 0 else names[::-1]:
            batch = replace(batches[name], version=learners[name].version)  # sampled at these weights, as in the loop
            tic = time.process_time()
            learners[name].update(batch)
            if r:
                times[name].append(time.process_time() - tic)
    return {name: sum(t) / len(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flat-share", type=float, default=0.0, help="share of the groups with one reward each")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for size in args.sizes:
        preset, n, group, _, _, prompt_len, max_new, _ = SIZES[size]
        with tempfile.TemporaryDirectory() as tmp:
            folder = make_tiny_model_dir(Path(tmp) / "model", preset=preset, max_position_embeddings=2048)
            vocab = AutoConfig.from_pretrained(folder).vocab_size
            batch = gsm8k_batch(n, group, max_new, seed=0) if size == "gsm8k" else \
                synthetic_batch(vocab, n, group, prompt_len, max_new, seed=0)
            flat = round(args.flat_share * n / group) * group  # rows of the first groups, made flat
            batch.rewards[:flat] = 1.0
            real = sum(len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids))
            longest = max(len(p) + len(c) for p, c in zip(batch.prompt_ids, batch.completion_ids))
            padded = n * longest
            print(f"{size}: {n} rows, padding {1 - real / padded:.1%} of the padded batch, {flat} rows in flat groups",
                  flush=True)
            variants = list(dict.fromkeys(args.variants))
            learners = {v: make_learner(folder, size, v, longest) for v in variants}
            batches = {v: as_sampled(learners[v], batch, v != "measured") for v in variants}
            seen = time_updates(learners, batches, args.repeats)
            for variant, seconds in seen.items():
                ratios = "  ".join(f"{seen[b] / seconds:5.2f}x vs {b}"
                                   for b in ("recompute", "sampler", "tokens", "packed", "allrows", "measured")
                                   if b in seen and b != variant)
                print(f"  {variant:10s} {seconds:7.3f} CPU-s/update  {ratios}", flush=True)


if __name__ == "__main__":
    main()
