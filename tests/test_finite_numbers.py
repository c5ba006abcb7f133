"""`check_finite_number`: the one check that a plain Python number (a hyper-parameter, a weight, a timeout) is
finite, used by the config, the rollout's sampling params, the rewards and the offline trainers."""

import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.config import check_finite_number


@pytest.mark.parametrize("value, expected", [(0, 0.0), (3, 3.0), (-2.5, -2.5), (1e308, 1e308),
                                             (np.float32(0.5), 0.5), (np.int64(7), 7.0), (Fraction(1, 4), 0.25)])
def test_a_finite_number_comes_back_as_a_float(value, expected):
    out = check_finite_number("x", value)
    assert out == expected and type(out) is float


@pytest.mark.parametrize("value, shown", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
                                          (True, "True"), (False, "False"), ("1.0", "'1.0'"), (None, "None"),
                                          ([1.0], "[1.0]"), (1j, "1j"), (np.float64("nan"), "nan")])
def test_bools_non_numbers_and_non_finite_values_are_refused_by_name(value, shown):
    with pytest.raises(ValueError) as err:
        check_finite_number("optim.lr", value)
    assert str(err.value).replace("np.float64(nan)", "nan") == f"optim.lr must be a finite number, got {shown}"


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**12, 10**12) | st.booleans())
def test_accepted_exactly_when_a_finite_non_bool_number(value):
    ok = not isinstance(value, bool) and math.isfinite(value)
    try:
        out = check_finite_number("x", value)
    except ValueError as err:
        assert not ok and str(err).startswith("x must be a finite number, got ")
    else:
        assert ok and out == float(value)


def test_the_config_and_reward_layers_get_it_without_loading_torch():
    """The CLI and every reward worker process import these layers; torch costs ~1.7 s per process."""
    code = ("import sys, rlvr.cli, rlvr.config, rlvr.rewards; rlvr.config.check_finite_number('x', 1); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
