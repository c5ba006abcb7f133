"""Tasks by name. Each module below registers its tasks on import."""

from rlvr.tasks.base import TASKS, Example, Task, TaskOptionError, TooFewExamples, get_task, register_task
from rlvr.tasks import arithmetic, sorting  # noqa: F401  (registers "arithmetic", "sort")
from rlvr.tasks import countdown, gym, math_tasks  # noqa: F401  (gsm8k, math500, math_file, reasoning_gym, countdown)
from rlvr.tasks import subset  # noqa: F401  (subset: a task's saved training subset)
from rlvr.tasks import dataset  # noqa: F401  (dataset: TRL-style rows, rlvr.GRPOTrainer's data)
from rlvr.tasks import code_functions, guess  # noqa: F401  (py_functions; guess: the guess-the-number game's items)
from rlvr.tasks import word_problems  # noqa: F401  (word_problems: generated arithmetic word problems)

__all__ = ["TASKS", "Example", "Task", "TaskOptionError", "TooFewExamples", "get_task", "register_task"]
