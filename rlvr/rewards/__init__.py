"""Verifiable rewards: text in, score out. See docs/rewards_tasks_eval.md."""

from rlvr.rewards.base import (BatchContext, BatchRewardFn, RewardBatch, RewardConfigError, RewardFn,
                               RewardOutput, bounded)
from rlvr.rewards.breaker import RewardTimingOut, TimeoutLimits
from rlvr.rewards.code import CodeReward, extract_code, pass_fraction
from rlvr.rewards.combine import CombinedReward, TRLReward
from rlvr.rewards.countdown import CountdownReward, countdown_equal, evaluate_countdown
from rlvr.rewards.extract import extract_answer, extract_choice, extract_last_number, last_boxed
from rlvr.rewards.format import MathReward, format_ok, r1_format_reward, r1_format_reward_strict
from rlvr.rewards.language import LanguageConsistencyReward, script_share
from rlvr.rewards.length import (KimiLengthReward, OverlongPenalty, StepGated, dapo_overlong_penalty,
                                 kimi_length_reward)
from rlvr.rewards.math_grader import MathGrader, get_grader, math_equal, math_equal_batch
from rlvr.rewards.registry import REWARDS, reward_from_name
from rlvr.rewards.safe import SafeReward

__all__ = [
    "BatchContext", "BatchRewardFn", "CodeReward", "CombinedReward", "CountdownReward",
    "KimiLengthReward", "LanguageConsistencyReward", "MathGrader", "MathReward", "OverlongPenalty",
    "REWARDS", "RewardBatch", "RewardConfigError", "RewardFn", "RewardOutput", "RewardTimingOut", "SafeReward",
    "StepGated", "TimeoutLimits", "TRLReward", "countdown_equal",
    "dapo_overlong_penalty", "evaluate_countdown", "extract_answer", "extract_choice", "extract_code",
    "extract_last_number", "format_ok", "get_grader", "kimi_length_reward", "last_boxed", "math_equal",
    "math_equal_batch", "r1_format_reward", "r1_format_reward_strict", "reward_from_name",
    "script_share", "pass_fraction", "bounded",
]
