"""Curation speed on real data: GSM8K train + test (8,792 questions), single process.

Prints, side by side: decontamination of train against test (n = 13), and near-duplicate removal with
MinHash-LSH (`method="minhash"`, the default) against the exact inverted shingle index
(`method="exact"`: every kept item sharing a shingle is compared by exact Jaccard). Same greedy rule,
so the removed sets agree up to LSH misses (probability <= 1% per pair at the threshold).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_curation.py
"""

from __future__ import annotations

import time

from rlvr.data import decontaminate, deduplicate, read_jsonl
from rlvr.tasks.data import shared_file



def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    train, test = read_jsonl(shared_file("gsm8k_train.jsonl")), read_jsonl(shared_file("gsm8k_test.jsonl"))
    res, t = timed(lambda: decontaminate(train, {"gsm8k_test": test}, text="question", n=13))
    print(f"decontaminate {len(train)} train vs {len(test)} test (n=13): {t:.2f} s, removed {len(res.removed)}")
    texts = [r["question"] for r in train + test]
    print(f"{'threshold':>9} {'shingle':>7} {'minhash s':>10} {'exact s':>8} {'ratio':>6} {'removed':>8} {'exact':>6}")
    for threshold, k in [(0.8, 5), (0.5, 5), (0.5, 3), (0.3, 3)]:
        mh, t_mh = timed(lambda: deduplicate(texts, text=lambda s: s, threshold=threshold, shingle=k))
        ref, t_ref = timed(lambda: deduplicate(texts, text=lambda s: s, threshold=threshold, shingle=k,
                                               method="exact"))
        print(f"{threshold:>9} {k:>7} {t_mh:>10.2f} {t_ref:>8.2f} {t_ref / t_mh:>6.2f} {len(mh.removed):>8} "
              f"{len(ref.removed):>6}")


if __name__ == "__main__":
    main()
