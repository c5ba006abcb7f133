"""The configs of the offline trainers: `rlvr dpo`, `rlvr reward-model`, `rlvr rft` (and the packed SFT inside RFT),
the RL warm start's SFT, and `rlvr sft` itself.

Each trainer's config is one section of its own keys plus the RL run's `optim` section (one AdamW and schedule for
every trainer, `rlvr.config.OptimConfig`); its fields carry their help, ranges and choices like every section's,
and `check_section` (through `validate()`) checks them. A command reads them from a YAML file and `--set KEY=VALUE`
(`rlvr dpo --set optim.lr=1e-6 --set loss=ipo`); `rlvr dpo --help-config` lists them.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields
from typing import Any

from rlvr.config.fields import ConfigError, check_section, f, key_meant
from rlvr.config.sections import (BaseModelConfig, Config, GenerationConfig, ModelConfig, OptimConfig, RolloutConfig,
                                  SFTConfig, TaskConfig, TaskExamplesConfig)

# names of rlvr.core.PREFERENCE_LOSSES, and the one without a paper default for beta (rlvr.core.preference
# DEFAULT_BETA); tests/algorithms/test_offline.py holds them equal
PREFERENCE_LOSSES = ("dpo", "ipo", "simpo", "ln_dpo")
NO_DEFAULT_BETA = ("ln_dpo",)
PACKING_ROUTES = ("auto", "varlen", "mask", "position_ids")  # rlvr.algorithms.packing


class UnknownKeyword(ConfigError, TypeError):
    """A keyword that is not a field of the config built from Python: a ConfigError (one line, as a YAML key's), and
    the TypeError a dataclass raises for it."""


class Checked:
    """`validate()`: the config's fields and rules (`check_section`); ConfigError (a ValueError) naming the key.
    Built from Python with a keyword it does not have (an earlier version's `PreferenceConfig(lr=1e-6)`, now
    `optim.lr`), it raises `UnknownKeyword` naming the key meant, as the YAML path does, not a bare TypeError."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in cls.__dataclass_fields__:
                raise UnknownKeyword(f"{cls.__name__}({name}=...): {_keyword_hint(cls, name)}")
        return super().__new__(cls)

    def validate(self) -> None:
        check_section(self)


def _keyword_hint(cls: type, name: str) -> str:
    meant = key_meant(name, cls)
    if meant is None:
        return f"no such key; keys: {', '.join(cls.__dataclass_fields__)}"
    section, _, key = meant.partition(".")
    moved = f" ({section}={typing.get_type_hints(cls)[section].__name__}({key}=...))" if key else ""
    return f"no such key; did you mean {meant}{moved}?"


@dataclass
class OfflineConfig(Checked):
    """Optimisation settings of `rlvr.algorithms.offline.train_offline` (preference, reward model, SFT)."""

    seed: int = f(0, "Seeds the held-out split, the batch order and (rft) the sampling.")
    epochs: int = f(1, "Passes over the training data (ignored when steps is set).", gt=0)
    steps: int | None = f(None, "Optimizer steps; empty: epochs x ceil(items / batch_size).", gt=0)
    batch_size: int = f(8, "Items (pairs, or documents for SFT) per optimizer step; the last step of an epoch takes "
                           "what is left.", gt=0)
    micro_batch_size: int | None = f(None, "Items per forward pass; gradients are accumulated up to batch_size "
                                           "(the same update). Empty: the whole batch at once.", gt=0)
    optim: OptimConfig = f(OptimConfig(lr=1e-6), "AdamW and its schedule, as the RL run's optim section. lr: 1e-6 "
                                                 "for 7B-scale models (DPO paper), ~1e-3 for a tiny model from "
                                                 "scratch.")

    def check(self, prefix: str) -> None:
        mb = self.micro_batch_size
        if mb is not None and mb > self.batch_size:
            raise ConfigError(f"{prefix}micro_batch_size must be in 1..batch_size ({self.batch_size}), got {mb}")

    def total_steps(self, n_items: int) -> int:
        return self.steps or self.epochs * math.ceil(n_items / self.batch_size)


@dataclass
class PairConfig(OfflineConfig):
    """Training on (prompt, chosen, rejected) pairs: the held-out split and the length limit."""

    eval_fraction: float = f(0.1, "Share of the pairs held out for evaluation when no separate evaluation set is "
                                  "given.", ge=0, lt=1)
    max_length: int | None = f(None, "Longest prompt + response in tokens; a longer pair is an error (silent "
                                     "truncation would change which response wins). The model's "
                                     "max_position_embeddings is a limit either way.", gt=0)


@dataclass
class PreferenceConfig(PairConfig):
    """`rlvr dpo`: DPO, IPO, SimPO and length-normalised DPO (rlvr.core.PREFERENCE_LOSSES)."""

    loss: str = f("dpo", "Preference loss: dpo (Rafailov et al. 2023), ipo (Azar et al. 2023), simpo (Meng et al. "
                         "2024, no reference model) or ln_dpo (length-normalised DPO).", choices=PREFERENCE_LOSSES)
    beta: float | None = f(None, "Inverse temperature of the implicit reward. Empty: the paper's default (dpo/ipo "
                                 "0.1, simpo 2.0); ln_dpo needs it set.", gt=0)
    gamma: float | None = f(None, "SimPO target reward margin (empty: 1.0, i.e. gamma/beta = 0.5).", ge=0)
    label_smoothing: float = f(0.0, "Conservative DPO (Mitchell 2023): assumed label-flip rate.", ge=0, lt=0.5)

    def check(self, prefix: str) -> None:
        super().check(prefix)
        if self.beta is None and self.loss in NO_DEFAULT_BETA:
            raise ConfigError(f"{prefix}loss {self.loss!r} has no default beta; set {prefix}beta (e.g. 0.1 * mean "
                              f"response length)")
        if self.gamma is not None and self.loss != "simpo":
            raise ConfigError(f"{prefix}gamma is SimPO's margin; loss {self.loss!r} does not use it")
        if self.label_smoothing and self.loss != "dpo":
            raise ConfigError(f"{prefix}label_smoothing applies to dpo only, not {self.loss!r}")


@dataclass
class RewardModelConfig(PairConfig):
    """`rlvr reward-model`: a Bradley-Terry reward model on preference pairs."""

    optim: OptimConfig = f(OptimConfig(lr=1e-5), "AdamW and its schedule, as the RL run's optim section "
                                                 "(InstructGPT's reward model: lr 9e-6).")
    center_coef: float = f(0.0, "Weight of (r_w + r_l)^2 that keeps rewards centred (Eisenstein et al. 2023; TRL "
                                "center_rewards_coefficient 0.01).", ge=0)


@dataclass
class PackedSFTConfig(OfflineConfig):
    """SFT on packed rows (RFT's fine-tuning step): documents share rows of max_len tokens, kept apart."""

    batch_size: int = f(32, "Documents per optimizer step (packed into rows of max_len).", gt=0)
    optim: OptimConfig = f(OptimConfig(lr=1e-5), "AdamW and its schedule, as the RL run's optim section.")
    max_len: int = f(4096, "Tokens per packed row; a longer document is an error. Long rows cost nothing extra with "
                           "the varlen and flash routes.", ge=2)
    route: str = f("auto", "How documents are kept apart: varlen (per-document attention), mask (4D block-diagonal "
                           "mask), position_ids (flash-attention varlen) or auto (varlen for eager/sdpa, else "
                           "position_ids).", choices=PACKING_ROUTES)


@dataclass
class RFTConfig(PackedSFTConfig):
    """`rlvr rft`: rejection-sampling fine-tuning (Yuan et al. 2023) and expert iteration (Anthony et al. 2017)."""

    rounds: int = f(1, "Sample -> filter -> SFT rounds: 1 is RFT, more is expert iteration (each round samples from "
                       "the model the previous one trained).", gt=0)
    num_samples: int = f(8, "Completions sampled per prompt (Yuan et al. 2023: k up to 100).", gt=0)
    temperature: float = f(1.0, "Sampling temperature; diversity is what finds new correct paths.", ge=0)
    top_p: float = f(1.0, "Nucleus sampling threshold (1 = off).", gt=0, le=1)
    max_new_tokens: int = f(128, "Generation budget per completion.", gt=0)
    dedup: bool = f(True, "Keep each distinct correct completion of a prompt once (distinct reasoning paths are what "
                          "help, Yuan et al. 2023).")
    max_per_prompt: int | None = f(None, "Keep at most this many correct completions per prompt (empty: all), so "
                                         "easy prompts do not dominate.", gt=0)


def warm_start_config(sft: SFTConfig, seed: int) -> OfflineConfig:
    """The RL warm start's optimisation (the `sft` section): linear warmup over 10% of the steps, then cosine to 10%
    of lr; AdamW's betas and epsilon are the RL optimizer's defaults."""
    schedule = OptimConfig(lr=sft.lr, schedule="cosine", warmup_steps=max(1, sft.steps // 10), min_lr_ratio=0.1)
    return OfflineConfig(seed=seed, steps=sft.steps, batch_size=sft.batch_size, optim=schedule)


@dataclass
class SFTRunConfig(Checked):
    """`rlvr sft`: the supervised warm start on its own, then the held-out greedy accuracy of the model it wrote.
    Its sections are the RL run's, cut to what it reads, so `rlvr sft` takes an `rlvr train` config file: the keys
    of `READS_FILE_OF` it does not have are left out of a file, and refused from --set (`RENAMED`: the key meant)."""

    READS_FILE_OF = Config  # (a class attribute, not a key)

    seed: int = f(0, "Seeds the tiny model's weights, the demonstrations, the batch order and the held-out check.")
    out_dir: str = f("runs/sft", "Run folder: sft_model/ (and init_model/, the tiny model it started from).")
    threads: int = f(0, "torch CPU threads (0 = leave torch's default).", ge=0)
    model: BaseModelConfig = f(BaseModelConfig(), "The model to fine-tune (every weight: no LoRA).")
    task: TaskExamplesConfig = f(TaskExamplesConfig(), "The task of the demonstrations and the held-out check.")
    sft: SFTConfig = f(SFTConfig(), "The supervised steps (sft.steps >= 1).")
    rollout: GenerationConfig = f(GenerationConfig(), "How the held-out check generates (greedy).")

    def check(self, prefix: str) -> None:
        if self.sft.steps < 1:
            raise ConfigError("sft.steps must be >= 1 for `rlvr sft` (use --steps)")
        if not self.out_dir.strip():
            raise ConfigError("out_dir must not be empty")

    @staticmethod
    def check_file(raw: dict) -> None:
        """A LoRA in the file (an `rlvr train` config's) is refused rather than left out: SFT trains every weight."""
        lora = raw.get("model", {}).get("lora") if isinstance(raw.get("model"), dict) else None
        if isinstance(lora, dict) and lora.get("r"):
            raise ConfigError(f"model.lora: rlvr sft trains every weight and does not read model.lora (r={lora['r']} "
                              "in the config); remove it, or leave it to `rlvr train`, whose RL stage uses it")

    @staticmethod
    def refuse(key: str) -> None:
        """A --set of a key `rlvr sft` does not read would change nothing: refused, naming the key it has instead."""
        hint = f"; did you mean {SFT_RENAMED[key]}?" if key in SFT_RENAMED else ""
        raise ConfigError(f"--set {key}: rlvr sft does not read this key, so it would change nothing{hint} (see "
                          "rlvr sft --help-config)")

    def run_config(self) -> Config:
        """The RL config these settings are part of (every other key at its default), for the shared start-up
        checks and the warm start (`rlvr.train.setup.start_model`)."""
        def widen(section: object, cls: type) -> object:
            return cls(**{fld.name: getattr(section, fld.name) for fld in fields(section)})

        return Config(seed=self.seed, out_dir=self.out_dir, threads=self.threads,
                      model=widen(self.model, ModelConfig), task=widen(self.task, TaskConfig), sft=self.sft,
                      rollout=widen(self.rollout, RolloutConfig))


# keys of an `rlvr train` config that `rlvr sft` reads under another name
SFT_RENAMED = {"train.steps": "sft.steps", "optim.lr": "sft.lr", "train.batch_size": "sft.batch_size"}
