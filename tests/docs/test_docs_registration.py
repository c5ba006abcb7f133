"""docs/rewards_tasks_eval.md, "Your own rewards and tasks": its blocks run as written. The docs spoke of "a
function added to `REWARDS`", but `REWARDS` holds factories (`REWARDS["brevity"] = brevity` fails on use),
and `register_task` was mentioned nowhere."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.rewards import REWARDS, RewardOutput, reward_from_name
from rlvr.tasks import TASKS, Task, TaskOptionError, get_task
from rlvr.commands.grammar import set_args

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "rewards_tasks_eval.md"
HEADING = "### Your own rewards and tasks\n"
TINY = ["model.tiny_preset=test", "task.train_size=64", "task.eval_size=4", "sft.steps=2", "sft.batch_size=8",
        "train.steps=1", "train.batch_size=8", "train.group_size=4", "train.mini_batch_size=0", "eval.every=0",
        "eval.samples=2", "log.progress=false", "log.report_to=[]", "log.plots=false", "checkpoint.every=0",
        "threads=1"]


def _blocks() -> list[str]:
    section = DOC.read_text().split(HEADING)[1].split("\n### ")[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.fixture
def registered():
    """The namespace of the docs' registration block, run as written; the registries are restored after."""
    rewards, tasks = dict(REWARDS), dict(TASKS)
    namespace = {"__name__": "docs_snippet"}
    exec(compile(_blocks()[0], f"{DOC} ({HEADING.strip()})", "exec"), namespace)
    yield namespace
    REWARDS.clear()
    REWARDS.update(rewards)
    TASKS.clear()
    TASKS.update(tasks)


def test_the_section_has_the_two_blocks_it_describes():
    register, run = _blocks()
    assert "REWARDS[" in register and "@register_task(" in register and run.lstrip().startswith("from rlvr.cli")


def test_the_registration_block_runs_as_written(registered):
    task, reward = registered["task"], registered["reward"]
    assert isinstance(task, Task) and task.length == 5 and reward.chars == 50
    held = task.eval_examples(4, seed=0)
    assert all(ex.prompt.startswith("reverse a") and len(ex.answer) == 5 for ex in held)
    assert not {ex.prompt for ex in task.train_examples(50, seed=0)} & {ex.prompt for ex in held}
    assert task.is_correct(held[0].answer, held[0]) and task.reward_fn()("", held[0].answer, held[0].as_dict()) == 1.0
    assert reward("p", "x" * 50, {}) == 0.5
    assert reward_from_name("brevity")("p", "x" * 100, {}) == RewardOutput(0.5, {"chars": 100})
    with pytest.raises(TaskOptionError, match="^reverse has no option 'lenght'; options: length$"):
        get_task("reverse", lenght=3)


def test_registering_the_reward_itself_fails_as_the_docs_say(registered):
    REWARDS["wrong"] = registered["brevity"]
    with pytest.raises(ValueError, match="bad options for reward 'wrong': .*missing 3 required positional"):
        reward_from_name("wrong")


def test_the_run_block_trains_on_the_registered_task_and_reward(registered, tmp_path, monkeypatch):
    """The block's argv as written, run in the repository (its config path is relative), made tiny."""
    call = re.search(r"main\((\[.*?\])\)", _blocks()[1], re.S)
    argv = ast.literal_eval(call.group(1))
    monkeypatch.chdir(ROOT)
    assert main([*argv, *set_args([*TINY, f"out_dir={tmp_path / 'run'}"])]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r.get("step", 0) > 0]
    assert trained and "reward/short" in trained[-1] and "reward/task" in trained[-1]
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "name: reverse" in saved and "length: 5" in saved
