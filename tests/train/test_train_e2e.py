"""End to end on the tiny model: the run folder, parameters moving, finite metrics, micro-batching
invariance, no extra forward pass at mu = 1, the reference model only when beta > 0, determinism."""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import load_config
from rlvr.jsonl import read_jsonl
from rlvr.train import passes as passes_module
from rlvr.train.loop import train
from rlvr.train.setup import prepare_run

pytestmark = pytest.mark.slow


def weights(folder):
    return load_file(str(folder / "model.safetensors"))


def test_tiny_run_writes_everything_moves_parameters_and_logs_finite_metrics(config_factory):
    cfg = load_config(config_factory())
    result = train(cfg)
    run = result.run_dir
    for name in ("config.yaml", "metrics.jsonl", "timings.jsonl", "samples.jsonl"):
        assert (run / name).is_file(), name
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert {p.name for p in (run / "plots").glob("*.png")} >= {"reward.png", "heldout_accuracy.png",
                                                               "completion_length.png", "loss.png"}
    assert load_config(run / "config.yaml") == cfg
    before, after = weights(Path(cfg.model.path)), weights(run / "final_model")
    assert any(not torch.equal(before[k], after[k]) for k in before)
    records = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for record in records[1:]:
        for key in ("reward", "accuracy", "loss", "entropy", "grad_norm", "completion_length", "lr"):
            assert math.isfinite(record[key]), (key, record)
    assert "eval/greedy_accuracy" in records[2] and "eval/pass@2" in records[3]
    samples = read_jsonl(run / "samples.jsonl")
    assert {s["mode"] for s in samples} == {"greedy", "sampled"}
    assert result.final_eval == {k: v for k, v in records[-1].items() if k.startswith("eval/")}


def test_gradient_accumulation_does_not_change_the_update(config_factory):
    finals = []
    for name, micro in (("whole", 0), ("split", 4)):
        cfg = load_config(config_factory(name, train={"steps": 2, "batch_size": 16, "group_size": 4,
                                                      "micro_batch_size": micro},
                                         algorithm={"aggregation": "token_mean"}, eval={"every": 0}))
        finals.append(weights(train(cfg).run_dir / "final_model"))
    for key in finals[0]:
        torch.testing.assert_close(finals[0][key], finals[1][key], rtol=1e-4, atol=1e-6)


def test_old_logprobs_cost_no_forward_pass_at_mu_1_and_one_pass_otherwise(config_factory, monkeypatch):
    calls = []
    real = passes_module.cached_logprobs
    monkeypatch.setattr(passes_module, "cached_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    train(load_config(config_factory("mu1", train={"steps": 2}, eval={"every": 0})))
    assert calls == []
    train(load_config(config_factory("mu2", train={"steps": 2}, algorithm={"mu": 2}, eval={"every": 0})))
    assert calls == []  # the sampler's log-probs are pi_old: same weights, temperature 1, float32
    cfg = load_config(config_factory("mu2r", train={"steps": 2, "old_logprobs": "recompute"}, algorithm={"mu": 2},
                                     eval={"every": 0}))
    train(cfg)
    assert len(calls) == 2  # one cached pass per rollout, reused by both inner epochs
    ratios = [r["ratio_mean"] for r in read_jsonl(cfg.out_dir + "/metrics.jsonl")[1:]]
    assert all(math.isfinite(r) for r in ratios)


def test_reference_model_only_when_beta_positive(config_factory):
    assert prepare_run(load_config(config_factory("b0"))).learner.reference is None
    cfg = load_config(config_factory("b1", algorithm={"beta": 0.1}, train={"steps": 2}))
    run = prepare_run(cfg)
    assert run.learner.reference is not None
    assert not any(p.requires_grad for p in run.learner.reference.parameters())
    train(cfg, run=run)
    kls = [r["kl"] for r in read_jsonl(cfg.out_dir + "/metrics.jsonl")[1:]]
    assert kls[0] == pytest.approx(0.0, abs=1e-6)  # step 1 samples from the reference itself
    assert kls[1] > 0


def test_same_seed_same_metrics(config_factory):
    texts = []
    for name in ("a", "b"):
        cfg = load_config(config_factory(name, train={"steps": 2}))
        texts.append((train(cfg).run_dir / "metrics.jsonl").read_text())
    assert texts[0] == texts[1]
    cfg = load_config(config_factory("c", seed=1, train={"steps": 2}))
    assert (train(cfg).run_dir / "metrics.jsonl").read_text() != texts[0]
    assert all(json.loads(line) for line in texts[0].splitlines())


def test_the_progress_lines_name_the_algorithm(config_factory, capsys):
    """The bar said "GRPO step" for every algorithm (ppo, rloo, kimi runs too)."""
    for algorithm, label in (({"preset": "kimi"}, "kimi"), ({"advantage": "rloo"}, "rloo")):
        cfg = load_config(config_factory(label, algorithm=algorithm, train={"steps": 1}, log={"progress": True}))
        train(cfg)
        err = capsys.readouterr().err
        assert f"{label} step 1/1" in err and "GRPO" not in err, err
