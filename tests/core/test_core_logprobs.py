"""token_logprobs and entropy_from_logits: exactness, stability, gradients, memory structure."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import entropy_from_logits, token_logprobs

SETTINGS = settings(max_examples=50, deadline=None)


def _reference_logprobs(logits, labels):
    return torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)


def _reference_entropy(logits):
    p = torch.softmax(logits, -1)
    return -(p * torch.log_softmax(logits, -1)).sum(-1)


def _case(seed, b, t, v):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(b, t, v, generator=g, dtype=torch.float64)).requires_grad_()
    return logits, torch.randint(0, v, (b, t), generator=g)


def test_by_hand():
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # p = (1/4, 3/4), (1/2, 1/2)
    labels = torch.tensor([[1, 0]])
    expected = torch.tensor([[math.log(3 / 4), math.log(1 / 2)]])
    torch.testing.assert_close(token_logprobs(logits, labels), expected)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[h, math.log(2)]]))


@SETTINGS
@given(seed=st.integers(0, 2**31), b=st.integers(1, 3), t=st.integers(1, 5), v=st.integers(1, 9),
       chunk_rows=st.integers(1, 7), layout=st.sampled_from(["3d", "2d", "4d", "shifted"]))
def test_matches_log_softmax_in_value_and_gradient(seed, b, t, v, chunk_rows, layout):
    logits, labels = _case(seed, b, t, v)
    if layout == "2d":
        logits, labels = logits[0], labels[0]
    elif layout == "4d":
        logits, labels = logits[None].expand(2, b, t, v), labels[None].expand(2, b, t)
    elif layout == "shifted":
        logits = torch.cat([logits, logits[:, :1]], 1)[:, :-1]
    weights = torch.randn(labels.shape, dtype=torch.float64)
    for ours, ref in (
        (token_logprobs(logits, labels, chunk_rows), _reference_logprobs(logits, labels)),
        (entropy_from_logits(logits, chunk_rows), _reference_entropy(logits)),
    ):
        torch.testing.assert_close(ours, ref)
        g_ours, = torch.autograd.grad((ours * weights).sum(), logits, retain_graph=True)
        g_ref, = torch.autograd.grad((ref * weights).sum(), logits, retain_graph=True)
        torch.testing.assert_close(g_ours, g_ref)


@SETTINGS
@given(seed=st.integers(0, 2**31), shift=st.floats(-1e4, 1e4))
def test_shift_invariant_and_stable_for_huge_logits(seed, shift):
    logits, labels = _case(seed, 2, 3, 5)
    logits = logits.detach() * 100  # spreads of hundreds: naive exp overflows in float32
    shifted = logits + shift
    torch.testing.assert_close(token_logprobs(shifted, labels), token_logprobs(logits, labels))
    torch.testing.assert_close(entropy_from_logits(shifted), entropy_from_logits(logits))
    h = entropy_from_logits(logits.float() + shift)
    assert torch.isfinite(h).all() and (h >= 0).all() and (h <= math.log(5) + 1e-5).all()


def test_uniform_entropy_is_log_v_and_minus_inf_logits_are_zero_probability():
    v = 7
    assert torch.allclose(entropy_from_logits(torch.zeros(1, 1, v)), torch.tensor(math.log(v)))
    logits = torch.tensor([[[0.0, 0.0, float("-inf")]]], requires_grad=True)
    h = entropy_from_logits(logits)
    torch.testing.assert_close(h, torch.tensor([[math.log(2)]]))
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert token_logprobs(logits, torch.tensor([[2]])).item() == float("-inf")
    torch.testing.assert_close(entropy_from_logits(logits.detach()), torch.tensor([[math.log(2)]]))  # no-grad path


@SETTINGS
@given(seed=st.integers(0, 2**31))
def test_entropy_without_gradient_is_the_differentiable_one(seed):
    """A tensor that needs no gradient (a sampler's step (R, V), a detached forward) skips the autograd
    Function: the same values, in 2-D as in 3-D."""
    logits, _ = _case(seed, 3, 4, 9)
    with_grad = entropy_from_logits(logits)  # logits require grad: the Function
    assert with_grad.requires_grad
    torch.testing.assert_close(entropy_from_logits(logits.detach()), with_grad.detach())
    torch.testing.assert_close(entropy_from_logits(logits.detach()[0]), with_grad.detach()[0])  # (T, V) -> (T,)


def test_low_precision_logits_are_upcast():
    logits, labels = _case(0, 2, 4, 11)
    half = logits.detach().bfloat16()
    out = token_logprobs(half, labels)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, _reference_logprobs(half.double(), labels).float())
    assert entropy_from_logits(half).dtype == torch.float32


def _saved_vocab_wide(fn, logits):
    """Sizes of tensors autograd saves for backward that are vocabulary-wide and not the logits."""
    found = []

    def pack(t):
        if t.dim() > 0 and t.shape[-1] == logits.shape[-1] and t.untyped_storage().data_ptr() != \
                logits.untyped_storage().data_ptr():
            found.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(logits)
    return found


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk_rows", [5, None])  # 5: 7 chunks; None: the 32 rows fit in one
def test_autograd_keeps_no_second_vocabulary_wide_tensor(dtype, chunk_rows):
    full = torch.randn(4, 9, 50, dtype=dtype, requires_grad=True)
    logits = full[:, :-1]  # a causal LM's shifted, strided view must not be copied either
    labels = torch.randint(0, 50, (4, 8))
    assert _saved_vocab_wide(lambda z: token_logprobs(z, labels, chunk_rows), logits) == []
    assert _saved_vocab_wide(lambda z: entropy_from_logits(z, chunk_rows), logits) == []
    torch.testing.assert_close(token_logprobs(logits, labels), _reference_logprobs(logits.float(), labels))
    baseline = _saved_vocab_wide(lambda z: _reference_logprobs(z.float(), labels), logits)
    assert sum(baseline) >= logits.numel()  # log_softmax keeps a full (B, T, V) copy


def test_one_chunk_and_many_chunks_agree_on_a_shifted_view():
    """The whole-tensor path (all rows within one chunk) and the chunk loop compute the same values and
    gradients, on a causal LM's shifted (strided) logits at the demo's shape."""
    full = torch.randn(128, 12, 101, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 101, (128, 11))
    results = []
    for chunk_rows in (None, 100):  # 1,408 rows: one chunk, then 15
        full.grad = None
        logprobs = token_logprobs(full[:, :-1], labels, chunk_rows)
        entropy = entropy_from_logits(full[:, :-1], chunk_rows)
        (logprobs.sum() + entropy.sum()).backward()
        results.append((logprobs.detach(), entropy.detach(), full.grad.clone()))
    for one, many in zip(*results):
        torch.testing.assert_close(one, many, rtol=0, atol=1e-12)
    torch.testing.assert_close(results[0][0], _reference_logprobs(full[:, :-1].detach(), labels))


def test_bad_labels_and_logits():
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        token_logprobs(logits, torch.full((2, 3), 5))
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        token_logprobs(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        token_logprobs(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="floating"):
        entropy_from_logits(torch.zeros(2, 3, 5, dtype=torch.long))
