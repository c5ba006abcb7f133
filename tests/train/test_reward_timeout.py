"""A reward that hangs cannot hang the run: every sample past `reward.timeout` scores the fallback and
counts in reward/errors and reward/timeouts; a reward that keeps timing out stops the run fast with one line
(the circuit breaker), reward.step_timeout bounds a step's rewards; `reward.workers` is checked before any work."""

import json
import os
import time
from dataclasses import dataclass

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config, save_config
from rlvr.tasks import TASKS, register_task
from rlvr.tasks.sorting import SortTask
from rlvr.train.loop import train
from rlvr.train.validate import check_registries

HANGING, LOCAL, SLOW = "sort_hanging_reward", "sort_local_reward", "sort_slow_reward"
NO_BREAKER = ["reward.max_timeouts_in_a_row=0", "reward.max_timeout_share=0"]
TINY = ["model.tiny_preset=test", "task.options={length: 3}", "task.train_size=64", "task.eval_size=4",
        "train.steps=1", "train.batch_size=8", "train.group_size=4", "rollout.max_new_tokens=6",
        "eval.samples=0", "eval.every=0", "log.progress=false", "log.report_to=[]", "log.plots=false",
        "checkpoint.every=0", "threads=1"]


CALLS = "RLVR_TEST_REWARD_CALLS"  # a file each call of the hanging reward adds a line to (worker processes too)


def sleeps_forever(prompt, completion, example):
    if CALLS in os.environ:
        with open(os.environ[CALLS], "a") as log:
            log.write("call\n")
    time.sleep(10**6)


@dataclass
class HangingSort(SortTask):
    """A custom task whose verifier never returns (a module-level function: worker processes can import it)."""

    name: str = HANGING

    def reward_fn(self):
        return sleeps_forever


def sleeps_a_while(prompt, completion, example):
    time.sleep(0.3)
    return 1.0


@dataclass
class SlowSort(SortTask):
    """A custom task whose verifier takes 0.3 s a sample."""

    name: str = SLOW

    def reward_fn(self):
        return sleeps_a_while


@dataclass
class LocalRewardSort(SortTask):
    """A custom task whose verifier is a closure: it runs in the trainer, never in worker processes."""

    name: str = LOCAL

    def reward_fn(self):
        return lambda prompt, completion, example: 1.0


for _name, _task in [(HANGING, HangingSort), (LOCAL, LocalRewardSort), (SLOW, SlowSort)]:
    if _name not in TASKS:
        register_task(_name)(_task)


def _config(tmp_path, *sets):
    return load_config(None, [*TINY, *sets, f"out_dir={tmp_path / 'run'}"])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 1])
def test_a_reward_that_sleeps_forever_ends_as_errors_and_the_step_completes(tmp_path, workers):
    """With the circuit breaker off, every sample scores the fallback and the step completes."""
    cfg = _config(tmp_path, f"task.name={HANGING}", "reward.timeout=0.2", f"reward.workers={workers}", *NO_BREAKER)
    result = train(cfg)  # no bound on its time: a reward the timeout missed would hang the run
    assert result.steps == 1
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "run/metrics.jsonl").read_text().splitlines())}
    assert rows[1]["reward/errors"] == rows[1]["reward/timeouts"] == cfg.train.batch_size
    assert rows[1]["reward"] == 0.0  # the fallback
    assert rows[1]["eval/greedy_reward"] == 0.0 and (tmp_path / "run/final_model").is_dir()


@pytest.mark.parametrize("workers", [0, 1])
def test_a_reward_that_hangs_on_every_sample_stops_the_run_fast_with_one_line(tmp_path, capsys, monkeypatch,
                                                                          workers):
    """The breaker's defaults: the first evaluation's 4 samples all time out (at least half a batch), and the run
    stops there, naming the reward, exit code 1: the reward was called on those 4 samples and no other (without the
    breaker, 8 a step for 50 steps). Told by the calls, not by the run's time (a busy machine once took 61.5 s)."""
    monkeypatch.setenv(CALLS, str(tmp_path / "calls"))
    save_config(_config(tmp_path, f"task.name={HANGING}", "reward.timeout=0.2", f"reward.workers={workers}",
                        "train.steps=50"), tmp_path / "c.yaml")
    assert main(["train", str(tmp_path / "c.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlvr train: stopped: reward 'task' timed out on 4 of a batch's 4 "
                                                   "samples (100%, reward.max_timeout_share=0.5; reward.timeout=0.2 s")
    assert (tmp_path / "calls").read_text().count("\n") == 4 and not (tmp_path / "run" / "final_model").exists()


def test_a_step_deadline_bounds_a_slow_rewards_step_and_counts_its_timeouts(tmp_path):
    """8 samples of 0.3 s (2.4 s) under a 0.5 s deadline: at most 2 end in time (fewer on a busy machine), the
    others are cut and counted; without the deadline none would be. Told by the counts, not by the run's time."""
    cfg = _config(tmp_path, f"task.name={SLOW}", "reward.timeout=5", "reward.step_timeout=0.5", *NO_BREAKER)
    train(cfg)
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "run/metrics.jsonl").read_text().splitlines())}
    assert 4 <= rows[1]["reward/timeouts"] <= 8 and rows[1]["reward/timeouts"] == rows[1]["reward/errors"]


def test_reward_workers_need_an_importable_reward(tmp_path):
    with pytest.raises(ConfigError, match=r"^reward.workers=1: reward 'task' cannot run in worker processes: "
                                          r"it is not picklable"):
        check_registries(_config(tmp_path, f"task.name={LOCAL}", "reward.workers=1"))
    check_registries(_config(tmp_path, f"task.name={LOCAL}"))  # in the trainer, under the deadline
    check_registries(_config(tmp_path, "reward.workers=1"))  # sort's verifier is rlvr's own: it stays in process


def test_bad_reward_workers_fail_before_any_work(tmp_path, capsys):
    save_config(_config(tmp_path, f"task.name={LOCAL}"), tmp_path / "c.yaml")
    assert main(["train", str(tmp_path / "c.yaml"), "--set", "reward.workers=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reward.workers=2" in err and not (tmp_path / "run").exists()
