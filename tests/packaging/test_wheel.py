"""A built wheel, installed without the source tree, runs `rlvr demo`, a shipped config by name and a
shipped recipe by name from an empty folder: the configs are package data."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--set", "sft.steps=2", "--set", "train.batch_size=16", "--set", "train.mini_batch_size=8",
         "--set", "task.eval_size=8", "--set", "eval.samples=0", "--set", "log.progress=false",
         "--set", "log.report_to=[]", "--set", "log.plots=false", "--set", "checkpoint.every=0"]


def _run(args, cwd, env, timeout=600):
    out = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout, out.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site folder, env) of the wheel built from a copy of the sources, installed with --target."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT / "rlvr", src / "rlvr", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    code, _, err = _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(src)],
                        tmp, dict(os.environ))
    assert code == 0, err[-2000:]
    wheels = list((tmp / "dist").glob("rlvr-*.whl"))
    assert len(wheels) == 1
    code, _, err = _run([*pip, "install", "--no-deps", "--target", str(tmp / "site"), str(wheels[0])], tmp,
                        dict(os.environ))
    assert code == 0, err[-2000:]
    env = {**os.environ, "PYTHONPATH": str(tmp / "site"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return tmp / "site", env


@pytest.mark.slow
def test_demo_runs_from_an_empty_folder(installed, tmp_path):
    site, env = installed
    code, out, err = _run([sys.executable, "-c", "import rlvr; print(rlvr.__file__)"], tmp_path, env)
    assert code == 0 and out.strip().startswith(str(site)), out + err  # the installed copy, not the repo
    code, out, err = _run([sys.executable, "-m", "rlvr", "demo", "--set", "train.steps=2", *SMALL, "--out", "demo"],
                          tmp_path, env)
    # 2 steps cannot reach the demo's bar (exit 1 says so); anything else is a failure
    assert code in (0, 1) and "internal error" not in err, err[-3000:]
    assert "held-out greedy exact-match accuracy" in out
    assert (tmp_path / "demo" / "final_model" / "config.json").is_file()


@pytest.mark.slow
def test_shipped_config_and_recipe_by_name(installed, tmp_path):
    site, env = installed
    rlvr_script = site / "bin" / "rlvr"
    code, out, err = _run([str(rlvr_script), "train", "sort", "--set", "train.steps=1", *SMALL,
                           "--set", "out_dir=sort"], tmp_path, env)
    assert code == 0, err[-3000:]
    assert (tmp_path / "sort" / "metrics.jsonl").is_file()
    code, out, err = _run([sys.executable, "-c", "from rlvr.pipelines.recipes import load_recipe; "
                           "print([s.name for s in load_recipe('kimi_k15').stages])"], tmp_path, env)
    assert code == 0 and out.startswith("["), err[-3000:]
    code, _, err = _run([str(rlvr_script), "train", "no_such_config"], tmp_path, env)
    assert code == 2 and err.count("\n") == 1 and "no_such_config" in err
