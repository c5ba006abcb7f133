"""Thinking control: Qwen3-style thinking-mode fusion data and a thinking-token budget at inference.

The names below are imported from their modules when first used (PEP 562): `rlvr.thinking.fusion` (text only,
`rlvr data fusion`) does not import the budget engine and torch with it."""

from rlvr.lazy import lazy_names

_MODULES = {
    "rlvr.thinking.budget": ("EARLY_STOP_PHRASE", "EARLY_STOP_TEXT", "ThinkingBudgetEngine"),
    "rlvr.thinking.fusion": ("NO_THINK_FLAG", "THINK_END", "THINK_FLAG", "THINK_START", "build_fusion_data",
                             "no_thinking_completion", "split_thinking", "thinking_completion", "write_fusion_jsonl"),
    "rlvr.thinking.sweep": ("BudgetPoint", "budget_sweep", "format_budget_table", "plot_budget_sweep",
                            "run_budget_eval"),
}
__getattr__, __all__ = lazy_names(__name__, _MODULES)
