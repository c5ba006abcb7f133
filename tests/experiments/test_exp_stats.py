"""The tests behind the lecture-17 verdicts: the t distribution, Welch / one-sample / paired t, and the
readings of a test (direction, above, within, all_of), against hand computations and closed forms."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.pipelines.experiments.stats import (CONTRADICTED, HOLDS, UNDECIDED, TTest, above, all_of, direction,
                                              fisher_z, incomplete_beta, mean_sd, one_sample_test, paired_test,
                                              pearson, t_cdf, t_quantile, welch_test, within)

SETTINGS = settings(max_examples=60, deadline=None)
samples = st.lists(st.floats(-100, 100, allow_nan=False), min_size=2, max_size=12)


@SETTINGS
@given(st.floats(0, 1), st.floats(0.2, 8))
def test_incomplete_beta_closed_forms(x, c):
    """I_x(1, 1) = x, I_x(c, 1) = x^c, I_x(1, c) = 1 - (1 - x)^c (Abramowitz & Stegun 26.5)."""
    assert incomplete_beta(1, 1, x) == pytest.approx(x, abs=1e-12)
    assert incomplete_beta(c, 1, x) == pytest.approx(x ** c, abs=1e-11)
    assert incomplete_beta(1, c, x) == pytest.approx(1 - (1 - x) ** c, abs=1e-11)


@SETTINGS
@given(st.floats(-1e3, 1e3, allow_nan=False))
def test_t_cdf_closed_forms_for_one_and_two_degrees_of_freedom(t):
    """df = 1 is the Cauchy law, 1/2 + atan(t) / pi; df = 2 has 1/2 + t / (2 sqrt(2 + t^2))."""
    assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
    assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)


def test_t_table_values():
    """Student's t table (two-sided 5% and 10% critical values) and one p-value by hand."""
    assert t_quantile(0.975, 4) == pytest.approx(2.776445, abs=1e-6)
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)
    assert t_quantile(0.95, 1) == pytest.approx(6.313752, abs=1e-6)
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)  # the normal's
    assert 2 * (1 - t_cdf(2.0, 4)) == pytest.approx(0.1161165, abs=1e-7)  # R: 2 * pt(-2, 4)


@SETTINGS
@given(st.floats(0.001, 0.999), st.floats(0.5, 200))
def test_quantile_inverts_cdf_and_cdf_is_symmetric(q, df):
    t = t_quantile(q, df)
    assert t_cdf(t, df) == pytest.approx(q, abs=1e-9)
    assert t_cdf(-t, df) == pytest.approx(1 - q, abs=1e-9)


def test_welch_by_hand():
    """a = [1, 2, 3] (mean 2, var 1), b = [4, 6] (mean 5, var 2): se = sqrt(1/3 + 2/2), Welch-Satterthwaite
    df = (4/3)^2 / ((1/3)^2 / 2 + 1^2 / 1) = 32/19."""
    w = welch_test([1, 2, 3], [4, 6])
    assert w.estimate == -3 and w.se == pytest.approx(math.sqrt(4 / 3)) and w.df == pytest.approx(32 / 19)
    assert w.t == pytest.approx(-3 / math.sqrt(4 / 3)) and w.n == "3 + 2"
    assert w.p == pytest.approx(2 * t_cdf(-3 / math.sqrt(4 / 3), 32 / 19))


def test_paired_by_hand():
    """Differences [2, 3, 1]: mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3), df 2; p from the df = 2 closed form."""
    p = paired_test([3, 5, 4], [1, 2, 3])
    t = 2 * math.sqrt(3)
    assert (p.estimate, p.df, p.n, p.name) == (2, 2, "3", "paired t")
    assert p.se == pytest.approx(1 / math.sqrt(3)) and p.t == pytest.approx(t)
    assert p.p == pytest.approx(2 * (1 - (0.5 + t / (2 * math.sqrt(2 + t * t)))), abs=1e-12)  # 0.0742
    lo, hi = p.interval(0.95)
    assert (lo + hi) / 2 == pytest.approx(2) and hi - lo == pytest.approx(2 * 4.302653 / math.sqrt(3), abs=1e-5)


def test_one_sample_against_a_bound_and_degenerate_samples():
    assert one_sample_test([1.0, 2.0, 3.0], mu=2.0).estimate == 0.0
    same = one_sample_test([0.5, 0.5, 0.5], mu=0.5)  # no spread, no difference: nothing to reject
    assert (same.se, same.t, same.p) == (0.0, 0.0, 1.0)
    shifted = one_sample_test([0.5, 0.5], mu=0.0)  # no spread but a difference: certain
    assert shifted.t == math.inf and shifted.p == 0.0 and shifted.interval() == (0.5, 0.5)
    with pytest.raises(ValueError, match="at least 2"):
        one_sample_test([1.0])
    with pytest.raises(ValueError, match="NaN"):
        welch_test([1.0, float("nan")], [1.0, 2.0])
    with pytest.raises(ValueError, match="one length"):
        paired_test([1.0, 2.0], [1.0])


@SETTINGS
@given(samples, samples, st.floats(-50, 50), st.floats(0.1, 10))
def test_welch_is_antisymmetric_and_location_scale_invariant(a, b, shift, scale):
    w, back = welch_test(a, b), welch_test(b, a)
    assert back.estimate == pytest.approx(-w.estimate, abs=1e-9) and back.p == pytest.approx(w.p, abs=1e-9)
    moved = welch_test([scale * x + shift for x in a], [scale * x + shift for x in b])
    if w.se > 1e-6:
        assert moved.t == pytest.approx(w.t, rel=1e-6, abs=1e-6) and moved.df == pytest.approx(w.df, rel=1e-6)
    assert 0.0 <= w.p <= 1.0


def _test(estimate, se, df=10.0):
    return TTest("t", estimate, se, df, "11")


def test_readings_of_a_test():
    crit = t_quantile(0.975, 10)
    assert direction(_test(1.0, 1.0 / (crit + 0.01)), +1) == HOLDS
    assert direction(_test(1.0, 1.0 / (crit + 0.01)), -1) == CONTRADICTED
    assert direction(_test(1.0, 1.0 / (crit - 0.01)), +1) == UNDECIDED
    one = t_quantile(0.95, 10)  # the 90% interval's half width per unit se
    assert above(_test(0.0, 0.1), -0.1 * one - 1e-9) == HOLDS  # lower end just above the bound
    assert above(_test(0.0, 0.1), 0.1 * one + 1e-9) == CONTRADICTED  # upper end below it
    assert above(_test(0.0, 0.1), 0.0) == UNDECIDED
    assert within(_test(0.0, 0.1), 0.1 * one + 1e-9) == HOLDS
    assert within(_test(0.0, 0.1), 0.1 * one - 1e-9) == UNDECIDED
    assert within(_test(1.0, 0.1), 0.5) == CONTRADICTED and within(_test(-1.0, 0.1), 0.5) == CONTRADICTED
    assert all_of(HOLDS, HOLDS) == HOLDS and all_of(HOLDS, UNDECIDED) == UNDECIDED
    assert all_of(UNDECIDED, CONTRADICTED, HOLDS) == CONTRADICTED and all_of() == UNDECIDED


def test_describe_states_every_number():
    text = paired_test([3, 5, 4], [1, 2, 3]).describe()
    assert text == "paired t: +2.000 ± 0.577 (s.e.), t = 3.46, df = 2.0, p = 0.074, n = 3"
    assert "p < 0.001" in welch_test([10, 11, 12, 10], [0, 1, 0, 1]).describe()


def test_pearson_and_fisher_by_hand():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 1, 2]) == pytest.approx(-0.5)  # sxy = -1, sxx = syy = 2
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    assert fisher_z(0.0) == 0.0 and fisher_z(math.tanh(0.5)) == pytest.approx(0.5)
    assert math.isfinite(fisher_z(1.0))
    assert mean_sd([1.0, 3.0]) == (2.0, math.sqrt(2.0)) and mean_sd([5.0]) == (5.0, 0.0)
