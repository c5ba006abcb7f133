"""Data curation: decontamination, de-duplication, best-of-N difficulty filtering, curriculum and
failure-rate weighted prompt sampling. Every filtering step returns a `CurationResult` (kept items and
the reason for each removal) and can write a report (`<step>.removed.jsonl` + `<step>.md`).

The names of the modules that import numpy or torch are imported when first used (PEP 562), so importing one
module of the package (`rlvr.data.text`, for `rlvr data --help`) does not import the others and torch with them.
"""

from rlvr.data.decontaminate import decontaminate
from rlvr.data.report import CurationResult, Removal
from rlvr.data.text import get_text, ngrams, normalize_text, words
from rlvr.jsonl import read_jsonl, write_jsonl
from rlvr.lazy import lazy_names

# the modules that import numpy or torch, loaded on first use (the ones above are plain Python)
_MODULES = {
    "rlvr.data.curriculum": ("CurriculumSampler", "curriculum_buckets", "curriculum_order", "easy_to_hard"),
    "rlvr.data.dedup": ("MinHasher", "choose_bands", "deduplicate", "jaccard", "shingles"),
    "rlvr.data.difficulty": ("best_of_n_filter", "difficulty_filter", "solve_counts"),
    "rlvr.data.sampler": ("FailureRateSampler", "PromptSampler"),
}
__getattr__, _lazy = lazy_names(__name__, _MODULES)
__all__ = sorted([*_lazy, "decontaminate", "CurationResult", "Removal", "get_text", "ngrams", "normalize_text",
                  "words", "write_jsonl", "read_jsonl"])
