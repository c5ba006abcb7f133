"""The update's minibatch order (`shuffled_groups`) and the optimizer it steps (`build_optimizer`)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.optim import build_optimizer
from rlvr.train.learner import shuffled_groups


def test_shuffled_groups_by_hand():
    # 3 groups of 2: torch.randperm(3) under seed 0 is [2, 0, 1]
    g = torch.Generator().manual_seed(0)
    assert torch.randperm(3, generator=torch.Generator().manual_seed(0)).tolist() == [2, 0, 1]
    assert shuffled_groups(6, 2, g).tolist() == [4, 5, 0, 1, 2, 3]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.integers(1, 8), st.integers(0, 2**31 - 1))
def test_shuffled_groups_is_a_permutation_of_whole_groups(groups, size, seed):
    order = shuffled_groups(groups * size, size, torch.Generator().manual_seed(seed))
    assert sorted(order.tolist()) == list(range(groups * size))
    blocks = order.view(groups, size)
    assert torch.equal(blocks - blocks[:, :1], torch.arange(size).expand(groups, size))  # rows in order
    assert (blocks[:, 0] % size == 0).all()  # each block starts a group


def test_rows_that_do_not_fill_groups_are_shuffled_as_rows():
    order = shuffled_groups(7, 2, torch.Generator().manual_seed(1))
    assert sorted(order.tolist()) == list(range(7))


def test_adamw_is_fused_on_plain_cpu_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    optimizer = build_optimizer(model, 1e-3, (0.9, 0.999), 1e-8, 0.1)
    assert optimizer.defaults["fused"] is True
    # the fused kernel is AdamW's update: equal to torch's per-tensor loop after two steps
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    reference.load_state_dict(model.state_dict())
    plain = torch.optim.AdamW([{"params": [reference[0].weight], "weight_decay": 0.1},
                               {"params": [reference[0].bias, *reference[1].parameters()], "weight_decay": 0.0}],
                              lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        for net, opt in ((model, optimizer), (reference, plain)):
            opt.zero_grad()
            net(x).pow(2).sum().backward()
            opt.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6)
