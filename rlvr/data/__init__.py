"""Data curation: decontamination, de-duplication, best-of-N difficulty filtering, curriculum and
failure-rate weighted prompt sampling. Every filtering step returns a `CurationResult` (kept items and
the reason for each removal) and can write a report (`<step>.removed.jsonl` + `<step>.md`)."""

from rlvr.data.curriculum import CurriculumSampler, curriculum_buckets, curriculum_order, easy_to_hard
from rlvr.data.decontaminate import decontaminate
from rlvr.data.dedup import MinHasher, choose_bands, deduplicate, jaccard, shingles
from rlvr.data.difficulty import best_of_n_filter, difficulty_filter, solve_counts
from rlvr.data.report import CurationResult, Removal
from rlvr.data.sampler import FailureRateSampler, PromptSampler
from rlvr.data.text import get_text, ngrams, normalize_text, words
from rlvr.jsonl import read_jsonl, write_jsonl

__all__ = [
    "CurationResult", "CurriculumSampler", "FailureRateSampler", "MinHasher", "PromptSampler", "Removal",
    "best_of_n_filter", "choose_bands", "curriculum_buckets", "curriculum_order", "decontaminate",
    "deduplicate", "difficulty_filter", "easy_to_hard", "get_text", "jaccard", "ngrams", "normalize_text",
    "read_jsonl", "shingles", "solve_counts", "words", "write_jsonl",
]
