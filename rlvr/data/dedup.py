"""De-duplication: exact (after normalisation), then near-duplicates by word-shingle Jaccard similarity.

Near-duplicates are found with MinHash (Broder 1997) and locality-sensitive hashing over bands of the
signature, then every candidate pair is checked with the exact Jaccard similarity of the shingle sets,
so nothing is removed on an estimate: no false positives; a pair at the threshold is missed with
probability <= 1 - `recall` (the band/row split is chosen for that), less above it. Defaults follow
Lee et al. 2022 ("Deduplicating Training Data Makes Language Models Better": 5-gram shingles,
Jaccard >= 0.8).

Items are visited once, in order, and one is dropped when it duplicates an earlier *kept* item (first
by normalised text, then by similarity), so every removal names a kept item, the kept set never holds
two items above the threshold, and the first occurrence always survives. An item whose text has no words
(empty, blank, punctuation only) is refused, not called a duplicate of the other such items
(`comparable_texts`).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlvr.data.report import CurationResult, Removal, make_result
from rlvr.data.text import TextKey, comparable_texts, ngrams, normalize_text

_PRIME = (1 << 31) - 1  # Mersenne prime: a * x + b < 2**62 fits in uint64 for a, b, x < 2**31


def shingles(text: str, k: int, *, normalized: bool = False) -> frozenset[str]:
    """The set of k-word shingles of the normalised text; a text shorter than k is one shingle."""
    ws = (text if normalized else normalize_text(text)).split()
    if len(ws) < k:
        return frozenset([" ".join(ws)]) if ws else frozenset()
    return frozenset(" ".join(g) for g in ngrams(ws, k))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def choose_bands(num_perm: int, threshold: float, recall: float = 0.99) -> tuple[int, int]:
    """(bands, rows): the most rows per band (fewest spurious candidates) whose LSH still flags a pair
    of similarity `threshold` with probability >= `recall`: 1 - (1 - t**r)**b (Leskovec et al.,
    Mining of Massive Datasets, ch. 3.4)."""
    for rows in range(num_perm, 0, -1):
        bands = num_perm // rows
        if 1 - (1 - threshold**rows) ** bands >= recall:
            return bands, rows
    return num_perm, 1


class MinHasher:
    """`num_perm` universal hashes h(x) = (a x + b) mod p; a signature is the min of each over a set."""

    def __init__(self, num_perm: int = 128, seed: int = 0):
        if num_perm < 1:
            raise ValueError(f"num_perm must be >= 1, got {num_perm}")
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME, size=num_perm, dtype=np.uint64)  # (P,)
        self.b = rng.integers(0, _PRIME, size=num_perm, dtype=np.uint64)  # (P,)

    def signature(self, shingle_set: frozenset[str]) -> np.ndarray:
        # crc32 rather than hash(): stable across processes, so results and reports are reproducible
        x = np.fromiter((zlib.crc32(s.encode()) % _PRIME for s in shingle_set), dtype=np.uint64)  # (S,)
        return ((x[:, None] * self.a + self.b) % _PRIME).min(axis=0)  # (P,)


class _MinHashIndex:
    """LSH buckets over the kept items' MinHash signatures; candidates are checked with exact Jaccard."""

    def __init__(self, num_perm: int, seed: int, bands: int, rows: int):
        self.bands, self.rows = bands, rows
        self.hasher = MinHasher(num_perm, seed)
        self.buckets: list[dict[bytes, list[int]]] = [{} for _ in range(bands)]
        self.sets: dict[int, frozenset[str]] = {}

    def match(self, s: frozenset[str]) -> tuple[float, int, list[bytes]]:
        """(best Jaccard, kept index or -1, band keys) of a shingle set against the kept items."""
        sig = self.hasher.signature(s)
        keys = [sig[b * self.rows : (b + 1) * self.rows].tobytes() for b in range(self.bands)]
        candidates = {j for b, key in enumerate(keys) for j in self.buckets[b].get(key, ())}
        best = max(((jaccard(s, self.sets[j]), j) for j in candidates), default=(0.0, -1))
        return best[0], best[1], keys

    def add(self, i: int, s: frozenset[str], keys: list[bytes]) -> None:
        self.sets[i] = s
        for b, key in enumerate(keys):
            self.buckets[b].setdefault(key, []).append(i)


class _ExactIndex:
    """Inverted index shingle -> kept items: every kept item sharing a shingle is a candidate. Exact, and
    fast while shingles are rare (long shingles); common short shingles make candidate sets large."""

    def __init__(self):
        self.postings: dict[str, list[int]] = {}
        self.sets: dict[int, frozenset[str]] = {}

    def match(self, s: frozenset[str]) -> tuple[float, int, list]:
        candidates = {j for g in s for j in self.postings.get(g, ())}
        best = max(((jaccard(s, self.sets[j]), j) for j in candidates), default=(0.0, -1))
        return best[0], best[1], []

    def add(self, i: int, s: frozenset[str], keys: list) -> None:
        self.sets[i] = s
        for g in s:
            self.postings.setdefault(g, []).append(i)


def deduplicate(
    items: Sequence[Any],
    *,
    text: TextKey = "prompt",
    near: bool = True,
    method: str = "minhash",
    threshold: float = 0.8,
    shingle: int = 5,
    num_perm: int = 128,
    recall: float = 0.99,
    seed: int = 0,
    where: Sequence[str] | None = None,
    report_dir: str | Path | None = None,
) -> CurationResult:
    """Drop exact duplicates (same normalised text) and, if `near`, items whose `shingle`-word shingle
    Jaccard similarity to an earlier kept item is >= `threshold`. Each removal names the kept item it
    duplicates (`duplicate_of`, its index; and the similarity). `method="exact"` finds candidates with an
    inverted shingle index instead of MinHash-LSH: no misses, but slower when short shingles are common (see
    benchmarks/bench_curation.py). `where` gives each item's place (`train.jsonl:7`, `read_jsonl_located`):
    a removal then also carries its own (`Removal.where`) and the kept item's (`duplicate_of_where`), and an
    item without words is refused naming it."""
    if method not in ("minhash", "exact"):
        raise ValueError(f"unknown dedup method {method!r}; choose from ['exact', 'minhash']")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if shingle < 1:
        raise ValueError(f"shingle must be >= 1, got {shingle}")
    if not 0 < recall < 1:
        raise ValueError(f"recall must be in (0, 1), got {recall}")
    bands, rows = choose_bands(num_perm, threshold, recall)
    index = _MinHashIndex(num_perm, seed, bands, rows) if method == "minhash" else _ExactIndex()
    texts = comparable_texts(items, text, where)  # before any work: an item without words is refused
    kept_exact: dict[str, int] = {}  # normalised text -> the kept item that has it
    removed = []

    def drop(i: int, reason: str, j: int, **evidence: float) -> None:
        detail = {"duplicate_of": j, **({"duplicate_of_where": where[j]} if where is not None else {}), **evidence}
        removed.append(Removal(i, reason, detail, texts[i][0], where[i] if where is not None else ""))

    for i, (_, ws) in enumerate(texts):
        key = " ".join(ws)  # the normalised text
        if key in kept_exact:
            drop(i, "exact_duplicate", kept_exact[key])
            continue
        s = shingles(key, shingle, normalized=True) if near else frozenset()
        if s:
            sim, j, keys = index.match(s)
            if sim >= threshold:
                drop(i, "near_duplicate", j, jaccard=round(sim, 4))
                continue
            index.add(i, s, keys)
        kept_exact[key] = i
    stats = {"near": near, "method": method, "threshold": threshold, "shingle": shingle}
    if method == "minhash":
        stats.update(num_perm=num_perm, bands=bands, rows=rows)
    result = make_result("deduplicate", list(items), removed, stats)
    if report_dir is not None:
        result.write_report(report_dir)
    return result
