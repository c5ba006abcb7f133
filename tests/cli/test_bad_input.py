"""Bad input, table-driven: every case exits 2 with one line naming the key or file, no traceback, and
writes nothing (no run folder, no config.yaml, no init_model; a resumed folder is left as it was)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.commands.grammar import set_args

RUN = {"seed": 0, "threads": 1, "task": {"name": "sort", "options": {"length": 3}, "train_size": 50, "eval_size": 2},
       "rollout": {"max_new_tokens": 6}, "train": {"steps": 2, "batch_size": 4, "group_size": 2},
       "eval": {"every": 0, "samples": 0}, "checkpoint": {"every": 1, "keep": 3},
       "log": {"progress": False, "report_to": [], "plots": False}}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A tiny model, broken copies of it, data files and a run with checkpoints at steps 1 and 2."""
    from rlvr.models import make_tiny_model_dir

    root = tmp_path_factory.mktemp("bad")
    model = make_tiny_model_dir(root / "model", preset="test", seed=0)
    weights = (model / "model.safetensors").read_bytes()
    for name, edit in {"truncated": lambda d: (d / "model.safetensors").write_bytes(weights[: len(weights) // 2]),
                       "garbage": lambda d: (d / "model.safetensors").write_bytes(b"\x00\x01garbage" * 9),
                       "notok": lambda d: [(d / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")],
                       "noconfig": lambda d: (d / "config.json").unlink(),
                       "badconfig": lambda d: (d / "config.json").write_text("{not json"),
                       "noweights": lambda d: (d / "model.safetensors").unlink(),
                       "adapter": lambda d: (d / "config.json").rename(d / "adapter_config.json")}.items():
        edit(shutil.copytree(model, root / name))
    (root / "latin1.jsonl").write_bytes('{"prompt": "caf\xe9", "completion": "x"}\n'.encode("latin-1"))
    (root / "badline.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{oops\n')
    (root / "nofield.jsonl").write_text('{"prompt": "a"}\n')
    (root / "empty.jsonl").write_text("")
    (root / "empty.yaml").write_text("")
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "invalid.yaml").write_text("train: {steps: [\n")
    (root / "dup.yaml").write_text("train: {steps: 3}\ntrain: {steps: 4}\n")
    (root / "dup_nested.yaml").write_text("train:\n  steps: 3\n  steps: 4\n")
    (root / "latin1.yaml").write_bytes("seed: 0 # caf\xe9\n".encode("latin-1"))
    (root / "a_file").write_text("x")
    (root / "bad.json").write_text('[{"question": "1+1", "answer": "2"},\n oops]\n')
    (root / "subset.jsonl").write_text('{"prompt": "sort 2 1=", "answer": "1 2"}\n{"prompt": "sort 3 1="}\n')
    write(root / "run.yaml", {**RUN, "model": {"path": str(model)}, "out_dir": str(root / "run")})
    assert main(["train", str(root / "run.yaml")]) == 0
    write(root / "fresh.yaml", {**RUN, "model": {"path": str(model)}, "out_dir": str(root / "fresh")})
    main(["train", str(root / "fresh.yaml"), "--set", "train.steps=1", "--set", "checkpoint.every=0"])
    shutil.rmtree(root / "fresh" / "checkpoints")
    return root


def write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def run_copy(world: Path, tmp_path: Path, edit) -> Path:
    """A copy of the trained run, broken by `edit(run_dir)`."""
    run = shutil.copytree(world / "run", tmp_path / "run")
    write(run / "config.yaml", {**yaml.safe_load((run / "config.yaml").read_text()), "out_dir": str(run)})
    edit(run)
    return run


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


SETS = [  # (--set, the text the error line must contain)
    ("rollout.top_p=0", "rollout.top_p"), ("rollout.top_p=1.5", "rollout.top_p"), ("rollout.top_k=-5", "rollout.top_k"),
    ("eval.temperature=-1", "eval.temperature"), ("rollout.temperature=0", "rollout.allow_zero_temperature"),
    ("rollout.temperature=-1", "rollout.temperature"), ("optim.lr=inf", "optim.lr must be a finite"),
    ("optim.lr=nan", "optim.lr must be a finite"), ("optim.lr=0", "optim.lr"), ("optim.eps=-1", "optim.eps"),
    ("optim.eps=0", "optim.eps"), ("optim.weight_decay=-0.1", "optim.weight_decay"),
    ("optim.max_grad_norm=-1", "optim.max_grad_norm"), ("optim.max_grad_norm=inf", "optim.max_grad_norm"),
    ("optim.min_lr_ratio=2", "optim.min_lr_ratio"), ("optim.betas=[0.9, 1.0]", "optim.betas"),
    ("algorithm.gamma=1.5", "algorithm.gamma"), ("algorithm.lam=-0.1", "algorithm.lam"),
    ("algorithm.clip_high=-0.1", "algorithm.clip_high"), ("algorithm.beta=nan", "algorithm.beta"),
    ("value.coef=-1", "value.coef"), ("sft.lr=0", "sft.lr"), ("model.lora.dropout=1", "model.lora.dropout"),
    ("train.max_nonfinite_steps=0", "train.max_nonfinite_steps"), ("train.steps=0", "train.steps"),
    ("train.batch_size=5", "train.group_size"), ("eval.samples=-1", "eval.samples"),
    ("checkpoint.keep=0", "checkpoint.keep"), ("threads=-1", "threads"), ("train.steps=abc", "train.steps"),
    ("optim.lr=fast", "optim.lr"), ("optim.lrr=1", "optim.lrr"), ("algorithm.advantage=nope", "algorithm.advantage"),
    ("reward.timeout=-1", "reward.timeout must be >= 0"), ("reward.timeout=inf", "reward.timeout must be a finite"),
    ("reward.timeout=nan", "reward.timeout must be a finite"), ("reward.workers=-1", "reward.workers must be >= 0"),
    ("rollout.vllm_lora=adapter", "rollout.vllm_lora=adapter needs model.lora.r > 0"),
    ("rollout.vllm_lora=lora", "rollout.vllm_lora: unknown 'lora'; choose from ['auto', 'adapter', 'merge']"),
    ("distributed.learners=2", "distributed.learners=2 needs distributed.backend=ray"),
    ("distributed.rollout_workers=2", "distributed.rollout_workers=2 needs distributed.backend=ray"),
    ("task.options.length=[3", "--set task.options.length: invalid YAML"),  # free-form options are read as YAML
    ("optim.betas=[0.9", "--set optim.betas: invalid YAML"),  # so are list-typed fields
    ("task.options={length: 3, length: 4}", "--set task.options: duplicate key 'length' at line 1"),
    ("task.options={length: 5.0}", "task.options.length: sort option 'length' expects an integer, got 5.0"),
    ("task.options={lenght: 5}", "task.options.lenght: sort has no option 'lenght'"),
    # refused at step 1 by the core (not naming the key), after the run folder and step-0 metrics were written
    ("train.group_size=1", "train.group_size=1: algorithm.advantage=grpo needs groups of at least 2"),
]
SET_CASES = [pytest.param(["--set", s], key, id=s) for s, key in SETS] + [
    pytest.param(["--set", "reward.workers=2", "--set", "reward.timeout=0"], "reward.timeout > 0",
                 id="reward.workers-without-timeout"),
    pytest.param(["--set", "task.eval_size=50", "--set", "task.options.length=2"],  # was refused after the warm start
                 "task.eval_size=50: sort: could not draw 50 distinct held-out lists: only about 10 of the 100",
                 id="task.eval_size-beyond-the-held-out-share"),
    pytest.param(["--set", "distributed.backend=ray", "--set", "rollout.max_staleness=1",
                  "--set", "algorithm.is_cap=0"],
                 "algorithm.is_cap=0 turns the importance correction off, but rollout.max_staleness=1",
                 id="stale-uncorrected"),
    pytest.param(["--set", "rollout.max_new_tokens=600"],  # was refused at the first evaluation, metrics written
                 "rollout.max_new_tokens=600: the longest held-out prompt (11 tokens) + 600 exceeds the model's "
                 "max_position_embeddings (512); at most 501 fit", id="rollout.max_new_tokens-beyond-the-context"),
    pytest.param(["--set", "train.group_size=1", "--set", "algorithm.advantage=rloo"],
                 "train.group_size=1: algorithm.advantage=rloo needs groups of at least 2 completions to compare; "
                 "raise train.group_size or choose one of ['centered', 'max_only', 'raw', 'reinforce_pp_baseline', "
                 "'whitened']", id="rloo-group_size-1"),
    *[pytest.param(set_args(["train.batch_size=1", "train.group_size=1", f"algorithm.advantage={adv}"]),
                   f"train.batch_size=1: algorithm.advantage={adv} normalises over the batch", id=f"{adv}-batch-1")
      for adv in ("whitened", "reinforce_pp_baseline")],
    pytest.param(["--set", "train.batch_size=1", "--set", "train.group_size=1", "--set", "algorithm.advantage=gae"],
                 "train.batch_size=1: algorithm.whiten_advantages whitens over the batch", id="gae-whiten-batch-1")]

FILE_CASES = [  # (argv built from the world folder, text the error line must contain)
    ("empty.yaml", "empty.yaml"), ("list.yaml", "list.yaml"), ("invalid.yaml", "invalid.yaml"),
    ("latin1.yaml", "latin1.yaml"), ("no_such.yaml", "no_such.yaml"),
    ("dup.yaml", "dup.yaml: duplicate key 'train' at line 2"), ("dup_nested.yaml", "duplicate key 'steps' at line 3"),
    ("model", "config file '{w}/model' is a folder, not a YAML file"),
    ("out_dir={w}/a_file", "out_dir"), ("out_dir={w}/a_file/run", "out_dir"),
    ("model.path={w}/missing", "model.path"), ("model.path={w}/noconfig", "model.path"),
    ("model.path={w}/badconfig", "config.json"), ("model.path={w}/truncated", "model.safetensors"),
    ("model.path={w}/garbage", "model.safetensors"), ("model.path={w}/notok", "tokenizer"),
    ("model.path={w}/noweights", "model.path"), ("value.path={w}/noconfig", "value.path"),
    ("sft.data={w}/missing.jsonl", "missing.jsonl"), ("sft.data={w}/latin1.jsonl", "latin1.jsonl"),
    ("sft.data={w}/badline.jsonl", "badline.jsonl:2"), ("sft.data={w}/nofield.jsonl", "nofield.jsonl:1"),
    ("sft.data={w}/empty.jsonl", "empty.jsonl"), ("sft.data={w}/model", "is a folder, not a jsonl file"),
]


def _argv(world: Path, tmp_path: Path, spec: str) -> list[str]:
    base = write(tmp_path / "base.yaml", {**RUN, "model": {"path": str(world / "model")},
                                          "out_dir": str(tmp_path / "out")})
    if "=" not in spec:
        return ["train", str(world / spec)]
    sets = [spec.format(w=world)] + (["sft.steps=2"] if spec.startswith("sft.data") else [])
    return ["train", str(base), *set_args(sets)]


def _tree(path: Path) -> list[tuple[str, int]]:
    return sorted((str(p), p.stat().st_size) for p in path.rglob("*") if p.is_file()) if path.exists() else []


def check(capsys, argv: list[str], needle: str, folder: Path) -> None:
    before = _tree(folder)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "error: " in err and "Traceback" not in err, err
    assert needle in err, err
    assert _tree(folder) == before  # nothing written


@pytest.mark.parametrize("sets, key", SET_CASES)
def test_bad_config_value(world, tmp_path, capsys, sets, key):
    base = write(tmp_path / "base.yaml", {**RUN, "model": {"path": str(world / "model")},
                                          "out_dir": str(tmp_path / "out")})
    check(capsys, ["train", str(base), *sets], key, tmp_path / "out")


@pytest.mark.parametrize("spec, needle", FILE_CASES, ids=[s for s, _ in FILE_CASES])
def test_bad_file(world, tmp_path, capsys, spec, needle):
    check(capsys, _argv(world, tmp_path, spec), needle.format(w=world), tmp_path / "out")
    assert not (world / "a_file" / "run").exists() and (world / "a_file").read_text() == "x"


def test_an_empty_out_dir_is_refused(world, tmp_path, capsys, monkeypatch):
    """Path("") is the current folder: the run was written into it."""
    base = write(tmp_path / "base.yaml", {**RUN, "model": {"path": str(world / "model")}})
    monkeypatch.chdir(tmp_path)
    for empty in ("out_dir=", "out_dir= "):
        check(capsys, ["train", str(base), "--set", empty], "error: out_dir must not be empty", tmp_path)


@pytest.mark.parametrize("advantage", ["raw", "centered", "max_only"])
def test_advantages_without_a_baseline_from_the_group_accept_groups_of_one(advantage):
    from rlvr.config import load_config
    from rlvr.train.validate import check_registries

    sets = ["train.group_size=1", "train.batch_size=1", f"algorithm.advantage={advantage}", "task.train_size=50"]
    assert check_registries(load_config(None, sets)).train.group_size == 1


def test_a_bad_task_data_file_is_refused_before_the_run_folder(world, tmp_path, capsys):
    """The held-out set is drawn before any work, so a task's unreadable data file stops the run before
    the folder, the start model and the warm start (it stopped after them)."""
    task = {"name": "math_file", "options": {"path": str(world / "bad.json")}}
    base = write(tmp_path / "base.yaml", {**RUN, "task": task, "model": {"path": str(world / "model")},
                                          "sft": {"steps": 2}, "out_dir": str(tmp_path / "out")})
    check(capsys, ["train", str(base)], "bad.json:2: not valid JSON", tmp_path / "out")


def test_out_dir_not_writable(world, tmp_path, capsys, monkeypatch):
    """Root may write anywhere, so the permission answer is faked: what matters is the check runs first."""
    monkeypatch.setattr("rlvr.config.checks.os.access", lambda path, mode: False)
    check(capsys, _argv(world, tmp_path, "out_dir={w}/ro/run"), "not writable", tmp_path / "out")


RESUME_CASES = {
    "no config.yaml": (lambda run: (run / "config.yaml").unlink(), "config.yaml"),
    "state.pt truncated": (lambda run: truncate(run / "checkpoints/step_000002/state.pt"), "state.pt"),
    "weights truncated": (lambda run: truncate(run / "checkpoints/step_000002/model/model.safetensors"),
                          "model.safetensors"),
    "latest names a missing step": (lambda run: shutil.rmtree(run / "checkpoints/step_000002"), "step_000002"),
    # were: "delete RUN and start again" (empty), a silent resume from another run's weights (a path)
    "latest empty": (lambda run: (run / "checkpoints/latest").write_text(""),
                     "holds '', not the name of a checkpoint (step_NNNNNN); the newest complete checkpoint is "
                     "step_000002"),
    "latest names another run": (lambda run: (run / "checkpoints/latest").write_text(
        str(run.parent.parent / "elsewhere/checkpoints/step_000001")), "newest complete checkpoint is step_000002"),
}


@pytest.mark.parametrize("name", list(RESUME_CASES))
def test_bad_resume(world, tmp_path, capsys, name):
    edit, needle = RESUME_CASES[name]
    run = run_copy(world, tmp_path, edit)
    check(capsys, ["train", "--resume", str(run)], needle, run)


def test_corrupt_checkpoint_offers_the_previous_one(world, tmp_path, capsys):
    run = run_copy(world, tmp_path, lambda run: truncate(run / "checkpoints/step_000002/state.pt"))
    check(capsys, ["train", "--resume", str(run)], "previous complete checkpoint is step_000001", run)
    (run / "checkpoints/latest").write_text("step_000001")  # what the message says to do
    assert main(["train", "--resume", str(run)]) == 0
    capsys.readouterr()


def test_resume_without_checkpoint_needs_resume_or_start(world, tmp_path, capsys):
    run = tmp_path / "fresh"
    shutil.copytree(world / "fresh", run)
    (run / "metrics.jsonl").unlink()
    write(run / "config.yaml", {**yaml.safe_load((run / "config.yaml").read_text()), "out_dir": str(run)})
    check(capsys, ["train", "--resume", str(run)], "--resume-or-start", run)
    assert main(["train", "--resume", str(run), "--resume-or-start"]) == 0
    assert (run / "checkpoints/latest").read_text() == "step_000001"
    capsys.readouterr()


@pytest.mark.parametrize("argv, needle", [
    (["eval", "--model", "{w}/model", "--task", "sort", "--task-option", "lenght=3"], "lenght"),
    (["eval", "--model", "{w}/missing", "--task", "sort"], "--model"),
    (["eval", "--model", "{w}/truncated", "--task", "sort"], "model.safetensors"),
    (["eval", "--model", "{w}/notok", "--task", "sort"], "tokenizer"),
    (["eval", "--model", "{w}/model", "--task", "sort", "--batch-size", "0"], "--batch-size must be >= 1"),
    (["eval", "--model", "{w}/adapter", "--task", "sort"], "holds LoRA adapters (adapter_config.json), not a whole"),
    (["dpo", "--model", "{w}/adapter", "--data", "{w}/pairs.jsonl", "--out", "{t}/out"], "--model: "),
    (["rft", "--model", "{w}/missing", "--out", "{t}/out"], "--model: no model folder at"),
    (["train", "{w}/run.yaml", "--set", "optim.lr"], "key=value"),
    (["sft", "--model", "{w}/notok", "--steps", "2", "--out", "{t}/out"], "tokenizer"),
    (["sft", "--data", "{w}/latin1.jsonl", "--steps", "2", "--out", "{t}/out"], "latin1.jsonl"),
    (["eval", "--model", "{w}/model", "--task", "sort", "--task-option", "length=[3"], "--task-option length"),
    (["rft", "--model", "{w}/model", "--task-option", "length=[3", "--out", "{t}/out"], "--task-option length"),
    (["rft", "--model", "{w}/model", "--task-option", "lenght=3", "--out", "{t}/out"], "lenght"),
    (["eval", "--model", "{w}/model", "--task", "math_file", "--task-option", "path={w}/bad.json"], "bad.json:2"),
    (["eval", "--model", "{w}/model", "--task", "math_file", "--task-option", "path={w}/nofield.jsonl"],
     "nofield.jsonl:1: missing field(s) ['question', 'answer']"),
    (["eval", "--model", "{w}/model", "--task", "subset", "--task-option", "path={w}/subset.jsonl"],
     "subset.jsonl:2: missing field(s) ['answer']"),
    (["sft", "--task", "sort", "--steps", "2", "--out", "{w}/run"], "already holds metrics.jsonl from an earlier run"),
    (["sft", "--task", "sort", "--steps", "2", "--out", "{t}/out", "--set", "rollout.max_new_tokens=600"],
     "rollout.max_new_tokens=600: the longest held-out prompt"),
    (["sft", "--task", "sort", "--steps", "2", "--out", "{t}/out", "--set", "task.options.length=2"],
     "task.eval_size=100: sort: could not draw 100 distinct held-out lists"),  # was refused after training
    (["eval", "--model", "{w}/model", "--task", "sort", "--task-option", "length=2", "--num-examples", "50"],
     "--num-examples 50: sort: could not draw 50 distinct held-out lists"),
    (["rft", "--model", "{w}/model", "--task-option", "length=2", "--eval-size", "50", "--out", "{t}/out"],
     "--eval-size 50: sort: could not draw 50"),
    (["recipe", "{w}/invalid.yaml", "--out", "{t}/out"], "invalid.yaml: invalid YAML at line 2"),
    (["recipe", "{w}/latin1.yaml", "--out", "{t}/out"], "latin1.yaml: not UTF-8"),
    (["recipe", "r1", "--out", "{t}/out", "--set", "cold_start.steps=[2"], "cold_start.steps: expected int, got [2"),
    (["compare", "{w}/run.yaml", "--variants", "grpo", "{w}/invalid.yaml", "--out", "{t}/out"],
     "invalid.yaml: invalid YAML"),
])
def test_bad_cli_flags(world, tmp_path, capsys, argv, needle):
    check(capsys, [a.format(w=world, t=tmp_path) for a in argv], needle, tmp_path / "out")


def test_a_run_folder_given_as_a_model_names_its_model(world, tmp_path, capsys):
    run = run_copy(world, tmp_path, lambda r: shutil.rmtree(r / "final_model"))
    check(capsys, ["eval", "--model", str(world / "run"), "--task", "sort"],
          f"its trained model is {world / 'run' / 'final_model'}", tmp_path / "out")
    check(capsys, ["eval", "--model", str(run), "--task", "sort"],  # crashed before the end: its checkpoint
          f"a run folder without a final model: its latest checkpoint's is {run / 'checkpoints/step_000002/model'}",
          tmp_path / "out")


@pytest.mark.parametrize("argv, line", [
    (["train", "--foo"], "rlvr train: error: unrecognized arguments: --foo (see rlvr train --help)"),
    (["train", "cfg.yaml", "--foo", "x"], "rlvr train: error: unrecognized arguments: --foo x (see rlvr train --help)"),
    (["sft", "--steps", "abc"], "rlvr sft: error: argument --steps: invalid int value: 'abc' (see rlvr sft --help)"),
    (["eval", "--model"], "rlvr eval: error: argument --model: expected one argument (see rlvr eval --help)"),
    (["experiment", "sort-toy", "--delta", "median"], "rlvr experiment sort-toy: error: argument --delta: invalid "
     "choice: 'median' (choose from 'raw', 'centered', 'normalized', 'max_only', 'all') (see rlvr experiment "
     "sort-toy --help)"),
    (["experiment", "sort-toy", "--epochs", "0"],
     "rlvr experiment sort-toy: error: argument --epochs: must be >= 1, got 0 (see rlvr experiment sort-toy --help)"),
    (["data", "dedup", "in.jsonl", "--out", "o.jsonl", "--bogus"],
     "rlvr data dedup: error: unrecognized arguments: --bogus (see rlvr data dedup --help)"),
    (["--bogus", "doctor", "runs/x"], "rlvr: error: unrecognized arguments: --bogus (see rlvr --help)"),
    (["nosuch"], "rlvr: error: argument COMMAND: invalid choice: 'nosuch' (choose from "),
    ([], "rlvr: error: the following arguments are required: COMMAND (see rlvr --help)"),
    (["data"], "rlvr data: error: the following arguments are required: STEP (see rlvr data --help)"),
    (["experiment"], "rlvr experiment: error: the following arguments are required: EXPERIMENT (see rlvr "
     "experiment --help)"),
], ids=["unknown-flag", "unknown-after-config", "bad-int", "missing-value", "bad-choice", "bad-type",
        "nested-subcommand", "before-the-command", "unknown-command", "no-command", "no-data-step",
        "no-experiment"])
def test_argparse_errors_are_one_line_naming_the_command(tmp_path, capsys, monkeypatch, argv, line):
    """argparse printed its usage block, then the error: several lines, unlike every other bad input."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    assert stop.value.code == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith(line), captured.err
    assert not list(tmp_path.iterdir())  # refused before any work


def test_help_is_still_argparse_usage(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0 and out.startswith("usage: rlvr train [-h]") and "--resume-or-start" in out


@pytest.mark.parametrize("sets, needle", [
    (["optim.lr=1"], "--set optim.lr: rlvr sft does not read this key, so it would change nothing; did you mean "
                     "sft.lr? (see rlvr sft --help-config)"),
    (["train.steps=5"], "--set train.steps: rlvr sft does not read this key, so it would change nothing; did you mean "
                        "sft.steps?"),
    (["sft.lr=1e-3", "model.lora.r=8"], "--set model.lora.r: rlvr sft does not read this key"),  # full fine-tuning
    (["task.rewards=[]"], "--set task.rewards: rlvr sft does not read"),  # the held-out check grades by the verifier
    (["algorithm.preset=dapo"], "--set algorithm.preset: rlvr sft does not read"),
])
def test_sft_refuses_set_keys_it_does_not_read(world, tmp_path, capsys, sets, needle):
    """`rlvr sft --set optim.lr=1` (or train.steps=5) ran, rc 0, weights byte-identical to a run without it."""
    check(capsys, ["sft", "--model", str(world / "model"), "--task", "sort", "--steps", "1",
                   "--out", str(tmp_path / "out"), *set_args(sets)], needle, tmp_path / "out")


def test_sft_data_longer_than_the_context_is_refused_before_any_work(world, tmp_path, capsys):
    """A row past the model's max_position_embeddings trained (rc 0, transformers' warning only), in `rlvr sft` and
    in `rlvr train`'s warm start; refused naming its file:LINE."""
    data = tmp_path / "long.jsonl"
    data.write_text('{"prompt": "sort 2 1=", "completion": "1 2"}\n' * 2
                    + f'{{"prompt": "sort 3 1=", "completion": "{"1 " * 300}"}}\n')
    needle = (f"sft.data: {data}:3: prompt + completion is 610 tokens (9 + 601), which exceeds the model's "
              f"max_position_embeddings (512); shorten or drop the row")
    check(capsys, ["sft", "--model", str(world / "model"), "--data", str(data), "--steps", "1",
                   "--out", str(tmp_path / "out")], needle, tmp_path / "out")
    check(capsys, _argv(world, tmp_path, f"sft.data={data}"), needle, tmp_path / "out")


def test_sft_refuses_model_lora_from_a_config_file(world, tmp_path, capsys):
    """`model: {lora: {r: 4}}` in the config file trained every weight with no notice (`--set model.lora.r=4` was
    refused)."""
    config = write(tmp_path / "sft.yaml", {"model": {"path": str(world / "model"), "lora": {"r": 4}}})
    check(capsys, ["sft", str(config), "--task", "sort", "--steps", "1", "--out", str(tmp_path / "out")],
          "model.lora: rlvr sft trains every weight and does not read model.lora (r=4 in the config)", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_sft_data_with_an_empty_prompt_is_refused_naming_the_row_before_the_folder_is_made(world, tmp_path, capsys):
    """An empty prompt failed with "a prompt has no tokens", naming no row, after an empty --out was made."""
    data = tmp_path / "noprompt.jsonl"
    data.write_text('{"prompt": "sort 2 1=", "completion": "1 2"}\n{"prompt": "", "completion": "1 2"}\n')
    needle = (f"sft.data: {data}:2: the prompt encodes to no tokens, so the first response token could not be "
              f"scored; give every row a prompt")
    check(capsys, ["sft", "--model", str(world / "model"), "--data", str(data), "--steps", "1",
                   "--out", str(tmp_path / "out")], needle, tmp_path / "out")
    assert not (tmp_path / "out").exists()
