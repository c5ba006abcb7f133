"""The one field helper (`rlvr.config.fields.f`) and the checks a field and a section carry with them; configs of
the commands other than `rlvr train` read through the same loader (`load_config(cls=...)`)."""

import copy
import math
import re
import pickle
from dataclasses import dataclass, replace

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rlvr.config import (Config, ConfigError, OfflineConfig, OptimConfig, PackedSFTConfig, PreferenceConfig,
                         RewardModelConfig, RFTConfig, SFTRunConfig, config_help, f, load_config)
from rlvr.config.fields import bound_text, check_section, check_value


@dataclass
class Inner:
    rate: float = f(0.5, "A share.", ge=0, lt=1)
    mode: str = f("a", "A mode.", choices=("a", "b"))

    def check(self, prefix: str) -> None:
        if self.mode == "b" and self.rate == 0:
            raise ConfigError(f"{prefix}mode=b needs {prefix}rate > 0")


@dataclass
class Outer:
    count: int = f(3, "A count.", gt=0)
    inner: Inner = f(Inner(rate=0.25), "A section with its own default.")


def _meta(**bounds):
    return {"help": "", "gt": None, "ge": None, "lt": None, "le": None, "choices": None, **bounds}


@pytest.mark.parametrize("bounds, text", [({"gt": 0}, "> 0"), ({"ge": 0}, ">= 0"), ({"le": 1}, "<= 1"),
                                          ({"gt": 0, "le": 1}, "in (0, 1]"), ({"ge": 0, "lt": 0.5}, "in [0, 0.5)"),
                                          ({}, None)])
def test_bound_text(bounds, text):
    assert bound_text(_meta(**bounds)) == text


@pytest.mark.parametrize("value, bounds, message", [
    (0, {"gt": 0}, "^k must be > 0, got 0$"), (-1, {"ge": 0}, "^k must be >= 0, got -1$"),
    (1.0, {"ge": 0, "lt": 1}, r"^k must be in \[0, 1\), got 1.0$"),
    (math.nan, {}, "^k must be a finite number, got nan$"),
    (math.inf, {"gt": 0}, "^k must be a finite number, got inf$"),
    ("c", {"choices": ("a", "b")}, r"^k: unknown 'c'; choose from \['a', 'b'\]$"),
])
def test_check_value_is_one_line_naming_the_key(value, bounds, message):
    with pytest.raises(ConfigError, match=message):
        check_value("k", value, _meta(**bounds))


def test_an_empty_optional_value_and_a_bool_pass_every_range():
    check_value("k", None, _meta(gt=0))
    check_value("k", True, _meta(gt=5))


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=10),
       st.sampled_from([("gt", "le"), ("ge", "le"), ("gt", "lt"), ("ge", "lt")]), st.integers(-3, 3), st.integers(0, 4))
def test_check_value_refuses_exactly_the_values_outside_the_range(value, names, low, width):
    """Against the plain predicate: in range <=> no error."""
    lo_name, hi_name = names
    hi = low + width
    inside = (value > low if lo_name == "gt" else value >= low) and (value < hi if hi_name == "lt" else value <= hi)
    try:
        check_value("k", value, _meta(**{lo_name: low, hi_name: hi}))
        refused = False
    except ConfigError:
        refused = True
    assert refused == (not inside)


def test_check_section_walks_sub_sections_then_the_sections_own_rule():
    check_section(Outer())
    with pytest.raises(ConfigError, match=r"^inner.rate must be in \[0, 1\), got 1.5$"):
        check_section(Outer(inner=Inner(rate=1.5)))
    with pytest.raises(ConfigError, match="^inner.mode=b needs inner.rate > 0$"):
        check_section(Outer(inner=Inner(rate=0.0, mode="b")))
    with pytest.raises(ConfigError, match="^count must be > 0, got 0$"):
        check_section(Outer(count=0))


def test_a_section_default_of_its_own_is_fresh_per_config_and_kept_under_a_partial_file():
    """An offline trainer's OptimConfig(lr=1e-6): a file that sets only optim.schedule keeps lr 1e-6 (building the
    section from its class would have reset it to OptimConfig's 1e-5)."""
    a, b = Outer(), Outer()
    assert a.inner == Inner(rate=0.25) and a.inner is not b.inner
    cfg = load_config(None, base={"optim": {"schedule": "cosine"}}, cls=PreferenceConfig)
    assert (cfg.optim.lr, cfg.optim.schedule) == (1e-6, "cosine")
    assert OptimConfig().lr == 1e-5


def test_help_lists_every_key_with_the_default_it_has_there_and_its_range():
    lines = config_help(Outer)
    assert lines == ["count (3): A count. [> 0]", "inner.rate (0.25): A share. [in [0, 1)]",
                     "inner.mode ('a'): A mode. [a | b]"]
    assert all(line.split("): ", 1)[1] for line in config_help(Config))  # help text on every key of the RL run


def test_an_unknown_key_names_the_key_meant():
    """An offline trainer's optimizer keys moved into `optim`: `lr` names `optim.lr`; a typo the closest key."""
    with pytest.raises(ConfigError, match=r"^unknown config key 'lr'; did you mean 'optim.lr'\?$"):
        load_config(None, ["lr=1e-3"], cls=PreferenceConfig)
    with pytest.raises(ConfigError, match=r"^unknown config key 'weight_decay'; did you mean 'optim.weight_decay'\?$"):
        load_config(None, base={"weight_decay": 0.1}, cls=PreferenceConfig)
    with pytest.raises(ConfigError, match=r"^unknown config key 'train.stpes'; did you mean 'train.steps'\?$"):
        load_config(None, ["train.stpes=3"])


OLD_OPTIM_KEYWORDS = ("lr", "max_grad_norm", "weight_decay", "warmup_steps", "schedule", "min_lr_ratio")


@pytest.mark.parametrize("cls", [PreferenceConfig, RewardModelConfig, PackedSFTConfig, RFTConfig, OfflineConfig])
@pytest.mark.parametrize("name", OLD_OPTIM_KEYWORDS)
def test_an_old_keyword_from_python_names_the_key_meant(cls, name):
    """An earlier version's keyword (`PreferenceConfig(lr=1e-6)`: the optimizer's keys moved into `optim`) was a bare
    TypeError; it is one line naming the new key and how to write it, a ConfigError and still a TypeError."""
    message = (f"{cls.__name__}({name}=...): no such key; did you mean optim.{name} "
               f"(optim=OptimConfig({name}=...))?")
    for kind in (ConfigError, TypeError):
        with pytest.raises(kind) as err:
            cls(**{name: 1e-6}, seed=1)
        assert str(err.value) == message


def test_an_unknown_keyword_from_python_names_the_closest_key_or_lists_them():
    with pytest.raises(ConfigError, match=r"^PreferenceConfig\(betaa=\.\.\.\): no such key; did you mean beta\?$"):
        PreferenceConfig(betaa=0.1)
    with pytest.raises(ConfigError, match=r"^SFTRunConfig\(zzz=\.\.\.\): no such key; keys: seed, out_dir, "):
        SFTRunConfig(zzz=1)
    cfg = PreferenceConfig(beta=0.2, optim=OptimConfig(lr=1e-6))  # the fields themselves, as before
    assert (cfg.beta, cfg.optim.lr) == (0.2, 1e-6) and copy.deepcopy(cfg) == cfg
    assert replace(cfg, beta=0.3).beta == 0.3 and pickle.loads(pickle.dumps(cfg)) == cfg
    with pytest.raises(ConfigError, match=r"^PreferenceConfig\(lr=\.\.\.\): no such key; did you mean optim.lr"):
        replace(cfg, lr=1e-5)


def test_rlvr_sft_reads_its_keys_of_an_rl_config_file(tmp_path):
    """An `rlvr train` file: the sections `rlvr sft` does not read are left out, its own are read; a --set of an RL
    key is refused naming the SFT key meant; a key of neither is an unknown key."""
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump({"seed": 3, "model": {"tiny_preset": "test"}, "sft": {"steps": 5, "lr": 0.01},
                                    "task": {"name": "sort", "prompt_sampler": "failure_rate"},
                                    "rollout": {"max_new_tokens": 9, "temperature": 0.7},
                                    "algorithm": {"preset": "dapo"}, "train": {"steps": 40}}))
    cfg = load_config(path, [], cls=SFTRunConfig)
    assert (cfg.seed, cfg.sft.steps, cfg.sft.lr, cfg.rollout.max_new_tokens) == (3, 5, 0.01, 9)
    run = cfg.run_config()  # the RL config it is part of: its values, every other key at its default
    assert isinstance(run, Config) and (run.seed, run.sft.steps, run.rollout.max_new_tokens) == (3, 5, 9)
    assert (run.train.steps, run.rollout.temperature, run.model.lora.r) == (Config().train.steps, 1.0, 0)
    with pytest.raises(ConfigError, match=r"^--set train.steps: rlvr sft does not read this key, so it would change "
                                          r"nothing; did you mean sft.steps\?"):
        load_config(path, ["train.steps=3"], cls=SFTRunConfig)
    with pytest.raises(ConfigError, match="^unknown config key 'sft.stepz'"):
        load_config(path, ["sft.stepz=3"], cls=SFTRunConfig)
    with pytest.raises(ConfigError, match=r"^sft.steps must be >= 1 for `rlvr sft` \(use --steps\)$"):
        load_config(None, [], cls=SFTRunConfig)


def test_the_sections_choices_are_the_registries_names():
    """The config lists them itself (it imports no torch, so `--help` stays fast); the code that builds them reads
    the config's (value models, dynamic-sampling metrics) or equals it (the core's aggregation modes)."""
    from rlvr import core
    from rlvr.algorithms import dynamic_sampling, ppo
    from rlvr.config import sections

    assert sections.AGGREGATION_MODES == core.AGGREGATION_MODES
    assert ppo.VALUE_MODELS is sections.VALUE_MODELS and dynamic_sampling.METRICS is sections.DYNAMIC_SAMPLING_METRICS
    assert "[shared | separate]" in next(line for line in config_help(Config) if line.startswith("value.model "))


@pytest.mark.parametrize("item, message", [
    ("value.model=critic", "value.model: unknown 'critic'; choose from ['shared', 'separate']"),
    ("algorithm.dynamic_sampling_metric=format", "algorithm.dynamic_sampling_metric: unknown 'format'; choose from "
                                                 "['reward', 'accuracy']"),
    ("algorithm.aggregation=mean", "algorithm.aggregation: unknown 'mean'; choose from ['token_mean', "),
    ("rollout.vllm_lora=lora", "rollout.vllm_lora: unknown 'lora'; choose from ['auto', 'adapter', 'merge']"),
    ("rollout.gpu_memory_utilization=0", "rollout.gpu_memory_utilization must be in (0, 1], got 0.0"),
    ("sft.data=/no/such.jsonl", "sft.data: file '/no/such.jsonl' does not exist"),
    ("log.report_to=[tensorbord]", "log.report_to: unknown tracker 'tensorbord'; choose from ['tensorboard', "),
    ("out_dir= ", "out_dir must not be empty"),
])
def test_a_sections_own_rule_is_checked_when_the_config_loads(item, message):
    """Moved from the run's set-up (rlvr.train.validate, rlvr.train.family) and the cross-section checks
    (rlvr.config.checks) onto the section they concern: refused by load_config, before any registry is read."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [item])
    assert str(err.value).startswith(message), str(err.value)


def test_a_config_built_in_python_gets_its_sections_checks_at_set_up(tmp_path):
    """check_registries (every run's set-up) runs the sections' checks first: a Config built in Python, not loaded,
    is refused as a loaded one would be."""
    from rlvr.config import ValueConfig
    from rlvr.train.validate import check_registries

    for cfg, message in [(Config(out_dir=""), "out_dir must not be empty"),
                         (Config(out_dir=str(tmp_path), optim=OptimConfig(schedule="step")),
                          "optim.schedule: unknown 'step'"),
                         (Config(out_dir=str(tmp_path), value=ValueConfig(lr=0.0)), "value.lr must be > 0, got 0.0")]:
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
            check_registries(cfg)


def test_rlvr_sft_checks_its_sft_section_as_the_rl_run_does():
    with pytest.raises(ConfigError, match=r"^sft.data: file '/no/such.jsonl' does not exist$"):
        load_config(None, ["sft.data=/no/such.jsonl", "sft.steps=2"], cls=SFTRunConfig)
