from pathlib import Path

import pytest

from rlvr.cli import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sort.yaml"

TINY_RUN = ["--set", "model.tiny_preset=test", "--set", "sft.steps=20", "--set", "train.steps=8",
            "--set", "train.batch_size=16", "--set", "train.group_size=4", "--set", "train.mini_batch_size=16",
            "--set", "task.eval_size=8", "--set", "eval.every=4", "--set", "threads=1", "--set", "log.plots=false"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A real (tiny, CPU, ~20 s) GRPO run of the sort task, as `rlvr train` writes it."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    assert main(["train", str(CONFIG), *TINY_RUN, "--set", f"out_dir={out}"]) == 0
    return out
