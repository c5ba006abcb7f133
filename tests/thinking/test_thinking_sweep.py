import argparse
import json

import pytest

from rlvr.commands.eval import add_thinking_budget_args, parse_budgets
from rlvr.models import build_char_tokenizer, build_tiny_model
from rlvr.rollout import HFEngine, SamplingParams
from rlvr.tasks.base import Example
from rlvr.thinking import (
    EARLY_STOP_TEXT,
    ThinkingBudgetEngine,
    budget_sweep,
    format_budget_table,
    run_budget_eval,
)

from thinking_fakes import CharScriptEngine


class AnswerTask:
    name = "toy"

    def is_correct(self, completion, example):
        return completion.strip() == example.answer


def toy_setup():
    """Question i needs 20 * (i + 1) thinking tokens; cut short, the fake model answers wrong."""
    examples = [Example(prompt=f"q{i}:", answer=str(i)) for i in range(4)]
    responses = {ex.prompt: f"<think>{'x' * (20 * (i + 1) - 15)}</think>\n\n{i}" for i, ex in enumerate(examples)}
    return CharScriptEngine(responses, after_cut={ex.prompt: "wrong" for ex in examples}), examples


def test_accuracy_rises_with_budget_by_hand():
    engine, examples = toy_setup()
    points = budget_sweep(engine, AnswerTask(), examples, [10, 20, 40, 80])
    # "<think>" + x's + "</think>" is 20 (i + 1) tokens, so budget b fits the questions with 20 (i + 1) <= b
    assert [p.accuracy for p in points] == [0.0, 0.25, 0.5, 1.0]
    assert [p.exhausted for p in points] == [1.0, 0.75, 0.5, 0.0]
    assert points[0].mean_thinking_tokens == 10 and points[-1].mean_thinking_tokens == (20 + 40 + 60 + 80) / 4
    assert "budget" in format_budget_table(points).splitlines()[0]


def test_cli_args_and_run_budget_eval(tmp_path):
    parser = argparse.ArgumentParser()
    add_thinking_budget_args(parser)
    args = parser.parse_args(["--thinking-budget", "20,80"])
    assert args.thinking_budget == [20, 80] and args.answer_tokens is None
    engine, examples = toy_setup()
    points = run_budget_eval(args, engine, AnswerTask(), examples, tmp_path)
    assert [(p.budget, p.accuracy) for p in points] == [(20, 0.25), (80, 1.0)]
    assert (tmp_path / "thinking_budget.png").stat().st_size > 0
    rows = [json.loads(line) for line in (tmp_path / "thinking_budget.jsonl").read_text().splitlines()]
    assert [r["accuracy"] for r in rows] == [p.accuracy for p in points]
    for bad in ("", "a,b", "0,4"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_budgets(bad)
    with pytest.raises(ValueError, match="at least one budget"):
        budget_sweep(engine, AnswerTask(), examples, [])


def test_real_tiny_model_budget():
    """Random tiny weights never write </think>: every sample is cut, the phrase goes in, tokens align."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=0)
    engine = HFEngine(model, tokenizer)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6, seed=1)
    out = ThinkingBudgetEngine(engine, budget=8).generate(["sort 3 1 2=<think>", "9+1="], 2, sampling)
    assert [c.prompt for c in out] == ["sort 3 1 2=<think>"] * 2 + ["9+1="] * 2
    for c in out:
        mask = c.extra["sampled_mask"]
        assert len(c.token_ids) == len(c.logprobs) == len(mask)
        if c.extra["budget_exhausted"]:
            assert EARLY_STOP_TEXT in c.text and c.extra["thinking_tokens"] == 8
            inserted = tokenizer.decode([t for t, m in zip(c.token_ids, mask) if not m])
            assert inserted == EARLY_STOP_TEXT  # char tokenizer: the inserted ids are exactly the phrase
        assert tokenizer.decode(c.token_ids, skip_special_tokens=True).startswith(c.text[: len(c.text) // 2])
        assert all(lp <= 0 for lp in c.logprobs)
    assert any(c.extra["budget_exhausted"] for c in out)
