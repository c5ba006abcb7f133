"""Run configuration: dataclasses whose fields carry their help text and source.

A config is YAML with one section per dataclass (`sections`); `--set section.key=value` overrides any
field, typed by the field (`load`). `load_config` validates values, sizes and files (`checks`) before
any work starts and raises `ConfigError` with one line; the CLI turns that into exit code 2. Registry
names are checked when a run is set up (`rlvr.train.validate`). `rlvr train --help-config` prints every
field with its help.
"""

from rlvr.config.checks import check_out_dir, validate
from rlvr.config.load import (SHIPPED_CONFIGS, apply_overrides, config_file, config_help, from_dict, load_config,
                              parse_yaml, read_yaml, save_config, with_absolute_paths)
from rlvr.config.sections import (OLD_LOGPROBS, AlgorithmConfig, CheckpointConfig, Config, ConfigError,
                                  DistributedConfig, EnvConfig, EvalConfig, GuardConfig, LogConfig, LoRAConfig,
                                  ModelConfig, OptimConfig, RewardConfig, RolloutConfig, SFTConfig, TaskConfig,
                                  TrainConfig, ValueConfig, check_finite_number, f)

__all__ = [
    "check_out_dir", "validate", "SHIPPED_CONFIGS", "apply_overrides", "config_file", "config_help", "from_dict",
    "load_config", "parse_yaml", "read_yaml", "save_config", "with_absolute_paths", "OLD_LOGPROBS",
    "AlgorithmConfig", "CheckpointConfig", "Config", "ConfigError",
    "DistributedConfig", "EnvConfig", "EvalConfig", "GuardConfig", "LogConfig", "LoRAConfig", "ModelConfig",
    "OptimConfig",
    "RewardConfig", "RolloutConfig", "SFTConfig", "TaskConfig", "TrainConfig", "ValueConfig", "check_finite_number", "f",
]
