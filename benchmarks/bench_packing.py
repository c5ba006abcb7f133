"""Packed vs padded SFT on real reasoning traces: GSM8K question -> worked answer, char tokenizer.

The same documents, the same model, forward + backward of the completion-token NLL, four layouts:
  padded          batches of `--batch` documents in data order, right-padded to the longest
                  (what `rlvr.algorithms.sft` does)
  padded-sorted   the same, documents sorted by length first (HF `group_by_length`): a strong
                  baseline, but it biases every batch towards one length
  packed-mask     each batch's documents packed into rows of `--max-len` tokens, 4D block mask
  packed-posids   the same rows flattened to one, transformers derives the blocks from position ids
Prints s/epoch, completion tokens/s, the share of computed slots that are padding, and each layout's
speed-up over `padded`. Losses are printed too: they must agree (packing changes no number).

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/bench_packing.py --docs 256
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from rlvr.algorithms.common import completion_logprobs, encode_prompt_completion, read_jsonl
from rlvr.algorithms.packing import PAD_DOC, encode_documents, pack_documents, packed_nll
from rlvr.models import PRESETS, build_char_tokenizer, build_tiny_model

DATA = Path(os.environ.get("RLVR_DATA_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))


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
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--batch", type=int, default=16, help="documents per step")
    parser.add_argument("--max-len", type=int, default=2048, help="tokens per packed row")
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    args = parser.parse_args()
    rows = read_jsonl(DATA / "gsm8k_train.jsonl", ["question", "answer"], "GSM8K")[: args.docs]
    tok = build_char_tokenizer()
    pairs = [(r["question"] + "\n", r["answer"]) for r in rows]
    pairs = [p for p in pairs if sum(map(len, encode_prompt_completion(tok, *p))) <= args.max_len]
    encoded = [encode_prompt_completion(tok, p, c) for p, c in pairs]
    docs = encode_documents(tok, pairs)
    n_targets = sum(len(c) for _, c in encoded)
    real = sum(len(p) + len(c) for p, c in encoded)
    model = build_tiny_model(tok, max_position_embeddings=args.max_len, **PRESETS[args.preset])
    pad = tok.pad_token_id
    by_length = sorted(range(len(pairs)), key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
    layouts = {
        "padded": lambda: padded_epoch(model, encoded, args.batch, pad),
        "padded-sorted": lambda: padded_epoch(model, [encoded[i] for i in by_length], args.batch, pad),
        "packed-mask": lambda: packed_epoch(model, docs, args.batch, pad, args.max_len, "mask"),
        "packed-posids": lambda: packed_epoch(model, docs, args.batch, pad, args.max_len, "position_ids"),
    }
    print(f"{len(pairs)} GSM8K documents, {real} tokens ({n_targets} completion), batch {args.batch} docs, "
          f"model {args.preset} ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M), "
          f"{torch.get_num_threads()} threads")
    print(f"{'layout':>14} {'s/epoch':>8} {'tok/s':>8} {'pad share':>9} {'speed-up':>8} {'NLL/token':>10}")
    base = None
    for name, run in layouts.items():
        run()  # warm-up
        model.zero_grad(set_to_none=True)
        (loss, slots), seconds = timed(run)
        model.zero_grad(set_to_none=True)
        base = base or seconds
        print(f"{name:>14} {seconds:>8.2f} {n_targets / seconds:>8.0f} {1 - real / slots:>9.2f} "
              f"{base / seconds:>8.2f} {loss / n_targets:>10.6f}")


if __name__ == "__main__":
    main()
