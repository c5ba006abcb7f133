"""Options of the policy-gradient family that must fit together.

Group estimators (GRPO, Dr. GRPO, DAPO, RLOO, GSPO, Kimi, max-only) need nothing here; per-token
estimators (`gae` = PPO, `reinforce_pp`) add `rlvr.algorithms.ppo.TokenAdvantages`, and `gae` a value model
(the objective's, `rlvr.algorithms.ppo.TokenObjective`).
"""

from __future__ import annotations

from rlvr.algorithms.ppo import token_advantages
from rlvr.core import TOKEN_ADVANTAGES
from rlvr.config import Config, ConfigError
from rlvr.presets import get_preset
from rlvr.rollout.engines import behaviour_cap

# Kimi k1.5's loss needs r - mean(r) of the prompt's group: these estimators centre per group (grpo and rloo also
# scale; reinforce_pp_baseline whitens after centring). raw, max_only and whitened do not.
KIMI_ADVANTAGES = ("centered", "grpo", "rloo", "reinforce_pp_baseline")

# key -> (whether the setting it belongs to is on, that setting). A key the user moved off its default (or off its
# preset's value) while its setting is off changes nothing: refused, so a run never silently ignores it.
_TOKEN = (lambda c: c.algorithm.advantage in TOKEN_ADVANTAGES, f"algorithm.advantage {' or '.join(TOKEN_ADVANTAGES)}")
_GAE = (lambda c: c.algorithm.advantage == "gae", "algorithm.advantage gae (the only one with a value model)")
_RATIO = (lambda c: c.algorithm.policy_loss in ("clipped", "gspo"), "algorithm.policy_loss clipped or gspo")
_DYNAMIC = (lambda c: c.algorithm.dynamic_sampling, "algorithm.dynamic_sampling=true")
_LORA = (lambda c: c.model.lora.r > 0, "model.lora.r > 0")
NEEDS = {
    "algorithm.gamma": _TOKEN, "algorithm.lam": _GAE, "algorithm.whiten_advantages": _TOKEN,
    "algorithm.tau": (lambda c: c.algorithm.policy_loss == "kimi", "algorithm.policy_loss kimi"),
    "algorithm.clip_low": _RATIO, "algorithm.clip_high": _RATIO,
    "algorithm.dynamic_sampling_metric": _DYNAMIC, "algorithm.dynamic_sampling_rounds": _DYNAMIC,
    "algorithm.loss_constant": (lambda c: c.algorithm.aggregation == "seq_sum_constant",
                                "algorithm.aggregation seq_sum_constant"),
    "algorithm.is_mode": (lambda c: behaviour_cap(c) > 0, "algorithm.is_cap > 1 (or empty where the sampler is not "
                                                          "the policy itself: vLLM, Ray, staleness, partial)"),
    "algorithm.allow_uncorrected": (lambda c: (c.rollout.max_staleness > 0 or c.rollout.partial)
                                    and c.algorithm.is_cap == 0,
                                    "algorithm.is_cap=0 with rollout.max_staleness > 0 or rollout.partial"),
    "algorithm.ref_refresh_every": (lambda c: c.algorithm.beta > 0 or c.algorithm.kl_reward_coef > 0,
                                    "algorithm.beta > 0 (or kl_reward_coef > 0: a reference to refresh)"),
    **{f"value.{k}": _GAE for k in ("model", "path", "coef", "clip", "lr")},
    **{f"model.lora.{k}": _LORA for k in ("alpha", "dropout", "target_modules")},
}


def _get(cfg: object, key: str) -> object:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def check_inert_settings(cfg: Config) -> None:
    """ConfigError naming the first key of `NEEDS` set away from its default (and its preset's value) while the
    setting it needs is off; then the combinations that make a setting do nothing or count twice."""
    a, defaults = cfg.algorithm, Config()
    preset = get_preset(a.preset).overrides if a.preset else {}
    for key, (on, need) in NEEDS.items():
        value = _get(cfg, key)
        if not on(cfg) and value != _get(defaults, key) and not (key in preset and value == preset[key]):
            raise ConfigError(f"{key}={value} does nothing without {need}; remove it or set {need.split(' (')[0]}")
    if a.dynamic_sampling and cfg.train.group_size < 2:
        raise ConfigError(f"algorithm.dynamic_sampling keeps groups whose rewards vary, but train.group_size="
                          f"{cfg.train.group_size} never varies (every round is wasted); raise train.group_size")
    if a.policy_loss == "kimi" and a.advantage not in TOKEN_ADVANTAGES and a.advantage not in KIMI_ADVANTAGES:
        raise ConfigError(f"algorithm.policy_loss=kimi needs r - mean(r) of each group, which algorithm.advantage="
                          f"{a.advantage} does not give; choose one of {list(KIMI_ADVANTAGES)} (the paper: centered)")
    if a.advantage in TOKEN_ADVANTAGES and a.kl_reward_coef > 0 and a.beta > 0:
        raise ConfigError(f"algorithm.kl_reward_coef={a.kl_reward_coef} and algorithm.beta={a.beta} both penalise "
                          f"the KL to the reference with advantage {a.advantage} (counted twice); set beta=0")


def check_family_options(cfg: Config) -> None:
    """ConfigError (one line) for options of the family that do not fit together (each key's own range and choices,
    and the rules within the algorithm section that need no registry, are its section's: `rlvr.config.algorithm`)."""
    a = cfg.algorithm
    token = a.advantage in TOKEN_ADVANTAGES
    if a.kl_reward_coef > 0 and not token:
        raise ConfigError(f"algorithm.kl_reward_coef puts the KL into per-token rewards; it needs advantage "
                          f"{' or '.join(TOKEN_ADVANTAGES)}, not {a.advantage!r} (use beta for KL in the loss)")
    steps = a.mu * (cfg.train.batch_size // cfg.mini_batch_size)  # optimizer steps per rollout
    if a.policy_loss == "pg" and steps > 1:  # -A log pi has no ratio pi / pi_old to correct the later steps
        raise ConfigError(f"algorithm.policy_loss=pg has no importance ratio, but algorithm.mu={a.mu} x "
                          f"train.batch_size={cfg.train.batch_size} / train.mini_batch_size={cfg.mini_batch_size} "
                          f"gives {steps} optimizer steps per rollout, all but the first off-policy; set mu=1 and "
                          "mini_batch_size=batch_size, or use policy_loss=clipped")
    if token and a.policy_loss == "kimi":
        raise ConfigError("algorithm.policy_loss 'kimi' takes sequence rewards, not per-token advantages")
    if token:
        try:
            token_advantages(cfg)
        except ValueError as err:
            raise ConfigError(f"algorithm: {err}") from None
    check_inert_settings(cfg)

