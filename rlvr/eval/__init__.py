"""Evaluation: accuracy, unbiased pass@k, maj@k, lengths, format errors, truncation."""

from rlvr.eval.evaluate import answer_votes, evaluate, grade, summarize
from rlvr.eval.metrics import default_ks, maj_at_k, majority_correct, pass_at_k, vote_keys

__all__ = ["answer_votes", "default_ks", "evaluate", "grade", "maj_at_k", "majority_correct", "pass_at_k", "summarize",
           "vote_keys"]
