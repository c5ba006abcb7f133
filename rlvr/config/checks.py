"""Checks of a built Config that span its sections: distributed settings against the rest, engines, files.
Each section checks its own fields (ranges, choices, the rules between them: `rlvr.config.sections`).

Names looked up in registries (task, losses, rewards) are checked when a run is set up
(`rlvr.train.validate`), since this layer imports nothing of rlvr above the core.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from rlvr.config.fields import check_section
from rlvr.config.sections import TRACKERS, Config, ConfigError
from rlvr.config.sources import model_source


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


def _check_distributed(cfg: Config) -> None:
    """The settings of the distributed section that depend on other sections (its own: DistributedConfig.check)."""
    d, k = cfg.distributed, cfg.rollout.max_staleness
    if k > 0 and d.backend != "ray":
        raise ConfigError(f"rollout.max_staleness={k} needs distributed.backend=ray")
    a = cfg.algorithm
    if k > 0 and a.is_cap == 0 and not a.allow_uncorrected:
        raise ConfigError(f"algorithm.is_cap=0 turns the importance correction off, but rollout.max_staleness={k} "
                          "trains on batches sampled from weights up to that many updates old; leave is_cap empty "
                          "(auto) or set it > 1, or set algorithm.allow_uncorrected=true to train uncorrected")
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
    """Raise ConfigError (one line) on values, sizes and files; return cfg (the deprecated log.tensorboard folded
    into log.report_to, else unchanged). Each section checks its own fields (`check_section`), this module what
    spans sections; names looked up in registries (task, losses, rewards) are checked when a run is set up
    (`rlvr.train.validate`)."""
    check_section(cfg)
    _check_distributed(cfg)
    _check_files(cfg)
    _check_rollout_engine(cfg)
    _check_trackers(cfg)
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
