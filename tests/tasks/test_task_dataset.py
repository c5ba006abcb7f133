"""The `dataset` task (TRL-style rows, rlvr.GRPOTrainer's data): prompts as text or conversations, every other
column kept for the reward functions, the verifier grading rows that have an answer and abstaining (NaN) on the
others, a fixed held-out share, and a bad row named by its file and line before any work."""

from __future__ import annotations

import json
import math

import pytest

from rlvr.models import build_char_tokenizer
from rlvr.rewards import CombinedReward, TRLReward
from rlvr.rewards.combine import PROMPT_MESSAGES
from rlvr.tasks import TooFewExamples, get_task


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_text_prompts_keep_their_columns_and_the_answer_is_text(tmp_path):
    rows = [{"prompt": f"q{i}=", "answer": i, "source": "mine"} for i in range(20)]
    task = get_task("dataset", path=str(_jsonl(tmp_path / "d.jsonl", rows)))
    held = task.eval_examples(2, seed=0)  # a tenth of 20, the same rows whatever the seed
    train = task.train_examples(100, seed=0)
    assert len(held) == 2 and len(train) == 18 and not {e.prompt for e in held} & {e.prompt for e in train}
    assert {e.prompt for e in task.eval_examples(2, seed=5)} == {e.prompt for e in held}
    example = next(e for e in train if e.prompt == "q7=")
    assert example.answer == "7" and example.as_dict() == {"prompt": "q7=", "answer": "7", "source": "mine"}
    with pytest.raises(TooFewExamples, match="holds out 2 rows .* fewer than 3"):
        task.eval_examples(3, seed=0)


def test_a_conversation_is_rendered_and_kept_for_trl_rewards(tmp_path):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2="}]
    path = _jsonl(tmp_path / "chat.jsonl", [{"prompt": messages, "solution": "4"}] * 4)
    task = get_task("dataset", path=str(path), answer_field="solution", tokenizer="char")
    (example,) = task.eval_examples(1, seed=0)
    assert example.prompt == build_char_tokenizer().apply_chat_template(messages, tokenize=False,
                                                                         add_generation_prompt=True)
    assert example.answer == "4" and example.fields == {"solution": "4", PROMPT_MESSAGES: messages}
    seen = {}

    def reward(prompts, completions, solution, **columns):
        seen.update(prompts=prompts, completions=completions, solution=solution, columns=sorted(columns))
        return [1.0] * len(completions)

    TRLReward(reward).score_batch([example.prompt], ["4"], [example])
    assert seen == {"prompts": [messages], "completions": [[{"role": "assistant", "content": "4"}]],
                    "solution": ["4"], "columns": ["answer"]}
    with pytest.raises(ValueError, match=r"chat.jsonl:1: the prompt is a conversation; give tokenizer="):
        get_task("dataset", path=str(path))


@pytest.mark.parametrize("match, completions, scores", [
    ("math", ["The answer is 4.", "\\boxed{4.0}", "5", "4"], [1.0, 1.0, 0.0, 1.0]),
    ("exact", [" ab ", "The answer is ab.", "ba", "ab"], [1.0, 0.0, 0.0, 1.0])])
def test_the_verifier_grades_rows_with_an_answer_and_abstains_on_the_others(tmp_path, match, completions, scores):
    answer = "4" if match == "math" else "ab"
    rows = [{"prompt": f"p{i}", "answer": answer} for i in range(4)] + [{"prompt": "open", "note": "no answer"}]
    task = get_task("dataset", path=str(_jsonl(tmp_path / "d.jsonl", rows)), match=match, eval_fraction=0.5)
    examples = sorted(task.train_examples(10, 0) + task.eval_examples(2, 0), key=lambda e: e.prompt)
    graded, open_ = examples[1:], examples[0]
    assert open_.prompt == "open" and open_.answer == ""
    batch = task.reward_fn().score_batch([e.prompt for e in graded], completions, graded)
    assert batch.scores == scores
    (nan,) = task.reward_fn().score_batch(["open"], [answer], [open_]).scores
    assert math.isnan(nan) and not task.is_correct(answer, open_)
    assert task.correct_batch(completions, graded) == [s == 1.0 for s in scores]
    combined = CombinedReward.single(task.reward_fn()).score_batch(["open"], ["x"], [open_])
    assert combined.scores == [0.0]  # not applicable adds nothing (TRL's nansum)


@pytest.mark.parametrize("row, error", [
    ({"question": "no prompt"}, "d.jsonl:2: no 'prompt' field (has ['question'])"),
    ({"prompt": ""}, "d.jsonl:2: field 'prompt' must be text or a list of {role, content} messages, got \"\""),
    ({"prompt": [{"role": "user"}]}, "d.jsonl:2: field 'prompt' must be text or a list of {role, content} messages")])
def test_a_bad_row_is_named_by_its_line(tmp_path, row, error):
    path = _jsonl(tmp_path / "d.jsonl", [{"prompt": "fine"}, row])
    with pytest.raises(ValueError) as err:
        get_task("dataset", path=str(path))
    assert error in str(err.value)


def test_bad_options(tmp_path):
    path = str(_jsonl(tmp_path / "d.jsonl", [{"prompt": "a"}]))
    with pytest.raises(ValueError, match="match must be one of"):
        get_task("dataset", path=path, match="fuzzy")
    with pytest.raises(ValueError, match="give path="):
        get_task("dataset")
    with pytest.raises(ValueError, match="eval_fraction must be in"):
        get_task("dataset", path=path, eval_fraction=1.0)
