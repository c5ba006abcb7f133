"""A task = examples (prompt + ground truth fields) + a prompt template + its verifier (reward).

Tasks are chosen by name in a config: `get_task("sort", **options)`.
"""

from __future__ import annotations

import inspect
import random
import types
import zlib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, runtime_checkable

from rlvr.rewards.base import RewardFn


@dataclass
class Example:
    prompt: str  # the full prompt text given to the model (template applied)
    answer: str  # ground truth used by the verifier and by exact-match accuracy
    fields: dict[str, Any] = field(default_factory=dict)  # anything else the reward needs

    def as_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "answer": self.answer, **self.fields}


class TooFewExamples(ValueError):
    """A task cannot draw as many distinct examples as asked (its space, or its held-out share, is
    smaller); callers name the setting that asked (task.eval_size, --num-examples)."""


@runtime_checkable
class Task(Protocol):
    name: str

    def train_examples(self, n: int, seed: int) -> list[Example]: ...

    def eval_examples(self, n: int, seed: int) -> list[Example]: ...

    def reward_fn(self) -> RewardFn: ...

    def is_correct(self, completion: str, example: Example) -> bool:
        """Exact correctness, reported beside the training reward so reward gaming shows."""
        ...


HELD_OUT_SHARE = 10  # procedural tasks hold out one problem in this many, by a hash of its prompt


def held_out(prompt: str) -> bool:
    """Whether a procedural task's problem is in its held-out partition (a fixed hash of the prompt text)."""
    return zlib.crc32(prompt.encode()) % HELD_OUT_SHARE == 0


def draw_partition(make: Callable[[random.Random], Example], n: int, seed: int, held: bool,
                   tries: int) -> list[Example] | None:
    """`n` problems `make(rng)` draws in one partition (`held_out`), the held-out ones distinct so that none counts
    twice; None when `tries` draws did not find them (the caller names the task and why)."""
    rng, out, seen = random.Random(seed), [], set()
    for _ in range(tries):
        ex = make(rng)
        if held_out(ex.prompt) != held or (held and ex.prompt in seen):
            continue
        seen.add(ex.prompt)
        out.append(ex)
        if len(out) == n:
            return out
    return None


TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str):
    def deco(factory: Callable[..., Task]):
        if name in TASKS:
            raise ValueError(f"task {name!r} registered twice")
        TASKS[name] = factory
        return factory

    return deco


class TaskOptionError(ValueError):
    """An option the task does not take, or a required one left out; `key` names it so that callers can
    name it the way the user wrote it (`--task-option KEY`, `task.options.KEY`)."""

    def __init__(self, message: str, key: str, missing: bool = False):
        super().__init__(message)
        self.key, self.missing = key, missing


_POSITIONAL_OR_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def task_options(factory: Callable[..., Any]) -> tuple[list[str], list[str], bool]:
    """(option names, required names, open) of a task factory: its keyword parameters, plus, where it passes
    `**options` on to the class it returns (math_file -> MathTask), that class's; `open` when they cannot be
    known (then the factory itself refuses a wrong one). `name` is the registry's, not an option."""
    params = [p for p in inspect.signature(factory).parameters.values() if p.name != "name"]
    names = [p.name for p in params if p.kind in _POSITIONAL_OR_KEYWORD]
    required = [p.name for p in params if p.kind in _POSITIONAL_OR_KEYWORD and p.default is p.empty]
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return names, required, False
    try:
        returned = typing.get_type_hints(factory).get("return")
    except (NameError, TypeError):
        returned = None
    if not inspect.isclass(returned):
        return names, required, True
    more, _, is_open = task_options(returned)
    return names + [n for n in more if n not in names], required, is_open


def takes_tokenizer(name: str) -> bool:
    """Whether task `name` takes a `tokenizer` option (its chat and `auto` templates read the model's chat
    template): a run, `rlvr eval` and `subset` hand it the model's where the options name none."""
    return name in TASKS and "tokenizer" in task_options(TASKS[name])[0]


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a mapping",
          list: "a list", type(None): "null"}


def _option_types(factory: Callable[..., Any]) -> dict[str, Any]:
    """{option: annotation} of a task factory's keyword parameters, and of the class it passes `**options`
    on to (as `task_options` reads them)."""
    params = inspect.signature(factory, eval_str=True).parameters.values()
    types = {p.name: p.annotation for p in params if p.kind in _POSITIONAL_OR_KEYWORD}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        try:
            returned = typing.get_type_hints(factory).get("return")
        except (NameError, TypeError):
            returned = None
        if inspect.isclass(returned):
            types = {**_option_types(returned), **types}
    return types


def kind_problem(annotation: Any, value: Any) -> str | None:
    """None when `value` (read from YAML) fits `annotation`, else what was expected; annotations other than
    the plain YAML kinds (and unions of them) are left to the task."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        problems = [kind_problem(a, value) for a in typing.get_args(annotation)]
        return None if None in problems else " or ".join(dict.fromkeys(p for p in problems if p))
    if annotation is Path:
        return None if isinstance(value, str) else "a path"
    if annotation not in _KINDS:
        return None
    fits = (isinstance(value, annotation) and not (annotation is int and isinstance(value, bool))
            or annotation is float and isinstance(value, int) and not isinstance(value, bool))
    return None if fits else _KINDS[annotation]


def text_options(name: str) -> set[str]:
    """The options of task `name` that are text (str or Path, maybe None): a command line gives their value as
    written, not read as YAML (`template=Q: {question} A:` is a string, not a mapping)."""
    def is_text(annotation: Any) -> bool:
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
            return bool(kinds) and all(is_text(a) for a in kinds)
        return annotation in (str, Path)

    kinds = _option_types(TASKS[name]) if name in TASKS else {}
    return {key for key, kind in kinds.items() if is_text(kind) and key != "name"}  # `name` is the registry's


def get_task(name: str, **options: Any) -> Task:
    """The task `name` built with `options`; an option it does not take, or a required one left out, is a
    `TaskOptionError` naming the option (and the options there are), before anything is built."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {sorted(TASKS)}")
    names, required, is_open = task_options(TASKS[name])
    for key in options if not is_open else ():
        if key not in names:
            raise TaskOptionError(f"{name} has no option {key!r}; options: {', '.join(names) or '(none)'}", key)
    for key in required:
        if key not in options:
            raise TaskOptionError(f"{key} is required for {name}", key, missing=True)
    kinds = _option_types(TASKS[name])
    for key, value in options.items():
        if key in kinds and (problem := kind_problem(kinds[key], value)):
            raise TaskOptionError(f"{name} option {key!r} expects {problem}, got {value!r}", key)
    return TASKS[name](**options)
