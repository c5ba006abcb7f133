"""`rlvr --help` and every command's --help (and --help-config) answer without importing torch or transformers,
and every command says what it does."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter: every help page, then which heavy modules got imported on the way.
PROBE = r"""
import contextlib, io, json, sys
from rlvr.cli import build_parser, main

def pages(parser, prefix):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield [*prefix, name], sub
                yield from pages(sub, [*prefix, name])

out = {"pages": {}, "no_description": [], "codes": {}}
parser = build_parser()
for argv, sub in [([], parser), *pages(parser, [])]:
    for flag in ["--help"] + (["--help-config"] if any(a.dest == "help_config" for a in sub._actions) else []):
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            try:
                code = main([*argv, flag])
            except SystemExit as stop:
                code = stop.code
        out["pages"][" ".join([*argv, flag])] = text.getvalue()
        out["codes"][" ".join([*argv, flag])] = code
    if argv and not sub.description:
        out["no_description"].append(" ".join(argv))
out["heavy"] = sorted(m for m in ("torch", "transformers", "numpy", "matplotlib", "vllm", "ray") if m in sys.modules)
print(json.dumps(out))
"""


def test_help_pages_import_no_heavy_module_and_every_command_has_a_description():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["heavy"] == [], f"--help imported {out['heavy']}"
    assert out["no_description"] == []
    assert set(out["codes"].values()) == {0}, out["codes"]
    pages = out["pages"]
    for command in ("train", "sft", "demo", "eval", "dpo", "reward-model", "rft", "data", "experiment", "presets",
                    "configs", "compare", "recipe", "doctor", "report"):
        assert f"{command} --help" in pages, command
    for name in ("demo", "sort", "arith", "r1", "qwen3", "compare/length_bias"):  # the shipped configs, by name
        assert name in pages["--help"] and name in " ".join(pages["train --help"].split())
    for command in ("train", "sft", "eval", "dpo", "reward-model", "rft", "compare", "recipe", "demo"):
        assert pages[f"{command} --help-config"].strip(), command
    assert "eval.temperature (1.0)" in pages["eval --help-config"]
    assert "optim.lr (1e-06)" in pages["dpo --help-config"]  # DPO's own default, in the RL run's optim section
    assert "kind: fusion_sft" in pages["recipe --help-config"]
