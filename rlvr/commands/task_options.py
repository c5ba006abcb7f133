"""`--task-option KEY=VALUE` of `rlvr eval` and `rlvr rft`: one parser, one way to build the task."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rlvr.config import parse_yaml


def parse_task_options(name: str, items: list[str]) -> dict[str, Any]:
    """`--task-option` items as options: the value of a text option (a template, a path) as written, any other
    read as YAML (numbers, booleans, lists the way a config reads them; anything else a string). Bad input: one
    ValueError line naming `--task-option KEY`."""
    from rlvr.tasks.base import text_options

    options, text = {}, text_options(name)
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--task-option expects key=value, got {item!r}")
        options[key] = value if key in text else parse_yaml(value, f"--task-option {key}")
    return options


def flag_named(key: str) -> str:
    """How an error names a task option given by `--task-option`."""
    return f"--task-option {key}"


def task_from_options(name: str, options: dict[str, Any], model: str | Path,
                      named: Callable[[str], str] = flag_named):
    """The task `name` with `options`. A task that takes a `tokenizer` gets `model`'s unless an option names
    another, when its template follows the model: `template=chat` and the default `auto`. Bad input: one
    ValueError line naming the option as `named(key)` gives it (`--task-option KEY`, `task.options.KEY`)."""
    from rlvr.tasks import TaskOptionError, get_task
    from rlvr.tasks.base import takes_tokenizer

    options = dict(options)
    if options.get("template", "auto") in ("auto", "chat") and takes_tokenizer(name):
        options.setdefault("tokenizer", str(model))
    try:
        return get_task(name, **options)
    except TaskOptionError as err:  # "--task-option foo: ..." / "--task-option path is required for ..."
        raise ValueError(f"{named(err.key)} is required for {name}" if err.missing
                         else f"{named(err.key)}: {err}") from None
    except TypeError as err:  # a task whose options cannot be listed refused one
        raise ValueError(f"{named('').strip().rstrip('.')}: {err}") from None


def task_from_cli(name: str, items: list[str], model: str | Path):
    """The task `name` with its `--task-option` items (`parse_task_options`, `task_from_options`)."""
    return task_from_options(name, parse_task_options(name, items), model)
