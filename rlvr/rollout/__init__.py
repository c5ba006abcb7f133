"""Generation engines behind one protocol (`RolloutEngine`), sampling parameters, and the one layout
of prompt + completion tensors the learner consumes (`rlvr.rollout.batch`)."""

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.hf_engine import HFEngine

__all__ = ["Completion", "HFEngine", "RolloutEngine", "SamplingParams"]
