"""The options of a recipe's stages: one section per kind, each field with its default, help, range or choices.

A stage in a recipe file is `{name: NAME, kind: KIND, KEY: VALUE, ...}`; its keys are the fields of `STAGE_KINDS[KIND]`
(`rlvr recipe --help-config` lists them), read and checked like any config section, and errors name them as
`NAME.KEY`, the way `--set NAME.KEY=VALUE` sets them. The SFT kinds are the RL run's `sft` section with the stage's
own step count and data sources, so they share its help and defaults (batch size, learning rate, schedule).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlvr.config.fields import ConfigError, f
from rlvr.config.offline import PREFERENCE_LOSSES, PreferenceConfig
from rlvr.config.sections import OptimConfig, SFTConfig

FILTER_MODES = ("drop_solved", "all_fail")  # rlvr.data.difficulty.MODES


@dataclass
class RLStage:
    """An RL run: the recipe's base config with this stage's sections over it."""

    config: dict = f({}, "Config sections of this stage over the recipe's base (rlvr train's keys, rlvr train "
                         "--help-config); the recipe sets model.path, model.tiny_*, sft.* and out_dir itself.")


@dataclass
class Sampled:
    """The options of a stage that samples from the current model."""

    prompts: int = f(64, "Training prompts of the task the stage samples on.", gt=0)
    samples: int = f(4, "Completions sampled per prompt from the current model.", gt=0)
    temperature: float = f(1.0, "Sampling temperature.", ge=0)


def _check_file(key: str, path: str | None) -> None:
    if path is not None and not Path(path).is_file():
        raise ConfigError(f"{key}: no such file {path!r}")


@dataclass
class SFTStage(SFTConfig):
    """Supervised fine-tuning on a jsonl of {prompt, completion} and/or task demonstrations."""

    steps: int = f(100, "Optimizer steps of the stage.", gt=0)
    data: str | None = f(None, "jsonl of {prompt, completion} pairs, trained on together with the demonstrations.")
    demonstrations: int = f(256, "Task demonstrations (prompt, reference answer) added to the data.", ge=0)

    def check(self, prefix: str) -> None:
        _check_file(f"{prefix}data", self.data)


@dataclass
class RejectionSFTStage(Sampled, SFTStage):
    """DeepSeek-R1 sec. 2.3.3: the current model's verified-correct samples (deduplicated), mixed with other SFT
    data, fine-tuned on."""

    demonstrations: int = f(0, "Task demonstrations (prompt, reference answer) added to the correct samples.", ge=0)


@dataclass
class DPOStage(Sampled):
    """Preference optimisation on verifier-labelled pairs of the current model's own samples (chosen: a correct
    sample, else the reference answer; rejected: a wrong one)."""

    loss: str = f("dpo", "Preference loss, as rlvr dpo's: dpo, ipo, simpo or ln_dpo.", choices=PREFERENCE_LOSSES)
    beta: float | None = f(None, "Inverse temperature of the implicit reward (empty: the loss's paper default).", gt=0)
    lr: float = f(1e-4, "Peak AdamW learning rate (constant; higher than rlvr dpo's 1e-6 default, which is for "
                        "7B-scale models).", gt=0)
    epochs: int = f(1, "Passes over the pairs.", gt=0)
    batch_size: int = f(8, "Pairs per optimizer step.", gt=0)

    def preference_config(self, seed: int) -> PreferenceConfig:
        """The `rlvr dpo` config this stage trains with."""
        return PreferenceConfig(loss=self.loss, beta=self.beta, epochs=self.epochs, batch_size=self.batch_size,
                                seed=seed, optim=OptimConfig(lr=self.lr))

    def check(self, prefix: str) -> None:
        try:
            self.preference_config(0).validate()
        except ConfigError as err:
            raise ConfigError(f"{prefix}{err}") from None


@dataclass
class FilterStage:
    """Best-of-N difficulty filter of the training prompts with the current model (Kimi k1.5 sec. 2.1, Qwen3
    sec. 4.2); the kept prompts are the training set of the RL stages after it."""

    prompts: int | None = f(None, "Training prompts to filter (empty: the base config's task.train_size).", gt=0)
    samples: int = f(8, "Samples per prompt (the N of best-of-N).", gt=0)
    k: int | None = f(None, "drop_solved drops a prompt solved in >= k of the samples (it needs k; all_fail is "
                            "k = 1).", gt=0)
    mode: str = f("drop_solved", "drop_solved: keep the prompts not yet solved; all_fail: keep only those every "
                                 "sample fails.", choices=FILTER_MODES)
    drop_unsolved: bool = f(False, "Also drop the prompts no sample solves (too hard to learn from yet).")
    temperature: float = f(1.0, "Sampling temperature.", ge=0)


@dataclass
class FusionSFTStage(SFTStage):
    """Qwen3 sec. 4.3 thinking-mode fusion: SFT on /think and /no_think variants of the same prompts."""

    data: str | None = f(None, "Records {prompt, thinking, answer} (.jsonl, .json or .parquet); empty: the task's "
                               "demonstrations with the reasoning written by `thinking`.")
    thinking: str = f("The answer is {answer}.", "Template of the reasoning of a demonstration ({prompt}, {answer}).")
    unflagged_think: float = f(0.0, "Share of the thinking rows without the /think flag (thinking is the default "
                                    "mode).", ge=0, le=1)


@dataclass
class BudgetEvalStage:
    """Held-out accuracy against a thinking-token budget (Qwen3 sec. 4.3), /think prompts."""

    budgets: list = f([8, 16, 32], "Thinking budgets in tokens, each cut with Qwen3's early-stop phrase.")
    examples: int | None = f(None, "Held-out examples (empty: the base config's task.eval_size).", gt=0)
    answer_tokens: int | None = f(None, "New tokens of the answer after the thinking (empty: rollout.max_new_tokens).",
                                  ge=1)

    def check(self, prefix: str) -> None:
        check_budgets(f"{prefix}budgets", self.budgets)


def check_budgets(key: str, budgets: object) -> None:
    """Thinking budgets: a non-empty list of integers >= 1 (a recipe's budget_eval stage, `rlvr eval`)."""
    if not isinstance(budgets, list) or not budgets or \
            not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in budgets):
        raise ConfigError(f"{key}: expected a non-empty list of integers >= 1, e.g. [8, 16, 32], got {budgets!r}")


STAGE_KINDS: dict[str, type] = {"rl": RLStage, "sft": SFTStage, "rejection_sft": RejectionSFTStage,
                                "dpo": DPOStage, "filter": FilterStage, "fusion_sft": FusionSFTStage,
                                "budget_eval": BudgetEvalStage}
