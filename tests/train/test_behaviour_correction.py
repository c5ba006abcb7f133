"""The behaviour correction in the update (algorithm.is_cap, is_mode): the loss is the hand-computed one, and a
rejected token leaves the loss's denominators (IcePop / MIS as verl applies it)."""

from dataclasses import replace

import pytest
import torch

from rlvr.config import load_config
from rlvr.core import grpo_advantages
from rlvr.rollout.batch import completion_values
from rlvr.train.setup import prepare_run

CAP = 2.0


def _resampled(batch):
    """The batch as if another sampler had drawn it: rho = pi_old / pi_sampler = e^-1 on every token of the first
    row of each four (outside [1/2, 2]), e^0.5 on every other token of the second (inside), 1 elsewhere."""
    def shift(row, t):
        return 1.0 if row % 4 == 0 else -0.5 if row % 4 == 1 and t % 2 == 0 else 0.0

    moved = [[lp + shift(r, t) for t, lp in enumerate(lps)] for r, lps in enumerate(batch.sampler_logprobs)]
    return replace(batch, sampler_logprobs=moved)


@pytest.mark.parametrize("mode, aggregation", [("truncate", "token_mean"), ("mask", "token_mean"),
                                               ("mask", "seq_mean_token_mean"), ("sequence_mask", "token_mean"),
                                               ("sequence_truncate", "seq_mean_token_mean")])
def test_the_update_loss_is_the_hand_computed_one(config_factory, mode, aggregation):
    """One optimizer step per rollout: pi / pi_old = 1, so the clipped loss of a token is -A w, and the update's
    loss is the aggregation of -A w over the kept tokens (`_resampled`'s ratios). A `truncate` weight is
    min(rho, 2); a `mask` one is rho inside [1/2, 2], else the token leaves the mask, whole rows included."""
    # pi_old recomputed: the hf engine's own log-probs would stand in for it (it is the policy: weights 1)
    run = prepare_run(load_config(config_factory(mode, algorithm={"is_cap": CAP, "is_mode": mode,
                                                                  "aggregation": aggregation},
                                                 train={"old_logprobs": "recompute"})))
    learner = run.learner
    batch = _resampled(run.rollout.collect(1))
    rows = learner.tensors(batch)
    log_rho = (learner.logprobs(rows) - completion_values(rows.mask, batch.sampler_logprobs)).double()  # (N, W)
    mask = rows.mask
    if mode.startswith("sequence_"):  # one geometric-mean ratio per row
        log_rho = ((log_rho * mask).sum(-1) / mask.sum(-1))[:, None].expand_as(log_rho)
    rho = log_rho.exp()
    if mode.endswith("truncate"):
        weights, kept = rho.clamp(max=CAP), mask
    else:
        kept = mask & (log_rho.abs() <= torch.tensor(CAP).log())
        weights = torch.where(kept, rho, 0)
    advantages = grpo_advantages(rows.rewards, batch.group_size).double()[:, None]  # (N, 1)
    per_token = torch.where(kept, -advantages * weights, 0)
    if aggregation == "token_mean":
        expected = per_token.sum() / kept.sum()
    else:  # a row with no kept token adds 0 and still counts
        expected = (per_token.sum(-1) / kept.sum(-1).clamp(min=1)).mean()
    metrics = learner.update(batch)
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-5, abs=1e-7)
    rejected = float((mask & ~kept).sum() / mask.sum())
    if mode.endswith("mask"):
        assert rejected > 0.1  # the e^-1 tokens (and, at sequence level, the rows they pull out of the band)
        assert metrics["is/truncated_share"] == pytest.approx(rejected, rel=1e-6)
        # out of the denominator: the tokens' own count, not the valid tokens', divides the kept terms
        assert abs(float(per_token.sum() / mask.sum()) - metrics["loss"]) > 1e-4 or aggregation != "token_mean"
    assert metrics["is/weight_mean"] == pytest.approx(float(weights[mask].mean()), rel=1e-5)


def test_weights_are_one_and_nothing_is_rejected_at_equal_weights(config_factory):
    """The hf engine samples with the trained module: every mode keeps every token with weight 1 (to kernel
    rounding), so switching the correction on changes the update by rounding only."""
    for mode in ("truncate", "mask", "sequence_mask"):
        run = prepare_run(load_config(config_factory(mode, algorithm={"is_cap": 1.01, "is_mode": mode})))
        metrics = run.learner.update(run.rollout.collect(1))
        assert metrics["is/truncated_share"] == 0
        assert metrics["is/weight_mean"] == pytest.approx(1.0, abs=1e-5)
