"""Options of the policy-gradient family that must fit together, and the per-token estimator settings.

Group estimators (GRPO, Dr. GRPO, DAPO, RLOO, GSPO, Kimi, max-only) need nothing here; per-token
estimators (`gae` = PPO, `reinforce_pp`) add `TokenAdvantages`, and `gae` a value model (the Learner's).
"""

from __future__ import annotations

from pathlib import Path

from rlvr.algorithms.dynamic_sampling import METRICS
from rlvr.algorithms.ppo import TOKEN_ADVANTAGES, VALUE_MODELS, TokenAdvantages
from rlvr.config import Config, ConfigError


def check_family_options(cfg: Config) -> None:
    """ConfigError (one line) for options of the family that do not fit together."""
    a, v = cfg.algorithm, cfg.value
    token = a.advantage in TOKEN_ADVANTAGES
    if a.kl_reward_coef < 0:
        raise ConfigError(f"algorithm.kl_reward_coef must be >= 0, got {a.kl_reward_coef}")
    if a.kl_reward_coef > 0 and not token:
        raise ConfigError(f"algorithm.kl_reward_coef puts the KL into per-token rewards; it needs advantage "
                          f"{' or '.join(TOKEN_ADVANTAGES)}, not {a.advantage!r} (use beta for KL in the loss)")
    if token and a.policy_loss == "kimi":
        raise ConfigError("algorithm.policy_loss 'kimi' takes sequence rewards, not per-token advantages")
    if token:
        try:
            token_advantages(cfg)
        except ValueError as err:
            raise ConfigError(f"algorithm: {err}") from None
    if a.dynamic_sampling_rounds < 0 or a.dynamic_sampling_metric not in METRICS:
        raise ConfigError(f"algorithm.dynamic_sampling_rounds must be >= 0 and dynamic_sampling_metric one of "
                          f"{list(METRICS)}; got {a.dynamic_sampling_rounds}, {a.dynamic_sampling_metric!r}")
    if v.model not in VALUE_MODELS:
        raise ConfigError(f"value.model: unknown name {v.model!r}; choose from {list(VALUE_MODELS)}")
    if v.path and not (Path(v.path) / "config.json").is_file():
        raise ConfigError(f"value.path: no Hugging Face model folder at {v.path!r} (no config.json)")
    if v.lr is not None and not v.lr > 0:
        raise ConfigError(f"value.lr must be > 0, got {v.lr}")


def token_advantages(cfg: Config) -> TokenAdvantages | None:
    a = cfg.algorithm
    if a.advantage not in TOKEN_ADVANTAGES:
        return None
    return TokenAdvantages(a.advantage, a.gamma, a.lam, a.whiten_advantages, a.kl_reward_coef, a.kl_estimator,
                           cfg.value.coef, cfg.value.clip)
