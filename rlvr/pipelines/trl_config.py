"""`RLConfig(...)`: rlvr's typed `Config`, built from keyword arguments that a TRL user writes.

    RLConfig(output_dir="runs/py", learning_rate=3e-4, num_generations=4, max_steps=50)   # TRL's names
    RLConfig("configs/sort.yaml", **{"algorithm.preset": "dapo", "train.steps": 50})       # rlvr's keys
    RLConfig(seed=1, beta=0.04)                                                           # both

A keyword is one of TRL's GRPOConfig names that mean the same thing here (`TRL_NAMES`, mapped to rlvr's keys), or an
rlvr key (dotted, as `--set` takes it; `seed`, `out_dir`, `threads` undotted). Precedence as on the command line:
rlvr's defaults < a preset < the config file < the keywords. TRL's own defaults are not applied: an argument left
out keeps rlvr's value (`rlvr train --help-config`). A name that is neither is one ConfigError line naming it.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Callable

import yaml

from rlvr.config import Config, ConfigError, config_help, load_config

LOSS_TYPES = {"grpo": "seq_mean_token_mean", "dr_grpo": "seq_sum_constant", "dapo": "token_mean",
              "bnpo": "token_mean"}  # TRL's loss_type -> algorithm.aggregation (one process: bnpo == dapo)
SCALE_REWARDS = {True: "grpo", "group": "grpo", False: "centered", "none": "centered"}  # -> algorithm.advantage


def _choice(table: dict, name: str, key: str) -> Callable[[Any], list[tuple[str, Any]]]:
    def translate(value: Any) -> list[tuple[str, Any]]:
        if value not in table:
            raise ConfigError(f"RLConfig {name}={value!r}: rlvr has no equivalent; choose from {list(table)}")
        return [(key, table[value])]
    return translate


def _same(key: str) -> Callable[[Any], list[tuple[str, Any]]]:
    return lambda value: [(key, value)]


def _report_to(value: Any) -> list[tuple[str, Any]]:
    return [("log.report_to", [] if value in ("none", None) else [value] if isinstance(value, str) else list(value))]


# TRL's GRPOConfig name -> its rlvr key(s): only where the two mean the same thing (docs/python_api.md lists them)
TRL_NAMES: dict[str, Callable[[Any], list[tuple[str, Any]]]] = {
    "output_dir": _same("out_dir"), "seed": _same("seed"), "learning_rate": _same("optim.lr"),
    "max_steps": _same("train.steps"), "num_generations": _same("train.group_size"),
    "generation_batch_size": _same("train.batch_size"), "per_device_train_batch_size": _same("train.micro_batch_size"),
    "max_completion_length": _same("rollout.max_new_tokens"), "temperature": _same("rollout.temperature"),
    "top_p": _same("rollout.top_p"), "top_k": lambda v: [("rollout.top_k", v or 0)],
    "beta": _same("algorithm.beta"), "epsilon": _same("algorithm.clip_low"),
    "epsilon_high": _same("algorithm.clip_high"), "num_iterations": _same("algorithm.mu"),
    "loss_type": _choice(LOSS_TYPES, "loss_type", "algorithm.aggregation"),
    "scale_rewards": _choice(SCALE_REWARDS, "scale_rewards", "algorithm.advantage"),
    "mask_truncated_completions": _same("algorithm.overlong_filter"),
    "max_grad_norm": _same("optim.max_grad_norm"), "weight_decay": _same("optim.weight_decay"),
    "adam_epsilon": _same("optim.eps"), "warmup_steps": _same("optim.warmup_steps"),
    "lr_scheduler_type": _same("optim.schedule"),
    "bf16": lambda v: [("model.dtype", "bfloat16")] if v else [],
    "fp16": lambda v: [("model.dtype", "float16")] if v else [],
    "gradient_checkpointing": _same("model.gradient_checkpointing"),
    "use_vllm": lambda v: [("rollout.engine", "vllm" if v else "hf")],
    "vllm_gpu_memory_utilization": _same("rollout.gpu_memory_utilization"),
    "eval_steps": _same("eval.every"), "save_steps": _same("checkpoint.every"),
    "save_total_limit": _same("checkpoint.keep"), "report_to": _report_to, "project": _same("log.project"),
    "disable_tqdm": lambda v: [("log.progress", not v)],
}
_BETAS = {"adam_beta1": 0, "adam_beta2": 1}  # halves of optim.betas


def _as_set(value: Any) -> str:
    """A Python value as `--set` text: strings as they are, anything else as YAML (1e-05, true, null, [a, b])."""
    return value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip().removesuffix(
        "\n...").strip()


def _unknown(name: str) -> ConfigError:
    keys = [line.split(" (")[0] for line in config_help()]
    close = difflib.get_close_matches(name, [*TRL_NAMES, *_BETAS, *keys], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"RLConfig: unknown argument {name!r}{hint} (TRL's names rlvr maps: docs/python_api.md; "
                       f"rlvr's keys are dotted: **{{'train.steps': 50}})")


def RLConfig(config: str | Path | None = None, **kwargs: Any) -> Config:  # noqa: N802  (named as TRL's GRPOConfig)
    """The validated Config of `config` (a YAML file or a shipped config's name; None: rlvr's defaults) with
    `kwargs` applied: TRL's names (TRL_NAMES, adam_beta1/2) or rlvr keys. Two arguments that set one key are
    refused, naming both."""
    keys = {line.split(" (")[0] for line in config_help()}
    pairs: list[tuple[str, str, Any]] = []  # (argument, rlvr key, value)
    for name, value in kwargs.items():
        if name in TRL_NAMES:
            pairs += [(name, key, v) for key, v in TRL_NAMES[name](value)]
        elif name in keys or name.split(".")[0] in ("task", "model") and "." in name:
            pairs.append((name, name, value))  # task.options.*, model.tiny_sizes.*: free-form
        elif name not in _BETAS:
            raise _unknown(name)
    if "epsilon" in kwargs and "epsilon_high" not in kwargs:  # TRL: epsilon_high defaults to epsilon
        pairs.append(("epsilon", "algorithm.clip_high", kwargs["epsilon"]))
    if betas := {name: i for name, i in _BETAS.items() if name in kwargs}:
        current = list(load_config(config, [f"{k}={_as_set(v)}" for _, k, v in pairs]).optim.betas)
        for name, i in betas.items():
            current[i] = kwargs[name]
        pairs.append(("/".join(betas), "optim.betas", current))
    seen: dict[str, str] = {}
    for name, key, _ in pairs:
        if key in seen and seen[key] != name:
            raise ConfigError(f"RLConfig: {seen[key]} and {name} both set {key}; give one")
        seen[key] = name
    return load_config(config, [f"{key}={_as_set(value)}" for _, key, value in pairs])
