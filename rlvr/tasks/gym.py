"""Procedural tasks from reasoning-gym (Open-Thought, 2025) by dataset name, scored by the
dataset's own `score_answer`.

    get_task("reasoning_gym", dataset="leg_counting", config={"min_animals": 3})

Needs the `gym` extra (`pip install rlvr[gym]`). Train and eval items come from disjoint seeds.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any, Mapping

from rlvr.rewards.base import RewardOutput
from rlvr.rewards.format import final_answer
from rlvr.tasks.base import Example, TaskOptionError, kind_problem, register_task
from rlvr.tasks.templates import ANSWER_TAGS, render_prompt, set_up_template

_EVAL_SEED_OFFSET = 1_000_003  # eval items use seeds far from any training seed


def _gym():
    try:
        import reasoning_gym
    except ImportError:
        raise ImportError("task 'reasoning_gym' needs reasoning-gym: pip install 'rlvr[gym]'") from None
    return reasoning_gym


@functools.lru_cache(maxsize=None)
def _scorer(dataset: str):
    return _gym().get_score_answer_fn(dataset)


def _stated(text: str | None) -> str | None:
    return None if text is None else text.strip()


def _config_kind(config_field: dataclasses.Field, hints: Mapping[str, Any]) -> Any:
    """The type a config value must fit: the field's hint, unless `kind_problem` cannot check it (list[str],
    Literal) or the field's own default breaks it (rearc's `diff_ub: int = 0.2`); then the default's type."""
    hint, default = hints.get(config_field.name), config_field.default
    checkable = hint is not None and kind_problem(hint, object()) is not None  # a checked kind refuses an object
    if checkable and (default is dataclasses.MISSING or kind_problem(hint, default) is None):
        return hint
    return type(default)


class GymReward:
    """`score_answer` of the entry's source dataset (a float in [0, 1]); 0 when nothing is stated."""

    __name__ = "reasoning_gym"

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        entry = example["entry"]
        answer = _stated(final_answer(prompt, completion))
        score = 0.0 if answer is None else float(_scorer(entry["metadata"]["source_dataset"])(answer, entry))
        return RewardOutput(score, {"stated": float(answer is not None)})


@dataclass
class ReasoningGymTask:
    dataset: str
    config: dict = field(default_factory=dict)  # keyword options of the dataset's config
    template: str = "auto"  # auto: the model's chat template when it has one, else r1_zero
    tokenizer: Any = None
    name: str = "reasoning_gym"

    def __post_init__(self) -> None:
        gym = _gym()
        if self.dataset not in gym.factory.DATASETS:
            raise ValueError(f"unknown reasoning-gym dataset {self.dataset!r}; "
                             f"choose from {sorted(gym.factory.DATASETS)}")
        self._check_config(gym.factory.DATASETS[self.dataset][1])
        self.template, self.tokenizer = set_up_template(self.template, self.tokenizer)

    def _check_config(self, config_cls: type) -> None:
        """Build the dataset's config now, so that a bad `config` stops the command (naming `config.KEY`)
        before any work, not deep inside `create_dataset`."""
        if not isinstance(self.config, Mapping):
            raise TaskOptionError(f"reasoning_gym option 'config' expects a mapping, got {self.config!r}", "config")
        known = {f.name: f for f in dataclasses.fields(config_cls)}
        try:
            hints = typing.get_type_hints(config_cls)
        except (NameError, TypeError):  # a hint naming what its module cannot resolve: check by defaults
            hints = {}
        for key, value in self.config.items():
            if key not in known:
                raise TaskOptionError(f"reasoning_gym option 'config.{key}': {self.dataset} has no such setting; "
                                      f"settings: {', '.join(sorted(known))}", "config")
            if key in ("seed", "size"):  # create_dataset gets them from the caller's n and seed
                raise TaskOptionError(f"reasoning_gym option 'config.{key}' is set by rlvr (the seed and number "
                                      f"of examples asked for); leave it out", "config")
            if problem := kind_problem(_config_kind(known[key], hints), value):
                raise TaskOptionError(f"reasoning_gym option 'config.{key}' expects {problem}, got {value!r}", "config")
        try:
            config = config_cls(**self.config)
            if hasattr(config, "validate"):
                config.validate()
        except (AssertionError, TypeError, ValueError) as err:
            raise TaskOptionError(f"reasoning_gym option 'config' for {self.dataset}: {err or 'invalid'}",
                                  "config") from None

    def _examples(self, n: int, seed: int) -> list[Example]:
        if n < 1:
            raise ValueError(f"reasoning_gym: n must be >= 1, got {n}")
        data = _gym().create_dataset(self.dataset, size=n, seed=seed, **self.config)
        return [Example(prompt=render_prompt(self.template, e["question"], self.tokenizer, ANSWER_TAGS),
                        answer=str(e["answer"]), fields={"entry": e}) for e in data]

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return self._examples(n, seed)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return self._examples(n, seed + _EVAL_SEED_OFFSET)

    def reward_fn(self) -> GymReward:
        return GymReward()

    def is_correct(self, completion: str, example: Example) -> bool:
        return GymReward()(example.prompt, completion, example.as_dict()).score >= 1.0

    def format_ok(self, completion: str, example: Example) -> bool:
        return final_answer(example.prompt, completion) is not None

    def answer_key(self, completion: str, example: Example) -> str | None:
        return _stated(final_answer(example.prompt, completion))


register_task("reasoning_gym")(ReasoningGymTask)
