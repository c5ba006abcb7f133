"""Evaluation: accuracy, unbiased pass@k, maj@k, lengths, format errors, truncation."""

from rlvr.eval.evaluate import evaluate, grade, summarize, write_jsonl
from rlvr.eval.metrics import maj_at_k, majority_correct, pass_at_k

__all__ = ["evaluate", "grade", "maj_at_k", "majority_correct", "pass_at_k", "summarize", "write_jsonl"]
