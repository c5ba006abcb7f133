"""Generation engines behind one protocol (`RolloutEngine`), sampling parameters, and the helper
that turns completions into the padded tensors the trainer consumes."""

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.tensors import completions_to_tensors

__all__ = ["Completion", "HFEngine", "RolloutEngine", "SamplingParams", "completions_to_tensors"]
