"""`dataset`: a TRL-style data set as a task. Each row has a `prompt`, text given to the model as it is, or a
conversation (a list of {role, content} messages) rendered with the tokenizer's chat template; every other column
(an `answer`, a `solution`, ...) reaches the reward functions as TRL passes columns (`rlvr.rewards.TRLReward`).

    get_task("dataset", path="train.jsonl")                       # .jsonl, .json or .parquet
    get_task("dataset", path="chat.jsonl", tokenizer="path/to/model", eval_path="test.jsonl")

The verifier grades rows that have an `answer_field`: `match: math` (default) when the final answer the completion
states (\\boxed{}, <answer>, ####, "the answer is", else the whole completion) equals it by `math_equal`;
`match: exact` when the completion, stripped, is the answer. A row without one scores NaN (not applicable: the
reward functions alone pay) and never counts as correct. `rlvr.GRPOTrainer` builds this task from the data it is
given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rlvr.rewards.base import BatchContext, RewardBatch, bounded
from rlvr.rewards.combine import PROMPT_MESSAGES
from rlvr.rewards.extract import extract_answer
from rlvr.rewards.math_grader import get_grader
from rlvr.rewards.safe import as_mapping
from rlvr.tasks.base import Example, TooFewExamples, register_task
from rlvr.tasks.data import read_records, record_place
from rlvr.tasks.math_tasks import pick
from rlvr.tasks.templates import load_tokenizer_option

MATCHES = ("math", "exact")


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


@bounded
@dataclass
class AnswerVerifier:
    """1.0 when a row's answer is matched (`match`), 0.0 when not, NaN for a row without an answer."""

    answer_field: str = "answer"
    match: str = "math"

    def matched(self, completions: Sequence[str], answers: Sequence[str]) -> list[bool]:
        if self.match == "exact":
            return [c.strip() == a.strip() for c, a in zip(completions, answers)]
        stated = [extract_answer(c) or c.strip() for c in completions]
        return get_grader().equal_batch(list(zip(stated, answers)))

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        answers = [as_mapping(e).get(self.answer_field) for e in examples]
        graded = [i for i, a in enumerate(answers) if isinstance(a, str) and a.strip()]
        scores = [math.nan] * len(completions)
        for i, ok in zip(graded, self.matched([completions[i] for i in graded], [answers[i] for i in graded])):
            scores[i] = float(ok)
        return RewardBatch(scores)


@register_task("dataset")
@dataclass
class DatasetTask:
    """Rows of `path` (training; without `eval_path`, a fixed `eval_fraction` of them is held out, the same rows
    whatever the seed) and `eval_path` (held out)."""

    path: str | Path | None = None
    eval_path: str | Path | None = None
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    match: str = "math"
    tokenizer: Any = None  # a tokenizer or a model folder (`char`: the tiny model's): renders conversations
    eval_fraction: float = 0.1
    name: str = "dataset"
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.path is None:
            raise ValueError("dataset: give path= (and optionally eval_path=)")
        if self.match not in MATCHES:
            raise ValueError(f"dataset: match must be one of {MATCHES}, got {self.match!r}")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"dataset: eval_fraction must be in (0, 1), got {self.eval_fraction}")
        self.tokenizer = load_tokenizer_option(self.tokenizer)
        for path in (self.path, self.eval_path):  # read now: a bad row stops the command before any work
            if path is not None:
                self._examples(path)

    def _examples(self, path: str | Path) -> list[Example]:
        if path not in self._cache:
            rows = read_records(path)
            if not rows:
                raise ValueError(f"{path}: no rows")
            self._cache[path] = [self._example(row, path, i) for i, row in enumerate(rows)]
        return self._cache[path]

    def _example(self, row: Any, path: str | Path, index: int) -> Example:
        where = record_place(path, index)
        if not isinstance(row, dict) or self.prompt_field not in row:
            got = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{where}: no {self.prompt_field!r} field (has {got})")
        prompt, fields = row[self.prompt_field], {k: v for k, v in row.items() if k != self.prompt_field}
        if _is_conversation(prompt):
            if self.tokenizer is None:
                raise ValueError(f"{where}: the prompt is a conversation; give tokenizer= (the model folder) to "
                                 "render it with its chat template")
            fields[PROMPT_MESSAGES] = prompt
            prompt = self.tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        elif not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{where}: field {self.prompt_field!r} must be text or a list of {{role, content}} "
                             f"messages, got {json.dumps(prompt, default=str)[:80]}")
        answer = row.get(self.answer_field)
        if isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer):
            answer = str(answer)
        if self.answer_field == "answer":  # Example.answer is the text of it; another column keeps its own name
            fields.pop("answer", None)
        return Example(prompt=prompt, answer=answer if isinstance(answer, str) else "", fields=fields)

    def _split(self, held_out: bool) -> list[Example]:
        if self.eval_path is not None:
            return self._examples(self.eval_path if held_out else self.path)
        rows = self._examples(self.path)
        held = set(pick(list(range(len(rows))), max(1, round(self.eval_fraction * len(rows))), seed=0))
        return [r for i, r in enumerate(rows) if (i in held) == held_out]

    def held_out_size(self) -> int:
        return len(self._split(held_out=True))

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return pick(self._split(held_out=False), n, seed)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        held = self._split(held_out=True)
        if n > len(held):
            where = f"eval_path={self.eval_path}" if self.eval_path else \
                f"eval_fraction={self.eval_fraction:g} of the {len(self._examples(self.path))} rows of {self.path}"
            raise TooFewExamples(f"the dataset holds out {len(held)} rows ({where}), fewer than {n}")
        return pick(held, n, seed)

    def reward_fn(self) -> AnswerVerifier:
        return AnswerVerifier("answer", self.match)

    def correct_batch(self, completions: list[str], examples: list[Example]) -> list[bool]:
        scores = self.reward_fn().score_batch([e.prompt for e in examples], completions, examples).scores
        return [s == 1.0 for s in scores]

    def is_correct(self, completion: str, example: Example) -> bool:
        return self.correct_batch([completion], [example])[0]
