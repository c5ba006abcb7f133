"""Math word problems with a verifiable final answer: GSM8K, MATH-500, and any jsonl/parquet file.

    get_task("gsm8k")                                   # shared data, R1-Zero template
    get_task("math500", template="chat", tokenizer="path/to/model")
    get_task("math_file", path="my.jsonl", question_field="problem", answer_field="solution",
             answer_format="boxed")

The verifier is `MathReward` (`math_equal` on the extracted answer); with the R1-Zero template it
is the R1-Zero reward (format gate x correctness).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rlvr.rewards.extract import last_boxed
from rlvr.rewards.format import (MARKERS, MathReward, format_ok, marked_answer, stated_answer,
                                 with_prompt_prefix)
from rlvr.rewards.math_grader import get_grader, plain_number
from rlvr.tasks.base import Example, register_task
from rlvr.tasks.data import gsm8k_answer, map_fields, read_records, record_place, shared_file
from rlvr.tasks.templates import INSTRUCTIONS, render_prompt, set_up_template

ANSWER_FORMATS = ("plain", "gsm8k", "boxed")
EXTRACTIONS = ("marker", "stated", "last_number")  # which answer of a completion counts (MathAnswers)


def pick(rows: list, n: int | None, seed: int) -> list:
    """`n` rows in a seeded random order; all of them when n is None, <= 0 or larger than the data."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    if n is not None and 0 < n < len(rows):
        order = order[:n]
    return [rows[i] for i in order]


def ground_truth(raw: str, answer_format: str) -> str:
    """The answer `raw` states, read as `answer_format` says; an empty one (`""`, `"  "`, `\\boxed{}`) is
    refused, as no prediction could ever equal it."""
    if answer_format == "gsm8k":
        truth = gsm8k_answer(raw)
    elif answer_format == "boxed":
        truth = last_boxed(raw)
        if truth is None:
            raise ValueError(f"answer_format 'boxed' but no \\boxed{{}} in {raw[:80]!r}")
    else:
        truth = raw
    if not truth.strip():
        raise ValueError(f"empty answer {raw[:80]!r}")
    return truth.strip()


def field_text(value: Any, field_name: str, numbers: bool = False) -> str:
    """`value` (of the file's field `field_name`) as text: a string, or (`numbers`, for answers, where
    `"answer": 42` is common) a finite number written as text. Anything else (null, a list, a mapping,
    true/false) would reach the prompt or the grader as Python's repr (`Question: None`), so it is refused,
    naming the field as the file spells it."""
    if isinstance(value, str):
        return value
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    kind = "a string or a finite number" if numbers else "a string"
    raise ValueError(f"field {field_name!r} must be {kind}, got {json.dumps(value, default=str)[:80]}")


class MathAnswers:
    """Prompting and grading shared by the tasks whose answer is a number or expression (`MathTask`'s files, the
    generated `word_problems`): the prompt asks for the final answer in `\\boxed{}` or `<answer>` tags
    (`answer_style`), the verifier is `MathReward` (`math_equal` on the answer the completion states). With the
    R1-Zero template the reward is R1-Zero's (format gate x correctness); with another, `answer_extraction` says
    which answer counts: `marker` only the one in the marker asked for (reward = format x correct: the format is
    learned too), `stated` one stated in any recognised form (`extract_answer`: boxed, tags, `####`, "the answer
    is"), `last_number` that, else the number the completion ends on (`stated_answer`). `format_ok` is always the
    marker asked for, so that accuracy and format are told apart."""

    template: str
    tokenizer: Any
    answer_style: str
    system_prompt: str | None
    instruction: str | None
    strict_format: bool
    answer_extraction: str
    name: str

    def _set_up_prompting(self) -> None:
        if self.answer_style not in INSTRUCTIONS:
            raise ValueError(f"{self.name}: answer_style must be one of {list(INSTRUCTIONS)}, got "
                             f"{self.answer_style!r}")
        if self.answer_extraction not in EXTRACTIONS:
            raise ValueError(f"{self.name}: answer_extraction must be one of {list(EXTRACTIONS)}, got "
                             f"{self.answer_extraction!r}")
        self.template, self.tokenizer = set_up_template(self.template, self.tokenizer)

    def render(self, question: str) -> str:
        return render_prompt(self.template, question, self.tokenizer,
                             self.instruction or INSTRUCTIONS[self.answer_style], self.system_prompt)

    def format_gate(self) -> str | None:
        if self.template == "r1_zero":
            return "strict" if self.strict_format else "lenient"
        return self.answer_style if self.answer_extraction == "marker" else None

    def reward_fn(self) -> MathReward:
        get_grader().start()  # its workers import sympy while the caller loads the model
        return MathReward(format_gate=self.format_gate(), last_number=self._last_number())

    def _last_number(self) -> bool:
        return self.template != "r1_zero" and self.answer_extraction == "last_number"

    def predicted(self, completion: str, example: Example) -> str | None:
        """The answer graded, as the reward reads it (`answer_extraction`), so that accuracy is what it counts."""
        if self.format_gate() in MARKERS:
            return marked_answer(completion, self.answer_style)
        return stated_answer(example.prompt, completion, self._last_number())

    def is_correct(self, completion: str, example: Example) -> bool:
        return self.correct_batch([completion], [example])[0]

    def correct_batch(self, completions: list[str], examples: list[Example]) -> list[bool]:
        """Correctness of many completions at once (the grader's pool works in parallel)."""
        pairs = [(self.predicted(c, e), e.answer) for c, e in zip(completions, examples)]
        return get_grader().equal_batch(pairs)

    def format_ok(self, completion: str, example: Example) -> bool:
        """The completion states its answer as asked: R1-Zero's layout, else in the `answer_style` marker."""
        if self.template == "r1_zero":
            return format_ok(with_prompt_prefix(example.prompt, completion), strict=self.strict_format)
        return marked_answer(completion, self.answer_style) is not None

    def answer_key(self, completion: str, example: Example) -> str | None:
        """What majority voting counts: the exact value of a number, else the answer without spaces; None when
        nothing is stated. Keys that differ may still be one answer (`\\sqrt{2}/2`, `\\frac{1}{\\sqrt{2}}`):
        `same_answers` says which, and `rlvr.eval` groups them."""
        pred = self.predicted(completion, example)
        if pred is None:
            return None
        value = plain_number(pred)
        return str(value) if value is not None else re.sub(r"\s+", "", pred)

    def same_answers(self, pairs: Sequence[tuple[str, str]], example: Example) -> list[bool]:
        """Whether each pair of completions states one answer, for majority voting (Minerva's maj@k groups answers
        by equivalence): two numbers by their exact values, without the grader; anything else when the grader finds
        them equal either way round (`math_equal(p, t)` is not symmetric); a completion stating none equals none."""
        answers = {text: self.predicted(text, example)  # once per completion, not once per pair it is in
                   for text in dict.fromkeys(text for pair in pairs for text in pair)}
        stated = [(answers[a], answers[b]) for a, b in pairs]
        out: list[bool | None] = []
        for a, b in stated:
            if a is None or b is None:
                out.append(False)
                continue
            va, vb = plain_number(a), plain_number(b)
            out.append(va == vb if va is not None and vb is not None else None)
        todo = [i for i, v in enumerate(out) if v is None]
        same = get_grader().equal_batch([stated[i] for i in todo] + [stated[i][::-1] for i in todo]) if todo else []
        for j, i in enumerate(todo):
            out[i] = same[j] or same[j + len(todo)]
        return out  # type: ignore[return-value]


@dataclass
class MathTask(MathAnswers):
    """Question/answer rows -> prompts + `math_equal` verification.

    eval_path: held-out file; without one, a fixed `eval_fraction` of `path` is held out (the same
    rows whatever the seed, so training never sees them).
    """

    path: str | Path | None = None
    eval_path: str | Path | None = None
    question_field: str = "question"
    answer_field: str = "answer"
    answer_format: str = "plain"  # how to read the ground truth: plain, gsm8k (#### N), boxed
    template: str = "auto"  # auto: the model's chat template when it has one, else r1_zero
    tokenizer: Any = None
    answer_style: str = "boxed"  # chat and plain templates: the final answer in \\boxed{} or <answer> tags
    system_prompt: str | None = None
    instruction: str | None = None  # chat and plain templates: how the prompt asks for it (None: answer_style's)
    strict_format: bool = False  # R1-Zero template: open-r1's strict layout instead of lenient
    answer_extraction: str = "stated"  # other templates: marker, stated or last_number (MathAnswers)
    eval_fraction: float = 0.1
    name: str = "math_file"
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.path is None and self.eval_path is None:
            raise ValueError(f"{self.name}: give path= (and optionally eval_path=)")
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"{self.name}: answer_format must be one of {ANSWER_FORMATS}, got {self.answer_format!r}")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"{self.name}: eval_fraction must be in (0, 1), got {self.eval_fraction}")
        self._set_up_prompting()
        for path in (self.path, self.eval_path):  # read now, so a bad row stops a command before any work
            if path is not None:
                self._rows(path)

    # --- data ------------------------------------------------------------------------------------

    def _rows(self, path: str | Path) -> list[dict]:
        """The rows of `path`: question and answer text, the answer read as `answer_format` says; every row is
        checked when the task is built, so a bad one is refused (naming its file and line) before any work."""
        if path not in self._cache:
            fields = {"question": self.question_field, "answer": self.answer_field}
            rows = map_fields(read_records(path), fields, path)
            if not rows:
                raise ValueError(f"{path}: no rows")
            for i, row in enumerate(rows):
                try:
                    row["question"] = field_text(row["question"], self.question_field)
                    answer = field_text(row["answer"], self.answer_field, numbers=True)
                    row["answer"] = ground_truth(answer, self.answer_format)
                except ValueError as err:
                    raise ValueError(f"{record_place(path, i)}: {err}") from None
            self._cache[path] = rows
        return self._cache[path]

    def _split(self, held_out: bool) -> list[dict]:
        if self.eval_path is not None:
            if held_out:
                return self._rows(self.eval_path)
            if self.path is None:
                raise ValueError(f"{self.name} is an evaluation set only; give path= to train")
            return self._rows(self.path)
        rows = self._rows(self.path)
        held = set(pick(list(range(len(rows))), max(1, round(self.eval_fraction * len(rows))), seed=0))
        return [r for i, r in enumerate(rows) if (i in held) == held_out]

    def _example(self, row: dict) -> Example:
        question = row["question"]
        return Example(prompt=self.render(question), answer=row["answer"],
                       fields={"question": question})

    def held_out_note(self) -> str:
        """Why the held-out share has the size it has, for a caller that asked for more."""
        if self.eval_path is not None:
            return f"eval_path={self.eval_path} has {len(self._rows(self.eval_path))} rows"
        return (f"eval_fraction={self.eval_fraction:g} of the {len(self._rows(self.path))} rows of {self.path}; "
                f"the rest is for training: raise eval_fraction or give eval_path=")

    def train_examples(self, n: int, seed: int) -> list[Example]:
        return [self._example(r) for r in pick(self._split(held_out=False), n, seed)]

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return [self._example(r) for r in pick(self._split(held_out=True), n, seed)]


@register_task("gsm8k")
def gsm8k(path: str | Path | None = None, eval_path: str | Path | None = None, **options: Any) -> MathTask:
    """GSM8K (Cobbe et al. 2021): train on gsm8k_train.jsonl, evaluate on gsm8k_test.jsonl."""
    return MathTask(path=path or shared_file("gsm8k_train.jsonl"),
                    eval_path=eval_path or shared_file("gsm8k_test.jsonl"),
                    **{"answer_format": "gsm8k", **options}, name="gsm8k")  # the options may set another format


@register_task("math500")
def math500(eval_path: str | Path | None = None, path: str | Path | None = None, **options: Any) -> MathTask:
    """MATH-500 (Lightman et al. 2023's split of Hendrycks' MATH): an evaluation set; pass path= to
    train on other MATH-style data."""
    return MathTask(path=path, eval_path=eval_path or shared_file("math500_test.jsonl"),
                    **{"question_field": "problem", "answer_field": "answer", **options}, name="math500")


@register_task("math_file")
def math_file(path: str | Path, **options: Any) -> MathTask:
    return MathTask(path=path, **options)


__all__ = ["MathAnswers", "MathTask", "gsm8k", "math500", "math_file", "pick"]
