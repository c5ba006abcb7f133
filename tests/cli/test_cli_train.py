"""`rlvr train|sft|demo` argument handling: config errors are one line on stderr and exit code 2."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlvr.cli import COMMAND_MODULES, build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def run_main(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("config, sets, message", [
    ({"trian": {}}, [], "unknown config key 'trian'; did you mean 'train'?"),
    ({"train": {"batch_size": 10, "group_size": 4}}, [], "must be divisible by train.group_size"),
    ({"train": {"steps": "x"}}, [], "train.steps: expected int"),
    ({"model": {"path": "/no/such/model"}}, [], "model.path: no Hugging Face model folder"),
    ({}, ["algorithm.advantage=nope"], "algorithm.advantage: unknown advantage 'nope'"),
    ({}, ["task.name=nope"], "task.name: unknown name 'nope'"),
])
def test_config_errors_exit_2_with_one_line(tmp_path, capsys, config, sets, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out, err = run_main(capsys, "train", str(path), *[a for s in sets for a in ("--set", s)])
    assert code == 2
    assert err.count("\n") == 1 and message in err and err.startswith("rlvr train: error: ")
    assert not (tmp_path / "runs").exists()


def test_missing_config_file_and_missing_argument(tmp_path, capsys):
    code, _, err = run_main(capsys, "train", str(tmp_path / "nope.yaml"))
    assert code == 2 and "does not exist" in err
    code, _, err = run_main(capsys, "train")
    assert code == 2 and "give a CONFIG file" in err


def test_help_config_lists_every_key(capsys):
    code, out, _ = run_main(capsys, "train", "--help-config")
    assert code == 0
    assert "train.group_size (8):" in out and "algorithm.clip_high (0.2):" in out


def test_every_command_module_registers():
    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    assert {"train", "sft", "demo", "eval"} <= commands
    assert len(COMMAND_MODULES) == len(set(COMMAND_MODULES))


def test_a_real_process_prints_no_traceback(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"train": {"batch_size": 10, "group_size": 4}}))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "train", str(path)], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [  # one line: the allocator's report waits until a run starts (rlvr.allocator)
        "rlvr train: error: train.batch_size (10) must be divisible by train.group_size (4): every prompt "
        "needs a full group"]


def test_sft_from_task_demonstrations_and_from_jsonl(tmp_path, capsys):
    tiny = ["--set", "model.tiny_preset=test", "--set", "task.eval_size=8", "--set", "threads=1"]
    code, out, err = run_main(capsys, "sft", "--task", "sort", "--steps", "3", "--out", str(tmp_path / "a"), *tiny)
    assert code == 0, err
    assert "held-out greedy exact-match accuracy:" in out
    first = tmp_path / "a" / "sft_model"
    assert (first / "model.safetensors").is_file()
    data = tmp_path / "pairs.jsonl"
    data.write_text('{"prompt": "sort 2 1=", "completion": "1 2"}\n{"prompt": "sort 9 3=", "completion": "3 9"}\n')
    code, _, err = run_main(capsys, "sft", "--model", str(first), "--data", str(data), "--steps", "2",
                            "--out", str(tmp_path / "b"), *tiny)
    assert code == 0, err
    assert (tmp_path / "b" / "sft_model" / "config.json").is_file()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n')
    code, _, err = run_main(capsys, "sft", "--data", str(bad), "--steps", "2", "--out", str(tmp_path / "c"), *tiny)
    assert code == 2 and "missing field(s) ['completion']" in err and err.count("\n") == 1


def test_vllm_engine_without_vllm_exits_2_before_any_work(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(capsys, "train", str(ROOT / "configs" / "sort.yaml"), "--set", "rollout.engine=vllm")
    assert code == 2 and err.count("\n") == 1 and "install the extra: pip install 'rlvr[vllm]'" in err
    assert list(tmp_path.iterdir()) == []
