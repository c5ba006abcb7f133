"""A task restricted to a saved subset of its training prompts (e.g. after difficulty filtering).

    task: {name: subset, options: {path: runs/r/kept.jsonl, task: sort, options: {length: 4}}}

Training examples come from the jsonl (rows written by `write_examples`); the held-out set, the
verifier and exact-match correctness stay those of the underlying task, so curves stay comparable.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from rlvr.jsonl import read_jsonl_located
from rlvr.tasks.base import Example, TaskOptionError, get_task, register_task, takes_tokenizer


def write_examples(examples: Sequence[Example], path: str | Path) -> Path:
    """Examples as jsonl rows {prompt, answer, fields}, which `subset` reads back unchanged."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": ex.prompt, "answer": ex.answer, "fields": ex.fields}) + "\n"
                            for ex in examples))
    return path


def read_examples(path: str | Path) -> list[Example]:
    """The rows `write_examples` wrote: {prompt, answer, fields}; a bad row is one line naming file and line."""
    examples = []
    for place, row in read_jsonl_located(path, ("prompt", "answer"), "subset: example", empty_ok=False):
        fields = row.get("fields")
        if not isinstance(fields, (dict, type(None))):
            raise ValueError(f"{place}: field 'fields' must be an object, got {json.dumps(fields)[:80]}")
        examples.append(Example(row["prompt"], row["answer"], dict(fields or {})))
    return examples


@register_task("subset")
@dataclass
class SubsetTask:
    path: str
    task: str = "sort"
    options: dict = field(default_factory=dict)
    tokenizer: Any = None  # handed on to the task when it takes one and `options` name none (a run's model's)
    name: str = "subset"

    def __post_init__(self) -> None:
        options = dict(self.options)
        if self.tokenizer is not None and takes_tokenizer(self.task):
            options.setdefault("tokenizer", self.tokenizer)
        try:
            self.base: Any = get_task(self.task, **options)
        except TaskOptionError as err:  # the inner task's option, not one of subset's own
            raise ValueError(f"subset: options: {err}") from None
        self.examples = read_examples(self.path)

    def train_examples(self, n: int, seed: int) -> list[Example]:
        """The saved examples (a seeded sample of n when n is smaller)."""
        if n >= len(self.examples):
            return list(self.examples)
        return random.Random(seed).sample(self.examples, n)

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        return self.base.eval_examples(n, seed)

    def reward_fn(self):
        return self.base.reward_fn()

    def is_correct(self, completion: str, example: Example) -> bool:
        return self.base.is_correct(completion, example)

    def __getattr__(self, name: str) -> Any:
        """What else the underlying task offers (batched grading, maj@k's answer keys and equivalence, format
        checks, a held-out note) is its own: only the training prompts differ."""
        if name.startswith("_") or name == "base":  # not yet built (copy, pickle): no forwarding
            raise AttributeError(name)
        return getattr(self.base, name)
