"""Checks of a built Config that span its sections: distributed settings against the rest, engines, model folders.
Each section checks its own fields (ranges, choices, the rules between them, its own files and trackers:
`rlvr.config.sections`, `monitoring`, `distributed`).

Names looked up in registries (task, losses, rewards) are checked when a run is set up
(`rlvr.train.validate`), since this layer imports nothing of rlvr above the core.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlvr.config.fields import check_section
from rlvr.config.sections import Config, ConfigError
from rlvr.config.sources import model_source


def _check_rollout_engine(cfg: Config) -> None:
    """The engine's settings against the model section (their ranges and choices are the rollout section's); its
    name, whether it is installed and what it can do are the engine registry's (`rlvr.rollout.engines.check_engine`,
    when a run or a command is set up)."""
    if cfg.rollout.vllm_lora == "adapter" and cfg.model.lora.r == 0:
        raise ConfigError("rollout.vllm_lora=adapter needs model.lora.r > 0: it loads LoRA adapters into the engine")


def _check_off_policy(cfg: Config) -> None:
    """Sampling from older weights (rollout.max_staleness, rollout.partial) against what it needs: Ray for
    staleness, the behaviour correction (algorithm.is_cap) unless algorithm.allow_uncorrected, and for partial
    rollouts a batch of plain completions."""
    a, k = cfg.algorithm, cfg.rollout.max_staleness
    if k > 0 and cfg.distributed.backend != "ray":
        raise ConfigError(f"rollout.max_staleness={k} needs distributed.backend=ray")
    uncorrected = a.is_cap == 0 and not a.allow_uncorrected
    if k > 0 and uncorrected:
        raise ConfigError(f"algorithm.is_cap=0 turns the importance correction off, but rollout.max_staleness={k} "
                          "trains on batches sampled from weights up to that many updates old; leave is_cap empty "
                          "(auto) or set it > 1, or set algorithm.allow_uncorrected=true to train uncorrected")
    if cfg.rollout.partial:
        for unmet, why in ((a.dynamic_sampling, "algorithm.dynamic_sampling: false (its extra rounds draw prompts "
                            "of their own)"), (bool(cfg.env.name), "no env (an episode's turns are not cut in "
                            "segments)"),
                           (uncorrected, "the importance correction: leave algorithm.is_cap empty (auto: 2) or set "
                            "it > 1, or set algorithm.allow_uncorrected=true (tokens carried from earlier steps were "
                            "sampled by older weights, and each is weighted by pi_old / pi of its own version)")):
            if unmet:
                raise ConfigError(f"rollout.partial: true needs {why}")


def _check_distributed(cfg: Config) -> None:
    """The settings of the distributed section that depend on other sections (its own: DistributedConfig.check)."""
    d, tp, k = cfg.distributed, cfg.rollout.tensor_parallel_size, cfg.rollout.max_staleness
    if d.colocate and k > 0:
        raise ConfigError(f"rollout.max_staleness={k} samples while the learners update, but distributed.colocate: "
                          "true runs both on the learner ranks, one after the other; set max_staleness=0 or "
                          "colocate=false")
    if d.colocate and cfg.rollout.data_parallel % d.learners:
        raise ConfigError(f"distributed.colocate: true samples each step's groups on the {d.learners} learner rank(s): "
                          f"set rollout.data_parallel to a multiple of distributed.learners (got "
                          f"{cfg.rollout.data_parallel})")
    if d.colocate and tp > 1:
        raise ConfigError(f"rollout.tensor_parallel_size={tp} splits an engine over GPUs, but distributed.colocate: "
                          "true holds one engine per learner rank on the rank's own device; set it to 1 (or "
                          "colocate=false with rollout_gpus)")
    if d.backend == "ray" and tp > 1 and tp > d.rollout_gpus:
        raise ConfigError(f"rollout.tensor_parallel_size={tp} splits each engine over {tp} GPUs: reserve them with "
                          f"distributed.rollout_gpus={tp} (now {d.rollout_gpus:g})")
    if d.shard:
        for unmet, need in [(d.learners < 2, f"distributed.learners >= 2 (got {d.learners}: one learner holds the "
                                             "whole policy, there is nothing to shard)"),
                            (cfg.model.lora.r > 0, "model.lora.r=0 (a LoRA policy is not sharded)"),
                            (cfg.algorithm.advantage == "gae", "an advantage without a value model (not gae)"),
                            (cfg.train.micro_batch_tokens > 0, "train.micro_batch_tokens=0 (every learner must "
                                                               "run as many forward passes)")]:
            if unmet:
                raise ConfigError(f"distributed.shard: true needs {need}")
    if d.mixed_precision and cfg.model.dtype == "float32":
        raise ConfigError("distributed.mixed_precision: true gathers the parameters in model.dtype; set "
                          "model.dtype=bfloat16 (or float16 on a GPU)")
    if d.learners > 1 and cfg.mini_batch_size % d.learners:
        raise ConfigError(f"train.mini_batch_size ({cfg.mini_batch_size}) must be divisible by "
                          f"distributed.learners ({d.learners})")


def _check_files(cfg: Config) -> None:
    for key, path in (("model.path", cfg.model.path), ("value.path", cfg.value.path)):
        if path and model_source(path, key).is_dir() and not (Path(path) / "config.json").is_file():
            raise ConfigError(f"{key}: no Hugging Face model folder at {path!r} (no config.json)")


def validate(cfg: Config) -> Config:
    """Raise ConfigError (one line) on values, sizes and files; return cfg (the deprecated log.tensorboard folded
    into log.report_to, else unchanged). Each section checks its own fields (`check_section`), this module what
    spans sections; names looked up in registries (task, losses, rewards) are checked when a run is set up
    (`rlvr.train.validate`)."""
    check_section(cfg)
    _check_off_policy(cfg)
    _check_distributed(cfg)
    _check_files(cfg)
    _check_rollout_engine(cfg)
    return cfg


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
