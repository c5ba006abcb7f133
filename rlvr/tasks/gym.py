"""Procedural tasks from reasoning-gym (Open-Thought, 2025) by dataset name, scored by the
dataset's own `score_answer`.

    get_task("reasoning_gym", dataset="leg_counting", config={"min_animals": 3})

Needs the `gym` extra (`pip install rlvr[gym]`). Train and eval items come from disjoint seeds.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

from rlvr.rewards.base import RewardOutput
from rlvr.rewards.extract import extract_answer
from rlvr.rewards.format import answer_in_tags, with_prompt_prefix
from rlvr.tasks.base import Example, register_task
from rlvr.tasks.templates import ANSWER_TAGS, check_template, load_tokenizer_option, render_prompt

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


def gym_answer(prompt: str, completion: str) -> str | None:
    """The last <answer> block, else the answer `extract_answer` finds."""
    text = with_prompt_prefix(prompt, completion)
    return answer_in_tags(text) if "<answer>" in text else extract_answer(completion)


def _stated(text: str | None) -> str | None:
    return None if text is None else text.strip()


class GymReward:
    """`score_answer` of the entry's source dataset (a float in [0, 1]); 0 when nothing is stated."""

    __name__ = "reasoning_gym"

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        entry = example["entry"]
        answer = _stated(gym_answer(prompt, completion))
        score = 0.0 if answer is None else float(_scorer(entry["metadata"]["source_dataset"])(answer, entry))
        return RewardOutput(score, {"stated": float(answer is not None)})


@dataclass
class ReasoningGymTask:
    dataset: str
    config: dict = field(default_factory=dict)  # keyword options of the dataset's config
    template: str = "r1_zero"
    tokenizer: Any = None
    name: str = "reasoning_gym"

    def __post_init__(self) -> None:
        gym = _gym()
        if self.dataset not in gym.factory.DATASETS:
            raise ValueError(f"unknown reasoning-gym dataset {self.dataset!r}; "
                             f"choose from {sorted(gym.factory.DATASETS)}")
        self.tokenizer = load_tokenizer_option(self.tokenizer)
        check_template(self.template, self.tokenizer)

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
        return gym_answer(example.prompt, completion) is not None

    def answer_key(self, completion: str, example: Example) -> str | None:
        return _stated(gym_answer(example.prompt, completion))


register_task("reasoning_gym")(ReasoningGymTask)
