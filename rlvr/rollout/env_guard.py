"""An environment's calls, contained: nothing it does stops or hangs the run.

An environment is code from outside rlvr (a user's class, a game, a tool that runs a program). Each call to
its `reset` or `step` runs under a wall-clock deadline (`rlvr.sandbox.call_with_deadline`, a SIGALRM timer,
on the main thread; elsewhere in a helper thread that is abandoned when it overruns), and what it returns is
checked: messages must be mappings with a known role and text content, a reward a finite number. A call
that raises, overruns or returns something else becomes an `EnvProblem` of one of `PROBLEMS`: the runner
ends that episode, keeps the reward it had, and counts the problem (`episode/env_<kind>`); the first of each
kind is logged with its cause. An observation longer than the runner's limit is cut and counted
(`episode/truncated_observations`), as verl's tool agent loop cuts a tool response.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping
from numbers import Real
from typing import Any, Callable

from rlvr.rollout.environment import Message, StepResult
from rlvr.sandbox import DeadlineExceeded, call_with_deadline, can_interrupt

logger = logging.getLogger("rlvr.rollout")
PROBLEMS = ("errors", "timeouts", "bad_output")  # what an environment call can go wrong with
ROLES = ("system", "user", "assistant", "tool")
_logged: set[tuple[str, str]] = set()  # (environment class, problem kind) already logged


class EnvProblem(Exception):
    """An environment call that raised (`errors`), overran its deadline (`timeouts`) or returned something
    that is not an episode's messages or a step's result (`bad_output`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def call_env(env: Any, method: str, arg: Any, timeout: float) -> Any:
    """`env.<method>(arg)` under `timeout` seconds (0: none); EnvProblem instead of any exception or overrun."""
    fn = getattr(env, method, None)
    if not callable(fn):
        raise _problem(env, "bad_output", f"the environment has no {method}() method")
    try:
        if timeout <= 0:
            return fn(arg)
        if can_interrupt():
            return call_with_deadline(fn, timeout, arg)
        return _in_thread(fn, arg, timeout)
    except DeadlineExceeded:
        raise _problem(env, "timeouts", f"{method}() ran past {timeout:g} s") from None
    except Exception as err:  # noqa: BLE001 - an environment's bug must not stop the run
        raise _problem(env, "errors", f"{method}() raised {type(err).__name__}: {err}", exc=err) from None


def _in_thread(fn: Callable[[Any], Any], arg: Any, timeout: float) -> Any:
    """fn(arg) in a daemon thread, waited for `timeout` seconds: where no signal can interrupt the caller (not
    the main thread) an overrunning call is left behind, and the episode goes on without it."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(arg)
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = err

    worker = threading.Thread(target=run, daemon=True, name="rlvr-env-step")
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise DeadlineExceeded(f"exceeded {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _problem(env: Any, kind: str, message: str, exc: BaseException | None = None) -> EnvProblem:
    name = type(env).__name__
    if (name, kind) not in _logged:  # loud once per environment class and kind, then only counted
        _logged.add((name, kind))
        logger.warning("environment %s: %s (counted in episode/env_%s; the episode ends)", name, message, kind,
                       exc_info=exc)
    return EnvProblem(kind, message)


def check_messages(env: Any, value: Any, what: str) -> list[Message]:
    """`value` as a list of {role, content: str} messages, or EnvProblem("bad_output")."""
    if not isinstance(value, (list, tuple)):
        raise _problem(env, "bad_output", f"{what} must be a list of messages, got {type(value).__name__}")
    messages = []
    for m in value:
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise _problem(env, "bad_output", f"{what}: a message must be {{role: one of {ROLES}, content: text}}, "
                                              f"got {m!r:.200}")
        messages.append({"role": m["role"], "content": m["content"]})
    return messages


def check_step(env: Any, value: Any) -> StepResult:
    """A step's result (a StepResult, or Gym's (observations, reward, done, info) tuple) checked, or EnvProblem."""
    if isinstance(value, tuple) and len(value) == 4:
        value = StepResult(*value)
    if not isinstance(value, StepResult):
        raise _problem(env, "bad_output", f"step() must return a StepResult, got {type(value).__name__}")
    reward = value.reward
    if isinstance(reward, bool) or not isinstance(reward, Real) or not math.isfinite(reward):
        raise _problem(env, "bad_output", f"step() returned the reward {reward!r}; a reward is a finite number")
    info = value.info if value.info is not None else {}
    if not isinstance(info, Mapping):
        raise _problem(env, "bad_output", f"step() returned info of type {type(info).__name__}; info is a mapping")
    return StepResult(check_messages(env, value.observations, "step()'s observations"), float(reward),
                      bool(value.done), dict(info))


def cut_observations(messages: list[Message], encode: Callable[[str], list[int]], decode: Callable[[list[int]], str],
                     max_tokens: int) -> tuple[list[Message], int]:
    """Each message's content cut to `max_tokens` tokens (its text is cut first at 16 characters a token, so a
    huge string is never tokenized whole); returns the messages and how many were cut."""
    cut, out = 0, []
    for m in messages:
        text = m["content"][: 16 * max_tokens]
        ids = encode(text)
        if len(ids) > max_tokens or len(text) < len(m["content"]):
            text, cut = decode(ids[:max_tokens]) + " ...(truncated)", cut + 1
        out.append({**m, "content": text})
    return out, cut


def plain_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """A step's info as JSON-able values (what samples.jsonl keeps): numbers, text, booleans, None as they are,
    anything else as its repr, cut to 200 characters."""
    return {str(k): v if isinstance(v, (bool, int, float, str, type(None))) else repr(v)[:200] for k, v in info.items()}
