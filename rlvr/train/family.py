"""The parts of the loop that differ across the algorithm family, built from the config once.

Group estimators (GRPO, Dr. GRPO, DAPO, RLOO, GSPO, Kimi, max-only) need none of this beyond the
sampler; per-token estimators (`gae` = PPO, `reinforce_pp`) add `TokenAdvantages`, and `gae` a value
model. The loop calls the same four functions whatever the algorithm.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from rlvr.algorithms.dynamic_sampling import METRICS, RolloutSampler, overlong_filter, overlong_loss_mask
from rlvr.algorithms.ppo import TOKEN_ADVANTAGES, VALUE_MODELS, TokenAdvantages, ValueModel, build_value_model, forward_with_values
from rlvr.config import Config, ConfigError
from rlvr.rollout.base import SamplingParams
from rlvr.train.batch import policy_logprobs


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


def value_model(cfg: Config, token_adv: TokenAdvantages | None, policy: nn.Module, init: Path,
                optimizer: torch.optim.Optimizer) -> ValueModel | None:
    """The value model when the algorithm needs one (else None); its parameters join the optimizer
    as their own group (lr `value.lr`), before the scheduler is built, so the schedule covers them."""
    if token_adv is None or not token_adv.needs_value_model:
        return None
    model = build_value_model(cfg.value.model, policy, cfg.value.path or init)
    optimizer.add_param_group({"params": list(model.parameters()), "lr": cfg.value.lr or cfg.optim.lr,
                               "weight_decay": 0.0})
    return model


def rollout_sampler(cfg: Config, engine: Any, stream: Any, task: Any, reward: Any, purpose: int) -> RolloutSampler:
    r, a, G = cfg.rollout, cfg.algorithm, cfg.train.group_size
    sampling = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens)
    return RolloutSampler(engine, stream, task, reward, sampling, G, cfg.train.batch_size // G, cfg.seed, purpose,
                          a.dynamic_sampling, a.dynamic_sampling_rounds, a.dynamic_sampling_metric)


def compute_advantages(run: Any, batch: Any, completions: list, micro_batch_size: int) -> Tensor:
    """(N,) group-relative advantages, or (N, W) per token (PPO's GAE, REINFORCE++); with
    `overlong_filter`, truncated completions get 0 and leave `batch.mask` (DAPO; see
    `overlong_loss_mask` and the dynamic_sampling module for the two exceptions)."""
    if run.token_adv is None:
        advantages = run.algo.advantages(batch.rewards, run.cfg.train.group_size)
    else:
        run.token_adv.annotate(batch, run.policy, run.value_model, micro_batch_size)
        advantages = batch.advantages
    if run.cfg.algorithm.overlong_filter:
        truncated = torch.tensor([c.finish_reason == "length" for c in completions])
        advantages = overlong_filter(advantages, truncated)
        if run.cfg.algorithm.aggregation != "seq_mean_token_mean":
            batch.mask = overlong_loss_mask(batch.mask, truncated)
    return advantages


def policy_forward(policy: nn.Module, value_model: ValueModel | None, batch: Any, temperature: float
                   ) -> tuple[Tensor, Tensor, Tensor | None]:
    """log pi (b, W), entropy (b, W) and, with a value model, V (b, W)."""
    if value_model is None:
        return (*policy_logprobs(policy, batch, temperature, with_entropy=True), None)
    return forward_with_values(policy, value_model, batch, temperature, with_entropy=True)


def trainable_parameters(policy: nn.Module, value_model: ValueModel | None) -> list[nn.Parameter]:
    """What gradient clipping covers: the policy's and the value model's trainable parameters."""
    extra = list(value_model.parameters()) if value_model is not None else []
    return [p for p in [*policy.parameters(), *extra] if p.requires_grad]
