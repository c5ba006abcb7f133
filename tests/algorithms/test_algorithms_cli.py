"""`rlvr dpo`, `rlvr reward-model`, `rlvr rft` through their parsers (rlvr.commands.offline)."""

import json
import re
import shutil
from dataclasses import fields, is_dataclass

import pytest
import yaml

from offline_data import SORT_ALPHABET, sort_pairs
from rlvr.cli import main
import rlvr.commands.offline
import rlvr.models
from rlvr.commands.grammar import set_args
from rlvr.config import PreferenceConfig, RewardModelConfig, RFTConfig
from rlvr.models import load_model, make_tiny_model_dir


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    make_tiny_model_dir(root / "model", preset="test", alphabet=SORT_ALPHABET)
    with open(root / "pairs.jsonl", "w") as handle:
        for pair in sort_pairs(40, seed=0):
            handle.write(json.dumps(pair) + "\n")
    (root / "bad.jsonl").write_text(json.dumps({"prompt": "a", "chosen": "b"}) + "\n")
    pairs = sort_pairs(40, seed=0)
    for name, change in {"long": {"chosen": " ".join("1" * 25)}, "toolong": {"chosen": " ".join("1" * 400)},
                         "same": {"rejected": pairs[29]["chosen"]}}.items():  # on line 30 only
        rows = [*pairs[:29], {**pairs[29], **change}, *pairs[30:]]
        (root / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return root


def test_dpo_command_trains_and_saves(workdir, capsys):
    """metrics.json recorded "beta": null when --beta was left at the loss's default, not the beta used."""
    out = workdir / "dpo"
    code = main(["dpo", "--model", str(workdir / "model"), "--data", str(workdir / "pairs.jsonl"), "--out", str(out),
                 *set_args(["optim.lr=1e-3", "epochs=2", "batch_size=8", "loss=simpo", "gamma=0.5"])])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["loss"] == "simpo" and metrics["config"]["gamma"] == 0.5
    assert metrics["config"]["beta"] == 2.0  # SimPO's paper default, the one used
    assert metrics["eval_after"]["accuracy"] > metrics["eval_before"]["accuracy"]
    assert "held-out accuracy" in capsys.readouterr().out
    load_model(out / "model")  # an ordinary Hugging Face folder


def test_reward_model_command_then_reload(workdir):
    first, second = workdir / "rm1", workdir / "rm2"
    base = ["--data", str(workdir / "pairs.jsonl"), *set_args(["optim.lr=1e-3", "epochs=2", "batch_size=8"])]
    assert main(["reward-model", "--model", str(workdir / "model"), "--out", str(first), *base]) == 0
    assert main(["reward-model", "--model", str(first / "model"), "--out", str(second), *base,
                 "--set", "epochs=1"]) == 0
    metrics = json.loads((second / "metrics.json").read_text())
    assert metrics["eval_before"]["accuracy"] > 0.5  # the second run starts from the trained reward model


def test_the_out_folder_of_an_earlier_run_is_a_model_to_go_on_from(workdir, tmp_path, capsys):
    """`rlvr reward-model --model runs/rm`, the --out folder of an earlier run, was refused ("not a Hugging Face
    model folder (no config.json)": the model is in runs/rm/model), as was every offline command's, `rlvr
    sft`'s (runs/sft/sft_model) and `rlvr eval`'s. Each now goes on from the model saved there (`rlvr.models.model_folder`)."""
    pairs = ["--data", str(workdir / "pairs.jsonl"), *set_args(["optim.lr=1e-3", "epochs=1", "batch_size=8"])]
    rm, rm2, dpo, sft, dpo2 = (tmp_path / name for name in ("rm", "rm2", "dpo", "sft", "dpo2"))
    assert main(["reward-model", "--model", str(workdir / "model"), *pairs, "--out", str(rm)]) == 0
    assert main(["reward-model", "--model", str(rm), *pairs, "--set", "steps=1", "--out", str(rm2)]) == 0
    before, trained = (json.loads((out / "metrics.json").read_text()) for out in (rm2, rm))
    assert before["eval_before"] == pytest.approx(trained["eval_after"])  # it started from rm's model
    assert main(["dpo", "--model", str(workdir / "model"), *pairs, "--set", "steps=1", "--out", str(dpo)]) == 0
    assert main(["sft", "--model", str(dpo), "--task", "sort", "--steps", "1", "--out", str(sft),
                 "--set", "task.eval_size=2", "--set", "threads=1"]) == 0
    assert json.loads((sft / "sft_model" / "built_with.json").read_text())["model"] == str(dpo / "model")
    assert main(["dpo", "--model", str(sft), *pairs, "--set", "steps=1", "--out", str(dpo2)]) == 0
    assert f"saved to {dpo2 / 'model'}" in capsys.readouterr().out
    assert main(["eval", "--model", str(dpo2), "--task", "sort", "--num-examples", "2", "--n", "0"]) == 0
    assert (dpo2 / "model" / "eval_sort.jsonl").is_file()  # evaluated the model saved there
    # rft's model check passes on an out folder: the next check, of the task, is the one that fails
    assert main(["rft", "--model", str(dpo), "--task", "nosuchtask", "--out", str(tmp_path / "rft")]) == 2
    assert "unknown task 'nosuchtask'" in capsys.readouterr().err
    run = tmp_path / "run"  # an `rlvr train` run folder: its warm start is not its trained model
    shutil.copytree(sft / "sft_model", run / "sft_model")
    (run / "config.yaml").write_text("{}")
    assert main(["dpo", "--model", str(run), *pairs, "--out", str(tmp_path / "dpo3")]) == 2
    assert "is not a Hugging Face model folder (no config.json)" in capsys.readouterr().err


def test_rft_command(workdir, capsys):
    code = main(["rft", "--model", str(workdir / "model"), "--task-option", "length=3", "--set", "rounds=1",
                 "--set", "num_samples=2", "--set", "max_new_tokens=6", "--train-size", "8", "--eval-size", "4",
                 "--set", "dedup=false", "--out", str(workdir / "rft")])
    assert code == 0
    metrics = json.loads((workdir / "rft" / "metrics.json").read_text())
    assert metrics["config"]["dedup"] is False and len(metrics["rounds"]) == 1
    assert "greedy accuracy" in capsys.readouterr().out


def test_out_is_checked_before_any_work_and_never_written_over_unasked(workdir, tmp_path, capsys):
    """A trained model is not lost at the end to an --out that cannot take it, nor replaced silently."""
    (tmp_path / "a_file").write_text("x")
    base = ["dpo", "--model", str(workdir / "model"), "--data", str(workdir / "pairs.jsonl"), "--set", "steps=1"]
    for out, message in [(tmp_path / "a_file", "is an existing file, not a folder"),
                         (tmp_path / "a_file" / "run", "is a file, not a folder")]:
        assert main([*base, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("rlvr dpo: error: --out: ") and message in err and "\n" not in err
    out = tmp_path / "run"
    assert main([*base, "--out", str(out)]) == 0
    weights = (out / "model" / "model.safetensors").read_bytes()
    assert main([*base, "--out", str(out), "--set", "optim.lr=1e-2"]) == 2
    assert capsys.readouterr().err.strip() == (f"rlvr dpo: error: --out: {str(out)!r} already holds model, "
                                               "metrics.json from an earlier run; choose another --out or pass --overwrite")
    assert (out / "model" / "model.safetensors").read_bytes() == weights  # untouched
    assert main([*base, "--out", str(out), "--set", "optim.lr=1e-2", "--overwrite"]) == 0
    assert (out / "model" / "model.safetensors").read_bytes() != weights
    rft = ["rft", "--model", str(workdir / "model"), "--task-option", "length=3", "--out", str(out)]
    assert main(rft) == 2 and "already holds model" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["dpo", "--data", "{dir}/bad.jsonl"], r"missing field\(s\) \['rejected'\]"),
    (["dpo", "--data", "{dir}/nope.jsonl"], "does not exist"),
    (["dpo", "--data", "{dir}/pairs.jsonl", "--set", "loss=ln_dpo"], "no default beta"),
    (["dpo", "--data", "{dir}/pairs.jsonl", "--set", "max_length=5"], "more than max_length=5"),
    (["reward-model", "--data", "{dir}/pairs.jsonl", "--set", "batch_size=0"], "batch_size must be > 0"),
    (["rft", "--task", "nosuchtask"], "unknown task 'nosuchtask'"),
    (["rft", "--task-option", "length"], "expects key=value"),
    (["dpo", "--data", "{dir}/pairs.jsonl", "--dtype", "float16"], r"--dtype=float16 needs a CUDA device \(--device=cuda\)"),
    (["reward-model", "--data", "{dir}/pairs.jsonl", "--device", "tpu"], "--device: unknown device 'tpu'"),
    (["rft", "--engine", "sglang"], "--engine: unknown name 'sglang'"),
    # rows past the model's context trained (rc 0, transformers' warning only); row errors named a 0-based index
    # or the position after the split ("pair 3 has 61 tokens"), not the file and line
    *[([cmd, "--data", "{dir}/toolong.jsonl"], r"^rlvr %s: error: \S*/toolong.jsonl:30: prompt \+ chosen is 813 tokens "
       r"\(13 \+ 800\), which exceeds the model's max_position_embeddings \(512\); shorten or drop the row$" % cmd)
      for cmd in ("dpo", "reward-model")],
    *[([cmd, "--data", "{dir}/long.jsonl", "--set", "max_length=30"],
       r"/long.jsonl:30: prompt \+ chosen is 63 tokens \(13 \+ 50\), more than max_length=30")
      for cmd in ("dpo", "reward-model")],
    (["dpo", "--data", "{dir}/pairs.jsonl", "--eval-data", "{dir}/long.jsonl", "--set", "max_length=30"],
     "/long.jsonl:30: "),
    (["dpo", "--data", "{dir}/same.jsonl"], r"/same.jsonl:30: chosen and rejected are identical \('0 1 2 3'\)$"),
    (["reward-model", "--data", "{dir}/pairs.jsonl", "--eval-data", "{dir}/same.jsonl"], "/same.jsonl:30: chosen and"),
    (["reward-model", "--data", "{dir}/pairs.jsonl", "--set", "max_length=0"],
     r"max_length must be > 0, got 0"),
])
def test_bad_input_is_one_line_and_exit_code_2(workdir, tmp_path, capsys, monkeypatch, argv, message):
    """... before any work: no model is loaded, nothing is written (the default --out is runs/<command>)."""
    def loaded(*args, **kwargs):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(rlvr.models, "load_policy", loaded)
    monkeypatch.setattr(rlvr.commands.offline, "_load_reward_model", loaded)
    monkeypatch.chdir(tmp_path)
    argv = [a.replace("{dir}", str(workdir)) for a in argv] + ["--model", str(workdir / "model")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"rlvr {argv[0]}: error:") and "\n" not in err
    assert re.search(message, err), err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv, message", [
    (["dpo", "--data", "{dir}/pairs.jsonl", *set_args(["loss=simpo", "gamma=nan"])], "gamma must be a finite number"),
    (["dpo", "--data", "{dir}/pairs.jsonl", "--set", "beta=inf"], "beta must be a finite number, got inf$"),
    (["dpo", "--data", "{dir}/pairs.jsonl", "--set", "optim.weight_decay=inf"], "weight_decay must be a finite number"),
    (["reward-model", "--data", "{dir}/pairs.jsonl", "--set", "center_coef=nan"], "center_coef must be a finite"),
    (["reward-model", "--data", "{dir}/pairs.jsonl", "--set", "optim.max_grad_norm=nan"],
     "optim.max_grad_norm must be a finite"),
    (["rft", "--set", "temperature=nan"], "temperature must be a finite number, got nan$"),
    (["rft", "--set", "top_p=inf"], "top_p must be a finite number, got inf$"),
    (["rft", "--set", "temperature=-1"], "temperature must be >= 0, got -1.0$"),
])
def test_a_non_finite_hyper_parameter_is_one_line_and_exit_code_2(workdir, tmp_path, capsys, monkeypatch, argv,
                                                                   message):
    """--gamma nan, --beta inf, --weight-decay inf trained and saved an all-NaN model (exit 0), and rft
    --temperature nan failed inside sampling ("index 101 is out of bounds", exit 1)."""
    test_bad_input_is_one_line_and_exit_code_2(workdir, tmp_path, capsys, monkeypatch, argv, message)


@pytest.mark.parametrize("command", [["dpo"], ["dpo", "--set", "loss=simpo"], ["reward-model"]])
def test_an_empty_prompt_is_refused_naming_the_row(workdir, tmp_path, capsys, monkeypatch, command):
    """An empty prompt trained under --loss dpo (its first response token never scored) and failed under simpo
    with "chosen_lengths must all be > 0, found [0]", naming no row. (An empty response is its EOS: scored.)"""
    rows = sort_pairs(5, seed=1)
    rows[2] = {**rows[2], "prompt": ""}
    data = workdir / "empty_prompt.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    test_bad_input_is_one_line_and_exit_code_2(workdir, tmp_path, capsys, monkeypatch, [*command, "--data", str(data)],
                                               r"/empty_prompt.jsonl:3: the prompt encodes to no tokens, so the first "
                                               "response token could not be scored; give every row a prompt$")


@pytest.mark.parametrize("command, cls", [("dpo", PreferenceConfig), ("reward-model", RewardModelConfig),
                                          ("rft", RFTConfig)])
def test_help_config_lists_every_key_of_the_trainer(capsys, command, cls):
    """Each key of the trainer's config, with its default and help, as `rlvr train --help-config` lists the RL
    run's; no --model or --data needed to ask."""
    assert main([command, "--help-config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    keys = [line.split(" (")[0] for line in lines]
    assert keys == [key for key in _keys(cls())] and all(line.split("): ", 1)[1] for line in lines)
    assert "optim.lr (1e-06): " in "\n".join(lines) if cls is PreferenceConfig else True


def _keys(config, prefix=""):
    for fld in fields(config):
        value = getattr(config, fld.name)
        yield from _keys(value, f"{prefix}{fld.name}.") if is_dataclass(value) else [prefix + fld.name]


def test_a_config_file_and_set_configure_the_trainer(workdir, tmp_path, capsys):
    """A YAML of the trainer's keys, --set over it; a key that is not one is one line naming the closest."""
    config = tmp_path / "dpo.yaml"
    config.write_text(yaml.safe_dump({"loss": "ipo", "batch_size": 8, "optim": {"lr": 1e-3, "schedule": "cosine"}}))
    out = tmp_path / "dpo"
    assert main(["dpo", "--model", str(workdir / "model"), "--data", str(workdir / "pairs.jsonl"), "--out", str(out),
                 "--set", "steps=2", str(config), "--set", "optim.lr=2e-3"]) == 0  # CONFIG among the options
    used = json.loads((out / "metrics.json").read_text())["config"]
    assert (used["loss"], used["batch_size"], used["steps"]) == ("ipo", 8, 2)
    assert used["optim"]["lr"] == 2e-3 and used["optim"]["schedule"] == "cosine"
    assert capsys.readouterr().err == ""
    assert main(["dpo", "--model", str(workdir / "model"), "--data", str(workdir / "pairs.jsonl"), "--set",
                 "lr=1e-3"]) == 2
    assert capsys.readouterr().err == "rlvr dpo: error: unknown config key 'lr'; did you mean 'optim.lr'?\n"


def test_the_flags_of_earlier_versions_still_work_with_one_deprecation_line_each(workdir, tmp_path, capsys):
    """`--lr 1e-3 --batch-size 8 --no-dedup` (the per-key flags before config files) train as the keys they now
    are, each saying once which key that is."""
    out = tmp_path / "rft"
    assert main(["rft", "--model", str(workdir / "model"), "--task-option", "length=3", "--train-size", "8",
                 "--eval-size", "0", "--rounds", "1", "--num-samples", "2", "--max-new-tokens", "6", "--no-dedup",
                 "--lr", "1e-3", "--out", str(out)]) == 0
    used = json.loads((out / "metrics.json").read_text())["config"]
    assert (used["rounds"], used["num_samples"], used["dedup"], used["optim"]["lr"]) == (1, 2, False, 1e-3)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"rlvr rft: deprecated: {flag} is now the config key {key}; write --set {key}={value}"
                   for flag, key, value in [("--rounds", "rounds", "1"), ("--num-samples", "num_samples", "2"),
                                            ("--max-new-tokens", "max_new_tokens", "6"),
                                            ("--no-dedup", "dedup", "false"), ("--lr", "optim.lr", "1e-3")]]
    assert main(["dpo", "--model", str(workdir / "model"), "--data", str(workdir / "pairs.jsonl"), "--max-length",
                 "0"]) == 2  # checked as the key
    assert capsys.readouterr().err.splitlines()[-1] == "rlvr dpo: error: max_length must be > 0, got 0"


def _bf16_or_refused(argv: list[str], capsys) -> bool:
    """Run `argv` with --dtype bfloat16: True when it ran; on a CPU without native bfloat16 it must be
    refused in one line naming the flag (then False)."""
    from rlvr.models.placement import cpu_supports_bf16

    code = main([*argv, "--dtype", "bfloat16"])
    if not cpu_supports_bf16():
        assert code == 2 and "--dtype=bfloat16: this CPU has no native bfloat16" in capsys.readouterr().err
        return False
    assert code == 0, capsys.readouterr().err
    return True


def test_offline_commands_train_in_bfloat16_with_float32_weights(workdir, tmp_path, capsys):
    """--dtype bfloat16 (AMX here): the forward under autocast, the saved weights float32 and trained."""
    import torch
    from safetensors.torch import load_file

    start = load_file(str(workdir / "model" / "model.safetensors"))
    pairs = ["--data", str(workdir / "pairs.jsonl"), *set_args(["optim.lr=1e-3", "epochs=2", "batch_size=8"])]
    runs = {"dpo": ["dpo", "--model", str(workdir / "model"), *pairs, "--out", str(tmp_path / "dpo")],
            "rft": ["rft", "--model", str(workdir / "model"), "--task-option", "length=3", "--set", "rounds=1",
                    "--set", "num_samples=4", "--set", "max_new_tokens=6", "--train-size", "8", "--eval-size", "4",
                    "--set", "optim.lr=1e-3", "--out", str(tmp_path / "rft")]}
    for name, argv in runs.items():
        if not _bf16_or_refused(argv, capsys):
            return
        trained = load_file(str(tmp_path / name / "model" / "model.safetensors"))
        assert all(t.dtype == torch.float32 for t in trained.values())
        # (RFT's random start model samples nothing correct to train on; its sampling ran in bfloat16)
        assert name == "rft" or any(not torch.equal(trained[k], start[k]) for k in start), name
    metrics = json.loads((tmp_path / "dpo" / "metrics.json").read_text())
    assert metrics["eval_after"]["loss"] < metrics["eval_before"]["loss"]  # DPO learns in bfloat16 too
    assert _bf16_or_refused(["reward-model", "--model", str(workdir / "model"), *pairs, "--out", str(tmp_path / "rm")],
                            capsys)
