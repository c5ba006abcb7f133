"""An engine that holds its own copy of the weights, built from a model folder as vLLM's is, is given the
checkpoint's weights on resume; the HF engine shares the policy module and needs nothing."""

import torch

import rlvr.train.setup as setup
from rlvr.config import load_config
from rlvr.models import load_model
from rlvr.rollout import HFEngine
from rlvr.train.loop import train


def test_resume_gives_an_engine_with_its_own_copy_the_checkpoint_weights(config_factory, monkeypatch):
    built = []

    def own_copy(cfg, policy, tokenizer, model_path):
        built.append(model_path)
        return HFEngine(load_model(model_path), tokenizer)  # like vLLM: loads the folder, not the module

    monkeypatch.setattr(setup, "build_engine", own_copy)
    path = config_factory(train={"steps": 2, "batch_size": 16, "group_size": 4}, checkpoint={"every": 1})
    train(load_config(path))
    run = setup.prepare_run(load_config(path), resume=True)
    engine, trained = dict(run.rollout.engine.model.named_parameters()), dict(run.learner.named_weights())
    init = dict(load_model(built[-1]).named_parameters())
    assert run.start_step == 2 and built[0] == built[-1]  # both engines built from the start folder
    assert all(torch.equal(engine[k], trained[k]) for k in trained)  # ... then given the checkpoint's weights
    assert any(not torch.equal(init[k], trained[k]) for k in trained)  # which differ from the folder's
