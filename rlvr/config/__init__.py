"""Configuration of every command: dataclasses whose fields carry their help text, source, range or choices.

A config is YAML with one section per dataclass (`sections`: the RL run's; `offline`: the offline trainers' and
`rlvr sft`'s; `evaluation`: `rlvr eval`'s; `stages`: a recipe's stages); `--set section.key=value` overrides any
field, typed by the field (`load`). Each section checks its own fields (`fields.check_section`); `load_config` runs those checks and the
ones across sections and files (`checks`) before any work starts and raises `ConfigError` with one line; the CLI
turns that into exit code 2. Registry names are checked when a run is set up (`rlvr.train.validate`).
`rlvr COMMAND --help-config` prints every field with its help.
"""

from rlvr.config.checks import check_out_dir, validate
from rlvr.config.load import (SHIPPED_CONFIGS, apply_overrides, config_file, config_help, from_dict, load_config,
                              parse_yaml, read_yaml, save_config, shipped_configs, with_absolute_paths)
from rlvr.config.evaluation import EvalRunConfig
from rlvr.config.offline import (OfflineConfig, PackedSFTConfig, PreferenceConfig, RewardModelConfig, RFTConfig,
                                 SFTRunConfig)
from rlvr.config.sections import (OLD_LOGPROBS, AlgorithmConfig, BaseModelConfig, CheckpointConfig, Config,
                                  ConfigError, DistributedConfig, EnvConfig, EvalConfig, GenerationConfig, GuardConfig,
                                  LogConfig, LoRAConfig, ModelConfig, OptimConfig, RewardConfig, RolloutConfig,
                                  SFTConfig, TaskConfig, TaskExamplesConfig, TrainConfig, ValueConfig,
                                  check_finite_number, f)

__all__ = [
    "check_out_dir", "validate", "SHIPPED_CONFIGS", "apply_overrides", "config_file", "config_help", "from_dict",
    "load_config", "parse_yaml", "read_yaml", "save_config", "shipped_configs", "with_absolute_paths",
    "EvalRunConfig", "OfflineConfig", "PackedSFTConfig", "PreferenceConfig", "RewardModelConfig", "RFTConfig", "SFTRunConfig",
    "OLD_LOGPROBS", "AlgorithmConfig", "BaseModelConfig", "CheckpointConfig", "Config", "ConfigError",
    "DistributedConfig", "EnvConfig", "EvalConfig", "GenerationConfig", "GuardConfig", "LogConfig", "LoRAConfig",
    "ModelConfig", "OptimConfig", "RewardConfig", "RolloutConfig", "SFTConfig", "TaskConfig", "TaskExamplesConfig",
    "TrainConfig", "ValueConfig", "check_finite_number", "f",
]
