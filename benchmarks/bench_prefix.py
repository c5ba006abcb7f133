"""The training forward with shared prompts (`rlvr.models.prefix`) against the plain one, interleaved.

    .venv/bin/python benchmarks/bench_prefix.py                                  # the demo's shapes
    .venv/bin/python benchmarks/bench_prefix.py --preset bench20m --prompts 2 --n 8 --prompt-len 96 --completion-len 128

One micro-batch of `prompts` x `n` rows (random tokens: the cost does not depend on them) through
`policy_logprobs`, as the learner runs it: forward + backward of the training pass (with entropy), and
the no-grad pass of pi_old / pi_ref. Each variant runs `--repeats` times, alternating, after a warm-up;
the table gives the median CPU seconds (time.process_time, one torch thread) and the token slots each
computes. The demo's shapes: its minibatch of 128 rows holds about 32 prompts x 4 (rows are shuffled
across the 32 groups of 8), prompts of 14 tokens, completions of at most 10.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.models.forward import policy_logprobs
from rlvr.rollout.batch import build_batch
from rlvr.models.prefix import plan_shared_prefix


def batch_of(prompts: int, n: int, prompt_len: int, completion_len: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompt_ids = [torch.randint(5, 90, (prompt_len,), generator=g).tolist() for _ in range(prompts)]
    rows = [prompt_ids[i // n] for i in range(prompts * n)]
    completions = [torch.randint(5, 90, (completion_len,), generator=g).tolist() for _ in rows]
    return build_batch(rows, completions, None, torch.zeros(len(rows)), pad_id=0)


def timed(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="test", choices=sorted(PRESETS), help="tiny model size (the demo's: test)")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--n", type=int, default=4, help="rows per prompt in the micro-batch")
    p.add_argument("--prompt-len", type=int, default=14)
    p.add_argument("--completion-len", type=int, default=9)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    torch.set_num_threads(1)
    model = build_tiny_model(build_char_tokenizer(), arch="qwen2", seed=0, **PRESETS[args.preset])
    batch = batch_of(args.prompts, args.n, args.prompt_len, args.completion_len)
    plan = plan_shared_prefix(batch.input_ids, batch.attention_mask, batch.mask, batch.start, min_saving=0.0)
    slots = {"plain": batch.input_ids.numel(),
             "shared": plan.prefix_ids.numel() + plan.suffix_ids.numel()}

    def train(share: bool):
        model.zero_grad(set_to_none=True)
        logprobs, _ = policy_logprobs(model, batch, 1.0, with_entropy=True, share_prefix=share)
        (logprobs * batch.mask).sum().backward()

    def no_grad(share: bool):
        with torch.no_grad():
            policy_logprobs(model, batch, 1.0, share_prefix=share)

    times = {(kind, share): [] for kind in ("train", "no_grad") for share in (False, True)}
    for share in (False, True):  # warm-up
        train(share), no_grad(share)
    for _ in range(args.repeats):
        for kind, fn in (("train", train), ("no_grad", no_grad)):
            for share in (False, True):
                times[(kind, share)].append(timed(lambda: fn(share)))
    print(f"{args.preset} model, {args.prompts} prompts x {args.n} rows, prompt {args.prompt_len} + completion "
          f"{args.completion_len} tokens; token slots: plain {slots['plain']}, shared {slots['shared']} "
          f"({slots['plain'] / slots['shared']:.2f}x fewer); median CPU s of {args.repeats}, 1 thread")
    print(f"{'pass':34}{'plain':>10}{'shared':>10}{'speed-up':>10}")
    for kind, label in (("train", "forward + backward (training)"), ("no_grad", "no-grad pass (pi_old, pi_ref)")):
        plain, shared = (statistics.median(times[(kind, s)]) for s in (False, True))
        print(f"{label:34}{plain:>10.4f}{shared:>10.4f}{plain / shared:>9.2f}x")


if __name__ == "__main__":
    main()
