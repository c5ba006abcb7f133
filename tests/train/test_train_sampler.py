"""Prompt samplers chosen from the config (task.prompt_sampler): end-to-end runs, failure-rate weighting
seen in the loop's draws, exact resume, and a bad name rejected before any work."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import rlvr.train.loop as loop_module
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.tasks import TASKS, register_task
from rlvr.tasks.sorting import SortTask
from rlvr.data.stream import SampledPromptStream, build_prompt_stream, difficulty_scores
from rlvr.train.loop import train
from rlvr.train.setup import prepare_run

FIXED = "sort_fixed_outcome"


@dataclass
class FixedOutcomeSort(SortTask):
    """Sorting whose correctness ignores the completion: even-numbered training prompts always count
    as solved, odd ones never, so which prompts fail is known whatever the model does."""

    name: str = FIXED

    def train_examples(self, n, seed):
        examples = super().train_examples(n, seed)
        for i, ex in enumerate(examples):
            ex.fields["solved"] = i % 2 == 0
        return examples

    def is_correct(self, completion, example):
        return bool(example.fields.get("solved", False))


if FIXED not in TASKS:
    register_task(FIXED)(FixedOutcomeSort)

QUICK = dict(eval={"every": 0, "samples": 0}, log={"progress": False, "report_to": [], "plots": False})


def run_config(config_factory, name, sampler, options=None, **sections):
    task = {"prompt_sampler": sampler, "sampler_options": options or {}, "eval_size": 4, **sections.pop("task", {})}
    return load_config(config_factory(name, **QUICK, task=task, **sections))


def metrics(cfg):
    return [json.loads(line) for line in (Path(cfg.out_dir) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("sampler, options", [("failure_rate", {"decay": 0.9}),
                                              ("curriculum", {"n_buckets": 2, "steps_per_stage": 2})])
def test_each_sampler_trains_with_finite_metrics(config_factory, sampler, options):
    cfg = run_config(config_factory, sampler, sampler, options)
    run = prepare_run(cfg)
    result = train(cfg, run=run)
    rows = metrics(cfg)
    assert result.steps == 3 and [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(math.isfinite(v) for r in rows for v in r.values())
    assert isinstance(run.rollout.stream, SampledPromptStream)
    assert run.rollout.stream.draws.sum() == 3 * cfg.train.batch_size // cfg.train.group_size  # one draw per group


@pytest.mark.slow
def test_curriculum_draws_only_unlocked_buckets(config_factory):
    cfg = run_config(config_factory, "cur", "curriculum", {"n_buckets": 2, "steps_per_stage": 10})
    run = prepare_run(cfg)
    train(cfg, run=run)
    easy = set(run.rollout.stream.sampler.buckets[0])
    assert set(np.flatnonzero(run.rollout.stream.draws)) <= easy  # 3 steps < steps_per_stage: stage 0 only


@pytest.mark.slow
def test_failure_rate_draws_failing_prompts_more_often(config_factory):
    steps, prompts = 8, 4
    cfg = run_config(config_factory, "fr", "failure_rate", task={"name": FIXED, "train_size": 8},
                     train={"steps": steps, "batch_size": prompts * 4, "group_size": 4})
    run = prepare_run(cfg)
    train(cfg, run=run)
    solved = np.array([ex.fields["solved"] for ex in run.rollout.stream.pool])
    draws = run.rollout.stream.draws
    assert draws.sum() == steps * prompts and solved.sum() == 4
    # uniform sampling would draw both halves equally often (exactly so, epoch by epoch)
    assert draws[~solved].sum() > 2 * draws[solved].sum()
    assert np.all(run.rollout.stream.sampler.failure_rates()[~solved] > run.rollout.stream.sampler.failure_rates()[solved])


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["failure_rate", "curriculum"])
def test_resume_with_a_weighted_sampler_equals_uninterrupted(config_factory, monkeypatch, sampler):
    sections = dict(train={"steps": 5, "batch_size": 16, "group_size": 4}, checkpoint={"every": 2, "keep": 5})
    options = {"n_buckets": 2, "steps_per_stage": 2} if sampler == "curriculum" else {}
    full_cfg = run_config(config_factory, "full", sampler, options, **sections)
    full = prepare_run(full_cfg)
    train(full_cfg, run=full)

    cfg = run_config(config_factory, "crashed", sampler, options, **sections)
    real_save = loop_module.save_checkpoint

    def crash_at_step_4(run_dir, step, *args, **kwargs):
        if step == 4:  # steps 3 and 4 are logged, the newest checkpoint is step 2
            raise KeyboardInterrupt
        return real_save(run_dir, step, *args, **kwargs)

    monkeypatch.setattr(loop_module, "save_checkpoint", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    monkeypatch.setattr(loop_module, "save_checkpoint", real_save)
    resumed = prepare_run(cfg, resume=True)
    assert resumed.start_step == 2
    train(cfg, resume=True, run=resumed)
    assert metrics(cfg) == metrics(full_cfg)
    assert np.array_equal(resumed.rollout.stream.draws, full.rollout.stream.draws)
    assert resumed.rollout.stream.sampler.state_dict() == full.rollout.stream.sampler.state_dict()


def test_unknown_sampler_or_option_exits_2_with_one_line(config_factory, capsys):
    path = str(config_factory("bad"))
    for override, words in [("task.prompt_sampler=weighted", "task.prompt_sampler"),
                            ("task.sampler_options={temperature: 2}", "task.sampler_options")]:
        sampler = [] if "prompt_sampler" in override else ["--set", "task.prompt_sampler=failure_rate"]
        assert main(["train", path, *sampler, "--set", override]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err


def test_uniform_takes_no_options_and_stream_helpers_check_input():
    from rlvr.tasks.base import Example

    pool = [Example("ab", "a", {"size": 2}), Example("a", "a", {"size": 1}), Example("abc", "a", {})]
    with pytest.raises(ValueError, match="no options"):
        build_prompt_stream("uniform", {"decay": 0.5}, pool, 0)
    assert difficulty_scores(pool, "prompt_length") == [2.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="example 2 has no numeric field 'size'"):
        difficulty_scores(pool, "size")
    assert difficulty_scores(pool[:2], "size") == [2.0, 1.0]
