"""The TRL half of `bench_trl.py`, run by it inside the TRL virtualenv (`.venv-trl`); also holds
`TrainClock`, the training-only clock both halves share.

    .venv-trl/bin/python benchmarks/_trl_side.py SPEC.json RESULT.json

SPEC (written by bench_trl.py): the warm-started model folder, the GRPOConfig arguments mapped from
the rlvr config (`bench_trl.trl_arguments`), the task, the evaluation cadence and the thread count.
The task, its reward and its held-out set come from rlvr itself (repo root on sys.path; the task code
needs only the standard library), so both trainers see the same prompts, reward and exact-match check.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class TrainClock:
    """Wall and CPU seconds spent training: evaluation is paused out, so both trainers are timed on the
    same work whatever their evaluation costs. CPU seconds (`process_time`, all threads) are what a
    shared, loaded machine cannot inflate."""

    def __init__(self) -> None:
        self.origin: tuple[float, float] | None = None
        self.paused_wall = self.paused_cpu = 0.0
        self.rollout = [0.0, 0.0]  # wall, CPU seconds spent sampling training completions so far
        self.steps: list[tuple[int, float, float, float, float]] = []  # (RL step, train wall, CPU, rollout wall, CPU)
        self.evals: list[tuple[int, float, float, float]] = []  # (RL step, wall, CPU, greedy exact accuracy)

    def begin(self) -> None:
        self.origin = (time.perf_counter(), time.process_time())

    def now(self) -> tuple[float, float]:
        if self.origin is None:
            return 0.0, 0.0
        return (time.perf_counter() - self.origin[0] - self.paused_wall,
                time.process_time() - self.origin[1] - self.paused_cpu)

    @contextmanager
    def paused(self):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.paused_wall += time.perf_counter() - wall
            self.paused_cpu += time.process_time() - cpu

    def timed_rollout(self, fn):
        """`fn` with its wall and CPU seconds added to `rollout` (the rest of a step is the update)."""
        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.rollout[0] += time.perf_counter() - wall
                self.rollout[1] += time.process_time() - cpu
        return timed

    def step(self, step: int) -> None:
        self.steps.append((step, *self.now(), *self.rollout))

    def evaluated(self, step: int, accuracy: float) -> None:
        """Record an evaluation of the weights after `step`; the clock starts after the step-0 one."""
        self.evals.append((step, *self.now(), accuracy))
        if self.origin is None:
            self.begin()

    def as_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "evals": self.evals}


def greedy_accuracy(model, tokenizer, task, examples, max_new_tokens: int) -> dict[str | None, float]:
    """Held-out greedy exact-match accuracy with `model.generate`, judged by the task's `is_correct`
    on the completion decoded without special tokens (what rlvr's engine hands the task), per evaluation
    group as rlvr reports it (`eval_group`; None: the main set, `eval/greedy_accuracy`)."""
    import torch

    was_training = model.training
    model.eval()
    enc = tokenizer([ex.prompt for ex in examples], return_tensors="pt", padding=True, padding_side="left")
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    model.train(was_training)
    groups: dict[str | None, list[bool]] = {}
    for text, ex in zip(texts, examples):
        groups.setdefault(ex.fields.get("eval_group"), []).append(bool(task.is_correct(text, ex)))
    return {group: sum(right) / len(right) for group, right in groups.items()}


def _callback(clock: TrainClock, spec: dict, tokenizer, task, held_out):
    from transformers import TrainerCallback

    per_rollout, every, steps = spec["updates_per_rollout"], spec["eval_every"], spec["steps"]
    stop_at = spec.get("stop_at")  # --stop-at-target: end at the first evaluation at this accuracy

    def evaluate(model, step: int) -> float:
        with clock.paused():
            groups = greedy_accuracy(model, tokenizer, task, held_out, spec["max_new_tokens"])
        acc = groups.pop(None)
        clock.evaluated(step, acc)
        others = "".join(f", {group} {value:.3f}" for group, value in groups.items())
        print(f"[trl] step {step}: held-out greedy exact accuracy {acc:.3f}{others}", flush=True)
        return acc

    class Clock(TrainerCallback):
        """An RL step = one generation batch = `per_rollout` optimizer steps (mu x minibatches)."""

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            evaluate(model, 0)

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step % per_rollout:
                return
            step = state.global_step // per_rollout
            clock.step(step)
            if (every and step % every == 0) or step == steps:
                accuracy = evaluate(model, step)
                if stop_at is not None and accuracy >= stop_at:
                    control.should_training_stop = True

    return Clock()


def run(spec: dict) -> dict:
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, spec["repo"])
    from rlvr.tasks import get_task
    from rlvr.rewards.scoring import build_reward

    torch.set_num_threads(spec["threads"])
    t = spec["task"]
    task = get_task(t["name"], **t["options"])
    train_examples = task.train_examples(t["train_size"], t["seed"])
    held_out = task.eval_examples(t["eval_size"], t["eval_seed"])
    reward = build_reward(task)

    def sort_reward(prompts, completions, idx, **_):  # TRL passes dataset columns as keyword arguments
        return reward.score_batch(prompts, completions, [train_examples[i] for i in idx]).scores

    tokenizer = AutoTokenizer.from_pretrained(spec["model"], local_files_only=True)
    dataset = Dataset.from_dict({"prompt": [ex.prompt for ex in train_examples],
                                 "idx": list(range(len(train_examples)))})
    clock = TrainClock()
    args = GRPOConfig(output_dir=spec["out_dir"], **spec["trl_args"])
    trainer = GRPOTrainer(model=spec["model"], reward_funcs=sort_reward, args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[_callback(clock, spec, tokenizer, task, held_out)])
    # rollout = prompts -> completions -> rewards, as rlvr's sampler (evaluation calls neither)
    trainer._generate = clock.timed_rollout(trainer._generate)
    trainer._calculate_rewards = clock.timed_rollout(trainer._calculate_rewards)
    trainer.train()
    versions = {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}
    return {**clock.as_dict(), "versions": versions, "threads": torch.get_num_threads()}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: _trl_side.py SPEC.json RESULT.json")
    result = run(json.loads(Path(sys.argv[1]).read_text()))
    Path(sys.argv[2]).write_text(json.dumps(result))
