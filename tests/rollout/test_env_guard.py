"""Bad environment output never stops or hangs a run: an exception, a hang (on the main thread and off it),
non-text messages, a reward that is not a finite number, a step that returns something else, a reset that fails.
Each ends its own episode, keeps the reward it had, is counted, and the other episodes of the batch go on."""

import math
import threading
import time

import pytest

from rlvr.rollout.environment import StepResult
from rlvr.rollout.env_guard import EnvProblem, call_env, check_messages, check_step
from rlvr.rollout.episode import EpisodeLimits, episode_metrics, run_episodes
from episode_fakes import ITEM, SAMPLING, TOK, Echo, ScriptedEngine


class Raises(Echo):
    def step(self, message):
        raise RuntimeError("the game's bug")


class Hangs(Echo):
    def step(self, message):
        time.sleep(60)


class Spins(Echo):
    def step(self, message):
        while True:
            pass


class NotText(Echo):
    def step(self, message):
        return StepResult([{"role": "user", "content": b"bytes"}], 0.0, False)


class NaNReward(Echo):
    def step(self, message):
        return StepResult([], math.nan, True)


class WrongType(Echo):
    def step(self, message):
        return "higher"


class BadReset(Echo):
    def reset(self, item):
        return [{"role": "narrator", "content": "once upon a time"}]


class ResetRaises(Echo):
    def reset(self, item):
        raise KeyError("no such level")


LIMITS = EpisodeLimits(max_turns=3, max_tokens=64, step_timeout=0.5)
CASES = [(Raises, "errors"), (Hangs, "timeouts"), (Spins, "timeouts"), (NotText, "bad_output"),
         (NaNReward, "bad_output"), (WrongType, "bad_output"), (BadReset, "bad_output"), (ResetRaises, "errors")]


@pytest.mark.parametrize("env, kind", CASES, ids=[c.__name__ for c, _ in CASES])
def test_bad_environment_output_is_contained_and_counted(env, kind):
    mixed = iter([env, Echo, env, Echo])  # a bad environment beside good ones in one batch
    start = time.monotonic()
    out = run_episodes(ScriptedEngine(["ab", "stop"]), TOK, lambda: next(mixed)(), [ITEM, ITEM], 2, SAMPLING, LIMITS)
    assert time.monotonic() - start < 10  # two hangs of 0.5 s each, not 60 s
    bad, good = out[0::2], out[1::2]
    assert all(c.extra["episode"]["end"] == kind for c in bad)
    assert all(c.extra["episode"]["end"] == "done" and c.extra["episode"]["correct"] for c in good)
    assert all(c.token_ids and any(c.loss_mask) for c in out)  # every row keeps a token of the model's to train on
    metrics = episode_metrics(out)
    assert metrics[f"episode/env_{kind}"] == 2.0
    assert sum(metrics[f"episode/env_{k}"] for k in ("errors", "timeouts", "bad_output")) == 2.0


def test_a_hang_off_the_main_thread_is_left_behind():
    """No signal reaches a thread other than the main one (a Ray actor's method): the call runs in a helper thread,
    which is abandoned when it overruns."""
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("out", _timed_call(Hangs(), 0.3)))
    worker.start()
    worker.join(10)
    assert box["out"][0] == "timeouts" and box["out"][1] < 5


def _timed_call(env, timeout):
    start = time.monotonic()
    try:
        call_env(env, "step", {"role": "assistant", "content": "1"}, timeout)
    except EnvProblem as problem:
        return problem.kind, time.monotonic() - start
    return None, time.monotonic() - start


def test_what_a_step_may_return():
    env = Echo()
    assert check_step(env, ([{"role": "tool", "content": "4"}], 1, False, None)).reward == 1.0  # Gym's tuple
    for bad in (StepResult([{"role": "user"}]), StepResult([], True), StepResult([], 0.0, False, info=[1]),
                StepResult("higher")):
        with pytest.raises(EnvProblem) as err:
            check_step(env, bad)
        assert err.value.kind == "bad_output"
    with pytest.raises(EnvProblem):
        check_messages(env, {"role": "user", "content": "x"}, "reset()")


def test_stepping_episodes_in_threads_plays_the_same_episodes_and_contains_a_hang():
    """env.workers > 1: each episode's step runs in a thread of a pool (for environments that wait on a process);
    the episodes are those played in turn, and a hang there is abandoned at the timeout like one off the main
    thread."""
    engine = lambda: ScriptedEngine(["ab", "cd", "stop"])  # noqa: E731
    one = run_episodes(engine(), TOK, Echo, [ITEM], 4, SAMPLING, LIMITS)
    pooled = run_episodes(engine(), TOK, Echo, [ITEM], 4, SAMPLING, EpisodeLimits(3, 64, step_timeout=0.5,
                                                                                   workers=3))
    assert [(c.token_ids, c.loss_mask, c.extra) for c in one] == [(c.token_ids, c.loss_mask, c.extra) for c in pooled]
    mixed = iter([Hangs, Echo, Hangs, Echo])
    start = time.monotonic()
    out = run_episodes(engine(), TOK, lambda: next(mixed)(), [ITEM], 4, SAMPLING,
                       EpisodeLimits(3, 64, step_timeout=0.5, workers=4))
    assert time.monotonic() - start < 10
    assert [c.extra["episode"]["end"] for c in out] == ["timeouts", "done", "timeouts", "done"]
