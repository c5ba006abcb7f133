"""Tasks by name. Each module below registers its tasks on import."""

from rlvr.tasks.base import TASKS, Example, Task, get_task, register_task

__all__ = ["TASKS", "Example", "Task", "get_task", "register_task"]
