"""docs/environments.md, "Your own environment" and the tool registration: the blocks run as written (the training
command made tiny)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.environments import TOOLS, get_tools, run_tool_call
from rlvr.environments.tools import ToolCall
from rlvr.commands.grammar import set_args

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "environments.md"
TINY = ["model.tiny_preset=test", "task.train_size=64", "task.eval_size=4", "sft.steps=2", "sft.batch_size=8",
        "train.steps=1", "train.batch_size=8", "train.group_size=4", "train.mini_batch_size=0", "eval.every=0",
        "eval.samples=2", "log.progress=false", "log.report_to=[]", "log.plots=false", "checkpoint.every=0",
        "threads=1"]


def _section(heading: str) -> str:
    return DOC.read_text().split(f"### {heading}\n")[1].split("\n### ")[0]


def test_the_worked_example_trains_as_written(tmp_path, monkeypatch):
    section = _section("Your own environment")
    code = re.search(r"```python\n# my_envs.py\n(.*?)```", section, re.S).group(1)
    (tmp_path / "my_envs.py").write_text(code)
    command = re.search(r"```bash\nPYTHONPATH=\. rlvr (.*?)\n```", section, re.S).group(1)
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=.
    try:
        assert main([*shlex.split(command), *set_args([*TINY, f"out_dir={tmp_path / 'run'}"])]) == 0
    finally:
        sys.modules.pop("my_envs", None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 1 and 1 <= rows[-1]["episode/turns"] <= 2 and "reward/env" in rows[-1]
    sample = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert sample["episode"]["turns"][0]["assistant"] is not None


def test_the_tool_registration_block_runs_as_written():
    block = re.search(r"```python\n(from rlvr.environments import register_tool.*?)```", _section("Tools"),
                      re.S).group(1)
    try:
        exec(compile(block, f"{DOC} (Tools)", "exec"), {"__name__": "docs_snippet"})
        assert run_tool_call(ToolCall("lookup", {"country": "France"}), get_tools(["lookup"])) == ("Paris", True)
    finally:
        TOOLS.pop("lookup", None)


@pytest.mark.parametrize("name", ["guess", "code", "tools"])
def test_the_shipped_configs_the_page_names_exist(name):
    assert f"rlvr train environments/{name}" in DOC.read_text()
    assert (ROOT / "configs" / "environments" / f"{name}.yaml").is_file()
