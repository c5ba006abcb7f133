"""Environments by name: the built-in ones, those registered with `register_environment`, or any class
`module:Class` importable from the run's Python path (`env.name` in a config).

An environment is a class (or factory) whose instances have `reset(item) -> messages` and
`step(message) -> StepResult` (`rlvr.rollout.environment.Environment`); one instance plays one episode.
Its constructor takes the config's `env.options` as keyword arguments, and, if it has a parameter named
`task`, the run's task, whose verifier it may use to score a final answer.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Callable

from rlvr.rollout.environment import Environment

ENVIRONMENTS: dict[str, Callable[..., Environment]] = {}


def register_environment(name: str) -> Callable[[Callable[..., Environment]], Callable[..., Environment]]:
    """Register an environment class under `name` (what `env.name` selects)."""
    def deco(factory: Callable[..., Environment]) -> Callable[..., Environment]:
        if name in ENVIRONMENTS:
            raise ValueError(f"environment {name!r} registered twice")
        ENVIRONMENTS[name] = factory
        return factory

    return deco


def resolve_environment(name: str) -> Callable[..., Environment]:
    """The class a name means: a registered one, else `module:Class` imported; ValueError with one line."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name]
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"unknown environment {name!r}; choose from {sorted(ENVIRONMENTS)} or give module:Class")
    try:
        found = getattr(importlib.import_module(module), attr)
    except ImportError as err:
        raise ValueError(f"environment {name!r}: cannot import module {module!r} ({err}); put its folder on the "
                         "Python path (PYTHONPATH=.) or install it") from None
    except AttributeError:
        raise ValueError(f"environment {name!r}: module {module!r} has no {attr!r}") from None
    if not callable(found):
        raise ValueError(f"environment {name!r} is not a class or factory")
    return found


def environment_factory(name: str, options: dict[str, Any], task: Any = None) -> Callable[[], Environment]:
    """A function that builds one environment per episode: `name` with `options`, and `task` where its
    constructor takes one. An option it does not take is a ValueError naming it, before any episode."""
    cls = resolve_environment(name)
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # a builtin or C callable: options are left to it
        params = {}
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key in options:
        if params and not open_ended and (key not in params or key == "task"):
            names = [p for p in params if p != "task"]
            raise ValueError(f"environment {name!r} has no option {key!r}; options: {', '.join(names) or '(none)'}")
    make = functools.partial(cls, **options, **({"task": task} if "task" in params else {}))
    try:
        probe = make()  # built once now, so a bad option value fails here with its message, not mid-run
    except Exception as err:  # noqa: BLE001 - the user's constructor: its message, on one line
        raise ValueError(f"environment {name!r} with options {options}: {type(err).__name__}: {err}") from None
    if not callable(getattr(probe, "reset", None)) or not callable(getattr(probe, "step", None)):
        raise ValueError(f"environment {name!r} has no reset() and step() methods")
    return make

