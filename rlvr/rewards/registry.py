"""Rewards by name, so that a config can pick them: `reward_from_name("r1_zero")`.

Each entry is a factory taking keyword options. A task brings its own verifier
(`task.reward_fn()`); these are the task-independent rewards and shaping terms.
"""

from __future__ import annotations

from typing import Any, Callable

from rlvr.rewards.code import CodeReward
from rlvr.rewards.countdown import CountdownReward
from rlvr.rewards.format import MathReward, r1_format_reward, r1_format_reward_strict
from rlvr.rewards.language import LanguageConsistencyReward
from rlvr.rewards.length import KimiLengthReward, OverlongPenalty, StepGated
from rlvr.sandbox import SandboxLimits


def _no_options(fn: Any, name: str) -> Callable[..., Any]:
    def factory(**opts: Any) -> Any:
        if opts:
            raise ValueError(f"reward {name!r} takes no options, got {sorted(opts)}")
        return fn

    return factory


def _kimi(start_step: int = 0, threshold: float = 1.0) -> Any:
    reward = KimiLengthReward(threshold=threshold)
    return StepGated(reward, start_step) if start_step else reward


def _code(max_workers: int | None = None, isolation: str = "auto", **limits: Any) -> CodeReward:
    return CodeReward(SandboxLimits(**limits), max_workers=max_workers, isolation=isolation)


def _reward_model(path: str, batch_size: int = 32, shift: float = 0.0, scale: float = 1.0, device: str = "cpu",
                  dtype: str = "float32") -> Any:
    """A trained Bradley-Terry reward model as a reward: RLHF. `path` is the --out folder of `rlvr reward-model`
    or the model folder in it. `device` and `dtype` place it as model.device and model.dtype place the policy
    (float32 weights, autocast)."""
    from rlvr.rewards.reward_model import RewardModelReward, load_placed_reward_model  # torch models: on use only
    from rlvr.models import load_tokenizer, model_folder
    from rlvr.models.placement import resolve_device, resolve_dtype

    try:
        placed_on = resolve_device(device)
        compute = resolve_dtype(dtype, placed_on)
    except ValueError as err:  # the checks speak of model.device / model.dtype
        raise ValueError(str(err).replace("model.", "reward_model ")) from None
    try:
        folder = model_folder(path, key="reward_model path")
    except FileNotFoundError as err:
        raise ValueError(f"reward_model path {err}") from None
    rm = load_placed_reward_model(folder, placed_on, compute)
    return RewardModelReward(rm, load_tokenizer(folder), batch_size, shift, scale)


REWARDS: dict[str, Callable[..., Any]] = {
    "math": lambda answer_key="answer": MathReward(answer_key),
    "r1_zero": lambda answer_key="answer", strict=False: MathReward(
        answer_key, format_gate="strict" if strict else "lenient"),
    "format": _no_options(r1_format_reward, "format"),
    "format_strict": _no_options(r1_format_reward_strict, "format_strict"),
    "language": LanguageConsistencyReward,
    "kimi_length": _kimi,
    "overlong": OverlongPenalty,
    "code": _code,
    "countdown": CountdownReward,
    "reward_model": _reward_model,
}


def reward_from_name(name: str, **opts: Any) -> Any:
    """Build the reward registered as `name`; unknown names and options raise ValueError."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose from {sorted(REWARDS)}")
    try:
        return REWARDS[name](**opts)
    except TypeError as e:
        raise ValueError(f"bad options for reward {name!r}: {e}") from None
