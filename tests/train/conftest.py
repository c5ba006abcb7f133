import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]


def tiny_config(out_dir: Path, model: Path, **sections) -> dict:
    """A config that trains in seconds: the warm-started smallest tiny model (a random model earns
    no reward, so nothing would move), sort 4 digits, a few RL steps."""
    cfg = {
        "seed": 0, "out_dir": str(out_dir), "threads": 1,
        "model": {"path": str(model)},
        "task": {"name": "sort", "options": {"length": 4, "reward": "positional"}, "train_size": 500,
                 "eval_size": 16},
        "rollout": {"max_new_tokens": 10},
        "train": {"steps": 3, "batch_size": 16, "group_size": 4},
        "optim": {"lr": 0.0003},
        "eval": {"every": 2, "samples": 2},
        "checkpoint": {"every": 2},
        "log": {"progress": False},
    }
    for name, values in sections.items():
        if isinstance(cfg.get(name), dict):
            cfg[name] = {**cfg[name], **values}
        else:
            cfg[name] = values
    return cfg


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _rlvr(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlvr", *args], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=300)


def _spawn(*args: str, **popen) -> subprocess.Popen:
    """`popen`: Popen's options over these (e.g. `stderr=file`, `start_new_session=True`)."""
    return subprocess.Popen([sys.executable, "-m", "rlvr", *args],
                            **{"cwd": ROOT, "env": ENV, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
                               **popen})


def latest_step(run_dir: Path) -> int:
    """The step of the checkpoint `checkpoints/latest` names (0: none yet), read while a run writes them."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    return int(pointer.read_text().split("_")[1]) if pointer.exists() else 0


def crash_after(full: Path, step: int, crashed: Path) -> Path:
    """A copy of the finished run `full` as a crash right after its step-`step` checkpoint leaves it:
    later checkpoints and the final model gone, `latest` naming that one."""
    shutil.copytree(full, crashed)
    checkpoints = crashed / "checkpoints"
    for later in checkpoints.glob("step_*"):
        if int(later.name.split("_")[1]) > step:
            shutil.rmtree(later)
    (checkpoints / "latest").write_text(f"step_{step:06d}")
    for folder in ("final_model", "final_adapter"):
        shutil.rmtree(crashed / folder, ignore_errors=True)
    return crashed


@pytest.fixture
def crash():
    """`crash_after`, for the resume tests."""
    return crash_after


@pytest.fixture
def checkpoint_step():
    """`latest_step`, for the tests that stop a run once it has checkpointed."""
    return latest_step


@pytest.fixture
def rlvr():
    """Run the `rlvr` command line in a fresh interpreter, as a user would; `rlvr.spawn` starts it
    in the background."""
    _rlvr.spawn = _spawn
    return _rlvr


@pytest.fixture(scope="session")
def warm_model(tmp_path_factory) -> Path:
    """The demo's warm start: the "test"-preset model after 200 SFT steps on sorting 4 digits, right
    on about half the held-out lists, so rewards vary within groups and RL has something to improve."""
    from rlvr.algorithms.sft import pairs_from_task, train_sft
    from rlvr.models import load_model, load_tokenizer, make_tiny_model_dir, save_model
    from rlvr.tasks import get_task

    torch.set_num_threads(1)
    path = make_tiny_model_dir(tmp_path_factory.mktemp("warm") / "model", preset="test", seed=0)
    model, tokenizer = load_model(path), load_tokenizer(path)
    train_sft(model, tokenizer, pairs_from_task(get_task("sort", length=4), 20000, 1), 200, 32, 3e-3, 0)
    return save_model(model, tokenizer, path)


@pytest.fixture
def config_factory(tmp_path, warm_model):
    def make(name: str = "run", **sections) -> Path:
        return write_config(tmp_path / f"{name}.yaml", tiny_config(tmp_path / name, warm_model, **sections))

    return make
