"""Shared helpers of the offline-trainer tests: tiny models and synthetic sorting preference data."""

from __future__ import annotations

import random

from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.tasks import get_task

SORT_ALPHABET = "0123456789 sort="  # all the sorting task needs: a small vocabulary trains fast
TEST_SIZES = dict(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128)


def tokenizer():
    return build_char_tokenizer(SORT_ALPHABET)


def tiny_model(tok, arch: str = "qwen2", seed: int = 0):
    return build_tiny_model(tok, arch=arch, seed=seed, **TEST_SIZES)


def sort_pairs(n: int, seed: int, held_out: bool = False, length: int = 4) -> list[dict[str, str]]:
    """Preference pairs from the sorting task: chosen = sorted digits, rejected = a wrong order.
    Prompts whose digits are all equal (no wrong order exists) are skipped."""
    task = get_task("sort", length=length)
    examples = task.eval_examples(n, seed) if held_out else task.train_examples(n, seed)
    rng = random.Random(seed)
    pairs = []
    for ex in examples:
        digits = list(ex.fields["digits"])
        if len(set(digits)) == 1:
            continue
        wrong = digits[:]
        while wrong == sorted(digits):
            rng.shuffle(wrong)
        pairs.append({"prompt": ex.prompt, "chosen": ex.answer, "rejected": " ".join(map(str, wrong))})
    return pairs
