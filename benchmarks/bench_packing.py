"""Packed vs padded SFT on real reasoning traces: GSM8K question -> worked answer, char tokenizer.

The same documents, the same model, forward + backward of the completion-token NLL, four layouts:
  padded          batches of `--batch` documents in data order, right-padded to the longest
                  (what `rlvr.algorithms.sft` does)
  padded-sorted   the same, documents sorted by length first (HF `group_by_length`): a strong
                  baseline, but it biases every batch towards one length
  packed-mask     each batch's documents packed into rows of `--mask-len` tokens, 4D block mask:
                  little padding, but every masked attention score is still computed (R * L^2)
  packed-varlen   the batch's documents in rows of `--max-len` tokens, causal attention per document
                  (`rlvr.models.varlen`, the default route on CPU): sum_i len_i^2
The position-ids route is not timed: it exists for flash-attention's varlen kernels; with eager/sdpa
transformers turns it into one mask over the whole flattened batch, quadratic in its tokens.
Prints the best of `--repeats` epochs: CPU and wall seconds per epoch, completion tokens per CPU
second, the share of computed slots that are padding, and each layout's speed-up over `padded`
(CPU time). Losses are printed too: they must agree (packing changes no number).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_packing.py --docs 64
"""

from __future__ import annotations

import argparse
import time

import torch

from rlvr.algorithms.common import completion_logprobs
from rlvr.jsonl import read_jsonl
from rlvr.rollout.batch import encode_prompt_completion
from rlvr.algorithms.packing import encode_documents, pack_documents, packed_nll
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model
from rlvr.tasks.data import shared_file



def padded_epoch(model, encoded, batch, pad_id):
    loss_sum, slots = 0.0, 0
    for lo in range(0, len(encoded), batch):
        part = encoded[lo: lo + batch]
        logps, lengths = completion_logprobs(model, [p for p, _ in part], [c for _, c in part], pad_id)
        (-logps.sum()).backward()
        loss_sum += -logps.sum().item()
        slots += len(part) * max(len(p) + len(c) for p, c in part)
    return loss_sum, slots


def packed_epoch(model, docs, batch, pad_id, max_len, route):
    loss_sum, slots = 0.0, 0
    for lo in range(0, len(docs), batch):
        packed = pack_documents(docs[lo: lo + batch], max_len, pad_id)
        nll, _ = packed_nll(model, packed, route)
        nll.backward()
        loss_sum += nll.item()
        slots += packed.doc_ids.numel()
    return loss_sum, slots


def timed(fn):
    """(fn(), wall seconds, CPU seconds of this process). CPU time is what the speed-ups use: on a
    shared machine wall time also measures the neighbours' load."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="documents per step")
    parser.add_argument("--max-len", type=int, default=16384, help="tokens per packed row (varlen)")
    parser.add_argument("--mask-len", type=int, default=1024, help="tokens per packed row (dense mask)")
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per layout; the best is shown")
    args = parser.parse_args()
    rows = read_jsonl(shared_file("gsm8k_train.jsonl"), ["question", "answer"], "GSM8K")[: args.docs]
    tok = build_char_tokenizer()
    pairs = [(r["question"] + "\n", r["answer"]) for r in rows]
    pairs = [p for p in pairs if sum(map(len, encode_prompt_completion(tok, *p))) <= args.mask_len]
    encoded = [encode_prompt_completion(tok, p, c) for p, c in pairs]
    docs = encode_documents(tok, pairs)
    n_targets = sum(len(c) for _, c in encoded)
    real = sum(len(p) + len(c) for p, c in encoded)
    model = build_tiny_model(tok, max_position_embeddings=args.mask_len, **PRESETS[args.preset])
    pad = tok.pad_token_id
    by_length = sorted(range(len(pairs)), key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
    layouts = {
        "padded": lambda: padded_epoch(model, encoded, args.batch, pad),
        "padded-sorted": lambda: padded_epoch(model, [encoded[i] for i in by_length], args.batch, pad),
        "packed-mask": lambda: packed_epoch(model, docs, args.batch, pad, args.mask_len, "mask"),
        "packed-varlen": lambda: packed_epoch(model, docs, args.batch, pad, args.max_len, "varlen"),
    }
    print(f"{len(pairs)} GSM8K documents, {real} tokens ({n_targets} completion), batch {args.batch} docs, "
          f"model {args.preset} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M), "
          f"{torch.get_num_threads()} threads")
    times = {name: [] for name in layouts}
    losses = {}
    for _ in range(args.repeats):  # interleaved, so a load spike on a shared machine hits every layout
        for name, run in layouts.items():
            (losses[name], slots), wall, cpu = timed(run)
            model.zero_grad(set_to_none=True)
            times[name].append((cpu, wall, slots))
    print(f"{'layout':>14} {'cpu s':>7} {'wall s':>7} {'tok/cpu-s':>9} {'pad share':>9} {'speed-up':>8} "
          f"{'NLL/token':>10}")
    base = min(times["padded"])[0]
    for name in layouts:
        cpu, wall, slots = min(times[name])  # best of the repeats
        print(f"{name:>14} {cpu:>7.2f} {wall:>7.2f} {n_targets / cpu:>9.0f} {1 - real / slots:>9.2f} "
              f"{base / cpu:>8.2f} {losses[name] / n_targets:>10.6f}")


if __name__ == "__main__":
    main()
