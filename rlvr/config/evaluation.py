"""The config of `rlvr eval`: the model evaluated, the task, how it generates, the sampled mode, the thinking budgets.

Its fields are the RL run's where they mean the same (model.device and model.dtype, task.options, the rollout
section's engine settings, the held-out eval section's samples and temperature, a recipe's budget_eval stage's
answer_tokens: declared with `like`, so they share help, range and choices), read from a YAML file and
`--set KEY=VALUE` (`rlvr eval --set eval.samples=8 --set rollout.engine=hf`); `rlvr eval --help-config` lists them.
The command's flags (--model, --n, --temperature, ...) are aliases of these keys.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from rlvr.config.fields import ConfigError, f, like
from rlvr.config.monitoring import EvalConfig
from rlvr.config.offline import Checked
from rlvr.config.sections import (BaseModelConfig, Config, GenerationConfig, ModelConfig, RolloutConfig,
                                  TaskExamplesConfig, TaskConfig)
from rlvr.config.stages import BudgetEvalStage, check_budgets

DEFAULT_NEW_TOKENS = 512  # rollout.max_new_tokens when empty, capped to what the model's context leaves


@dataclass
class EvalModelConfig:
    """The model evaluated and where it runs (no training: float32 weights, the forward in dtype)."""

    path: str | None = like(BaseModelConfig, "path", help="The model to evaluate (required): a Hugging Face folder, "
                            "a .gguf file, an embedded model's name (smollm2-135m-instruct), or the out folder of an "
                            "rlvr dpo / rft / sft run (the model it saved there).")
    device: str = like(BaseModelConfig, "device")
    dtype: str = like(BaseModelConfig, "dtype")


@dataclass
class EvalTaskConfig:
    """The task whose held-out problems are evaluated."""

    name: str | None = like(TaskExamplesConfig, "name", default=None,
                            help="Task by name (required; rlvr.tasks.get_task): gsm8k, math_file, sort, ...")
    options: dict = like(TaskExamplesConfig, "options")


@dataclass
class EvalRolloutConfig(GenerationConfig):
    """How completions are generated: the RL run's engine settings and the token budget."""

    max_new_tokens: int | None = f(None, f"New tokens per completion; empty: {DEFAULT_NEW_TOKENS}, or what the "
                                         "model's context leaves after the longest prompt when that is less (a "
                                         "value set is refused when it does not fit).", ge=1)
    batch_size: int | None = f(None, "Most sequences decoded at once by rlvr's own engine (hf; vLLM schedules its "
                                     "own); empty: all at once.", ge=1)


@dataclass
class SampledEvalConfig:
    """The sampled mode, after the greedy one (n = 1, temperature 0)."""

    samples: int = like(EvalConfig, "samples", help="Samples per problem in the sampled mode, for its accuracy, "
                                                    "reward, pass@k (unbiased estimator of Chen et al. 2021) and "
                                                    "maj@k (0 = greedy only).")
    k: list | None = f(None, "k values of pass@k and maj@k, each in 1..samples, e.g. [1, 4]; empty: 1, the powers "
                             "of 2 below samples, and samples.")
    temperature: float = like(EvalConfig, "temperature")
    top_p: float = like(RolloutConfig, "top_p", help="Nucleus sampling threshold of the sampled mode (1 = off; "
                                                     "Holtzman et al. 2020).")

    def check(self, prefix: str) -> None:
        k, n = self.k, self.samples
        if k is None:
            return
        if not k or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in k):
            raise ConfigError(f"{prefix}k: expected a non-empty list of integers >= 1, e.g. [1, 4], got {k!r}")
        if n == 0:
            raise ConfigError(f"{prefix}k {','.join(map(str, k))}: pass@k and maj@k need sampled mode; "
                              f"{prefix}samples is 0 (greedy only)")
        if max(k) > n:
            raise ConfigError(f"{prefix}k {max(k)} needs at least that many samples per problem; {prefix}samples "
                              f"is {n}")


@dataclass
class ThinkingEvalConfig:
    """Qwen3's thinking budget (sec. 4.3): after the evaluation, greedy accuracy with the thinking cut at each budget
    by the early-stop phrase; a table, thinking_budget.jsonl and thinking_budget.png beside the graded samples."""

    budgets: list = like(BudgetEvalStage, "budgets", default=[], help="Thinking budgets in tokens, e.g. [64, 128, "
                                                                      "256]; empty: no sweep.")
    answer_tokens: int | None = like(BudgetEvalStage, "answer_tokens", help="New tokens of the answer after the "
                                     "thinking; empty: rollout.max_new_tokens, else what the model's context leaves "
                                     f"after the prompt, the largest budget and the early-stop text, at most "
                                     f"{DEFAULT_NEW_TOKENS}.")

    def check(self, prefix: str) -> None:
        if self.budgets:
            check_budgets(f"{prefix}budgets", self.budgets)


@dataclass
class EvalRunConfig(Checked):
    """`rlvr eval`: greedy and sampled evaluation of a model on a task's held-out problems."""

    seed: int = f(0, "Seeds the held-out selection and the sampling.")
    num_examples: int = f(100, "Held-out problems (0 = all the task holds out).", ge=0)
    model: EvalModelConfig = f(EvalModelConfig(), "The model evaluated.")
    task: EvalTaskConfig = f(EvalTaskConfig(), "The task.")
    rollout: EvalRolloutConfig = f(EvalRolloutConfig(), "How completions are generated.")
    eval: SampledEvalConfig = f(SampledEvalConfig(), "The sampled mode.")
    thinking: ThinkingEvalConfig = f(ThinkingEvalConfig(), "The thinking-budget sweep.")

    def check(self, prefix: str) -> None:
        for key, value, flag in (("model.path", self.model.path, "--model DIR"),
                                 ("task.name", self.task.name, "--task NAME")):
            if not value:
                raise ConfigError(f"{prefix}{key} is required: give {flag} (or --set {prefix}{key}=...)")

    def run_config(self) -> Config:
        """The RL config holding these placement and engine settings (every other key at its default), which the
        engine is built and checked from, as `rlvr train`'s (`rlvr.train.rollout.inference_engine`)."""
        rollout = {fld.name: getattr(self.rollout, fld.name) for fld in fields(GenerationConfig)
                   if fld.name != "max_new_tokens"}
        return Config(seed=self.seed, model=ModelConfig(path=self.model.path, device=self.model.device,
                                                        dtype=self.model.dtype),
                      task=TaskConfig(name=self.task.name, options=dict(self.task.options)),
                      rollout=RolloutConfig(**rollout))
