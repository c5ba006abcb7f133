"""The loop's held-out evaluation reports a task's held-out groups (word_problems' held-out families) as metrics of
their own, and format apart from value; `rlvr train` ends with them before and after, the gain and where things are."""

import io

import pytest
from rich.console import Console

from rlvr.models import build_char_tokenizer
from rlvr.rollout.base import Completion
from rlvr.tasks import get_task
from rlvr.train.evaluate import eval_groups, evaluate_heldout
from rlvr.train.loop import RunResult
from rlvr.train.summary import print_summary


class ScriptedEngine:
    """Answers each prompt with the completion `answer(example)` gives."""

    def __init__(self, replies):
        self.replies = replies  # prompt -> completion text

    def generate(self, prompts, n, sampling):
        return [Completion(p, [1], [0] * 5, [0.0] * 5, self.replies[p], "stop") for p in prompts for _ in range(n)]


@pytest.fixture
def task_and_examples():
    task = get_task("word_problems", tokenizer=build_char_tokenizer(), held_out_templates=["measure"],
                    answer_extraction="marker")
    return task, task.eval_examples(4, seed=0)


def test_groups_are_reported_apart_and_format_apart_from_value(task_and_examples):
    task, examples = task_and_examples
    seen, unseen = examples[:4], examples[4:]
    assert eval_groups(examples) == {None: [0, 1, 2, 3], "heldout_family": [4, 5, 6, 7]}
    wrong = lambda e: str(int(e.answer) + 1)  # noqa: E731
    replies = {seen[0].prompt: f"\\boxed{{{seen[0].answer}}}", seen[1].prompt: f"\\boxed{{{seen[1].answer}}}",
               seen[2].prompt: f"\\boxed{{{wrong(seen[2])}}}", seen[3].prompt: f"it is {seen[3].answer}",
               unseen[0].prompt: f"\\boxed{{{unseen[0].answer}}}", unseen[1].prompt: f"\\boxed{{{wrong(unseen[1])}}}",
               unseen[2].prompt: "no idea", unseen[3].prompt: "no idea"}
    metrics, rows = evaluate_heldout(ScriptedEngine(replies), task, examples, 8, 2, 1.0, 0, 3)
    assert metrics["eval/greedy_accuracy"] == 0.5 and metrics["eval/greedy_format"] == 0.75
    assert metrics["eval/greedy_formatted_wrong"] == 0.25 and metrics["eval/greedy_reward"] == 0.5
    assert metrics["eval/heldout_family/greedy_accuracy"] == 0.25
    assert metrics["eval/heldout_family/greedy_format"] == 0.5
    assert metrics["eval/heldout_family/greedy_formatted_wrong"] == 0.25
    assert metrics["eval/sampled_accuracy"] == 0.5 and metrics["eval/heldout_family/pass@2"] == 0.25
    assert len(rows) == 6 and rows[0]["mode"] == "greedy"


def test_a_task_without_groups_keeps_its_metric_names():
    task = get_task("arithmetic")
    examples = task.eval_examples(2, seed=0)
    metrics, _ = evaluate_heldout(ScriptedEngine({e.prompt: e.answer for e in examples}), task, examples, 4, 0,
                                  1.0, 0, 0)
    assert metrics == {"eval/greedy_accuracy": 1.0, "eval/greedy_reward": 1.0, "eval/greedy_length": 5.0}


def test_the_end_of_a_run_shows_before_after_gain_per_group_and_where_things_are(tmp_path):
    first = {"eval/greedy_accuracy": 0.25, "eval/greedy_format": 0.5, "eval/heldout_family/greedy_accuracy": 0.125}
    final = {"eval/greedy_accuracy": 0.75, "eval/greedy_format": 1.0, "eval/heldout_family/greedy_accuracy": 0.5,
             "eval/heldout_family/pass@2": 0.5}
    out = io.StringIO()
    print_summary(RunResult(tmp_path, first, final, 3), 12.3, Console(file=out, width=200))
    text = out.getvalue()
    lines = [" ".join(line.replace("│", " ").split()) for line in text.splitlines()]
    assert "held-out greedy exact-match accuracy" in text
    assert "main accuracy 0.250 0.750 +0.500" in lines and "main answer stated as asked (format) 0.500 1.000 +0.500" \
        in lines and "heldout_family accuracy 0.125 0.500 +0.375" in lines
    assert f"wall time 12 s; run folder {tmp_path}" in text and f"rlvr report {tmp_path}" in text
    assert f"rlvr doctor {tmp_path}" in text
