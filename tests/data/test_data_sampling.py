import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlvr.data.curriculum import CurriculumSampler, curriculum_buckets, curriculum_order, easy_to_hard
from rlvr.data.sampler import FailureRateSampler, PromptSampler


def test_failure_rates_by_hand():
    s = FailureRateSampler(3, prior_fail=1, prior_success=1)
    assert np.allclose(s.probabilities(), [1 / 3] * 3)  # no data: uniform
    s.update([0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 0, 0])  # prompt 0 solved 4/4, prompt 1 failed 2/2
    # f = (fail + 1) / (attempts + 2): 1/6, 3/4, 1/2
    assert np.allclose(s.failure_rates(), [1 / 6, 3 / 4, 1 / 2])
    assert np.allclose(s.probabilities(), np.array([1 / 6, 3 / 4, 1 / 2]) / (1 / 6 + 3 / 4 + 1 / 2))


def test_decay_shrinks_old_counts():
    s = FailureRateSampler(1, decay=0.5)
    s.update([0], [1.0])
    s.update([0], [0.0])  # old success weighs 1/2 now: fail 1, attempts 1.5
    assert np.isclose(s.failure_rates()[0], (1 + 1) / (1.5 + 2))


def test_sampling_frequency_follows_failure_rate():
    s = FailureRateSampler(2, seed=0)
    s.update([0] * 98 + [1] * 98, [1.0] * 98 + [0.0] * 98)  # f = 1/100 and 99/100
    draws = np.array([s.sample(1)[0] for _ in range(4000)])
    assert abs((draws == 0).mean() - 0.01) < 4 * (0.01 * 0.99 / 4000) ** 0.5


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 1)), max_size=40), st.integers(1, 5))
def test_state_dict_resumes_exactly(updates, k):
    a = FailureRateSampler(5, seed=3)
    if updates:
        a.update([i for i, _ in updates], [o for _, o in updates])
    b = FailureRateSampler(5, seed=99)
    b.load_state_dict(a.state_dict())
    assert a.sample(k) == b.sample(k)
    assert isinstance(a, PromptSampler)


def test_sampler_bad_input():
    s = FailureRateSampler(3)
    with pytest.raises(ValueError, match="equal length"):
        s.update([0, 1], [1.0])
    with pytest.raises(ValueError, match="in 0..2"):
        s.update([3], [1.0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        s.update([0], [2.0])
    with pytest.raises(ValueError, match="distinct prompts"):
        s.sample(4)
    with pytest.raises(ValueError, match="decay"):
        FailureRateSampler(3, decay=0)


def test_curriculum_by_hand(tmp_path):
    items = ["hard", "easy", "mid", "easy2"]
    difficulty = [0.9, 0.1, 0.5, 0.1]
    assert easy_to_hard(difficulty) == [1, 3, 2, 0]  # ties keep input order
    assert curriculum_buckets(difficulty, 2) == [[1, 3], [2, 0]]
    res = curriculum_order(items, difficulty, report_dir=tmp_path)
    assert res.kept == ["easy", "easy2", "mid", "hard"] and res.kept_scores() == [0.1, 0.1, 0.5, 0.9]
    assert (tmp_path / "curriculum.md").exists()


@settings(deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40), st.integers(1, 8))
def test_buckets_partition_in_difficulty_order(difficulty, n_buckets):
    n_buckets = min(n_buckets, len(difficulty))
    buckets = curriculum_buckets(difficulty, n_buckets, seed=1)
    flat = [i for b in buckets for i in b]
    assert sorted(flat) == list(range(len(difficulty)))
    assert [difficulty[i] for i in flat] == sorted(difficulty)
    assert max(map(len, buckets)) - min(map(len, buckets)) <= 1


def test_curriculum_sampler_unlocks_buckets():
    s = CurriculumSampler([0.0, 0.1, 0.5, 0.6, 0.9, 1.0], n_buckets=3, steps_per_stage=2, seed=0)
    seen = [set(s.sample(2)) for _ in range(6)]
    assert seen[0] | seen[1] <= {0, 1}
    assert seen[2] | seen[3] <= {0, 1, 2, 3}
    assert s.stage == 2 and set(s.pool()) == set(range(6))
    state = s.state_dict()
    nxt = s.sample(3)
    s2 = CurriculumSampler([0.0, 0.1, 0.5, 0.6, 0.9, 1.0], n_buckets=3, steps_per_stage=2, seed=5)
    s2.load_state_dict(state)
    assert s2.sample(3) == nxt
    with pytest.raises(ValueError, match="unlocked at stage"):
        CurriculumSampler([0.0, 1.0], n_buckets=2).sample(2)
    with pytest.raises(ValueError, match="one difficulty per item"):
        curriculum_order(["a"], [0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        easy_to_hard([float("nan")])
