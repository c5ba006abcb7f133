"""DeepSeek-R1's format reward and the R1-Zero reward (format gate x answer correctness).

R1 (DeepSeek-AI 2025, sec. 2.2.2) asks for the reasoning in `<think>...</think>` followed by the
answer in `<answer>...</answer>`. Two forms:
- strict (open-r1's regex): exactly `<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>`, nothing
  around it, each tag once;
- lenient: the two blocks in that order, any whitespace around and between them, each tag once.
When the prompt ends with `<think>` (the R1-Zero template opens the tag for the model), the
completion is checked as if it started with it.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from rlvr.rewards.base import BatchContext, RewardBatch, RewardOutput, bounded
from rlvr.rewards.extract import extract_answer, extract_last_number, last_boxed
from rlvr.rewards.math_grader import MathGrader, get_grader
from rlvr.rewards.safe import as_mapping

_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_STRICT = re.compile(r"<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>\n?", re.DOTALL)
_LENIENT = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
MARKERS = ("boxed", "tags")  # where a chat or plain prompt asks for the final answer (rlvr.tasks.templates)


def with_prompt_prefix(prompt: str, completion: str) -> str:
    """The completion as the model wrote it after a prompt that may already open `<think>`, with the prompt's
    whitespace after that tag (`"Q<think>\\n"` + `"a..."` reads `"<think>\\na..."`)."""
    head = prompt.rstrip()
    return "<think>" + prompt[len(head):] + completion if head.endswith("<think>") else completion


def format_ok(text: str, strict: bool = False) -> bool:
    if any(text.count(tag) != 1 for tag in _TAGS):
        return False
    return (_STRICT if strict else _LENIENT).fullmatch(text) is not None


@bounded
def r1_format_reward(prompt: str, completion: str, example: Mapping[str, Any]) -> float:
    """1.0 when the completion is `<think>...</think> <answer>...</answer>` (lenient), else 0.0."""
    return float(format_ok(with_prompt_prefix(prompt, completion)))


@bounded
def r1_format_reward_strict(prompt: str, completion: str, example: Mapping[str, Any]) -> float:
    """1.0 for open-r1's exact newline layout, else 0.0."""
    return float(format_ok(with_prompt_prefix(prompt, completion), strict=True))


def answer_in_tags(text: str) -> str | None:
    """The final answer inside the last `<answer>` block (a `\\boxed{}` in it wins)."""
    blocks = _ANSWER.findall(text)
    return extract_answer("<answer>" + blocks[-1] + "</answer>") if blocks else None


def marked_answer(text: str, marker: str) -> str | None:
    """The answer `text` states in the marker a prompt asked for: `boxed` (its last `\\boxed{}`) or `tags` (its
    last `<answer>` block); None when it has no such marker, or an empty one."""
    if marker not in MARKERS:
        raise ValueError(f"unknown answer marker {marker!r}; choose from {list(MARKERS)}")
    found = last_boxed(text) if marker == "boxed" else answer_in_tags(text)
    return found.strip() or None if found is not None else None


def final_answer(prompt: str, completion: str) -> str | None:
    """The answer the completion states: its last `<answer>` block (after a prompt that may open `<think>`),
    else what `extract_answer` finds; a `\\boxed{}` in the reasoning never overrides the `<answer>` block."""
    text = with_prompt_prefix(prompt, completion)
    return answer_in_tags(text) if "<answer>" in text else extract_answer(completion)


def stated_answer(prompt: str, completion: str, last_number: bool = False) -> str | None:
    """`final_answer`, else with `last_number` the number the completion ends on (the last one in it): the
    flexible extraction of lm-evaluation-harness's GSM8K, for a model that answers `3 + 5 = 8` without a marker.
    The reward without a format gate and the task's accuracy both read this one answer."""
    found = final_answer(prompt, completion)
    return extract_last_number(completion) if found is None and last_number else found


@bounded
class MathReward:
    """1.0 when the completion's final answer equals `example[answer_key]` (`math_equal`), else 0.0.

    format_gate: None, "lenient" or "strict" (R1-Zero's layout), "boxed" or "tags" (the marker a chat prompt
    asked for). With a gate the score is format_ok * correct: the R1-Zero reward, or an answer that counts only in
    its marker (components `format` and `correct` are reported separately; `correct` falls back to
    `extract_answer` when there is no marker, so that it shows correctness apart from format). Without one,
    `last_number` reads a completion that states no answer by the number it ends on (`stated_answer`).
    """

    def __init__(self, answer_key: str = "answer", format_gate: str | None = None,
                 grader: MathGrader | None = None, last_number: bool = False) -> None:
        if format_gate not in (None, "lenient", "strict", *MARKERS):
            raise ValueError(f"format_gate must be None, 'lenient', 'strict', 'boxed' or 'tags', got {format_gate!r}")
        self.answer_key, self.format_gate, self.last_number = answer_key, format_gate, last_number
        self.grader = grader
        self.__name__ = "r1_zero" if format_gate in ("lenient", "strict") else "math"

    def _truth(self, example: Mapping[str, Any]) -> str:
        if self.answer_key not in example or example[self.answer_key] is None:
            raise KeyError(f"example has no ground truth {self.answer_key!r}; fields: {sorted(example)}")
        return str(example[self.answer_key])

    def _predicted(self, prompt: str, completion: str) -> tuple[str | None, bool]:
        if self.format_gate is None:
            return stated_answer(prompt, completion, self.last_number), True
        # The `correct` component stays meaningful without the tags; the score is gated anyway.
        if self.format_gate in MARKERS:  # the answer in the marker counts; without one, `correct` reads what is said
            marked = marked_answer(completion, self.format_gate)
            return (final_answer(prompt, completion) if marked is None else marked), marked is not None
        text = with_prompt_prefix(prompt, completion)
        return final_answer(prompt, completion), format_ok(text, strict=self.format_gate == "strict")

    def score_batch(self, prompts: Sequence[str], completions: Sequence[str], examples: Sequence[Any],
                    ctx: BatchContext | None = None) -> RewardBatch:
        examples = [as_mapping(e) for e in examples]
        extracted = [self._predicted(p, c) for p, c in zip(prompts, completions)]
        grader = self.grader or get_grader()
        correct = grader.equal_batch([(pred, self._truth(e)) for (pred, _), e in zip(extracted, examples)])
        scores = [float(ok and c) for (_, ok), c in zip(extracted, correct)]
        if self.format_gate is None:
            return RewardBatch(scores)
        return RewardBatch(scores, {"format": [float(ok) for _, ok in extracted],
                                    "correct": [float(c) for c in correct]})

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> RewardOutput:
        batch = self.score_batch([prompt], [completion], [example])
        return RewardOutput(batch.scores[0], {k: v[0] for k, v in batch.components.items()})
