"""algorithm.ref_refresh_every: N (CS336 lecture 17's compute_ref_model_period): the KL reference takes the
policy's weights after every N-th update, and a resumed run refreshes as the uninterrupted one did."""

import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.train.setup import prepare_run

REFRESH = {"beta": 0.04, "ref_refresh_every": 2}


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_reference_takes_the_policys_weights_after_every_nth_update(config_factory):
    run = prepare_run(load_config(config_factory("refresh", algorithm=REFRESH)))
    learner = run.learner
    start = _weights(learner.reference)
    assert _equal(start, _weights(learner.policy))
    seen = []
    for step in range(1, 5):
        batch = run.rollout.collect(step)
        metrics = learner.update(batch)
        run.rollout.load_weights(learner.named_weights())
        seen.append((_weights(learner.policy), _weights(learner.reference), metrics["kl"]))
    (p1, r1, kl1), (p2, r2, kl2), (p3, r3, kl3), (p4, r4, kl4) = seen
    assert _equal(r1, start) and not _equal(r1, p1)  # one update: still the start model
    assert _equal(r2, p2)  # the second: the policy's weights, copied
    assert _equal(r3, p2) and not _equal(r3, p3)  # held until the fourth
    assert _equal(r4, p4)
    # one update per step (mu 1): the KL is measured at the step's start weights, so it is 0 at steps 1 and 3
    # (the reference is those very weights) and grows over steps 2 and 4 (one update away from it)
    assert kl1 == kl3 == 0 and kl2 > 0 and kl4 > 0


def test_a_resumed_run_refreshes_as_the_uninterrupted_one(config_factory, crash):
    """The checkpoint at step 3 holds the reference of step 2 (the policy of step 3 is another model): the
    resumed steps 4 and 5 compute the same KL, metrics and weights bit for bit."""
    sections = dict(train={"steps": 5, "batch_size": 16, "group_size": 4}, checkpoint={"every": 3, "keep": 2},
                    eval={"every": 5, "samples": 2}, algorithm=REFRESH)
    config = config_factory("full", **sections)
    full = config.parent / "full"
    assert main(["train", str(config)]) == 0
    crashed = crash(full, 3, config.parent / "crashed")
    assert main(["train", "--resume", str(crashed)]) == 0
    assert (crashed / "metrics.jsonl").read_text() == (full / "metrics.jsonl").read_text()
    a = load_file(str(full / "final_model" / "model.safetensors"))
    b = load_file(str(crashed / "final_model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
