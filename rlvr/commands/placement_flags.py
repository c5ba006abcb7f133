"""`--device`, `--dtype` and `--engine` for the commands that load a model without a run config
(`rlvr eval`, `rlvr dpo`, `rlvr reward-model`, `rlvr rft`): they mean what `model.device`, `model.dtype`
and `rollout.engine` mean, are checked by the same code, and an error names the flag.
"""

from __future__ import annotations

import argparse
import re

from rlvr.config import Config, ConfigError, load_config

FLAGS = {"model.device": "--device", "model.dtype": "--dtype", "rollout.engine": "--engine"}


def add_placement_flags(parser: argparse.ArgumentParser, engine: bool = False) -> None:
    parser.add_argument("--device", help="cpu, cuda, cuda:<i> or auto, as model.device (default: cpu)")
    parser.add_argument("--dtype", help="compute precision, as model.dtype: float32 (the default), bfloat16 (CUDA, or "
                                        "a CPU with AMX/AVX512-BF16; float32 weights, autocast forward) or float16 "
                                        "(CUDA, no training)")
    if engine:
        parser.add_argument("--engine", help="as rollout.engine: hf (rlvr's sampler), vllm (the extra), or auto (the "
                                             "default) = vllm where it is installed and --device is a GPU, else hf")


def config_from_flags(args: argparse.Namespace, training: bool) -> Config:
    """A config holding the flags as model.device, model.dtype (and rollout.engine), checked as a run's
    are: the device exists, the dtype runs there, the engine is installed; `training`: not float16."""
    sets = [f"{key}={getattr(args, flag[2:])}" for key, flag in FLAGS.items()
            if getattr(args, flag[2:], None) is not None]
    try:
        cfg = load_config(None, sets)
    except ConfigError as err:
        raise ConfigError(named(str(err), FLAGS)) from None
    return check_placement(cfg, training, FLAGS)


def check_placement(cfg: Config, training: bool, names: dict[str, str]) -> Config:
    """The device exists, the dtype runs there, the engine is installed (`training`: not float16): an error names
    the key as `names` give it (`model.device` -> `--device` where the flag set it)."""
    from rlvr.models import resolve_placement
    from rlvr.rollout.engines import check_engine
    from rlvr.train.validate import check_model

    try:
        resolve_placement(cfg.model)
        check_engine(cfg)  # a known, installed engine that runs on model.device
        if training:
            check_model(cfg)
    except ConfigError as err:
        raise ConfigError(named(str(err), names)) from None
    return cfg


def named(message: str, names: dict[str, str]) -> str:
    """`message` with each config key of `names` written as the flag that set it (`model.device` -> `--device`);
    a key is replaced where it stands as a whole (not inside `model.device_map` or `a.model.device`)."""
    for key, flag in names.items():
        message = re.sub(rf"(?<![\w.-]){re.escape(key)}(?![\w])", flag, message)
    return message
