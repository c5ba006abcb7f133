"""Every algorithm preset is a configuration of the one loop: it loads, resolves as documented, and
trains the tiny model end to end (parameters change, metrics finite)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from rlvr.algorithms.ppo import VALUE_MODEL_FILE
from rlvr.presets import PRESETS, deep_merge, format_presets, get_preset, nested, preset_overrides
from rlvr.train.validate import check_registries
from rlvr.config import ConfigError, load_config
from rlvr.train.loop import train
from variant_helpers import TINY, changed, start_dir

ROOT = Path(__file__).resolve().parents[2]


def test_every_preset_has_a_citation_a_summary_and_valid_keys():
    for name, preset in PRESETS.items():
        assert preset.citation and preset.summary.endswith(".")
        cfg = load_config(None, [f"algorithm.preset={name}"])
        for key, value in preset.overrides.items():
            section, field = key.split(".")
            resolved = getattr(getattr(cfg, section), field)
            if value is not None:
                assert resolved == value, (name, key)
    assert "dr_grpo" in format_presets() and "source:" in format_presets()


def test_precedence_defaults_preset_file_set(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"preset": "dapo", "clip_high": 0.3}}))
    cfg = load_config(path, ["algorithm.beta=0.01"])
    assert cfg.algorithm.clip_high == 0.3  # the file beats the preset
    assert cfg.algorithm.aggregation == "token_mean" and cfg.algorithm.dynamic_sampling  # from the preset
    assert cfg.algorithm.beta == 0.01  # --set beats everything
    assert load_config(path, ["algorithm.preset=grpo"]).algorithm.aggregation == "seq_mean_token_mean"


SHIPPED = sorted((ROOT / "configs").glob("*.yaml")) + sorted((ROOT / "rlvr" / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", [p for p in SHIPPED if "algorithm" in yaml.safe_load(p.read_text())],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_a_preset_set_on_the_command_line_replaces_the_files_algorithm(config):
    """`rlvr train configs/sort.yaml --set algorithm.preset=kimi` ran GRPO labelled kimi (the file spells out
    GRPO's keys, and they beat the preset), and ppo was refused for a key the user never set; `rlvr compare`
    with the same preset ran kimi. A preset named by --set now goes over the file, as in compare; other --set
    keys still win over it, and a preset the file names stays under the file's keys."""
    for name, preset in PRESETS.items():
        # pg (no importance ratio) is refused with more than one optimizer step per rollout: another --set key
        key, value, setting = ("algorithm.beta", 0.01, "algorithm.beta=0.01") if name == "rloo" else \
            ("algorithm.mu", 3, "algorithm.mu=3")
        cfg = check_registries(load_config(config, [f"algorithm.preset={name}", setting]))
        for k, v in preset.overrides.items():
            if k != key:
                assert getattr(getattr(cfg, k.split(".")[0]), k.split(".")[1]) == v, (config.name, name, k)
        assert getattr(cfg.algorithm, key.split(".")[1]) == value  # a --set key beats the preset, whatever the order
        variant = load_config(config, [f"algorithm.preset={name}", *preset_overrides(name), setting])
        assert variant == cfg  # what `rlvr compare` runs for that variant


def test_unknown_preset_is_one_clear_error():
    with pytest.raises(ConfigError, match="unknown algorithm preset 'drgrpo'.*dr_grpo"):
        check_registries(load_config(None, ["algorithm.preset=drgrpo"]))
    with pytest.raises(ValueError, match="choose from"):
        get_preset("nope")


def test_preset_helpers():
    assert nested({"a.b": 1, "a.c": 2, "d.e": None}) == {"a": {"b": 1, "c": 2}, "d": {"e": None}}
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "x": 1}) == {"a": {"b": 1, "c": 3}, "x": 1}
    assert "algorithm.loss_constant=null" in preset_overrides("dr_grpo")
    assert "algorithm.dynamic_sampling=true" in preset_overrides("dapo")


def test_invalid_combinations_fail_before_a_run_starts():
    with pytest.raises(ConfigError, match="kl_reward_coef"):
        # group advantages have no per-token reward
        check_registries(load_config(None, ["algorithm.kl_reward_coef=0.1"]))
    with pytest.raises(ConfigError, match="kimi"):
        check_registries(load_config(None, ["algorithm.preset=ppo", "algorithm.policy_loss=kimi", "algorithm.tau=0.1"]))
    with pytest.raises(ConfigError, match="value.model"):
        check_registries(load_config(None, ["algorithm.preset=ppo", "value.model=tied"]))
    with pytest.raises(ConfigError, match="value.path"):
        check_registries(load_config(None, ["algorithm.preset=ppo", "value.path=/nonexistent/critic"]))
    with pytest.raises(ConfigError, match="gamma = lam = 1"):
        check_registries(load_config(None, ["algorithm.preset=reinforce_pp", "algorithm.lam=0.95"]))
    with pytest.raises(ConfigError, match="dynamic_sampling_metric"):
        check_registries(load_config(None, ["algorithm.preset=dapo", "algorithm.dynamic_sampling_metric=loss"]))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_trains_end_to_end(name, tmp_path):
    extra = ["value.model=shared"] if name == "ppo" else []
    cfg = load_config(None, [f"algorithm.preset={name}", *TINY, *extra, f"out_dir={tmp_path}"])
    result = train(cfg)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == cfg.train.steps
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["reward"]) for r in steps)
    assert changed(start_dir(tmp_path), tmp_path / "final_model"), name
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["algorithm"]["preset"] == name
    assert "eval/greedy_accuracy" in result.final_eval


def test_ppo_separate_critic_trains_and_logs_value_metrics(tmp_path):
    cfg = load_config(None, ["algorithm.preset=ppo", *TINY, "algorithm.mu=2", "train.mini_batch_size=4",
                             f"out_dir={tmp_path}"])
    train(cfg)
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert math.isfinite(last["value_loss"]) and 0 <= last["value_clip_frac"] <= 1
    assert changed(start_dir(tmp_path), tmp_path / "final_model")
    critic = load_file(tmp_path / "final_model" / VALUE_MODEL_FILE)  # the trained critic is kept too
    assert any(k.startswith("trunk.") for k in critic) and critic["head.proj.weight"].abs().sum() > 0


def test_dapo_dynamic_sampling_logs_its_rounds(tmp_path):
    cfg = load_config(None, ["algorithm.preset=dapo", *TINY, f"out_dir={tmp_path}"])
    train(cfg)
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()][1:]
    assert all(1 <= r["sampling/rounds"] <= 1 + cfg.algorithm.dynamic_sampling_rounds for r in steps)
    assert all(0 <= r["sampling/informative_share"] <= 1 for r in steps)


def test_presets_command_lists_every_preset(capsys):
    from rlvr.cli import main

    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}:" in out for name in PRESETS)
