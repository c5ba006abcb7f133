"""Evaluation statistics over n samples per prompt.

pass@k is the unbiased estimator of Chen et al. 2021 (Codex, eq. 1): with c correct out of n
samples, pass@k = 1 - C(n-c, k) / C(n, k), computed as a product to stay exact in floating point
for large n. maj@k (self-consistency, Wang et al. 2023) votes over the stated answers of k samples;
answers the task finds equal are one vote (Minerva, Lewkowycz et al. 2022), see `vote_keys`.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Hashable, Sequence, TypeVar

A = TypeVar("A")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    fail = 1.0
    for i in range(n - c + 1, n + 1):  # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
        fail *= 1.0 - k / i
    return 1.0 - fail


def default_ks(n: int) -> list[int]:
    """The k values of pass@k and maj@k when none are asked, for n samples per prompt: 1, the powers of 2
    below n, and n (n = 6: [1, 2, 4, 6])."""
    if n < 1:
        raise ValueError(f"need n >= 1 samples per prompt, got {n}")
    return sorted({2**j for j in range(n.bit_length())} | {n})


def vote_keys(keys: Sequence[Hashable | None], answers: Sequence[A],
              same: Callable[[list[tuple[A, A]]], list[bool]] | None = None) -> list[Hashable | None]:
    """One prompt's votes: each sample's key, or the key of the group it joins. Samples with one key are one
    vote; a sample with a key not seen before joins the first group whose representative's answer `same` finds
    equal to its own (`same` maps (answer, representative) pairs to flags), else it starts a group of its own.
    A group's representative is its first sample, so the vote does not depend on the order beyond that. None
    (nothing stated) stays None; without `same`, the votes are the keys."""
    votes: dict[Hashable, Hashable] = {}  # key -> the key of its group
    reps: dict[Hashable, A] = {}  # a group's key -> its first answer
    for key, answer in zip(keys, answers):
        if key is None or key in votes:
            continue
        found = same([(answer, r) for r in reps.values()]) if same is not None and reps else []
        votes[key] = next((k for k, ok in zip(reps, found) if ok), key)
        if votes[key] == key:
            reps[key] = answer
    return [None if k is None else votes[k] for k in keys]


def majority_correct(keys: Sequence[Hashable | None], correct: Sequence[bool]) -> bool:
    """Whether the most frequent stated answer (first seen wins a tie; None = nothing stated,
    never voted for) is a correct one."""
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(k for k in keys if k is not None and votes[k] == top)
    return any(ok for k, ok in zip(keys, correct) if k == winner)


def maj_at_k(keys: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """maj@k of one prompt's n samples: the mean over the n // k disjoint blocks of k samples."""
    if len(keys) != len(correct):
        raise ValueError(f"{len(keys)} answer keys but {len(correct)} correctness flags")
    if not 1 <= k <= len(keys):
        raise ValueError(f"need 1 <= k <= n = {len(keys)}, got k={k}")
    blocks = range(0, len(keys) - k + 1, k)
    return sum(majority_correct(keys[s:s + k], correct[s:s + k]) for s in blocks) / len(blocks)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
