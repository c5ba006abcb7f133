"""head_logprobs: the output layer's log-probs and entropies chunk by chunk equal the full logits' computation."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import entropy_from_logits, head_chunk_rows, head_logprobs, process_logits, token_logprobs

SETTINGS = settings(max_examples=40, deadline=None)
LN2, LN3 = math.log(2.0), math.log(3.0)


def _hand_case():
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64, requires_grad=True)
    weight = torch.tensor([[0.0, 0.0], [LN3, 0.0], [0.0, LN2]], dtype=torch.float64, requires_grad=True)
    return hidden, weight, torch.tensor([1, 2])


def test_by_hand():
    # row 0: logits (0, ln 3, 0) -> q = (1/5, 3/5, 1/5); row 1: (0, 0, ln 2) -> (1/4, 1/4, 1/2)
    hidden, weight, labels = _hand_case()
    logprobs, entropy = head_logprobs(hidden, weight, labels, chunk_rows=1, with_entropy=True)
    torch.testing.assert_close(logprobs, torch.tensor([math.log(3 / 5), math.log(1 / 2)], dtype=torch.float32))
    h0 = -(2 * 0.2 * math.log(0.2) + 0.6 * math.log(0.6))
    torch.testing.assert_close(entropy, torch.tensor([h0, 1.5 * LN2], dtype=torch.float32))
    logprobs.sum().backward()
    # d log q(y) / dh = (onehot(y) - q) W: row 0 (-1/5, 2/5, -1/5) W = (2/5 ln 3, -1/5 ln 2)
    expected_h = torch.tensor([[0.4 * LN3, -0.2 * LN2], [-0.25 * LN3, 0.5 * LN2]], dtype=torch.float64)
    torch.testing.assert_close(hidden.grad, expected_h)
    # d/dW_v = sum over rows of (onehot(y) - q)_v h: row 0 adds to column 0 of W, row 1 to column 1
    expected_w = torch.tensor([[-0.2, -0.25], [0.4, -0.25], [-0.2, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(weight.grad, expected_w)


def test_temperature_by_hand():
    # T = 2 halves the logits: row 0 (0, ln 3 / 2, 0) -> q(1) = sqrt 3 / (2 + sqrt 3), and the gradient halves too
    hidden, weight, labels = _hand_case()
    logprobs, _ = head_logprobs(hidden, weight, labels, temperature=2.0)
    s3 = math.sqrt(3.0)
    assert logprobs[0].item() == pytest.approx(math.log(s3 / (2 + s3)), abs=1e-7)
    logprobs[0].backward()
    q = torch.tensor([1 / (2 + s3), s3 / (2 + s3), 1 / (2 + s3)], dtype=torch.float64)
    torch.testing.assert_close(hidden.grad[0], (torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64) - q) @ weight
                               .detach() / 2)


def _full(hidden, weight, labels, temperature, top_k, top_p):
    logits = process_logits(hidden @ weight.T, temperature, top_k, top_p, keep=labels)
    return token_logprobs(logits, labels), entropy_from_logits(logits.detach())


@SETTINGS
@given(seed=st.integers(0, 2**31), n=st.integers(1, 13), d=st.integers(1, 6), v=st.integers(2, 17),
       chunk=st.integers(1, 9), temperature=st.sampled_from([1.0, 0.7, 1.5]), top_k=st.sampled_from([0, 1, 3]),
       top_p=st.sampled_from([1.0, 0.9, 0.5]))
def test_equals_the_full_logits_in_value_and_gradients(seed, n, d, v, chunk, temperature, top_k, top_p):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64, requires_grad=True)
    weight = (2 * torch.randn(v, d, generator=g, dtype=torch.float64)).requires_grad_()
    labels = torch.randint(0, v, (n,), generator=g)
    upstream = torch.randn(n, generator=g, dtype=torch.float64)
    ours, entropy = head_logprobs(hidden, weight, labels, temperature, top_k, top_p, chunk, with_entropy=True)
    ref, ref_entropy = _full(hidden, weight, labels, temperature, top_k, top_p)
    torch.testing.assert_close(ours, ref.float(), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(entropy, ref_entropy.float(), atol=1e-6, rtol=1e-6)
    grads = torch.autograd.grad((ours.double() * upstream).sum(), (hidden, weight))
    ref_grads = torch.autograd.grad((ref * upstream).sum(), (hidden, weight))
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@SETTINGS
@given(seed=st.integers(0, 2**31), chunk=st.integers(1, 40))
def test_float32_within_1e6_of_the_full_computation_whatever_the_chunk(seed, chunk):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 20, 16, generator=g, requires_grad=True)  # (B, T, d): any leading shape
    weight = torch.randn(50, 16, generator=g, requires_grad=True)
    labels = torch.randint(0, 50, (2, 20), generator=g)
    ours, _ = head_logprobs(hidden, weight, labels, 0.8, 0, 1.0, chunk)
    ref, _ = _full(hidden, weight, labels, 0.8, 0, 1.0)
    assert ours.shape == (2, 20)
    assert (ours - ref).abs().max().item() <= 1e-6 * max(1.0, ref.abs().max().item())
    gh, gw = torch.autograd.grad(ours.sum(), (hidden, weight))
    rh, rw = torch.autograd.grad(ref.sum(), (hidden, weight))
    assert (gh - rh).abs().max().item() <= 1e-5 and (gw - rw).abs().max().item() <= 1e-5


def test_autograd_keeps_no_vocabulary_wide_tensor():
    hidden = torch.randn(64, 8, requires_grad=True)
    weight = torch.randn(1000, 8, requires_grad=True)
    out, _ = head_logprobs(hidden, weight, torch.randint(0, 1000, (64,)), chunk_rows=4)
    saved = out.grad_fn.next_functions[0][0].saved_tensors  # the Function under the reshape
    assert max(t.numel() for t in saved) == weight.numel()  # the weight itself, no (64, 1000) logits
    assert all(t.data_ptr() in (hidden.data_ptr(), weight.data_ptr()) or t.dim() == 1 for t in saved)


def test_half_precision_products_match_autocast_of_the_output_layer():
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(12, 32, generator=g), torch.randn(40, 32, generator=g)
    labels = torch.randint(0, 40, (12,), generator=g)
    ours, _ = head_logprobs(hidden, weight, labels, compute_dtype=torch.bfloat16, chunk_rows=5)
    with torch.autocast("cpu", torch.bfloat16):
        logits = torch.nn.functional.linear(hidden, weight)  # (12, 40) bf16, as a bf16 policy's head
    torch.testing.assert_close(ours, token_logprobs(logits, labels), atol=0, rtol=0)


def test_gradient_check_float64():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 3, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (5,), generator=g)

    def f(h, w):
        return head_logprobs(h, w, labels, 0.9, 0, 1.0, 2, compute_dtype=torch.float64)[0].double()

    # the outputs are float32: check against the float64 full computation's gradient instead of finite differences
    ours = torch.autograd.grad(f(hidden, weight).sum(), (hidden, weight))
    ref = torch.autograd.grad(_full(hidden, weight, labels, 0.9, 0, 1.0)[0].sum(), (hidden, weight))
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b)


def test_chunk_rows_default_and_checks():
    assert head_chunk_rows(151_936) == (1 << 24) // 151_936 == 110
    assert head_chunk_rows(10**9) == 1
    hidden, weight, labels = _hand_case()
    with pytest.raises(ValueError, match="weight must be"):
        head_logprobs(hidden, weight.T, labels)
    with pytest.raises(ValueError, match="labels shape"):
        head_logprobs(hidden, weight, labels[:1])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        head_logprobs(hidden, weight, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="chunk_rows"):
        head_logprobs(hidden, weight, labels, chunk_rows=0)
    assert head_logprobs(hidden, weight, labels)[1] is None
