"""The optimizer the update steps (`build_optimizer`)."""

import torch

from rlvr.algorithms.optim import build_optimizer


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
