"""`rlvr train` with an environment (env.name): episodes are the group's samples, only the model's tokens reach the
loss, the episode metrics and whole episodes are logged, and a run stopped after a checkpoint resumes exactly."""

import json

import pytest
import torch

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.core import keep_tokens
from rlvr.rollout.batch import pack
from rlvr.train.loop import train
from rlvr.train.setup import prepare_run

pytestmark = pytest.mark.slow

GAME = ["task.train_size=64", "task.eval_size=7", "env.max_turns=4", "env.max_tokens=32", "sft.steps=5",
        "sft.batch_size=8", "train.batch_size=16", "train.group_size=4", "train.mini_batch_size=8", "eval.samples=2",
        "log.progress=false", "log.plots=false", "log.report_to=[]"]


def _train(out, *sets):
    argv = ["train", "environments/guess"]
    for value in [*GAME, f"out_dir={out}", *sets]:
        argv += ["--set", value]
    assert main(argv) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_run_logs_episodes_and_resumes_exactly(tmp_path, crash):
    full = _train(tmp_path / "full", "train.steps=4", "eval.every=2", "checkpoint.every=2")
    assert [r["step"] for r in full] == [0, 1, 2, 3, 4]
    step = full[1]
    assert 1 <= step["episode/turns"] <= 4 and 0 < step["episode/masked_share"] < 1
    assert step["episode/env_errors"] == 0 and "reward/env" in step
    assert {"eval/greedy_turns", "eval/sampled_turns", "eval/greedy_accuracy"} <= full[-1].keys()
    rows = [json.loads(line) for line in (tmp_path / "full" / "samples.jsonl").read_text().splitlines()]
    turns = rows[0]["episode"]["turns"]
    assert turns and {"assistant", "tokens", "reward", "info"} <= turns[0].keys()

    crashed = crash(tmp_path / "full", 2, tmp_path / "crashed")
    for name in ("metrics.jsonl", "samples.jsonl", "timings.jsonl"):  # the logs as they were at step 2
        lines = (crashed / name).read_text().splitlines()
        (crashed / name).write_text("".join(line + "\n" for line in lines if json.loads(line)["step"] <= 2))
    assert main(["train", "--resume", str(crashed)]) == 0
    assert (crashed / "metrics.jsonl").read_text() == (tmp_path / "full" / "metrics.jsonl").read_text()


def test_only_the_models_tokens_reach_the_loss(tmp_path, monkeypatch):
    """The objective's micro-batches carry the mask of the model's tokens: the environment's are out of it, so the
    loss, its token count and every metric over tokens leave them out."""
    cfg = load_config("environments/guess", [*GAME, f"out_dir={tmp_path / 'run'}", "train.steps=1", "eval.every=0",
                                              "algorithm.mu=1", "train.mini_batch_size=16", "train.zero_advantage_rows=train"])
    run = prepare_run(cfg)
    batch = run.rollout.collect(1)
    assert batch.loss_masks is not None and any(0 in m for m in batch.loss_masks)
    _, _, completion, _ = pack(batch.prompt_ids, batch.completion_ids, 0)
    expected = keep_tokens(completion, torch.tensor([k for m in batch.loss_masks for k in m]))
    seen = []
    loss = run.learner.objective.loss
    monkeypatch.setattr(run.learner.objective, "loss", lambda mb, *a, **k: seen.append(mb.mask) or loss(mb, *a, **k))
    run.learner.update(batch)
    assert int(sum(m.sum() for m in seen)) == int(expected.sum()) == sum(map(sum, batch.loss_masks))
    assert all(len(lp) == sum(m) for lp, m in zip(batch.sampler_logprobs, batch.loss_masks))
    run.logger.close()



SHIPPED = {"tools": ["env.options.system=calc", "env.options.instruction=boxed", "env.max_tokens=48", "sft.steps=2"],
           "code": ["env.max_tokens=64", "env.max_observation_tokens=32"]}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_real_model_config_trains_with_the_tiny_model_in_its_place(tmp_path, name):
    """`configs/environments/{tools,code}.yaml` as shipped but for their model (the tiny one, with prompts and
    budgets that fit its context, and a shorter warm start): a step of episodes trains, with the tool-call metrics in training and held-out
    rows; the code environment's failing tests come back as (masked) observations for another attempt."""
    argv = ["train", f"environments/{name}"]
    for value in ["model.path=", "model.tiny_preset=test", "threads=1", "train.steps=1", "task.train_size=16",
                  "task.eval_size=4", "train.batch_size=8", "train.group_size=4", "eval.every=1",
                  "rollout.max_new_tokens=16", "log.progress=false", "log.plots=false", "log.report_to=[]",
                  *SHIPPED[name], f"out_dir={tmp_path / 'run'}"]:
        argv += ["--set", value]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    step = rows[1]
    assert 1 <= step["episode/turns"] <= 3 and 0 <= step["episode/tool_errors"] <= step["episode/tool_calls"]
    assert all(r["eval/greedy_tool_calls"] >= 0 for r in rows)
    assert 0 <= step["episode/tool_calls_correct"] <= step["episode/tool_calls"]
    if name == "tools":  # its SFT warm start played the environment's demonstrations
        assert (tmp_path / "run" / "sft_model").is_dir()
    if name == "code":  # the tiny model's attempts fail, and the failures are fed back
        assert step["episode/turns"] > 1 and step["episode/masked_share"] > 0
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["episode"]["turns"][0]["assistant"] is not None
