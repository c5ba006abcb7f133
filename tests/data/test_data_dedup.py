import random

import pytest
from hypothesis import given, settings, strategies as st

from rlvr.data.dedup import MinHasher, choose_bands, deduplicate, jaccard, shingles


def greedy_exact(texts: list[str], threshold: float, k: int) -> set[int]:
    """Reference: visit in order, drop an item whose shingle Jaccard with a kept item reaches the threshold
    (an exact duplicate has J = 1, so both passes of `deduplicate` are covered)."""
    kept: list[int] = []
    removed = set()
    for i, t in enumerate(texts):
        s = shingles(t, k)
        if s and any(jaccard(s, shingles(texts[j], k)) >= threshold for j in kept):
            removed.add(i)
        else:
            kept.append(i)
    return removed


def test_by_hand_exact_and_near():
    texts = [
        "Tom has 3 apples and buys 4 more apples at the store today.",
        "tom has 3 apples, and buys 4 more apples at the store today",  # exact after normalisation
        "Tom has 3 apples and buys 4 more apples at the store today now.",  # one word added
        "A completely different question about trains and their speeds.",
    ]
    res = deduplicate(texts, text=lambda s: s, threshold=0.8, shingle=3)
    assert res.kept_indices == [0, 3]
    assert [(r.index, r.reason, r.detail["duplicate_of"]) for r in res.removed] == [
        (1, "exact_duplicate", 0), (2, "near_duplicate", 0)]
    # item 0 has 13 words (11 3-shingles); item 2 adds one word (12 shingles, 11 shared): J = 11 / 12
    assert res.removed[1].detail["jaccard"] == round(11 / 12, 4)
    assert deduplicate(texts, text=lambda s: s, near=False).kept_indices == [0, 2, 3]


def test_jaccard_and_shingles_by_hand():
    assert shingles("a b c d", 2) == {"a b", "b c", "c d"}
    assert shingles("a b", 5) == {"a b"} and shingles("", 3) == frozenset()
    assert jaccard(frozenset("ab"), frozenset("bc")) == 1 / 3


def test_minhash_estimates_jaccard():
    a = shingles(" ".join(f"w{i}" for i in range(200)), 1)
    b = shingles(" ".join(f"w{i}" for i in range(100, 300)), 1)  # J = 100 / 300
    h = MinHasher(num_perm=512, seed=1)
    est = float((h.signature(a) == h.signature(b)).mean())
    assert abs(est - jaccard(a, b)) < 4 * (1 / 3 * 2 / 3 / 512) ** 0.5  # 4 binomial standard deviations


def test_choose_bands_meets_recall():
    for threshold in (0.3, 0.5, 0.8, 0.9):
        b, r = choose_bands(128, threshold, recall=0.99)
        assert b * r <= 128 and 1 - (1 - threshold**r) ** b >= 0.99
        if r < 128:  # one more row per band would miss the recall target
            b2 = 128 // (r + 1)
            assert 1 - (1 - threshold ** (r + 1)) ** b2 < 0.99


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcde"), min_size=1, max_size=9), min_size=1, max_size=12),
       st.sampled_from([0.5, 0.7, 1.0]), st.sampled_from(["minhash", "exact"]))
def test_kept_set_has_no_pair_above_threshold_and_no_false_removals(items, threshold, method):
    texts = [" ".join(x) for x in items]
    res = deduplicate(texts, text=lambda s: s, threshold=threshold, shingle=2, method=method)
    if method == "exact":
        assert {r.index for r in res.removed} == greedy_exact(texts, threshold, 2)
    kept = [shingles(texts[i], 2) for i in res.kept_indices]
    for r in res.removed:  # every removal is justified by an earlier kept item
        j = r.detail["duplicate_of"]
        assert j < r.index and j in res.kept_indices
        if r.reason == "near_duplicate":
            assert jaccard(shingles(texts[r.index], 2), shingles(texts[j], 2)) >= threshold
    # LSH can miss a pair only with small probability; on these tiny sets with high-recall bands it must not
    for x in range(len(kept)):
        for y in range(x):
            assert jaccard(kept[x], kept[y]) < threshold or not kept[x]


def test_matches_exact_reference_on_planted_near_duplicates():
    rng = random.Random(0)
    vocab = [f"v{i}" for i in range(400)]
    base = [[rng.choice(vocab) for _ in range(30)] for _ in range(300)]
    texts = [" ".join(b) for b in base]
    for _ in range(60):  # near copies: one word changed at the end (5-shingle J = 25 / 27 > 0.8)
        src = rng.randrange(len(base))
        texts.append(" ".join(base[src][:-1] + ["changed"]))
    expected = greedy_exact(texts, 0.8, 5)
    assert len(expected) == 60
    for method in ("minhash", "exact"):
        res = deduplicate(texts, text=lambda s: s, threshold=0.8, shingle=5, method=method)
        assert {r.index for r in res.removed} == expected


def test_bad_input():
    with pytest.raises(ValueError, match="threshold"):
        deduplicate(["a"], text=lambda s: s, threshold=0)
    with pytest.raises(ValueError, match="shingle"):
        deduplicate(["a"], text=lambda s: s, shingle=0)
    with pytest.raises(ValueError, match="unknown dedup method 'lsh'"):
        deduplicate(["a"], text=lambda s: s, method="lsh")
    with pytest.raises(ValueError, match="num_perm"):
        MinHasher(0)


def test_items_without_words_are_refused_not_called_duplicates():
    """Two blank items were one kept, the other an "exact_duplicate" of it."""
    with pytest.raises(ValueError, match=r"^item 1: the text has no words \(empty, blank or punctuation only\): "
                                         r"nothing to compare; 2 more rows have none \(item 2, item 4\)"):
        deduplicate(["a b", "", " ", "c d", "..."], text=lambda s: s)
    with pytest.raises(ValueError, match=r"^t.jsonl:3: field 'q' has no words"):
        deduplicate([{"q": "a"}, {"q": ""}], text="q", where=["t.jsonl:1", "t.jsonl:3"])
