"""Group advantage estimators: hand cases, invariances, leave-one-out loop, baseline theory."""

import itertools
import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rlvr.core import (
    ADVANTAGES,
    centered_advantages,
    flat_group_share,
    get_advantage_fn,
    grpo_advantages,
    max_only_advantages,
    pg_loss,
    raw_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    whitened_advantages,
)

SETTINGS = settings(max_examples=50, deadline=None)
BASELINED = ("centered", "grpo", "rloo", "whitened", "reinforce_pp_baseline")


def _rewards(seed: int, groups: int, g: int) -> torch.Tensor:
    return torch.randn(groups * g, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_by_hand():
    r = torch.tensor([1.0, 0.0, 2.0, 5.0, 5.0, 5.0])  # two groups of 3
    mean, std = 1.0, 1.0  # group 1: mean (1 + 0 + 2) / 3, unbiased std sqrt((0 + 1 + 1) / 2)
    torch.testing.assert_close(raw_advantages(r, 3), r)
    centered = torch.tensor([1 - mean, 0 - mean, 2 - mean, 0, 0, 0])
    torch.testing.assert_close(centered_advantages(r, 3), centered)
    torch.testing.assert_close(grpo_advantages(r, 3), centered / torch.tensor([std + 1e-4] * 3 + [1e-4] * 3))
    torch.testing.assert_close(grpo_advantages(r, 3, scale_by_std=False), centered_advantages(r, 3))
    # leave-one-out: 1 - (0 + 2) / 2, 0 - (1 + 2) / 2, 2 - (1 + 0) / 2
    torch.testing.assert_close(rloo_advantages(r, 3), torch.tensor([1 - 1.0, 0 - 1.5, 2 - 0.5, 0, 0, 0]))
    # best of group 1 is index 2; in the tied group 2 every sample keeps its reward
    torch.testing.assert_close(max_only_advantages(r, 3), torch.tensor([0, 0, 2.0, 5.0, 5.0, 5.0]))
    batch_mean, batch_std = r.mean(), r.std()
    torch.testing.assert_close(whitened_advantages(r, 3), (r - batch_mean) / (batch_std + 1e-4))


def test_max_only_keeps_every_tied_maximum_as_the_lecture():
    """CS336 lecture 17 `max_rewards`: every sample equal to the group maximum keeps its reward."""
    r = torch.tensor([3.0, 3.0, 1.0, 3.0, 2.0, 2.0, 2.0, 2.0])
    torch.testing.assert_close(max_only_advantages(r, 4), torch.tensor([3.0, 3.0, 0.0, 3.0, 2.0, 2.0, 2.0, 2.0]))


def test_eps_default_is_the_lectures_and_reaches_every_std_estimator():
    """Lecture 17 divides by std + 1e-4; `get_advantage_fn(name, eps)` binds eps wherever a std divides."""
    r = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    std = r.std()  # one group: unbiased std sqrt(0.75 / 3) = 0.5
    assert math.isclose(float(std), 0.5)
    torch.testing.assert_close(grpo_advantages(r, 4), (r - 0.25) / (0.5 + 1e-4))
    for name in ("grpo", "whitened", "reinforce_pp_baseline"):
        loose, tight = get_advantage_fn(name, eps=0.5)(r, 4), get_advantage_fn(name, eps=0.0)(r, 4)
        torch.testing.assert_close(loose, (r - 0.25) / (0.5 + 0.5))
        torch.testing.assert_close(tight, (r - 0.25) / 0.5)
    for name in ("raw", "centered", "rloo", "max_only"):  # no std: eps changes nothing
        torch.testing.assert_close(get_advantage_fn(name, eps=0.5)(r, 4), ADVANTAGES[name](r, 4))
    with pytest.raises(ValueError, match="eps"):
        get_advantage_fn("grpo", eps=-1.0)


@pytest.mark.parametrize("name", BASELINED)
@SETTINGS
@given(value=st.floats(-1e3, 1e3), groups=st.integers(1, 4), g=st.integers(2, 6))
def test_identical_rewards_give_zero_advantage(name, value, groups, g):
    r = torch.full((groups * g,), value, dtype=torch.float64)
    assert (ADVANTAGES[name](r, g).abs() < 1e-9).all()


@SETTINGS
@given(seed=st.integers(0, 2**31), scale=st.floats(1e-2, 1e3), shift=st.floats(-1e3, 1e3),
       g=st.integers(2, 6))
def test_zscore_invariant_to_affine_rescaling(seed, scale, shift, g):
    r = _rewards(seed, 3, g)
    assume(bool((r.reshape(3, g).std(1) > 1e-3).all()))
    for fn in (grpo_advantages, whitened_advantages):
        torch.testing.assert_close(fn(scale * r + shift, g, eps=0.0), fn(r, g, eps=0.0))


@SETTINGS
@given(seed=st.integers(0, 2**31), groups=st.integers(1, 4), g=st.integers(2, 6))
def test_leave_one_out_equals_explicit_loop(seed, groups, g):
    r = _rewards(seed, groups, g)
    expected = torch.empty_like(r)
    for i in range(r.numel()):
        start = i // g * g
        others = [r[j] for j in range(start, start + g) if j != i]
        expected[i] = r[i] - sum(others) / len(others)
    torch.testing.assert_close(rloo_advantages(r, g), expected)
    torch.testing.assert_close(rloo_advantages(r, g), g / (g - 1) * centered_advantages(r, g))


@SETTINGS
@given(seed=st.integers(0, 2**31), groups=st.integers(1, 4), g=st.integers(1, 6))
def test_group_properties(seed, groups, g):
    r = _rewards(seed, groups, g)
    centered = centered_advantages(r, g).reshape(groups, g)
    torch.testing.assert_close(centered.sum(1), torch.zeros(groups, dtype=r.dtype), atol=1e-9, rtol=0)
    best = max_only_advantages(r, g).reshape(groups, g)
    top = r.reshape(groups, g).max(1, keepdim=True).values
    torch.testing.assert_close(best, torch.where(r.reshape(groups, g) == top, top.expand(-1, g), 0.0))
    tied = r.reshape(groups, g).repeat_interleave(2, dim=1).reshape(-1)  # every value twice in its group
    kept = (max_only_advantages(tied, 2 * g).reshape(groups, 2 * g) != 0).sum(1)
    assert (kept >= 2).all()  # both copies of the maximum keep their reward (randn: no exact 0)
    if g > 1:  # with g = 1 every centered advantage is 0, and eps = 0 divides 0 by 0
        w = reinforce_pp_baseline_advantages(r, g, eps=0.0)
        torch.testing.assert_close(w.mean(), torch.tensor(0.0, dtype=r.dtype), atol=1e-9, rtol=0)
        torch.testing.assert_close(w, (centered.flatten() - centered.mean()) / centered.std())


def test_baseline_keeps_expected_gradient_and_lowers_variance_two_state_example():
    """Two equally likely states, two actions each, uniform softmax policy (logits theta = 0).
    S1 rewards (11, 9), S2 rewards (0, 2); baseline b(s) = the state's mean reward (10, 1).
    Enumerate the 4 equally likely (s, a) samples and compute g = -grad pg_loss = A grad log pi."""
    rewards = torch.tensor([11.0, 9.0, 0.0, 2.0], dtype=torch.float64)  # groups = states

    def sample_gradients(advantages):
        grads = []
        for k, (s, a) in enumerate(itertools.product(range(2), range(2))):
            theta = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
            logp = torch.log_softmax(theta[s], -1)[a].reshape(1, 1)
            loss, _ = pg_loss(logp, advantages[k : k + 1])
            grads.append(-torch.autograd.grad(loss.sum(), theta)[0].flatten())
        return torch.stack(grads)  # (4 samples, 4 parameters)

    plain = sample_gradients(raw_advantages(rewards, 2))
    baselined = sample_gradients(centered_advantages(rewards, 2))
    # grad log pi(a|s) = e_a - pi(.|s) = +-(1/2, -1/2): E[g] = 1/4 * sum_a r(s, a) grad log pi(a|s)
    expected = 0.25 * torch.tensor([(11 - 9) / 2, -(11 - 9) / 2, (0 - 2) / 2, -(0 - 2) / 2]).double()
    torch.testing.assert_close(plain.mean(0), expected)
    torch.testing.assert_close(baselined.mean(0), expected)
    # total variance E|g|^2 - |E g|^2, with |grad log pi|^2 = 1/2
    second_plain = 0.25 * 0.5 * (11**2 + 9**2 + 0**2 + 2**2)
    second_base = 0.25 * 0.5 * (1**2 + 1**2 + 1**2 + 1**2)
    var_plain = (plain**2).sum(1).mean() - (plain.mean(0) ** 2).sum()
    var_base = (baselined**2).sum(1).mean() - (baselined.mean(0) ** 2).sum()
    torch.testing.assert_close(var_plain, second_plain - (expected**2).sum())
    torch.testing.assert_close(var_base, second_base - (expected**2).sum())
    assert var_base < var_plain


def test_registry_and_bad_input():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    for name, fn in ADVANTAGES.items():
        torch.testing.assert_close(get_advantage_fn(name)(r, 2), fn(r, 2))
        assert fn(r, 2).shape == r.shape
    with pytest.raises(ValueError, match="choose from"):
        get_advantage_fn("gae")
    with pytest.raises(ValueError, match="does not divide"):
        grpo_advantages(r, 3)
    with pytest.raises(ValueError, match="nan"):
        centered_advantages(torch.tensor([1.0, math.nan]), 2)
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        centered_advantages(r.reshape(2, 2), 2)
    with pytest.raises(ValueError, match=">= 2"):
        rloo_advantages(r, 1)
    with pytest.raises(ValueError, match="int"):
        raw_advantages(r, 2.0)


def test_flat_group_share_by_hand():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.0, 0.0])  # groups of 2: flat, mixed, flat, flat
    assert flat_group_share(rewards, 2).item() == pytest.approx(0.75)
    assert flat_group_share(rewards, 4).item() == 0.0  # (1, 1, 0, 1) and (.5, .5, 0, 0) both vary
    assert flat_group_share(rewards, 1).item() == 1.0  # a group of one never varies


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_flat_group_share_matches_the_zero_advantage_groups(groups, g, seed):
    """A group counts as flat exactly when its group-centred advantages are all 0 (the reason the
    share matters), and shuffling within groups changes nothing."""
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 2, (groups * g,), generator=gen).float()
    share = flat_group_share(rewards, g)
    zero = (centered_advantages(rewards, g).reshape(groups, g) == 0).all(dim=1).float().mean()
    assert 0.0 <= share.item() <= 1.0 and share.item() == pytest.approx(zero.item())
    perm = torch.cat([torch.randperm(g, generator=gen) + i * g for i in range(groups)])
    assert flat_group_share(rewards[perm], g).item() == share.item()


# --- closed forms and remaining hand cases (audit additions) ---------------------------------------


@SETTINGS
@given(seed=st.integers(0, 2**31), groups=st.integers(1, 4), g=st.integers(2, 8),
       scale=st.floats(1e-2, 1e2), shift=st.floats(-1e2, 1e2))
def test_grpo_zscore_has_zero_mean_and_unit_std_in_every_group(seed, groups, g, scale, shift):
    """GRPO (Shao et al. 2024, outcome supervision): A = (r - mean) / std per group, so with eps = 0
    every group's advantages have mean exactly 0 and (unbiased, torch.std) standard deviation exactly 1."""
    r = scale * _rewards(seed, groups, g) + shift
    adv = grpo_advantages(r, g, eps=0.0).reshape(groups, g)
    torch.testing.assert_close(adv.mean(1), torch.zeros(groups, dtype=r.dtype), atol=1e-9, rtol=0)
    torch.testing.assert_close(adv.std(1), torch.ones(groups, dtype=r.dtype))
    # the sign (order) of the rewards inside a group is kept: z-scoring is strictly increasing
    assert torch.equal(adv.argsort(1), r.reshape(groups, g).argsort(1))


@SETTINGS
@given(seed=st.integers(0, 2**31), groups=st.integers(1, 4), g=st.integers(1, 6))
def test_whitened_has_zero_mean_and_unit_std_over_the_batch_not_per_group(seed, groups, g):
    """REINFORCE++ (Hu et al. 2025): one mean and std for the whole batch, groups ignored."""
    assume(groups * g >= 2)
    r = _rewards(seed, groups, g)
    adv = whitened_advantages(r, g, eps=0.0)
    torch.testing.assert_close(adv.mean(), torch.tensor(0.0, dtype=r.dtype), atol=1e-9, rtol=0)
    torch.testing.assert_close(adv.std(), torch.tensor(1.0, dtype=r.dtype))
    # the group layout does not matter: the same rewards read as one group give the same advantages
    torch.testing.assert_close(whitened_advantages(r, r.numel(), eps=0.0), adv)


def test_reinforce_pp_baseline_by_hand():
    """Two groups of 2: r = (0, 2 | 3, 7). Group means 1 and 5 -> centred (-1, 1, -2, 2); their batch mean
    is 0 and unbiased std sqrt((1 + 1 + 4 + 4) / 3) = sqrt(10 / 3). Differs from both GRPO (per-group std)
    and plain whitening (no group baseline)."""
    r = torch.tensor([0.0, 2.0, 3.0, 7.0], dtype=torch.float64)
    std = math.sqrt(10 / 3)
    expected = torch.tensor([-1.0, 1.0, -2.0, 2.0], dtype=torch.float64) / std
    torch.testing.assert_close(reinforce_pp_baseline_advantages(r, 2, eps=0.0), expected)
    torch.testing.assert_close(reinforce_pp_baseline_advantages(r, 2), expected * std / (std + 1e-4))
    # GRPO: each group's unbiased std is sqrt(2) and sqrt(8): (-1, 1) / sqrt(2), (-2, 2) / sqrt(8)
    s = 1 / math.sqrt(2)
    torch.testing.assert_close(grpo_advantages(r, 2, eps=0.0), torch.tensor([-s, s, -s, s], dtype=torch.float64))
    # plain whitening: batch mean 3, unbiased std sqrt((9 + 1 + 0 + 16) / 3)
    torch.testing.assert_close(whitened_advantages(r, 2, eps=0.0),
                               torch.tensor([-3.0, -1.0, 0.0, 4.0], dtype=torch.float64) / math.sqrt(26 / 3))


@SETTINGS
@given(values=st.lists(st.integers(-5, 5), min_size=1, max_size=12), g=st.sampled_from([1, 2, 3, 4]))
def test_raw_advantages_are_the_rewards_as_a_float_copy(values, g):
    """REINFORCE without a baseline: A_i = r_i exactly; integer rewards come back as floats, and the
    result is a copy (a caller writing into the advantages never changes the rewards)."""
    values = values[: len(values) // g * g]
    assume(values)
    r = torch.tensor(values)
    adv = raw_advantages(r, g)
    assert adv.dtype == torch.get_default_dtype()
    assert adv.tolist() == [float(v) for v in values]
    rf = r.double()
    out = raw_advantages(rf, g)
    out += 1
    assert rf.tolist() == [float(v) for v in values]


@SETTINGS
@given(seed=st.integers(0, 2**31), groups=st.integers(1, 4), g=st.integers(2, 6))
def test_rloo_baseline_excludes_the_sample_itself(seed, groups, g):
    """Kool et al. 2019: the leave-one-out baseline b_i = mean_{j != i} r_j does not depend on r_i, so
    changing one reward r_i by d changes A_i by exactly d and every other A_j in its group by -d / (G - 1)."""
    r = _rewards(seed, groups, g)
    d = 0.75
    bumped = r.clone()
    bumped[0] += d
    delta = (rloo_advantages(bumped, g) - rloo_advantages(r, g)).reshape(groups, g)
    expected = torch.zeros(groups, g, dtype=r.dtype)
    expected[0, 0], expected[0, 1:] = d, -d / (g - 1)
    torch.testing.assert_close(delta, expected)
