from fractions import Fraction as F

import pytest
from hypothesis import given, settings, strategies as st

from rlvr.pipelines.experiments.two_state import check_against_core, format_two_state, two_state_example


def test_lecture_numbers_by_hand():
    """Score of a uniform 2-action softmax: +-1/2 on the state's two logits. With p(s, a) = 1/4:
    no baseline, g(s1,a1) = 11 (1/2, -1/2, 0, 0), g(s1,a2) = 9 (-1/2, 1/2, 0, 0), g(s2,a1) = 0,
    g(s2,a2) = 2 (0, 0, -1/2, 1/2): E[g] = (1/4, -1/4, -1/4, 1/4), E||g||^2 = (60.5 + 40.5 + 0 + 2) / 4.
    Baseline (10, 1): every g has norm^2 1/2, same mean."""
    r = two_state_example()
    assert r.baseline == (F(10), F(1))
    assert r.no_baseline.mean == r.with_baseline.mean == (F(1, 4), F(-1, 4), F(-1, 4), F(1, 4))
    assert r.no_baseline.variance == F(103, 4) - F(1, 4) == F(51, 2)
    assert r.with_baseline.variance == F(1, 2) - F(1, 4) == F(1, 4)
    assert r.no_baseline.coordinate_variance[0] == F(121 + 81, 16) - F(1, 16)
    # the lecture's |grad pi| = 1 shortcut: population variance of (11, 9, 0, 2) and of (1, -1, -1, 1)
    assert r.scalar_variance == (F(85, 4), F(1))
    # the lecture prints torch.std (n - 1): sqrt(85 / 3) = 5.32 and sqrt(4 / 3) = 1.15
    assert r.scalar_unbiased_variance == (F(85, 3), F(4, 3))
    assert r.scalar_std == pytest.approx((5.3229, 1.1547), abs=1e-4)


def test_core_reproduces_the_exact_gradients():
    assert check_against_core(two_state_example()) < 1e-12


@settings(deadline=None)
@given(st.lists(st.lists(st.integers(-20, 20), min_size=2, max_size=2), min_size=1, max_size=3))
def test_baseline_is_unbiased_and_never_increases_variance(rewards):
    r = two_state_example(tuple(map(tuple, rewards)))
    assert r.no_baseline.mean == r.with_baseline.mean
    assert r.with_baseline.variance <= r.no_baseline.variance
    assert check_against_core(r) < 1e-9


def test_report_and_errors():
    text = format_two_state(two_state_example(), 0.0)
    assert "51/2" in text and "1/4" in text and "expected gradients equal: True" in text
    assert "exact population variance: Var[R] = 85/4 -> Var[R - b(s)] = 1" in text
    assert "unbiased standard deviation (torch.std, n - 1): std[R] = 5.32 -> std[R - b(s)] = 1.15" in text
    with pytest.raises(ValueError, match="same number"):
        two_state_example(((1, 2), (3,)))
