"""The lecture experiments: the sorting toy with four deltas, the free-length toy and the two-state baseline example."""

from rlvr.pipelines.experiments.length_toy import LengthToyConfig, LengthToyResult, run_length_toy
from rlvr.pipelines.experiments.sort_toy import (
    DELTAS,
    SortModel,
    SortToyConfig,
    SortToyResult,
    expected_reward,
    plot_sort_toy,
    run_deltas,
    run_rewards,
    run_sort_toy,
)
from rlvr.pipelines.experiments.sort_rewards import (
    PROMPT_SETS,
    SORT_REWARDS,
    exact_match,
    inclusion_ordering_reward,
    position_reward,
)
from rlvr.pipelines.experiments.two_state import TwoStateResult, check_against_core, format_two_state, two_state_example

__all__ = [
    "DELTAS", "SortModel", "SortToyConfig", "SortToyResult", "TwoStateResult", "check_against_core",
    "expected_reward", "format_two_state", "inclusion_ordering_reward", "plot_sort_toy", "run_deltas",
    "run_sort_toy", "two_state_example", "PROMPT_SETS", "SORT_REWARDS", "exact_match", "position_reward",
    "run_rewards", "LengthToyConfig", "LengthToyResult", "run_length_toy",
]
