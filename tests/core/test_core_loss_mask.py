"""The loss mask of multi-turn episodes (`keep_tokens`): only the model's own tokens train. Environment tokens
leave every masked reduction, the loss aggregations' numerators and denominators, the KL and the importance
weights: hand-computed cases, and properties against the same episodes with the environment's tokens removed."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.core import (AGGREGATION_MODES, IS_MODES, aggregate_loss, behaviour_is_weights, keep_tokens, kl_k3,
                       masked_mean)

SETTINGS = settings(max_examples=60, deadline=None)


def test_keep_tokens_by_hand():
    # two rows: completion positions 1..4 of row 0 (model, model, env, model), 0..1 of row 1 (env, model)
    mask = torch.tensor([[False, True, True, True, True], [True, True, False, False, False]])
    keep = torch.tensor([1, 1, 0, 1, 0, 1])
    expected = torch.tensor([[False, True, True, False, True], [False, True, False, False, False]])
    assert torch.equal(keep_tokens(mask, keep), expected)
    assert torch.equal(keep_tokens(mask.int(), keep.bool()), expected)  # 0/1 masks as well as bool


def test_keep_tokens_refuses_a_keep_of_the_wrong_length():
    with pytest.raises(ValueError, match="one entry per True of mask"):
        keep_tokens(torch.ones(2, 3, dtype=torch.bool), torch.ones(5))


def test_token_mean_of_an_episode_by_hand():
    # per-token losses of one episode: model 1, 2 | env 100, 200 | model 3; the env tokens count nowhere
    loss = torch.tensor([[1.0, 2.0, 100.0, 200.0, 3.0]])
    m = keep_tokens(torch.ones(1, 5, dtype=torch.bool), torch.tensor([1, 1, 0, 0, 1]))
    assert aggregate_loss(loss, m, "token_mean") == pytest.approx((1 + 2 + 3) / 3)
    assert aggregate_loss(loss, m, "seq_mean_token_sum") == pytest.approx(6.0)
    assert aggregate_loss(loss, m, "seq_sum_constant", constant=4.0) == pytest.approx(1.5)


def test_an_environment_token_gets_no_gradient():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5, -0.7]], requires_grad=True)
    m = keep_tokens(torch.ones(1, 4, dtype=torch.bool), torch.tensor([1, 0, 0, 1]))
    aggregate_loss(-logprobs * 2.0, m, "seq_mean_token_mean").backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, 0.0, 0.0, -1.0]]))


@st.composite
def episodes(draw):
    """Right-padded rows of prompt (not in the mask) + completion tokens, each completion token the model's or the
    environment's (the first always the model's: an episode opens with a turn), per-token values, and the same rows
    with the environment's tokens removed (the model's tokens moved left)."""
    rows = draw(st.integers(1, 4))
    prompts = [draw(st.integers(0, 3)) for _ in range(rows)]
    owners = [[1] + draw(st.lists(st.integers(0, 1), min_size=0, max_size=6)) for _ in range(rows)]
    width = max(p + len(o) for p, o in zip(prompts, owners))
    values = torch.tensor(draw(st.lists(st.floats(-5, 5), min_size=rows * width, max_size=rows * width)),
                          dtype=torch.float64).reshape(rows, width)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for r, (p, o) in enumerate(zip(prompts, owners)):
        mask[r, p:p + len(o)] = True
    keep = torch.tensor([k for o in owners for k in o])
    short = max(sum(o) for o in owners)
    compact, compact_mask = torch.zeros(rows, short, dtype=torch.float64), torch.zeros(rows, short, dtype=torch.bool)
    for r, (p, o) in enumerate(zip(prompts, owners)):
        model = [values[r, p + j] for j, k in enumerate(o) if k]
        compact[r, :len(model)] = torch.stack(model)
        compact_mask[r, :len(model)] = True
    return values, mask, keep, compact, compact_mask


@SETTINGS
@given(episodes(), st.sampled_from(AGGREGATION_MODES))
def test_aggregation_of_episodes_is_that_of_the_model_tokens_alone(data, mode):
    values, mask, keep, compact, compact_mask = data
    m = keep_tokens(mask, keep)
    assert int(m.sum()) == int(keep.sum()) and bool((m <= mask).all())  # a subset, one True per kept token
    constant = 7.0 if mode == "seq_sum_constant" else None
    torch.testing.assert_close(aggregate_loss(values, m, mode, constant),
                               aggregate_loss(compact, compact_mask, mode, constant))


@SETTINGS
@given(episodes())
def test_environment_tokens_change_nothing_whatever_their_values(data):
    """NaN or huge values at the environment's positions (log-probs of tokens the model did not sample) leave the
    loss, the KL and the importance weights of the model's tokens as they are."""
    values, mask, keep, _, _ = data
    m = keep_tokens(mask, keep)
    noisy = torch.where(mask & ~m, torch.full_like(values, float("nan")), values)
    for mode in AGGREGATION_MODES:
        constant = 7.0 if mode == "seq_sum_constant" else None
        torch.testing.assert_close(aggregate_loss(noisy, m, mode, constant), aggregate_loss(values, m, mode, constant))
    ref, wild = values * 0.3, torch.nan_to_num(noisy, 1e6)
    torch.testing.assert_close(masked_mean(kl_k3(wild, ref), m), masked_mean(kl_k3(values, ref), m))
    for mode in IS_MODES:
        weights, kept, _ = behaviour_is_weights(values.clamp(-5, 0), wild.clamp(-5, 0), m, 2.0, mode)
        clean, clean_kept, _ = behaviour_is_weights(values.clamp(-5, 0), values.clamp(-5, 0), m, 2.0, mode)
        torch.testing.assert_close(weights, clean)
        assert torch.equal(kept, clean_kept) and not bool((kept & ~m).any())
    assert bool((weights[~m] == 0).all())
