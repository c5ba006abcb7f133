"""The held-out evaluation of an environment's episodes, by hand: success as accuracy, turns per episode and per
solved episode, tool calls per episode, the share of episodes with one and the shares of the calls that failed and
that were correct, pass@k over a prompt's episodes."""

import pytest

from rlvr.rollout.base import Completion
from rlvr.tasks import Example
from rlvr.train.evaluate import evaluate_episodes


def _episode(turns, correct, calls=0, errors=0, right=0):
    info = [{"tool_calls": calls, "tool_errors": errors, "tool_calls_correct": right}] + [{}] * (turns - 1)
    episode = {"turns": [{"assistant": "x", "tokens": 2, "finish": "stop", "reward": 0.0, "info": i} for i in info],
               "reward": float(correct), "correct": correct, "end": "done", "cut_observations": 0}
    return Completion("p", [1], [5, 6], [0.0, 0.0], "x", "stop", {"episode": episode}, loss_mask=[1, 1])


def play(items, n, sampling):
    """Greedy: item 0 solved in 2 turns with 2 calls (1 failed, 1 correct), item 1 unsolved in 3; sampled (n = 2):
    item 0 twice solved in 1 turn, item 1 once solved in 3 turns with 4 calls (3 correct), once not."""
    if sampling.temperature == 0:
        return [_episode(2, True, 2, 1, 1), _episode(3, False)][:len(items) * n]
    return [_episode(1, True), _episode(1, True), _episode(3, True, 4, 0, 3), _episode(2, False)]


def test_episode_metrics_by_hand():
    metrics, rows = evaluate_episodes(play, [Example("a", "1"), Example("b", "2")], 8, 2, 1.0, 0, 3)
    assert metrics["eval/greedy_accuracy"] == 0.5 and metrics["eval/greedy_turns"] == 2.5
    assert metrics["eval/greedy_turns_solved"] == 2.0 and metrics["eval/greedy_tool_calls"] == 1.0
    assert metrics["eval/greedy_tool_call_errors"] == 0.5  # 1 of the 2 calls failed
    assert metrics["eval/greedy_tool_calls_correct"] == 0.5 and metrics["eval/greedy_tool_call_episodes"] == 0.5
    assert metrics["eval/sampled_accuracy"] == 0.75 and metrics["eval/sampled_turns"] == pytest.approx(7 / 4)
    assert metrics["eval/sampled_turns_solved"] == pytest.approx(5 / 3) and metrics["eval/sampled_tool_calls"] == 1.0
    assert metrics["eval/sampled_tool_call_errors"] == 0.0 and metrics["eval/sampled_tool_calls_correct"] == 0.75
    assert metrics["eval/sampled_tool_call_episodes"] == 0.25  # 1 of the 4 episodes made calls
    assert metrics["eval/pass@1"] == 0.75 and metrics["eval/pass@2"] == 1.0
    assert rows[0]["mode"] == "greedy" and rows[0]["episode"]["turns"][0]["info"]["tool_calls"] == 2
