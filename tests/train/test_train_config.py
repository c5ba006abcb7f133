"""Config loading, --set overrides and validation: every error is one ConfigError line."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from rlvr.config import (Config, ConfigError, apply_overrides, config_help, load_config, parse_yaml, read_yaml,
                         save_config, with_absolute_paths)
from rlvr.train.validate import check_registries


def write(tmp_path, data) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_defaults_load_and_overrides_are_typed(tmp_path):
    cfg = load_config(write(tmp_path, {"train": {"steps": 3}}),
                      ["optim.lr=1e-3", "log.progress=false", "task.options.length=5",
                       "model.path=null", "algorithm.loss_constant=16", "optim.betas=[0.9, 0.95]"])
    assert cfg.train.steps == 3
    assert cfg.optim.lr == 1e-3 and isinstance(cfg.optim.lr, float)
    assert cfg.log.progress is False
    assert cfg.task.options == {"length": 5}
    assert cfg.algorithm.loss_constant == 16.0
    assert cfg.optim.betas == [0.9, 0.95]


def test_yaml_exponent_without_dot_is_a_float(tmp_path):
    # YAML 1.1 reads 1e-3 as a string; a float field accepts it anyway.
    assert load_config(write(tmp_path, {"optim": {"lr": "1e-3"}})).optim.lr == 1e-3


def test_saved_config_round_trips(tmp_path):
    cfg = load_config(None, ["train.steps=7", "task.options.reward=positional"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg


SHARD = ["distributed.backend=ray", "distributed.learners=2", "distributed.shard=true"]


@pytest.mark.parametrize("data, overrides, message", [
    ({"trian": {"steps": 1}}, [], "unknown config key 'trian'; did you mean 'train'"),
    ({"train": {"stpes": 1}}, [], "unknown config key 'train.stpes'; did you mean 'train.steps'"),
    ({}, ["optim.lrr=1"], "unknown config key 'optim.lrr'; did you mean 'optim.lr'"),
    ({"train": {"steps": "ten"}}, [], "train.steps: expected int, got 'ten' (str)"),
    ({"train": {"steps": 1.5}}, [], "train.steps: expected int"),
    ({"log": {"progress": "yes"}}, [], "log.progress: expected bool"),
    ({}, ["train.steps=abc"], "train.steps: expected int, got abc"),
    ({}, ["train.steps"], "--set expects key=value"),
    ({}, ["train=3"], "train is a section"),
    ({"train": 3}, [], "train: expected a section"),
    ({"train": {"batch_size": 12, "group_size": 8}}, [], "must be divisible by train.group_size"),
    ({"train": {"batch_size": 16, "group_size": 8, "mini_batch_size": 12}}, [], "train.mini_batch_size (12)"),
    ({"train": {"batch_size": 16, "group_size": 4, "mini_batch_size": 8, "micro_batch_size": 3}}, [],
     "train.micro_batch_size (3)"),
    ({"train": {"steps": 0}}, [], "train.steps must be > 0"),
    ({"train": {"micro_batch_tokens": -1}}, [], "train.micro_batch_tokens must be >= 0"),
    ({"train": {"old_logprobs": "sampler"}}, [], "train.old_logprobs: unknown 'sampler'"),
    ({"train": {"packing": "sometimes"}}, [], "train.packing: unknown 'sometimes'"),
    ({"train": {"zero_advantage_rows": "skip"}}, [], "train.zero_advantage_rows: unknown 'skip'"),
    ({"model": {"tiny_sizes": {"layers": 2}}}, [], "model.tiny_sizes: unknown ['layers']; choose from"),
    ({"model": {"tiny_sizes": {"hidden_size": 30}}}, [], "model.tiny_sizes: hidden_size (30) / num_heads"),
    ({"train": {"packing": True}}, [], "train.packing"),  # YAML's true is not a mode: auto, always or never
    ({"model": {"path": "/does/not/exist"}}, [], "model.path: no Hugging Face model folder"),
    ({"sft": {"data": "/nope.jsonl"}}, [], "sft.data: file '/nope.jsonl' does not exist"),
    ({"algorithm": {"advantage": "grpoo"}}, [], "algorithm.advantage: unknown advantage 'grpoo'"),
    ({"algorithm": {"policy_loss": "ppo"}}, [], "algorithm.policy_loss: unknown policy loss 'ppo'"),
    ({"algorithm": {"kl_estimator": "k4"}}, [], "algorithm.kl_estimator: unknown KL estimator 'k4'"),
    ({"algorithm": {"kl_unbiased": True, "beta": 0.0}}, [], "algorithm.kl_unbiased weights the loss's KL penalty"),
    ({}, ["algorithm.policy_loss=pg", "algorithm.mu=2"], "algorithm.policy_loss=pg has no importance ratio, but "
                                                          "algorithm.mu=2"),
    ({}, ["algorithm.preset=rloo", "train.batch_size=16", "train.group_size=4", "train.mini_batch_size=8"],
     "train.mini_batch_size=8 gives 2 optimizer steps per rollout"),
    ({"algorithm": {"aggregation": "mean"}}, [], "algorithm.aggregation: unknown 'mean'; choose from ['token_mean', "),
    # settings that do nothing without the feature they belong to (rlvr.train.family.NEEDS)
    ({}, ["algorithm.lam=0.9"], "algorithm.lam=0.9 does nothing without algorithm.advantage gae"),
    ({}, ["algorithm.gamma=0.9"], "algorithm.gamma=0.9 does nothing without algorithm.advantage gae or reinforce_pp"),
    ({}, ["algorithm.whiten_advantages=false"], "algorithm.whiten_advantages=False does nothing without"),
    ({}, ["algorithm.tau=0.1"], "algorithm.tau=0.1 does nothing without algorithm.policy_loss kimi"),
    ({}, ["algorithm.dynamic_sampling_rounds=5"], "algorithm.dynamic_sampling_rounds=5 does nothing without "
                                                  "algorithm.dynamic_sampling=true"),
    ({}, ["algorithm.dynamic_sampling_metric=reward"], "algorithm.dynamic_sampling_metric=reward does nothing"),
    ({}, ["algorithm.loss_constant=16"], "algorithm.loss_constant=16.0 does nothing without algorithm.aggregation "
                                         "seq_sum_constant"),
    ({}, ["algorithm.is_mode=mask"], "algorithm.is_mode=mask does nothing without algorithm.is_cap > 1 (or empty "
                                     "where the sampler is not the policy itself"),
    ({}, ["algorithm.is_cap=2", "algorithm.is_mode=clip"], "algorithm.is_mode: unknown 'clip'; choose from"),
    ({}, ["algorithm.is_cap=0.5"], "algorithm.is_cap must be empty (auto), 0 (off) or > 1, got 0.5"),
    ({}, ["algorithm.is_cap=nan"], "algorithm.is_cap must be a finite number, got nan"),
    ({}, ["distributed.backend=ray", "rollout.max_staleness=2", "algorithm.is_cap=0"],
     "algorithm.is_cap=0 turns the importance correction off, but rollout.max_staleness=2 trains on batches"),
    ({}, ["algorithm.allow_uncorrected=true"], "algorithm.allow_uncorrected=True does nothing without "
                                               "algorithm.is_cap=0 with rollout.max_staleness > 0 or "
                                               "rollout.partial; remove it or set algorithm.is_cap=0"),
    ({}, ["algorithm.ref_refresh_every=2"], "algorithm.ref_refresh_every=2 does nothing without algorithm.beta > 0"),
    ({}, ["algorithm.ref_refresh_every=-1"], "algorithm.ref_refresh_every must be >= 0, got -1"),
    ({}, ["algorithm.ref_refresh_every=2", "algorithm.beta=0.1", "model.lora.r=8"],
     "algorithm.ref_refresh_every needs model.lora.r=0"),
    ({}, ["value.coef=0.5"], "value.coef=0.5 does nothing without algorithm.advantage gae"),
    ({}, ["model.lora.alpha=32"], "model.lora.alpha=32.0 does nothing without model.lora.r > 0"),
    ({}, ["model.lora.target_modules=[q_proj]"], "model.lora.target_modules=['q_proj'] does nothing without"),
    ({}, ["algorithm.preset=rloo", "algorithm.clip_high=0.28"], "algorithm.clip_high=0.28 does nothing without "
                                                                "algorithm.policy_loss clipped or gspo"),
    ({}, ["algorithm.preset=dapo", "train.group_size=1"], "algorithm.dynamic_sampling keeps groups whose rewards "
                                                         "vary, but train.group_size=1"),
    ({}, ["algorithm.preset=kimi", "algorithm.advantage=raw"], "algorithm.policy_loss=kimi needs r - mean(r)"),
    ({}, ["algorithm.preset=kimi", "algorithm.advantage=max_only"], "choose one of ['centered', 'grpo', 'rloo'"),
    ({}, ["algorithm.preset=reinforce_pp", "algorithm.beta=0.04"], "algorithm.kl_reward_coef=0.01 and "
                                                                  "algorithm.beta=0.04 both penalise"),
    ({"algorithm": {"policy_loss": "kimi"}}, [], "needs tau"),
    ({"algorithm": {"clip_low": -0.1}}, [], "algorithm.clip_low must be >= 0, got -0.1"),
    ({"algorithm": {"advantage_eps": -1.0}}, [], "algorithm.advantage_eps must be >= 0, got -1.0"),
    ({"optim": {"schedule": "step"}}, [], "optim.schedule: unknown 'step'; choose from ['constant', 'linear', "),
    ({"task": {"name": "sorting"}}, [], "task.name: unknown name 'sorting'"),
    ({"task": {"options": {"lenght": 4}}}, [], "task.options.lenght: sort has no option"),
    ({}, ["task.name=math_file", "task.options.path=no/such.jsonl"],
     "task.options.path: data file no/such.jsonl not found"),
    ({"task": {"rewards": [{"name": "nope"}]}}, [], "task.rewards: unknown reward 'nope'"),
    ({"task": {"rewards": [{"name": "overlong", "options": {"cache_len": 100}}]}}, [],
     "task.rewards[0] overlong: cache_len=100 is larger than rollout.max_new_tokens=16"),
    ({"task": {"rewards": [{"name": "overlong", "options": {"cache_len": 4, "max_len": 64}}]}}, [],
     "leaves 60 tokens free, but rollout.max_new_tokens=16 stops sampling first"),
    ({"task": {"rewards": [{"name": "kimi_length"}]}}, ["train.group_size=1"],
     "task.rewards[0] kimi_length: compares lengths within a group, but train.group_size=1"),
    ({"task": {"rewards": [{"name": "kimi_length", "options": {"start_step": 101}}]}}, [],
     "start_step=101 is after the last step (train.steps=100)"),
    ({"model": {"tiny_preset": "huge"}}, [], "model.tiny_preset: unknown name 'huge'"),
    ({}, ["rollout.engine=vlm"], "rollout.engine: unknown name 'vlm'; choose from ['auto', 'hf', 'vllm']"),
    ({}, ["rollout.gpu_memory_utilization=1.5"], "rollout.gpu_memory_utilization must be in (0, 1]"),
    ({}, ["model.lora.r=8", "rollout.engine=hf", "rollout.vllm_lora=adapter"], "rollout.vllm_lora=adapter loads "
     "LoRA adapters into the engine, which rollout.engine=hf does not do; use rollout.engine=vllm or auto"),
    ({}, ["rollout.vllm_lora=adapter"], "rollout.vllm_lora=adapter needs model.lora.r > 0"),
    ({}, ["distributed.shard=true"], "distributed.shard=true needs distributed.backend=ray"),
    ({}, ["distributed.backend=ray", "distributed.shard=true"], "distributed.shard: true needs distributed.learners "
                                                                ">= 2 (got 1: one learner holds the whole policy"),
    ({}, [*SHARD, "model.lora.r=8"], "needs model.lora.r=0"),
    ({}, [*SHARD, "algorithm.advantage=gae"], "not gae"),
    ({}, [*SHARD, "train.micro_batch_tokens=64"],
     "needs train.micro_batch_tokens=0"),
    ({}, ["distributed.backend=ray", "distributed.learners=2", "distributed.cpu_offload=true"],
     "distributed.cpu_offload: true is an FSDP2 setting; it needs distributed.shard: true"),
    ({}, [*SHARD, "distributed.mixed_precision=true"], "distributed.mixed_precision: true gathers the parameters in "
                                                       "model.dtype; set model.dtype=bfloat16"),
    ({}, ["train.logprob_chunk=-1"], "train.logprob_chunk must be >= 0, got -1"),
    ({}, ["rollout.tensor_parallel_size=2"], "rollout.tensor_parallel_size=2 splits the engine's model over GPUs: it "
                                             "needs model.device=cuda and rollout.engine=vllm (not hf on cpu)"),
    ({}, ["rollout.tensor_parallel_size=2", "distributed.backend=ray", "distributed.rollout_gpus=1"],
     "rollout.tensor_parallel_size=2 splits each engine over 2 GPUs: reserve them with distributed.rollout_gpus=2 "
     "(now 1)"),
    ({}, ["rollout.data_parallel=0"], "rollout.data_parallel must be >= 1, got 0"),
    ({}, ["distributed.sync_bucket_mb=64"], "distributed.sync_bucket_mb=64.0 needs distributed.backend=ray"),
    ({}, ["distributed.learner_gpus=-1"], "distributed.learner_gpus must be >= 0, got -1"),
    ({}, ["distributed.backend=ray", "distributed.max_restarts=-2"], "distributed.max_restarts must be >= 0, got -2"),
    ({}, ["distributed.backend=ray", "distributed.max_restarts=-1"], "distributed.max_restarts must be >= 0, got -1"),
    ({}, ["distributed.backend=ray", "rollout.max_staleness=-1"], "rollout.max_staleness must be >= 0, got -1"),
    ({}, ["rollout.max_staleness=1"], "rollout.max_staleness=1 needs distributed.backend=ray"),
    ({}, ["distributed.backend=ray", "distributed.address="], "distributed.address must be local, auto, HOST:PORT "
                                                              "or ray://HOST:PORT, got ''"),
    ({}, ["distributed.backend=ray", "distributed.address=myhost"], "distributed.address must be local, auto"),
    ({}, ["distributed.backend=ray", "distributed.learners=2", "distributed.learner_cpus=0"],
     "distributed.learner_cpus or learner_gpus must be > 0 with learners > 1"),
])
def test_config_errors_are_one_line(tmp_path, data, overrides, message):
    with pytest.raises(ConfigError) as err:  # values when loading, registry names when a run is set up
        check_registries(load_config(write(tmp_path, data), overrides))
    text = str(err.value)
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize("setting", ["distributed.address=127.0.0.1:1", "distributed.address=auto",
                                     "distributed.learner_gpus=1", "distributed.rollout_gpus=0.5",
                                     "distributed.rollout_cpus=2", "distributed.learner_cpus=0.5",
                                     "distributed.max_restarts=0"])
def test_ray_only_settings_need_ray(setting):
    """Before, these were silently ignored without Ray (a run with distributed.address=127.0.0.1:1 trained
    in one process, rc 0), while learners=2 or shard=true were refused."""
    key = setting.split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}=\S+ needs distributed.backend=ray \(.*ignored\)$"):
        load_config(None, [setting])
    load_config(None, [setting, "distributed.backend=ray"])


@pytest.mark.parametrize("settings, cap", [
    ([], 0.0),  # the hf engine on the trained module: the sampler is the policy, no correction
    (["rollout.engine=vllm"], 2.0),  # vLLM's kernels
    (["distributed.backend=ray"], 2.0),  # a rollout worker's copy in another process
    (["distributed.backend=ray", "rollout.max_staleness=1"], 2.0),  # batches up to one update old
    (["rollout.engine=vllm", "algorithm.is_cap=0"], 0.0),  # an explicit choice is kept
    (["algorithm.is_cap=3"], 3.0),
    (["distributed.backend=ray", "rollout.max_staleness=1", "algorithm.is_cap=0", "algorithm.allow_uncorrected=true"],
     0.0),  # forced: loads, and trains uncorrected
    (["rollout.partial=true"], 2.0),  # tokens carried from steps with older weights
    (["rollout.partial=true", "algorithm.is_cap=0", "algorithm.allow_uncorrected=true"], 0.0),
])
def test_the_behaviour_correction_is_on_by_default_where_the_sampler_is_not_the_policy(settings, cap):
    from rlvr.rollout.engines import behaviour_cap

    cfg = load_config(None, [s for s in settings if not s.startswith("rollout.engine")])
    cfg.rollout.engine = "vllm" if "rollout.engine=vllm" in settings else "hf"  # vllm need not be installed
    assert behaviour_cap(cfg) == cap


def test_presets_and_defaults_never_trip_the_inert_settings_check():
    """A preset's own values count as unset: only a key the user moved is refused (rlvr.train.family.NEEDS)."""
    from rlvr.presets import PRESETS

    for name in [None, *PRESETS]:
        check_registries(load_config(None, [f"algorithm.preset={name}"] if name else []))
    check_registries(load_config(None, ["algorithm.preset=ppo", "algorithm.lam=0.9", "value.coef=0.5"]))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)
    for text in ("", "# a comment only\n"):  # with --set too: it silently trained the default 100 steps
        bad.write_text(text)
        with pytest.raises(ConfigError, match=rf"^{bad}: the config is empty"):
            load_config(bad, ["out_dir=elsewhere"])


def test_yaml_values_and_errors_by_hand(tmp_path):
    """parse_yaml reads values as a config does; a syntax error is one line with where, line and column."""
    assert parse_yaml("5", "w") == 5 and parse_yaml("1.5e-3", "w") == 1.5e-3 and parse_yaml("[1, 2]", "w") == [1, 2]
    assert parse_yaml("true", "w") is True and parse_yaml("/tmp/a b", "w") == "/tmp/a b" and parse_yaml("", "w") is None
    with pytest.raises(ConfigError) as err:
        parse_yaml("[3", "--set task.options.length")
    assert str(err.value) == ("--set task.options.length: invalid YAML at line 1, column 3 "
                              "(expected ',' or ']', but got '<stream end>')")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: 2\n  lr: [1\n")  # the flow list never closes: reported where the file ends
    with pytest.raises(ConfigError, match=rf"^{bad}: invalid YAML at line 4, column 1 \(") as err:
        read_yaml(bad)
    assert "\n" not in str(err.value)
    bad.write_bytes("seed: 0 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_yaml(bad)


def test_every_field_has_help():
    lines = config_help()
    assert len(lines) > 40
    assert all(line.split(": ", 1)[1].strip() for line in lines), [l for l in lines if l.endswith(": ")]
    assert any(line.startswith("algorithm.aggregation ") and "Dr. GRPO" in line for line in lines)


def test_apply_overrides_into_free_form_dict():
    cfg = Config()
    apply_overrides(cfg, ["task.options.nested.x=1"])
    assert cfg.task.options == {"nested": {"x": 1}}


@pytest.mark.parametrize("value, expected", [
    ("Q: {question} A:", "Q: {question} A:"),  # YAML cannot read it: the text as written
    ("Question {question}: answer", "Question {question}: answer"),  # YAML reads a block mapping: the text
    ("plain", "plain"), ("5", 5), ("true", True), ("[1, 2]", [1, 2]), ("{a: 1}", {"a": 1}),  # YAML as before
])
def test_free_form_option_text_is_taken_as_written_where_yaml_reads_no_value(value, expected):
    cfg = Config()
    apply_overrides(cfg, [f"task.options.template={value}"])
    assert cfg.task.options == {"template": expected}


def test_free_form_option_in_list_or_mapping_syntax_must_be_valid_yaml():
    with pytest.raises(ConfigError, match=r"^--set task.options.length: invalid YAML at line 1"):
        apply_overrides(Config(), ["task.options.length=[3"])


@pytest.mark.parametrize("name", ["demo.yaml", "sort.yaml", "arith.yaml"])
def test_shipped_configs_validate(name):
    from pathlib import Path

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / name)
    assert cfg.train.batch_size % cfg.train.group_size == 0


def test_vllm_engine_without_vllm_names_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError) as err:  # when a run is set up (the engine registry), before any work
        check_registries(load_config(write(tmp_path, {"seed": 0}), ["rollout.engine=vllm"]))
    assert str(err.value) == ("rollout.engine=vllm: vllm is not installed; install the extra: "
                              "pip install 'rlvr[vllm]' (on a CPU: scripts/setup_vllm.sh)")
    assert load_config(write(tmp_path, {"seed": 0})).rollout.engine == "auto"


@pytest.mark.parametrize("device, installed, chosen", [("cpu", True, "hf"), ("cpu", False, "hf"),
                                                       ("cuda", True, "vllm"), ("cuda", False, "hf")])
def test_auto_engine_is_vllm_where_installed_on_a_gpu(tmp_path, monkeypatch, device, installed, chosen):
    import torch

    import rlvr.rollout.engines as engines

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real("json") if installed else None) if name == "vllm" else real(name, *a))
    monkeypatch.setattr(engines, "resolve_placement",
                        lambda model: type("P", (), {"device": torch.device(device)})())
    cfg = load_config(write(tmp_path, {"seed": 0}))
    assert engines.engine_spec(cfg).name == chosen
    for explicit in ("hf", "vllm"):  # an explicit choice is kept
        cfg.rollout.engine = explicit
        assert engines.engine_spec(cfg).name == explicit


def test_with_absolute_paths_makes_every_path_absolute_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("d").mkdir()
    Path("d/sft.jsonl").write_text('{"prompt": "p", "completion": "c"}\n')
    cfg = load_config(None, ["out_dir=runs/a", "sft.data=d/sft.jsonl", "task.name=math_file",
                             "task.options={path: d/train.jsonl, eval_path: d/test.jsonl, template: plain}",
                             "task.rewards=[{name: reward_model, options: {path: rm}}, {name: overlong, "
                             "options: {cache_len: 4}}]"])
    out = with_absolute_paths(cfg)
    assert out.out_dir == str(tmp_path / "runs/a") and out.sft.data == str(tmp_path / "d/sft.jsonl")
    assert out.task.options == {"path": str(tmp_path / "d/train.jsonl"), "eval_path": str(tmp_path / "d/test.jsonl"),
                                "template": "plain"}
    assert out.task.rewards[0]["options"] == {"path": str(tmp_path / "rm")}
    assert out.task.rewards[1] == cfg.task.rewards[1] and out.model.path is None and out.value.path is None
    assert cfg.out_dir == "runs/a" and cfg.task.options["path"] == "d/train.jsonl"  # the argument is not changed
    assert with_absolute_paths(out) == out


def test_a_one_stage_recipe_loads_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config("dapo").algorithm.preset == "dapo"  # configs/recipes/dapo.yaml


def test_the_task_reads_the_start_models_tokenizer_and_its_template_follows_the_model(tmp_path):
    """`template: chat` needed the model's folder written again as `tokenizer:`; the default was r1_zero whatever
    the model. Now the run hands the task its start model's tokenizer, and `auto` picks its chat template."""
    from rlvr.models import load_tokenizer, make_tiny_model_dir
    from rlvr.tasks.templates import R1_ZERO
    from rlvr.train.preflight import run_task

    data = tmp_path / "q.jsonl"
    data.write_text('{"question": "1+1?", "answer": "2"}\n' * 4)
    chat = make_tiny_model_dir(tmp_path / "chat", preset="test")  # the char tokenizer has a chat template
    sets = ["task.name=math_file", f"task.options.path={data}", "task.options.eval_fraction=0.5"]
    for template in ("chat", "auto"):
        task = run_task(load_config(None, [f"model.path={chat}", *sets, f"task.options.template={template}"]))
        assert task.template == "chat" and task.eval_examples(1, 0)[0].prompt.startswith("<bos>1+1?\n\n")
    base = make_tiny_model_dir(tmp_path / "base", preset="test")
    tokenizer = load_tokenizer(base)
    tokenizer.chat_template = None  # a base model's tokenizer
    tokenizer.save_pretrained(base)
    (base / "chat_template.jinja").unlink(missing_ok=True)
    task = run_task(load_config(None, [f"model.path={base}", *sets]))
    assert task.template == "r1_zero" and task.eval_examples(1, 0)[0].prompt == R1_ZERO.format(question="1+1?")
    with pytest.raises(ConfigError, match="^task.options: template 'chat': this tokenizer has no chat_template"):
        check_registries(load_config(None, [f"model.path={base}", *sets, "task.options.template=chat"]))
