"""Decontamination: drop training prompts that share an n-gram with an evaluation item.

A training item is contaminated by an eval item when both contain the same run of `m` normalised
words, with m = min(n, len(train), len(eval)) and m >= `min_words`, or when the two normalise to the
same text. n = 13 is GPT-3's choice (Brown et al. 2020, App. C: "13-gram overlap"); taking the shorter
length when an item has fewer than n words also catches short eval questions pasted into a longer
prompt, which a fixed 13-gram test misses. `min_words` (GPT-3's lower bound, 8) is the floor of that
fallback: it stops a few common words from counting as a leak. It is at most n (by default min(8, n)),
so a smaller n is never a weaker check: every item caught with n is caught with any n' < n. An item
(training or eval) whose text has no words (empty, blank, punctuation only) could overlap nothing, so it
is refused rather than silently kept unchecked (`comparable_texts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.data.report import CurationResult, Removal, make_result
from rlvr.data.text import TextKey, comparable_texts, ngrams

DEFAULT_MIN_WORDS = 8  # GPT-3's shortest overlap that counts (Brown et al. 2020, App. C)


@dataclass
class _EvalIndex:
    """n-gram -> (eval set, eval index) for every eval item, built lazily per n-gram length."""

    items: list[tuple[str, int, tuple[str, ...]]]  # (set name, index, words)
    n: int
    min_words: int
    by_len: dict[int, dict[tuple[str, ...], tuple[str, int]]] = field(default_factory=dict)
    whole: dict[tuple[str, ...], tuple[str, int]] = field(default_factory=dict)  # exact normalised text
    short: dict[int, dict[tuple[str, ...], tuple[str, int]]] = field(default_factory=dict)  # eval < n words

    def __post_init__(self) -> None:
        for name, i, ws in self.items:
            self.whole.setdefault(ws, (name, i))
            if self.min_words <= len(ws) < self.n:
                self.short.setdefault(len(ws), {}).setdefault(ws, (name, i))

    def grams(self, m: int) -> dict[tuple[str, ...], tuple[str, int]]:
        """All m-grams of the eval items that have at least m words (first occurrence wins)."""
        if m not in self.by_len:
            index: dict[tuple[str, ...], tuple[str, int]] = {}
            for name, i, ws in self.items:
                for g in ngrams(ws, m):
                    index.setdefault(g, (name, i))
            self.by_len[m] = index
        return self.by_len[m]

    def match(self, ws: tuple[str, ...]) -> tuple[tuple[str, int], tuple[str, ...], int] | None:
        """First eval hit for a (non-empty) training word sequence: ((set, index), overlapping gram, #hits)."""
        if ws in self.whole:
            return self.whole[ws], ws, 1
        hits: list[tuple[tuple[str, int], tuple[str, ...]]] = []
        m = min(self.n, len(ws))
        if m >= self.min_words:
            index = self.grams(m)  # eval items >= m words; those shorter are in `short`
            hits += [(index[g], g) for g in ngrams(ws, m) if g in index]
        for length, index in self.short.items():
            if length < m:
                hits += [(index[g], g) for g in ngrams(ws, length) if g in index]
        if not hits:
            return None
        return hits[0][0], hits[0][1], len(hits)


def decontaminate(
    items: Sequence[Any],
    eval_sets: Mapping[str, Sequence[Any]],
    *,
    text: TextKey = "prompt",
    eval_text: TextKey | None = None,
    n: int = 13,
    min_words: int | None = None,
    where: Sequence[str] | None = None,
    eval_where: Mapping[str, Sequence[str]] | None = None,
    report_dir: str | Path | None = None,
) -> CurationResult:
    """Keep the items that share no n-gram with any eval item; report the eval item each removed one hit.

    `eval_sets` maps a name (e.g. "gsm8k_test") to its items; `text`/`eval_text` say where the text is
    (a field name or a callable). Example: `decontaminate(train_rows, {"gsm8k": test_rows},
    text="question")`. `min_words` defaults to min(8, n); one above n would switch n-gram matching off.
    `where` and `eval_where` (per set) give each item's place (`train.jsonl:7`, `read_jsonl_located`): a
    removal then carries its own (`Removal.where`) and the eval item's (`eval_where`, beside `eval_index`),
    and an item without words is refused naming it.
    """
    min_words = min(DEFAULT_MIN_WORDS, n) if min_words is None else min_words
    if n < 1 or min_words < 1:
        raise ValueError(f"n and min_words must be >= 1, got n={n}, min_words={min_words}")
    if min_words > n:
        raise ValueError(f"min_words ({min_words}) must be <= n ({n}); above n no n-gram overlap could count")
    if not eval_sets:
        raise ValueError("decontaminate needs at least one eval set")
    eval_text = text if eval_text is None else eval_text
    eval_where = eval_where or {}
    # before any work: every item, training and eval, has words to compare
    texts = comparable_texts(items, text, where)
    evals = {name: comparable_texts(es, eval_text, eval_where.get(name)) for name, es in eval_sets.items()}
    index = _EvalIndex([(name, i, ws) for name, es in evals.items() for i, (_, ws) in enumerate(es)],
                       n=n, min_words=min_words)
    removed = []
    for i, (raw, ws) in enumerate(texts):
        hit = index.match(ws)
        if hit is not None:
            (name, j), gram, count = hit
            place = {"eval_where": eval_where[name][j]} if name in eval_where else {}
            detail = {"eval_set": name, "eval_index": j, **place, "ngram": " ".join(gram), "n_hits": count}
            removed.append(Removal(i, "eval_overlap", detail, raw, where[i] if where is not None else ""))
    stats = {"n": n, "min_words": min_words, "eval_sets": {k: len(v) for k, v in eval_sets.items()}}
    result = make_result("decontaminate", list(items), removed, stats)
    if report_dir is not None:
        result.write_report(report_dir)
    return result
