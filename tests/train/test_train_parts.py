"""The loop's parts: batch layout, loss composition and accumulation, LR schedule, data stream,
atomic checkpoints and jsonl truncation."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.grpo import GroupPolicyGradient, accumulation_denominator
from rlvr.jsonl import read_jsonl
from rlvr.logging.sinks import JsonlSink, truncate_after
from rlvr.rollout.base import Completion
from rlvr.train import checkpoint as ckpt
from rlvr.rollout.batch import build_batch, pack
from rlvr.data.stream import PromptStream
from rlvr.algorithms.optim import lr_factor
from rlvr.core import kl_k3


def completion(prompt_ids, token_ids):
    return Completion("p", prompt_ids, token_ids, [0.0] * len(token_ids), "t", "stop")


def test_pack_layout_by_hand():
    ids, attn, mask, start = pack([[5, 6], [7, 8, 9]], [[1, 2, 3], [4]], pad_id=0)
    assert start == 1  # shortest prompt has 2 tokens: labels start at position 2
    assert ids.tolist() == [[5, 6, 1, 2, 3], [7, 8, 9, 4, 0]]
    assert attn.tolist() == [[True] * 5, [True] * 4 + [False]]
    # label columns are positions 2, 3, 4: row 0 completes there; row 1's only token is position 3
    assert mask.tolist() == [[True, True, True], [False, True, False]]


def test_select_trims_padding_and_keeps_columns_aligned():
    batch = build_batch([[5, 6], [7, 8, 9]], [[1, 2, 3], [4]], torch.tensor([1.0, -1.0]), torch.tensor([1.0, 0.0]),
                        pad_id=0)
    batch.old_logprobs = torch.arange(6.0).reshape(2, 3)
    part = batch.select(torch.tensor([1]))
    assert part.input_ids.tolist() == [[7, 8, 9, 4]]
    assert part.mask.tolist() == [[False, True]]
    assert part.old_logprobs.tolist() == [[3.0, 4.0]]
    assert part.advantages.tolist() == [-1.0]
    with pytest.raises(ValueError, match="no tokens"):
        pack([[1]], [[]], pad_id=0)


def test_grpo_loss_by_hand():
    algo = GroupPolicyGradient(aggregation="token_mean", clip_low=0.2, clip_high=0.2)
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 1.0]]))
    old = torch.log(torch.tensor([[0.25, 0.5], [0.25, 1.0]]))  # ratio 2 (clipped to 1.2), 1, 1
    mask = torch.tensor([[True, True], [True, False]])
    loss, metrics = algo.loss(logp, old, torch.tensor([1.0, -1.0]), mask, None, denominator=3)
    # per token: -min(2*1, 1.2*1) = -1.2 ; -1 ; +1 ; (masked)
    assert loss.item() == pytest.approx((-1.2 - 1.0 + 1.0) / 3)
    assert metrics["clip_frac_high"].item() == pytest.approx(1 / 3)


def test_kl_term_needs_reference_and_is_added():
    algo = GroupPolicyGradient(aggregation="seq_mean_token_sum", beta=0.5, kl_estimator="k1")
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0]])
    loss, metrics = algo.loss(logp, logp.detach(), torch.zeros(1), torch.ones(1, 2, dtype=torch.bool), ref, 1)
    assert loss.item() == pytest.approx(0.5 * 0.5)  # zero advantage: only beta * k1 = 0.5 * (0.5 + 0)
    assert metrics["kl"].item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="reference"):
        algo.loss(logp, logp.detach(), torch.zeros(1), torch.ones(1, 2, dtype=torch.bool), None, 1)


def test_unbiased_kl_weights_the_penalty_by_the_ratio():
    """kl_unbiased: beta * (pi / pi_old) * k3 per token; on policy the same value, and the gradient per log pi
    becomes beta * (log pi - log ref) (plain k3: beta * (1 - ref / pi))."""
    logp = torch.tensor([[math.log(0.5), math.log(0.25)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.25), math.log(0.5)]])
    old = torch.tensor([[math.log(0.25), math.log(0.25)]])  # ratios 2 and 1
    mask, zero = torch.ones(1, 2, dtype=torch.bool), torch.zeros(1)
    unbiased = GroupPolicyGradient(aggregation="seq_mean_token_sum", beta=0.5, kl_unbiased=True)
    plain = GroupPolicyGradient(aggregation="seq_mean_token_sum", beta=0.5)
    k3 = kl_k3(logp, ref).detach()[0]
    loss, metrics = unbiased.loss(logp, old, zero, mask, ref, 1)
    assert loss.item() == pytest.approx(0.5 * (2 * k3[0] + k3[1]).item())
    assert metrics["kl"].item() == pytest.approx((2 * k3[0] + k3[1]).item() / 2)
    on_policy, _ = unbiased.loss(logp, logp.detach(), zero, mask, ref, 1)
    grad, = torch.autograd.grad(on_policy, logp)
    torch.testing.assert_close(grad, 0.5 * (logp - ref).detach())
    grad_plain, = torch.autograd.grad(plain.loss(logp, logp.detach(), zero, mask, ref, 1)[0], logp)
    torch.testing.assert_close(grad_plain, 0.5 * (1 - (ref - logp).exp()).detach())


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_sum_constant"]),
       st.integers(2, 8), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_micro_batch_losses_sum_to_the_minibatch_loss(mode, batch, width, seed):
    """Gradient accumulation with the minibatch denominator reproduces the loss and gradient."""
    g = torch.Generator().manual_seed(seed)
    algo = GroupPolicyGradient(aggregation=mode, loss_constant=4.0, policy_loss="pg")
    logp = (-torch.rand(batch, width, generator=g)).requires_grad_()
    mask = torch.rand(batch, width, generator=g) > 0.3
    mask[:, 0] = True
    adv = torch.randn(batch, generator=g)
    denom = accumulation_denominator(mode, mask)
    full, _ = algo.loss(logp, logp.detach(), adv, mask, None, denom)
    (full_grad,) = torch.autograd.grad(full, logp)
    cut = int(torch.randint(1, batch, (1,), generator=g))
    parts = [algo.loss(logp[s], logp[s].detach(), adv[s], mask[s], None, denom)[0]
             for s in (slice(0, cut), slice(cut, batch))]
    (acc_grad,) = torch.autograd.grad(sum(parts), logp)
    assert sum(parts).item() == pytest.approx(full.item(), rel=1e-5, abs=1e-6)
    torch.testing.assert_close(acc_grad, full_grad)


def test_lr_schedules_by_hand():
    assert [lr_factor("constant", 2, 10, 0.0)(s) for s in (0, 1, 2, 9)] == [0.5, 1.0, 1.0, 1.0]
    linear = lr_factor("linear", 0, 10, 0.1)
    assert linear(0) == 1.0 and linear(5) == pytest.approx(0.55) and linear(10) == pytest.approx(0.1)
    cosine = lr_factor("cosine", 0, 10, 0.0)
    assert cosine(5) == pytest.approx(0.5) and cosine(10) == pytest.approx(0.0)
    assert cosine(2) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.2)))
    with pytest.raises(ValueError, match="unknown schedule"):
        lr_factor("step", 0, 10, 0.0)


def test_prompt_stream_resumes_exactly_and_reshuffles_each_epoch():
    stream = PromptStream(list(range(10)), seed=3)
    first = stream.next(7)
    state = stream.state_dict()
    rest = stream.next(13)
    again = PromptStream(list(range(10)), seed=3)
    again.load_state_dict(state)
    assert again.next(13) == rest
    epoch0, epoch1 = first + rest[:3], rest[3:13]
    assert sorted(epoch0) == sorted(epoch1) == list(range(10))
    assert epoch0 != epoch1


class _Saveable:
    def save_pretrained(self, path, **kwargs):
        path.mkdir(parents=True, exist_ok=True)
        (path / "weights.bin").write_text("w")


def test_checkpoint_is_atomic_when_a_write_crashes(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 1, _Saveable(), _Saveable(), {"data": 1}, keep=2)
    assert ckpt.latest_checkpoint(tmp_path).name == "step_000001"

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(tmp_path, 2, _Saveable(), _Saveable(), {"data": 2}, keep=2)
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest.name == "step_000001" and ckpt.load_state(latest)["data"] == 1
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000001"]


def test_checkpoints_are_pruned_to_keep(tmp_path):
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, _Saveable(), _Saveable(), {}, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000002", "step_000003"]
    assert ckpt.load_state(ckpt.latest_checkpoint(tmp_path))["step"] == 3


def test_jsonl_resume_drops_records_after_the_checkpoint(tmp_path):
    path = tmp_path / "m.jsonl"
    sink = JsonlSink(path)
    for step in range(5):
        sink.write({"step": step, "x": float(step)})
    sink.close()
    with open(path, "a") as handle:
        handle.write('{"step": 5, "x"')  # a line cut by kill -9
    truncate_after(path, 2)
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2]
    resumed = JsonlSink(path, resume_step=1)
    resumed.write({"step": 2, "x": float("nan")})
    resumed.close()
    assert read_jsonl(path)[-1] == {"step": 2, "x": "nan"}


def test_advantage_eps_from_the_config_reaches_the_estimator():
    """algorithm.advantage_eps (default 1e-4, CS336 lecture 17) is the eps of GRPO's std division."""
    from rlvr.config import load_config

    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0])  # one group of 4: mean 0.25, unbiased std 0.5
    for eps in (1e-4, 0.5):
        cfg = load_config(None, [f"algorithm.advantage_eps={eps}"])
        algo = GroupPolicyGradient.from_config(cfg.algorithm, cfg.rollout.max_new_tokens)
        torch.testing.assert_close(algo.advantages(rewards, 4), (rewards - 0.25) / (0.5 + eps))
    assert load_config(None, []).algorithm.advantage_eps == 1e-4
