"""Thinking control: Qwen3-style thinking-mode fusion data and a thinking-token budget at inference."""

from rlvr.thinking.budget import EARLY_STOP_PHRASE, EARLY_STOP_TEXT, ThinkingBudgetEngine
from rlvr.thinking.fusion import (
    NO_THINK_FLAG,
    THINK_END,
    THINK_FLAG,
    THINK_START,
    build_fusion_data,
    no_thinking_completion,
    split_thinking,
    thinking_completion,
    write_fusion_jsonl,
)
from rlvr.thinking.sweep import (
    BudgetPoint,
    add_thinking_budget_args,
    budget_sweep,
    format_budget_table,
    parse_budgets,
    plot_budget_sweep,
    run_budget_eval,
)

__all__ = [
    "BudgetPoint", "EARLY_STOP_PHRASE", "EARLY_STOP_TEXT", "NO_THINK_FLAG", "THINK_END", "THINK_FLAG",
    "THINK_START", "ThinkingBudgetEngine", "add_thinking_budget_args", "budget_sweep", "build_fusion_data",
    "format_budget_table", "no_thinking_completion", "parse_budgets", "plot_budget_sweep", "run_budget_eval",
    "split_thinking", "thinking_completion", "write_fusion_jsonl",
]
