import pytest
from hypothesis import given, settings, strategies as st

from rlvr.data.difficulty import best_of_n_filter, difficulty_filter, solve_counts
from rlvr.rollout.base import SamplingParams
from rlvr.tasks.base import Example

from data_helpers import ScriptedEngine


def examples():
    # answer "4" to "2+2", the engine's scripted samples below decide how often each is solved
    return [Example(prompt=f"q{i}", answer="4") for i in range(4)]


def is_correct(text, ex):
    return text.strip() == ex.answer


ENGINE_ANSWERS = {"q0": ["4"] * 4, "q1": ["4", "4", "5", "5"], "q2": ["4", "5", "5", "5"], "q3": ["5"] * 4}


def test_solve_counts_by_hand_and_batching():
    engine = ScriptedEngine(ENGINE_ANSWERS)
    sampling = SamplingParams(temperature=0.7, max_new_tokens=8)
    assert solve_counts(engine, examples(), is_correct, n=4, sampling=sampling, batch_size=3) == [4, 2, 1, 0]
    assert [len(p) for p, _, _ in engine.calls] == [3, 1]  # two generate calls: 3 prompts, then 1
    assert all(n == 4 and s is sampling for _, n, s in engine.calls)


def test_best_of_n_drop_solved_and_kimi_all_fail(tmp_path):
    exs = examples()
    res = best_of_n_filter(exs, ScriptedEngine(ENGINE_ANSWERS), is_correct, n=4, k=2, report_dir=tmp_path)
    assert res.kept_indices == [2, 3]
    assert [(r.index, r.reason, r.detail["solved"]) for r in res.removed] == [(0, "too_easy", 4), (1, "too_easy", 2)]
    assert res.scores == [1.0, 0.5, 0.25, 0.0] and res.kept_scores() == [0.25, 0.0]
    kimi = best_of_n_filter(exs, ScriptedEngine(ENGINE_ANSWERS), is_correct, n=4, mode="all_fail")
    assert kimi.kept == [exs[3]]  # only the prompt failed in all 4 samples survives
    both = difficulty_filter(exs, [4, 2, 1, 0], 4, k=3, drop_unsolved=True)
    assert [(r.index, r.reason) for r in both.removed] == [(0, "too_easy"), (3, "never_solved")]
    md = (tmp_path / "difficulty_filter.md").read_text()
    assert "too_easy (2)" in md and "solved=4" in md


@settings(deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=30), st.integers(1, 8))
def test_kept_are_exactly_those_below_k(solved, k):
    items = [f"p{i}" for i in range(len(solved))]
    res = difficulty_filter(items, solved, 8, k=k, text=lambda s: s)
    assert res.kept == [items[i] for i, s in enumerate(solved) if s < k]
    assert all(r.detail["pass_rate"] == solved[r.index] / 8 for r in res.removed)


def test_bad_input():
    items = ["a", "b"]
    with pytest.raises(ValueError, match="unknown difficulty mode"):
        difficulty_filter(items, [0, 1], 4, k=1, mode="easy", text=lambda s: s)
    with pytest.raises(ValueError, match="k must be in 1..n=4"):
        difficulty_filter(items, [0, 1], 4, text=lambda s: s)
    with pytest.raises(ValueError, match="means k=1"):
        difficulty_filter(items, [0, 1], 4, k=2, mode="all_fail", text=lambda s: s)
    with pytest.raises(ValueError, match="2 items"):
        difficulty_filter(items, [0], 4, k=1, text=lambda s: s)
    with pytest.raises(ValueError, match="outside 0..n=4"):
        difficulty_filter(items, [0, 5], 4, k=1, text=lambda s: s)
    with pytest.raises(ValueError, match="would drop every item"):
        difficulty_filter(items, [0, 1], 4, k=1, drop_unsolved=True, text=lambda s: s)
    with pytest.raises(ValueError, match="1 completions for 2 prompts"):
        class Short(ScriptedEngine):
            def generate(self, prompts, n, sampling):
                return super().generate(prompts, n, sampling)[:1]
        solve_counts(Short({"a": ["x"], "b": ["x"]}), items, is_correct, n=1, text=lambda s: s)
