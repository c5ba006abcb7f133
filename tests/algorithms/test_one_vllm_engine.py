"""Runs that follow one another in one process share one vLLM engine, and on a GPU vLLM allows one engine with
sleep mode per process: a recipe's RL stages and a comparison's variants that would ask for different engines
there are refused before any run (`check_one_engine`, for an engine that sleeps), not at the first that differs. CI has no GPU and
no vllm in this environment: the engine choice and the device are stood in for; what is checked is which
configs are compared and what the line says."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import yaml

from rlvr.config import ConfigError, load_config
from rlvr.models.tiny import make_tiny_model_dir
from rlvr.pipelines import compare, recipes
from rlvr.pipelines.compare import parse_variant, run_comparison
from rlvr.rollout import engines
from rlvr.train import rollout
from rlvr.train.rollout import check_one_engine
from variant_helpers import TINY


@pytest.fixture
def gpu_vllm(monkeypatch):
    """Every config samples with vLLM, installed, on a GPU where model.device is auto (rollout.engine=vllm needs
    vllm installed, model.device=cuda a GPU)."""
    vllm = engines.ENGINES["vllm"]
    monkeypatch.setattr(engines, "installed", lambda spec: True)
    for module in (rollout, engines):
        monkeypatch.setattr(module, "engine_spec", lambda cfg: vllm)
        monkeypatch.setattr(module, "resolve_placement",
                            lambda m: SimpleNamespace(device=torch.device(m.device if m.device != "auto" else "cuda")))


def _cfg(*sets: str):
    return load_config(None, [*TINY, "model.device=auto", *sets])  # auto: a GPU under the fixture


def test_runs_asking_for_one_engine_pass_and_a_difference_is_named(gpu_vllm):
    check_one_engine({"a": _cfg(), "b": _cfg(), "c": _cfg()}, "variant")
    with pytest.raises(ConfigError, match=r"variants 'a' and 'c' ask for different vllm engines "
                                          r"\(gpu_memory_utilization\).*one engine with sleep mode per process"):
        check_one_engine({"a": _cfg(), "b": _cfg(), "c": _cfg("rollout.gpu_memory_utilization=0.5")}, "variant")
    with pytest.raises(ConfigError, match=r"\(the start model's architecture or tokenizer, dtype\)"):
        check_one_engine({"a": _cfg(), "b": _cfg("model.tiny_preset=small", "model.dtype=bfloat16")}, "variant")


def test_folders_one_engine_can_serve_pass_and_another_architecture_is_named(gpu_vllm, tmp_path):
    """The shared engine serves another folder of the same architecture and tokenizer by loading its weights
    (a comparison of two checkpoints of one model); another architecture needs another engine."""
    one = make_tiny_model_dir(tmp_path / "one", seed=0)
    same = make_tiny_model_dir(tmp_path / "same", seed=1)  # other weights, same architecture and tokenizer
    wider = make_tiny_model_dir(tmp_path / "wider", hidden_size=64)
    check_one_engine({"a": _cfg(f"model.path={one}"), "b": _cfg(f"model.path={same}")}, "variant")
    with pytest.raises(ConfigError, match=r"'a' and 'b' .*\(the start model's architecture or tokenizer\)"):
        check_one_engine({"a": _cfg(f"model.path={one}"), "b": _cfg(f"model.path={wider}")}, "variant")
    # a recipe's stages train one model in turn: the start models are not compared
    check_one_engine({"a": _cfg(f"model.path={one}"), "b": _cfg(f"model.path={wider}")}, "RL stage", models=False)


def test_runs_that_do_not_sleep_on_a_gpu_are_left_alone(gpu_vllm):
    odd = _cfg("rollout.gpu_memory_utilization=0.5", "rollout.enable_sleep_mode=false")
    check_one_engine({"a": _cfg(), "b": odd}, "variant")  # no sleep mode: no CuMem allocator, no conflict
    on_cpu = _cfg("rollout.gpu_memory_utilization=0.5", "model.device=cpu")
    check_one_engine({"a": _cfg(), "b": on_cpu}, "variant")  # vLLM has no sleep mode on a CPU


def test_the_settings_compared_are_the_engines_arguments(gpu_vllm):
    settings = engines.ENGINES["vllm"].settings
    lora = settings(_cfg("model.lora.r=8", "rollout.vllm_lora=adapter"))
    assert lora["lora_adapter"]["r"] == 8 and lora["enable_sleep_mode"] and not lora["enforce_eager"]
    assert settings(_cfg("model.device=cpu"))["enforce_eager"]


def test_a_comparison_is_refused_before_any_variant_trains(gpu_vllm, tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "preflight", lambda *a, **k: None)
    trained = []
    variants = [parse_variant("a:rollout.gpu_memory_utilization=0.3"),
                parse_variant("b:rollout.gpu_memory_utilization=0.6")]
    with pytest.raises(ConfigError, match="variants 'a' and 'b' ask for different vllm engines"):
        run_comparison(None, variants, tmp_path, [*TINY, "model.device=auto"], train=trained.append)
    assert trained == []


def test_a_recipe_is_refused_when_it_loads(gpu_vllm, tmp_path):
    stages = [{"name": "first", "kind": "rl"},
              {"name": "second", "kind": "rl", "config": {"rollout": {"gpu_memory_utilization": 0.6}}}]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"stages": stages}))
    with pytest.raises(ConfigError, match="RL stages 'first' and 'second' ask for different vllm engines"):
        recipes.load_recipe(path, [*TINY, "model.device=auto"])
    path.write_text(yaml.safe_dump({"stages": [stages[0], {**stages[1], "config": {}}]}))
    assert [s.name for s in recipes.load_recipe(path, [*TINY, "model.device=auto"]).stages] == ["first", "second"]
