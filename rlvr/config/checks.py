"""Value checks of a built Config: ranges, batch shapes, engines, distributed settings, files.

Names looked up in registries (task, losses, rewards) are checked when a run is set up
(`rlvr.train.validate`), since this layer imports nothing of rlvr above the core.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from rlvr.config.sections import (OLD_LOGPROBS, PACKING, TRACKERS, ZERO_ADVANTAGE_ROWS, Config, ConfigError,
                                  DistributedConfig, check_finite_number)
from rlvr.config.sources import model_source


# key: (low, high, low included, high included); None = unbounded. Every float must also be finite.
_RANGES = {
    "train.steps": (0, None, 0, 0), "train.batch_size": (0, None, 0, 0), "train.group_size": (0, None, 0, 0),
    "train.max_nonfinite_steps": (0, None, 0, 0), "algorithm.mu": (0, None, 0, 0),
    "task.train_size": (0, None, 0, 0), "task.eval_size": (0, None, 0, 0),
    "rollout.max_new_tokens": (0, None, 0, 0), "checkpoint.keep": (0, None, 0, 0),
    "sft.batch_size": (0, None, 0, 0), "optim.lr": (0, None, 0, 0), "optim.eps": (0, None, 0, 0),
    "sft.lr": (0, None, 0, 0), "value.lr": (0, None, 0, 0), "value.clip": (0, None, 0, 0),
    "algorithm.loss_constant": (0, None, 0, 0), "model.lora.alpha": (0, None, 0, 0),
    "rollout.top_p": (0, 1, 0, 1), "optim.min_lr_ratio": (0, 1, 1, 1), "algorithm.gamma": (0, 1, 1, 1),
    "algorithm.lam": (0, 1, 1, 1), "model.lora.dropout": (0, 1, 1, 0), "guard.max_entropy": (0, 1, 1, 1),
    "reward.max_timeout_share": (0, 1, 1, 1),
    **{key: (0, None, 1, 0) for key in (
        "sft.steps", "eval.every", "checkpoint.every", "threads", "eval.samples", "eval.temperature",
        "optim.warmup_steps", "optim.weight_decay", "optim.max_grad_norm", "algorithm.beta",
        "algorithm.clip_low", "algorithm.clip_high", "algorithm.advantage_eps", "algorithm.kl_reward_coef",
        "algorithm.tau", "algorithm.dynamic_sampling_rounds",
        "value.coef", "rollout.temperature", "rollout.top_k", "model.lora.r", "log.samples_per_eval",
        "train.mini_batch_size", "train.micro_batch_size", "train.micro_batch_tokens", "reward.timeout",
        "reward.step_timeout", "reward.max_timeouts_in_a_row",
        "reward.workers", "distributed.rollout_cpus", "distributed.rollout_gpus", "distributed.learner_cpus",
        "distributed.learner_gpus", "log.peak_tflops", "guard.max_kl", "guard.max_policy_kl")},
    "distributed.rollout_workers": (1, None, 1, 0), "distributed.learners": (1, None, 1, 0),
    "env.max_turns": (1, None, 1, 0), "env.max_tokens": (1, None, 1, 0), "env.max_observation_tokens": (1, None, 1, 0),
    "env.step_timeout": (0, None, 1, 0),
}


def _get(cfg: Any, key: str) -> Any:
    for part in key.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _in_range(value: float, lo: float, hi: float | None, lo_in: int, hi_in: int) -> bool:
    above = value > lo or (lo_in and value == lo)
    return above and (hi is None or value < hi or (hi_in and value == hi))


def _check_ranges(cfg: Config) -> None:
    for key, (lo, hi, lo_in, hi_in) in _RANGES.items():
        value = _get(cfg, key)
        if value is None:  # an optional value left empty
            continue
        try:
            check_finite_number(key, value)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if not _in_range(value, lo, hi, lo_in, hi_in):
            low, high = ("[" if lo_in else "(") + str(lo), str(hi) + ("]" if hi_in else ")")
            bound = f"{'>=' if lo_in else '>'} {lo}" if hi is None else f"in {low}, {high}"
            raise ConfigError(f"{key} must be {bound}, got {value}")
    if cfg.reward.workers and not cfg.reward.timeout:
        raise ConfigError(f"reward.workers={cfg.reward.workers} needs reward.timeout > 0 (the workers exist to stop "
                          "a hung reward)")
    if cfg.algorithm.kl_unbiased and not cfg.algorithm.beta:
        raise ConfigError("algorithm.kl_unbiased weights the loss's KL penalty, which algorithm.beta = 0 turns off; "
                          "set algorithm.beta > 0 or kl_unbiased: false")
    if cfg.rollout.temperature == 0 and not cfg.rollout.allow_zero_temperature:
        raise ConfigError("rollout.temperature=0 makes every completion of a group identical (zero advantages, "
                          "nothing to learn); use a temperature > 0 or set rollout.allow_zero_temperature=true")


def _check_batches(cfg: Config) -> None:
    t = cfg.train
    if t.batch_size % t.group_size:
        raise ConfigError(f"train.batch_size ({t.batch_size}) must be divisible by train.group_size "
                          f"({t.group_size}): every prompt needs a full group")
    if cfg.mini_batch_size < 0 or t.batch_size % cfg.mini_batch_size:
        raise ConfigError(f"train.batch_size ({t.batch_size}) must be divisible by "
                          f"train.mini_batch_size ({cfg.mini_batch_size})")
    if cfg.micro_batch_size < 0 or cfg.mini_batch_size % cfg.micro_batch_size:
        raise ConfigError(f"train.mini_batch_size ({cfg.mini_batch_size}) must be divisible by "
                          f"train.micro_batch_size ({cfg.micro_batch_size})")
    if t.old_logprobs not in OLD_LOGPROBS:
        raise ConfigError(f"train.old_logprobs: unknown {t.old_logprobs!r}; choose from {list(OLD_LOGPROBS)}")
    if t.packing not in PACKING:
        raise ConfigError(f"train.packing: unknown {t.packing!r}; choose from {list(PACKING)}")
    if t.zero_advantage_rows not in ZERO_ADVANTAGE_ROWS:
        raise ConfigError(f"train.zero_advantage_rows: unknown {t.zero_advantage_rows!r}; choose from "
                          f"{list(ZERO_ADVANTAGE_ROWS)}")
    betas = cfg.optim.betas
    if len(betas) != 2 or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas):
        raise ConfigError(f"optim.betas must be two numbers in [0, 1), got {cfg.optim.betas}")


VLLM_LORA = ("auto", "adapter", "merge")


def _check_rollout_engine(cfg: Config) -> None:
    """The engine's settings; its name, whether it is installed and what it can do are the engine registry's
    (`rlvr.rollout.engines.check_engine`, when a run or a command is set up)."""
    r = cfg.rollout
    if not 0 < r.gpu_memory_utilization <= 1:
        raise ConfigError(f"rollout.gpu_memory_utilization must be in (0, 1], got {r.gpu_memory_utilization}")
    if r.vllm_lora not in VLLM_LORA:
        raise ConfigError(f"rollout.vllm_lora: unknown mode {r.vllm_lora!r}; choose from {list(VLLM_LORA)}")
    if r.vllm_lora == "adapter" and cfg.model.lora.r == 0:
        raise ConfigError("rollout.vllm_lora=adapter needs model.lora.r > 0: it loads LoRA adapters into the engine")


WEIGHT_SYNCS = ("object_store", "collective")
# why a distributed.* key does nothing in one process (backend=none): a value other than its default is refused,
# it was silently ignored (an address never joined, GPUs never reserved)
_RAY_ONLY = {"address": "one process joins no Ray cluster", "learners": "one process runs one learner",
             "rollout_workers": "one process runs one rollout", "weight_sync": "one process has no weights to send",
             "shard": "one process holds the whole policy", "max_restarts": "one process restarts no actor"}


def _check_ray_only(d: DistributedConfig) -> None:
    for item in fields(d):
        value = getattr(d, item.name)
        if item.name != "backend" and value != item.default:
            shown = str(value).lower() if isinstance(value, bool) else value
            why = _RAY_ONLY.get(item.name, "one process reserves no Ray resources")
            raise ConfigError(f"distributed.{item.name}={shown} needs distributed.backend=ray ({why}: it would be "
                              "ignored)")


def _check_distributed(cfg: Config) -> None:
    d, k = cfg.distributed, cfg.rollout.max_staleness
    if d.backend not in ("none", "ray"):
        raise ConfigError(f"distributed.backend must be none or ray, got {d.backend!r}")
    if d.weight_sync not in WEIGHT_SYNCS:
        raise ConfigError(f"distributed.weight_sync: unknown {d.weight_sync!r}; choose from {list(WEIGHT_SYNCS)}")
    if d.backend != "ray":
        _check_ray_only(d)
    if k < 0:
        raise ConfigError(f"rollout.max_staleness must be >= 0, got {k}")
    if k > 0 and d.backend != "ray":
        raise ConfigError(f"rollout.max_staleness={k} needs distributed.backend=ray")
    if d.max_restarts < 0:  # Ray's -1 (for ever) is not offered: rlvr counts the restarts to stop a failing run
        raise ConfigError(f"distributed.max_restarts must be >= 0, got {d.max_restarts}")
    if d.address not in ("local", "auto") and head_address(d.address) is None:
        raise ConfigError(f"distributed.address must be local, auto, HOST:PORT or ray://HOST:PORT, got "
                          f"{d.address!r}")
    if cfg.algorithm.is_cap and cfg.algorithm.is_cap <= 1:
        raise ConfigError(f"algorithm.is_cap must be 0 (off) or > 1, got {cfg.algorithm.is_cap}")
    if cfg.algorithm.is_mode not in ("truncate", "mask"):
        raise ConfigError(f"algorithm.is_mode must be truncate or mask, got {cfg.algorithm.is_mode!r}")
    if d.learners > 1 and d.learner_cpus + d.learner_gpus <= 0:
        raise ConfigError("distributed.learner_cpus or learner_gpus must be > 0 with learners > 1 (they are "
                          "placed as a group)")
    if d.shard:
        for unmet, need in [(d.learners < 2, f"distributed.learners >= 2 (got {d.learners}: one learner holds the "
                                             "whole policy, there is nothing to shard)"),
                            (cfg.model.lora.r > 0, "model.lora.r=0 (a LoRA policy is not sharded)"),
                            (cfg.algorithm.advantage == "gae", "an advantage without a value model (not gae)"),
                            (cfg.train.micro_batch_tokens > 0, "train.micro_batch_tokens=0 (every learner must "
                                                               "run as many forward passes)")]:
            if unmet:
                raise ConfigError(f"distributed.shard: true needs {need}")
    if d.learners > 1 and cfg.mini_batch_size % d.learners:
        raise ConfigError(f"train.mini_batch_size ({cfg.mini_batch_size}) must be divisible by "
                          f"distributed.learners ({d.learners})")


def _check_trackers(cfg: Config) -> None:
    """log.report_to: known names, each tracker's library installed (find_spec: importing wandb or mlflow takes
    seconds); the deprecated log.tensorboard folded in, so the saved config says it one way."""
    log = cfg.log
    if log.tensorboard is not None:
        logging.getLogger("rlvr").warning("log.tensorboard is deprecated: log.report_to lists the trackers "
                                          f"(read as tensorboard {'in' if log.tensorboard else 'out of'} it)")
        wanted = [t for t in log.report_to if t != "tensorboard"]
        log.report_to, log.tensorboard = (["tensorboard", *wanted] if log.tensorboard else wanted), None
    for name in log.report_to:
        if name not in TRACKERS:
            raise ConfigError(f"log.report_to: unknown tracker {name!r}; choose from {list(TRACKERS)}")
        module, package = TRACKERS[name]
        if module is not None and importlib.util.find_spec(module) is None:
            raise ConfigError(f"log.report_to: {name} is not installed; pip install 'rlvr[{name}]' "
                              f"(or pip install {package})")
    if len(set(log.report_to)) != len(log.report_to):
        raise ConfigError(f"log.report_to names a tracker twice: {log.report_to}")


def _check_files(cfg: Config) -> None:
    if not cfg.out_dir.strip():  # Path("") is the current folder: the run would be written into it
        raise ConfigError("out_dir must not be empty")
    for key, path in (("model.path", cfg.model.path), ("value.path", cfg.value.path)):
        if path and model_source(path, key).is_dir() and not (Path(path) / "config.json").is_file():
            raise ConfigError(f"{key}: no Hugging Face model folder at {path!r} (no config.json)")
    if cfg.sft.data and not Path(cfg.sft.data).is_file():
        what = "is a folder, not a jsonl file" if Path(cfg.sft.data).is_dir() else "does not exist"
        raise ConfigError(f"sft.data: file {cfg.sft.data!r} {what}")


def validate(cfg: Config) -> Config:
    """Raise ConfigError (one line) on values, sizes and files; return cfg (the deprecated log.tensorboard
    folded into log.report_to, else unchanged). Names looked up in
    registries (task, losses, rewards) are checked when a run is set up (`rlvr.train.validate`)."""
    _check_ranges(cfg)
    _check_batches(cfg)
    _check_distributed(cfg)
    _check_files(cfg)
    _check_rollout_engine(cfg)
    _check_trackers(cfg)
    return cfg


def head_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray head given as HOST:PORT or ray://HOST:PORT (IPv6 in brackets); None otherwise
    (`local`, `auto`, anything malformed). One parse for the config check and the reachability check."""
    scheme, _, rest = address.rpartition("://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or scheme not in ("", "ray"):
        return None
    return host.strip("[]"), int(port)


def check_out_dir(out_dir: str | Path, key: str = "out_dir") -> None:
    """out_dir is a folder (or can become one) that this process may write in; errors name `key`."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}: {str(out_dir)!r} is an existing file, not a folder")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{key}: {str(existing)!r} (a parent of {str(out_dir)!r}) is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}: {str(existing)!r} is not writable")
