"""`rlvr train --set model.lora.r=8`: adapters-only checkpoints, adapter + merged final model, exact resume;
the weights a LoRA learner hands each engine."""

import pickle

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.distributed.workers import LearnerWorker
from rlvr.models import load_model

SECTIONS = dict(train={"steps": 4, "batch_size": 16, "group_size": 4},
                checkpoint={"every": 2, "keep": 2}, eval={"every": 2, "samples": 2},
                algorithm={"beta": 0.02})  # beta > 0: the reference (adapters disabled) is used


def test_lora_run_checkpoints_adapters_and_resumes_exactly(config_factory, warm_model, crash):
    config = config_factory("full", **SECTIONS)
    cfg = yaml.safe_load(config.read_text())
    cfg["model"]["lora"] = {"r": 8, "alpha": 16}
    config.write_text(yaml.safe_dump(cfg))
    full = config.parent / "full"
    assert main(["train", str(config)]) == 0
    checkpoint = full / "checkpoints" / "step_000002" / "model"
    assert (checkpoint / "adapter_model.safetensors").is_file() and not (checkpoint / "model.safetensors").exists()
    adapter = load_file(str(full / "final_adapter" / "adapter_model.safetensors"))
    assert adapter and all("lora_" in name for name in adapter)
    merged, base = load_model(full / "final_model").state_dict(), load_model(warm_model).state_dict()
    changed = [n for n in base if not torch.equal(base[n], merged[n])]
    assert changed and all(n.endswith("proj.weight") for n in changed)  # only adapted linears moved

    # a crash after the step-2 checkpoint: resume from it and finish
    crashed = crash(full, 2, config.parent / "crashed")
    assert main(["train", "--resume", str(crashed)]) == 0
    assert (crashed / "metrics.jsonl").read_text() == (full / "metrics.jsonl").read_text()
    resumed = load_file(str(crashed / "final_adapter" / "adapter_model.safetensors"))
    assert resumed.keys() == adapter.keys() and all(torch.equal(resumed[k], adapter[k]) for k in adapter)


@pytest.mark.parametrize("engine, mode, adapters", [("vllm", "auto", True), ("vllm", "adapter", True),
                                                    ("vllm", "merge", False), ("hf", "auto", False)])
def test_learner_hands_adapters_only_to_an_engine_that_serves_them(config_factory, engine, mode, adapters):
    """rollout.vllm_lora decides the payload of a weight sync: the adapter tensors (PEFT names) for
    vLLM's own LoRA, else the merged plain weights. Built as a Ray learner worker builds it; the
    payload pickles (the object store's path to the rollout workers)."""
    cfg = load_config(config_factory(), ["model.lora.r=8"])
    cfg.rollout.engine, cfg.rollout.vllm_lora = engine, mode  # set after validation: vllm need not be installed
    worker = LearnerWorker(cfg, cfg.model.path, cfg.model.path, rank=0, world=1, master=("", 0))
    weights = pickle.loads(pickle.dumps(worker.weights()))
    is_adapter = [name.endswith((".lora_A.weight", ".lora_B.weight")) for name in weights]
    assert all(is_adapter) if adapters else not any(is_adapter)
    assert len(weights) == (2 * 7 * 2 if adapters else len(load_model(cfg.model.path).state_dict()))
