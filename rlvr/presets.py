"""Named algorithm presets: each method of the literature as a set of config overrides of one loop.

    algorithm:
      preset: dapo          # then any key below overrides the preset
      clip_high: 0.3

A preset only sets config keys; precedence is defaults < a preset the file names < config file < a preset
named by `--set algorithm.preset=X` < other `--set` keys (rlvr.config.load). Every
preset lists what it changes against the defaults and where that comes from (`rlvr presets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Preset:
    overrides: dict[str, Any]  # dotted config keys -> values
    summary: str  # one sentence: what this method changes
    citation: str


_NO_KL = {"algorithm.beta": 0.0}

PRESETS: dict[str, Preset] = {
    "grpo": Preset(
        {"algorithm.advantage": "grpo", "algorithm.policy_loss": "clipped",
         "algorithm.aggregation": "seq_mean_token_mean", "algorithm.clip_low": 0.2, "algorithm.clip_high": 0.2,
         "algorithm.beta": 0.04, "algorithm.kl_estimator": "k3"},
        "Group z-scored rewards as advantages, PPO clipping, each sequence's loss divided by its own length, "
        "k3 KL to the reference in the loss (beta = 0.04).",
        "Shao et al. 2024, DeepSeekMath, sec. 4.1, eq. 3; beta = 0.04 from sec. 4.2"),
    "dr_grpo": Preset(
        {"algorithm.advantage": "centered", "algorithm.aggregation": "seq_sum_constant",
         "algorithm.loss_constant": None, **_NO_KL},
        "GRPO without the std division and with a constant normaliser (the generation budget) instead of "
        "each sequence's length, removing the question-difficulty and length biases.",
        "Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO)"),
    "dapo": Preset(
        {"algorithm.advantage": "grpo", "algorithm.clip_low": 0.2, "algorithm.clip_high": 0.28,
         "algorithm.aggregation": "token_mean", "algorithm.dynamic_sampling": True,
         "algorithm.dynamic_sampling_metric": "accuracy", "algorithm.overlong_filter": True, **_NO_KL},
        "Clip-higher (0.2 / 0.28), token-mean loss, dynamic sampling that keeps groups whose accuracy is strictly "
        "between 0 and 1, truncated completions removed from the loss mask, no KL.",
        "Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale, sec. 3.1-3.4"),
    "rloo": Preset(
        {"algorithm.advantage": "rloo", "algorithm.policy_loss": "pg", "algorithm.aggregation": "seq_mean_token_sum",
         "algorithm.mu": 1, "train.mini_batch_size": 0, **_NO_KL},
        "Leave-one-out baseline and plain REINFORCE on the whole completion (sum of its token log-probs), "
        "one update per batch (pg has no importance ratio: one optimizer step per rollout, mini batch = batch).",
        "Kool et al. 2019, Buy 4 REINFORCE Samples, Get a Baseline for Free; Ahmadian et al. 2024, Back to Basics"),
    "reinforce_pp": Preset(
        {"algorithm.advantage": "reinforce_pp", "algorithm.policy_loss": "clipped",
         "algorithm.aggregation": "token_mean", "algorithm.kl_reward_coef": 0.01, "algorithm.kl_estimator": "k1",
         "algorithm.whiten_advantages": True, **_NO_KL},
        "No critic and no group baseline: per-token return-to-go of the score minus k1 KL penalties, "
        "normalised over the whole batch, PPO clipping.",
        "Hu et al. 2025, REINFORCE++, eq. 8-10 (the KL weight 0.01 is this library's choice)"),
    "gspo": Preset(
        {"algorithm.advantage": "grpo", "algorithm.policy_loss": "gspo", "algorithm.clip_low": 3e-4,
         "algorithm.clip_high": 4e-4, "algorithm.aggregation": "seq_mean_token_mean", **_NO_KL},
        "One length-normalised importance ratio per sequence, clipped to [1 - 3e-4, 1 + 4e-4], instead of "
        "per-token ratios.",
        "Zheng et al. 2025, Group Sequence Policy Optimization (GSPO); clip ranges from its experiments"),
    "max_only": Preset(
        {"algorithm.advantage": "max_only", **_NO_KL},
        "Only the best completion of each group gets its reward as delta, the others 0: learn from the best "
        "of n, as rejection-sampling fine-tuning does.",
        "Dong et al. 2023, RAFT; Stanford CS336 (2025) lecture on policy gradient, the max-only delta"),
    "kimi": Preset(
        {"algorithm.advantage": "centered", "algorithm.policy_loss": "kimi", "algorithm.tau": 0.1,
         "algorithm.aggregation": "seq_mean_token_sum", **_NO_KL},
        "Kimi's online mirror descent: mean-reward baseline without std, a squared log-ratio regulariser "
        "(tau) instead of clipping and KL, loss summed over each completion.",
        "Kimi Team 2025, Kimi k1.5, sec. 2.3.2 (tau = 0.1 is this library's choice)"),
    "ppo": Preset(
        {"algorithm.advantage": "gae", "algorithm.policy_loss": "clipped", "algorithm.aggregation": "token_mean",
         "algorithm.clip_low": 0.2, "algorithm.clip_high": 0.2, "algorithm.gamma": 1.0, "algorithm.lam": 0.95,
         "algorithm.whiten_advantages": True, "algorithm.kl_reward_coef": 0.02, "algorithm.kl_estimator": "k1",
         "algorithm.mu": 4, "value.model": "separate", "value.coef": 0.1, "value.clip": 0.2, **_NO_KL},
        "A learned value model and GAE per token, k1 KL to the reference subtracted from the reward on every "
        "token (score on the last), whitened advantages, clipped value loss, 4 epochs per batch.",
        "Schulman et al. 2017 (PPO), 2016 (GAE); Ziegler et al. 2019; Ouyang et al. 2022 (InstructGPT, beta = "
        "0.02); value/epoch defaults as TRL's PPOTrainer"),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown algorithm preset {name!r}; choose from {sorted(PRESETS)}")
    return PRESETS[name]


def preset_overrides(name: str) -> list[str]:
    """The preset as `key=value` strings in `--set` syntax (YAML scalars; None is `null`)."""
    return [f"{key}={_yaml_scalar(value)}" for key, value in get_preset(name).overrides.items()]


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def nested(overrides: dict[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, merging nested mappings key by key (a file's section does not erase the
    preset's other keys of that section)."""
    out = dict(base)
    for key, value in top.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def format_presets() -> str:
    """A readable table of every preset: name, what it changes, the keys it sets, its source."""
    lines = []
    for name, p in PRESETS.items():
        keys = ", ".join(f"{k.split('.', 1)[1] if k.startswith('algorithm.') else k}={v}" for k, v in p.overrides.items())
        lines += [f"{name}: {p.summary}", f"    sets: {keys}", f"    source: {p.citation}"]
    return "\n".join(lines)
