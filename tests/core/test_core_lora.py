"""LoRA's merged weight W0 + (alpha / r) B A."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import lora_merged_weight

SETTINGS = settings(max_examples=40, deadline=None)


def test_by_hand():
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    a = torch.tensor([[1.0, 2.0]])  # (r=1, in=2)
    b = torch.tensor([[3.0], [-1.0]])  # (out=2, r=1)
    # B A = [[3, 6], [-1, -2]]; scaling 0.5 -> [[1.5, 3], [-0.5, -1]]
    expected = torch.tensor([[2.5, 3.0], [-0.5, 0.0]])
    torch.testing.assert_close(lora_merged_weight(w, a, b, 0.5), expected)
    torch.testing.assert_close(w, torch.eye(2))  # W0 untouched


@SETTINGS
@given(out=st.integers(1, 6), inp=st.integers(1, 6), r=st.integers(1, 4), scaling=st.floats(-4, 4), seed=st.integers(0, 99))
def test_linear_layer_equivalence(out, inp, r, scaling, seed):
    """x W'^T equals the LoRA forward x W0^T + scaling * x A^T B^T (Hu et al. 2021, eq. 3)."""
    g = torch.Generator().manual_seed(seed)
    w, a, b = torch.randn(out, inp, generator=g), torch.randn(r, inp, generator=g), torch.randn(out, r, generator=g)
    x = torch.randn(3, inp, generator=g)
    merged = lora_merged_weight(w, a, b, scaling)
    torch.testing.assert_close(x @ merged.T, x @ w.T + scaling * (x @ a.T) @ b.T, rtol=1e-5, atol=1e-4)


@SETTINGS
@given(seed=st.integers(0, 99))
def test_zero_b_is_identity_and_keeps_dtype(seed):
    w = torch.randn(4, 3, generator=torch.Generator().manual_seed(seed)).bfloat16()
    merged = lora_merged_weight(w, torch.randn(2, 3), torch.zeros(4, 2), 2.0)
    assert merged.dtype == torch.bfloat16
    assert torch.equal(merged, w)


def test_shape_mismatch_is_one_line():
    with pytest.raises(ValueError, match="do not compose"):
        lora_merged_weight(torch.zeros(4, 3), torch.zeros(2, 3), torch.zeros(5, 2), 1.0)
