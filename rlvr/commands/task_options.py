"""`--task-option KEY=VALUE` of `rlvr eval` and `rlvr rft`: one parser, one way to build the task."""

from __future__ import annotations

from pathlib import Path

from rlvr.config import parse_yaml


def task_from_cli(name: str, items: list[str], model: str | Path):
    """The task `name` with its `--task-option` items: the value of a text option (a template, a path) as
    written, any other read as YAML (numbers, booleans, lists the way a config reads them; anything else a
    string). A task that takes a `tokenizer` gets `model`'s unless an option names another, when its template
    follows the model: `template=chat` and the default `auto`. Bad input: one ValueError line."""
    from rlvr.tasks import TASKS, TaskOptionError, get_task
    from rlvr.tasks.base import task_options, text_options

    options, text = {}, text_options(name)
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--task-option expects key=value, got {item!r}")
        options[key] = value if key in text else parse_yaml(value, f"--task-option {key}")
    if options.get("template", "auto") in ("auto", "chat") and name in TASKS and \
            "tokenizer" in task_options(TASKS[name])[0]:
        options.setdefault("tokenizer", str(model))
    try:
        return get_task(name, **options)
    except TaskOptionError as err:  # "--task-option foo: ..." / "--task-option path is required for ..."
        raise ValueError(f"--task-option {err}" if err.missing else f"--task-option {err.key}: {err}") from None
    except TypeError as err:  # a task whose options cannot be listed refused one
        raise ValueError(f"--task-option: {err}") from None
