"""`--device`, `--dtype` and `--engine` for the commands that load a model without a run config
(`rlvr eval`, `rlvr dpo`, `rlvr reward-model`, `rlvr rft`): they mean what `model.device`, `model.dtype`
and `rollout.engine` mean, are checked by the same code, and an error names the flag.
"""

from __future__ import annotations

import argparse

from rlvr.config import Config, ConfigError, load_config

FLAGS = {"model.device": "--device", "model.dtype": "--dtype", "rollout.engine": "--engine"}


def add_placement_flags(parser: argparse.ArgumentParser, engine: bool = False) -> None:
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:<i> or auto, as model.device")
    parser.add_argument("--dtype", default="float32",
                        help="compute precision, as model.dtype: float32, bfloat16 (CUDA, or a CPU with "
                             "AMX/AVX512-BF16; float32 weights, autocast forward) or float16 (CUDA, no training)")
    if engine:
        parser.add_argument("--engine", default="auto",
                            help="as rollout.engine: hf (rlvr's sampler), vllm (the extra), or auto = vllm where "
                                 "it is installed and --device is a GPU, else hf")


def config_from_flags(args: argparse.Namespace, training: bool) -> Config:
    """A config holding the flags as model.device, model.dtype (and rollout.engine), checked as a run's
    are: the device exists, the dtype runs there, the engine is installed; `training`: not float16."""
    from rlvr.models import resolve_placement
    from rlvr.rollout.engines import check_engine
    from rlvr.train.validate import check_model

    sets = [f"{key}={getattr(args, flag[2:])}" for key, flag in FLAGS.items() if hasattr(args, flag[2:])]
    try:
        cfg = load_config(None, sets)
        resolve_placement(cfg.model)
        check_engine(cfg)  # a known, installed engine that runs on --device
        if training:
            check_model(cfg)
    except ConfigError as err:
        message = str(err)
        for key, flag in FLAGS.items():
            message = message.replace(key, flag)
        raise ConfigError(message) from None
    return cfg
