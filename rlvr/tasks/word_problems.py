"""Arithmetic word problems, generated in families of phrasings: a task that a small instruct model (SmolLM2-135M)
partly solves, so that RL's learning shows on a CPU, with a family held out of training to measure transfer to
phrasings the model never trained on.

    get_task("word_problems", difficulty="easy", held_out_templates=["measure"], tokenizer=tok)

Families (`FAMILIES`): `direct` ("What is 3 + 5?"), `verbal` ("What is the sum of 3 and 5?"), `story` ("Tom has
3 apples. He gets 5 more apples. ..."), `measure` ("A rope is 3 meters long. ... How long is it now?"); each
with phrasings of addition and subtraction. Two splits keep the held-out set unseen: a fixed hash partition of
the operand pairs (one in five is held out: the held-out questions' numbers never appear in training), and
`held_out_templates`, families that training never draws from at all. `eval_examples(n)` gives n questions of
the training families (held-out numbers) and, with held-out families, n more of those, each marked with its
`eval_group` (`heldout_family`), which the evaluation reports as metrics of their own (`eval/heldout_family/...`).
Prompting and grading are `MathAnswers`' (chat template by default for an instruct model, answer in `\\boxed{}`).
Each item's `expression` field is its arithmetic ("12 + 7", "42 - 24"): what a calculator call should evaluate
(the `tools` environment's demonstrations call it).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any

from rlvr.tasks.base import Example, TooFewExamples, register_task
from rlvr.tasks.math_tasks import MathAnswers

NAMES = ("Tom", "Anna", "Sam", "Mia", "Leo", "Emma", "Ben", "Lily")
ITEMS = ("apples", "marbles", "books", "stickers", "pencils", "cookies", "stamps", "shells")
FAMILIES: dict[str, dict[str, tuple[str, ...]]] = {
    "direct": {"+": ("What is {a} + {b}?", "Compute {a} + {b}.", "Calculate {a} plus {b}."),
               "-": ("What is {a} - {b}?", "Compute {a} - {b}.", "Calculate {a} minus {b}.")},
    "verbal": {"+": ("What is the sum of {a} and {b}?", "What do you get when you add {a} and {b}?",
                     "What is the total of {a} and {b}?"),
               "-": ("What is the difference between {a} and {b}?", "What do you get when you take {b} away "
                     "from {a}?", "What is {a} take away {b}?")},
    "story": {"+": ("{name} has {a} {items}. {name} gets {b} more {items}. How many {items} does {name} have now?",
                    "There are {a} {items} in a box. {name} puts {b} more {items} in the box. How many {items} are "
                    "in the box now?"),
              "-": ("{name} has {a} {items}. {name} gives {b} {items} to a friend. How many {items} does {name} have "
                    "left?", "There are {a} {items} in a box. {name} takes {b} {items} out of the box. How many "
                    "{items} are left in the box?")},
    "measure": {"+": ("A rope is {a} meters long. {name} ties on another {b} meters. How many meters long is the "
                      "rope now?", "A tank holds {a} liters of water. {name} pours in {b} more liters. How many "
                      "liters are in the tank now?"),
                "-": ("A rope is {a} meters long. {name} cuts off {b} meters. How many meters of rope are left?",
                      "A tank holds {a} liters of water. {name} drains {b} liters. How many liters are left in the "
                      "tank?")},
}
# difficulty -> (operations, smallest operand, largest operand); a subtraction never goes below 0
DIFFICULTIES = {"easy": ("+", 1, 20), "medium": ("+-", 1, 50), "hard": ("+-", 10, 99)}
HELD_OUT_GROUP = "heldout_family"  # the eval_group of the held-out families' questions
_NUMBER_BUCKETS = 5  # one operand pair in five is held out of training


def held_out_pair(op: str, a: int, b: int) -> bool:
    """Whether the operand pair belongs to the held-out numbers: a fixed hash partition, the same in every run."""
    return zlib.crc32(f"{a}{op}{b}".encode()) % _NUMBER_BUCKETS == 0


@dataclass
class WordProblemTask(MathAnswers):
    """Generated addition/subtraction word problems (module docstring); the answer is a non-negative integer."""

    difficulty: str = "easy"
    families: list = field(default_factory=lambda: list(FAMILIES))  # those training draws from, and held out
    held_out_templates: list = field(default_factory=list)  # families never trained on, evaluated on their own
    template: str = "auto"  # auto: the model's chat template when it has one, else r1_zero
    tokenizer: Any = None
    answer_style: str = "boxed"  # the final answer in \\boxed{} or <answer> tags
    system_prompt: str | None = None
    instruction: str | None = None  # how the prompt asks for the answer (None: answer_style's, templates.INSTRUCTIONS)
    answer_extraction: str = "last_number"  # the stated answer, else the number the completion ends on
    strict_format: bool = False  # R1-Zero template: open-r1's strict layout instead of lenient
    name: str = "word_problems"

    def __post_init__(self) -> None:
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"{self.name}: difficulty must be one of {list(DIFFICULTIES)}, got {self.difficulty!r}")
        for key in ("families", "held_out_templates"):
            unknown = [f for f in getattr(self, key) if f not in FAMILIES]
            if unknown:
                raise ValueError(f"{self.name}: {key} {unknown} are not families; choose from {list(FAMILIES)}")
        self.training = [f for f in self.families if f not in self.held_out_templates]
        if not self.training:
            raise ValueError(f"{self.name}: held_out_templates {self.held_out_templates} leave no family to train on "
                             f"(families: {self.families})")
        self._set_up_prompting()
        ops, lo, hi = DIFFICULTIES[self.difficulty]
        pairs = [(op, a, b) for op in ops for a in range(lo, hi + 1) for b in range(lo, hi + 1) if op == "+" or a >= b]
        self._pairs = {held: [p for p in pairs if held_out_pair(*p) == held] for held in (False, True)}

    def _example(self, rng: random.Random, family: str, held_out_numbers: bool, group: str | None) -> Example:
        op, a, b = rng.choice(self._pairs[held_out_numbers])
        question = rng.choice(FAMILIES[family][op]).format(a=a, b=b, name=rng.choice(NAMES), items=rng.choice(ITEMS))
        fields = {"question": question, "family": family, "expression": f"{a} {op} {b}",
                  **({"eval_group": group} if group else {})}
        return Example(prompt=self.render(question), answer=str(a + b if op == "+" else a - b), fields=fields)

    def train_examples(self, n: int, seed: int) -> list[Example]:
        rng = random.Random(seed)
        return [self._example(rng, rng.choice(self.training), False, None) for _ in range(n)]

    def _distinct(self, n: int, seed: int, families: list[str], group: str | None) -> list[Example]:
        rng, found = random.Random(seed), {}
        for _ in range(50 * n + 1000):
            example = self._example(rng, rng.choice(families), True, group)
            found.setdefault(example.prompt, example)  # distinct questions: none counts twice
            if len(found) == n:
                return list(found.values())
        raise TooFewExamples(f"{self.name}: could not draw {n} distinct held-out questions of the families {families} "
                             f"at difficulty {self.difficulty!r}")

    def eval_examples(self, n: int, seed: int) -> list[Example]:
        """n questions of the training families on held-out numbers, then, with held_out_templates, n of those."""
        seen = self._distinct(n, seed, self.training, None)
        return seen + (self._distinct(n, seed + 1, self.held_out_templates, HELD_OUT_GROUP)
                       if self.held_out_templates else [])


register_task("word_problems")(WordProblemTask)
