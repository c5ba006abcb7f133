"""`rlvr eval`'s config (rlvr.config.evaluation): CONFIG, `--set KEY=VALUE` and `--help-config` as every command's;
its flags are aliases of keys (CONFIG < flags < --set); an error names the key, or the flag where a flag gave the
value; the fields that mean what an RL run's mean are declared from them (`like`)."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
import yaml

from rlvr.cli import build_parser, main
from rlvr.commands.eval import ALIASES, eval_config
from rlvr.commands.grammar import settle
from rlvr.config import BaseModelConfig, EvalConfig, RolloutConfig, config_help
from rlvr.config.evaluation import EvalRunConfig
from rlvr.config.fields import f, like
from rlvr.models import make_tiny_model_dir


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("eval_config") / "tiny", preset="test")


def _config(argv: list[str]):
    args = build_parser().parse_args(["eval", *argv])
    settle(args, "rlvr eval")
    return eval_config(args)


def _meta(cls: type, name: str) -> dict:
    return dict(cls.__dataclass_fields__[name].metadata)


def _leaf_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    for fld in fields(cls):
        value = getattr(cls(), fld.name)
        keys += _leaf_keys(type(value), f"{prefix}{fld.name}.") if is_dataclass(value) else [f"{prefix}{fld.name}"]
    return keys


def test_set_runs_eval_as_the_flags_do(model, tmp_path, capsys):
    flags = ["--model", str(model), "--task", "sort", "--num-examples", "2", "--n", "2", "--max-new-tokens", "4",
             "--temperature", "0.7", "--out", str(tmp_path / "flags.jsonl")]
    sets = ["--set", f"model.path={model}", "--set", "task.name=sort", "--set", "num_examples=2", "--set",
            "eval.samples=2", "--set", "rollout.max_new_tokens=4", "--set", "eval.temperature=0.7",
            "--out", str(tmp_path / "sets.jsonl")]
    assert main(["eval", *flags]) == 0 and main(["eval", *sets]) == 0
    rows = [[json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
            for name in ("flags.jsonl", "sets.jsonl")]
    assert [r["mode"] for r in rows[1]] == ["greedy"] * 2 + ["sampled"] * 4
    assert rows[0] == rows[1]  # the same settings, the same seed: the same graded samples
    assert capsys.readouterr().out.count("sampled (n=2, T=0.7)") == 2


def test_config_file_then_flags_then_set(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": "from_file"}, "task": {"name": "sort", "options":
                                    {"length": 4, "max_digit": 5}}, "eval": {"samples": 8, "temperature": 0.5},
                                    "num_examples": 7}))
    cfg, names, option_named = _config([str(path), "--n", "3", "--set", "eval.samples=2", "--temperature", "0.9",
                                        "--task-option", "length=3", "--set", "task.options.max_digit=7"])
    assert (cfg.model.path, cfg.task.name, cfg.num_examples) == ("from_file", "sort", 7)  # the file's
    assert (cfg.eval.samples, cfg.eval.temperature) == (2, 0.9)  # --set over --n, --temperature over the file
    assert cfg.task.options == {"length": 3, "max_digit": 7}  # per option: file < --task-option < --set
    assert names == {"eval.temperature": "--temperature"}  # --n was overridden: errors name eval.samples
    assert (option_named("length"), option_named("max_digit")) == ("--task-option length", "task.options.max_digit")
    cfg, _, _ = _config([str(path), "--task-option", "length=3", "--set", "task.options={reward: sparse}"])
    assert cfg.task.options == {"reward": "sparse"}  # the whole options set by --set: the flag's option is over


def test_every_flag_is_an_alias_of_a_key():
    keys = _leaf_keys(EvalRunConfig)
    assert set(ALIASES.values()) <= set(keys)
    cfg, names, _ = _config(["--model", "m", "--task", "gsm8k", "--num-examples", "5", "--n", "6", "--k", "1,3",
                             "--max-new-tokens", "9", "--temperature", "0.5", "--top-p", "0.9", "--seed", "4",
                             "--batch-size", "2", "--device", "cpu", "--dtype", "bfloat16", "--engine", "hf",
                             "--thinking-budget", "8,16", "--answer-tokens", "5"])
    assert (cfg.model.path, cfg.task.name, cfg.num_examples, cfg.eval.samples, cfg.eval.k) == ("m", "gsm8k", 5, 6,
                                                                                               [1, 3])
    assert (cfg.rollout.max_new_tokens, cfg.eval.temperature, cfg.eval.top_p, cfg.seed) == (9, 0.5, 0.9, 4)
    assert (cfg.rollout.batch_size, cfg.model.device, cfg.model.dtype, cfg.rollout.engine) == (2, "cpu", "bfloat16",
                                                                                                "hf")
    assert (cfg.thinking.budgets, cfg.thinking.answer_tokens) == ([8, 16], 5)
    assert set(names) == set(ALIASES.values())
    run = cfg.run_config()  # what the engine is built and checked from, as rlvr train's
    assert (run.model.path, run.model.dtype, run.rollout.engine, run.task.name) == ("m", "bfloat16", "hf", "gsm8k")


def test_help_config_lists_every_key_with_its_help(capsys):
    assert main(["eval", "--help-config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = [line.split(" (")[0] for line in lines]
    assert listed == _leaf_keys(EvalRunConfig)
    assert all(line.split("): ", 1)[1].strip() for line in lines)  # each with its help


def test_shared_fields_are_declared_from_the_rl_runs():
    """model.device, eval.temperature and eval.top_p's range are the RL run's fields: one help, one range."""
    from rlvr.config.evaluation import EvalModelConfig, SampledEvalConfig

    meta = _meta
    assert meta(EvalModelConfig, "device") == meta(BaseModelConfig, "device")
    assert meta(SampledEvalConfig, "temperature") == meta(EvalConfig, "temperature")
    top_p, rl = meta(SampledEvalConfig, "top_p"), meta(RolloutConfig, "top_p")
    assert (top_p["gt"], top_p["le"]) == (rl["gt"], rl["le"]) == (0, 1) and top_p["help"] != rl["help"]
    assert "\n".join(config_help(EvalRunConfig)).count(meta(BaseModelConfig, "device")["help"]) == 1


def test_like_copies_default_help_and_range():
    from dataclasses import dataclass

    @dataclass
    class Source:
        n: int = f(3, "Some count.", ge=1)
        options: dict = f({"a": 1}, "Options.")

    @dataclass
    class Copy:
        n: int = like(Source, "n")
        m: int = like(Source, "n", default=5, help="Another count.")
        options: dict = like(Source, "options")

    one, two = Copy(), Copy()
    assert (one.n, one.m, one.options) == (3, 5, {"a": 1}) and one.options is not two.options
    assert _meta(Copy, "m") == {**_meta(Source, "n"), "help": "Another count."}


def _refused(capsys, argv: list[str], message: str) -> None:
    assert main(["eval", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"rlvr eval: error: {message}\n", captured.err
    assert captured.out == ""


@pytest.mark.parametrize("argv, message", [
    (["--set", "eval.sample=2"], "unknown config key 'eval.sample'; did you mean 'eval.samples'?"),
    (["--set", "eval.temperature=-1"], "eval.temperature must be >= 0, got -1.0"),
    (["--temperature", "-1"], "--temperature must be >= 0, got -1.0"),
    (["--temperature", "-1", "--set", "eval.temperature=-2"], "eval.temperature must be >= 0, got -2.0"),
    (["--set", "rollout.max_new_tokens=0"], "rollout.max_new_tokens must be >= 1, got 0"),
    (["--set", "eval.samples=many"], "eval.samples: expected int, got many"),
    (["--n", "2", "--set", "eval.k=[4]"], "eval.k 4 needs at least that many samples per problem; --n is 2"),
    (["--set", "eval.k=[0]"], "eval.k: expected a non-empty list of integers >= 1, e.g. [1, 4], got [0]"),
    (["--set", "thinking.budgets=[8, x]"],
     "thinking.budgets: expected a non-empty list of integers >= 1, e.g. [8, 16, 32], got [8, 'x']"),
    (["--set", "model.device=tpu"], "model.device: unknown device 'tpu'"),
    (["--set", "rollout.engine=foo"], "rollout.engine: unknown name 'foo'; choose from ['auto', 'hf', 'vllm']"),
], ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_a_bad_key_or_value_is_one_line_naming_it(model, capsys, argv, message):
    base = ["--model", str(model), "--task", "sort", "--num-examples", "2"]
    assert main(["eval", *base, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlvr eval: error: {message}") and err.count("\n") == 1, err
    assert not (model / "eval_sort.jsonl").exists()


def test_model_and_task_are_required(capsys):
    _refused(capsys, ["--task", "sort"], "model.path is required: give --model DIR (or --set model.path=...)")
    _refused(capsys, ["--set", "model.path=m"], "task.name is required: give --task NAME (or --set task.name=...)")


def test_set_task_options_and_context_errors_name_the_key(model, tmp_path, capsys):
    base = ["--set", f"model.path={model}", "--set", "task.name=sort", "--set", "num_examples=2"]
    assert main(["eval", *base, "--set", "task.options.lenght=3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr eval: error: task.options.lenght: sort has no option 'lenght'"), err
    short = make_tiny_model_dir(tmp_path / "short", preset="test", max_position_embeddings=40)
    assert main(["eval", "--set", f"model.path={short}", "--set", "task.name=sort", "--set",
                 "rollout.max_new_tokens=512"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr eval: error: rollout.max_new_tokens=512: the longest prompt ("), err
    assert main(["eval", *base, "--set", "task.options.length=2", "--set", "num_examples=50"]) == 2
    assert "num_examples=50: sort: could not draw 50 distinct held-out lists" in capsys.readouterr().err
