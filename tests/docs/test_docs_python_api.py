"""The Python API's examples run as written: docs/python_api.md's worked example and the README tour's, each made
tiny the way tests/docs/test_docs_registration.py makes the CLI's (two RL steps, two SFT steps, the `test` preset of
the tiny model, no trackers), by putting those keywords over the ones the block gives RLConfig."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import rlvr.pipelines.trainer as trainer_module

ROOT = Path(__file__).resolve().parents[2]
TINY = {"max_steps": 2, "model.tiny_preset": "test", "log.report_to": [], "log.progress": False, "log.plots": False,
        "eval.every": 0, "threads": 1}


def _block(text: str, after: str) -> str:
    return re.search(r"```python\n(.*?)```", text.split(after, 1)[1], re.S).group(1)


pytestmark = pytest.mark.usefixtures("restore_rewards")

@pytest.fixture
def tiny_rlconfig(monkeypatch):
    real = trainer_module.RLConfig

    def tiny(config=None, **kwargs):
        if "sft.steps" in kwargs:
            kwargs["sft.steps"] = 2
        return real(config, **{**kwargs, **TINY})

    monkeypatch.setattr(trainer_module, "RLConfig", tiny)


@pytest.mark.parametrize("page, after, run", [("docs/python_api.md", "### A worked example", "runs/python_api"),
                                              ("README.md", "### Train from Python, as with TRL", "runs/py")])
def test_the_example_runs_as_written(tmp_path, monkeypatch, capsys, tiny_rlconfig, page, after, run):
    code = _block((ROOT / page).read_text(), after)
    assert "from rlvr import GRPOTrainer, RLConfig" in code and "trainer.train()" in code
    monkeypatch.chdir(tmp_path)  # the examples write runs/... in the current folder
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(code, f"{page} ({after})", "exec"), namespace)
    result = namespace["result"]
    assert result.run_dir == Path(run) and result.global_step == 2 and (tmp_path / run / "final_model").is_dir()
    steps = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2] and "reward/exact" in steps[-1]
    if page == "docs/python_api.md":
        assert capsys.readouterr().out.strip().startswith(f"{run} ")  # the block's print
        assert "reward/short" in steps[-1] and (tmp_path / run / "sft_model").is_dir()
