"""The house's dependency order (pyproject.toml [tool.importlinter]) holds: CI fails on a violation."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_no_function_level_import_dodges_a_layer():
    """A function-level import of rlvr is only for startup time: the CLI, the package root (`from rlvr import
    GRPOTrainer` loads the trainer on first use, not on `import rlvr.core`), and transformers kept off
    the import path of reward workers (they import rewards and tasks); everywhere else imports sit at
    the top, where the linter sees them; and the modules of optional extras (PEFT, vLLM), imported only
    when a config asks for them so that the core runs without them."""
    lazy_ok = {"cli.py", "commands", "__init__.py", "rewards/registry.py", "tasks/templates.py"}
    optional = ("from rlvr.models.lora import", "from rlvr.rollout.vllm_engine import")
    offenders = []
    for path in sorted((ROOT / "rlvr").rglob("*.py")):
        rel = path.relative_to(ROOT / "rlvr").as_posix()
        if any(rel == ok or rel.startswith(ok + "/") for ok in lazy_ok):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith((" ", "\t")) and line.strip().startswith(("from rlvr", "import rlvr")) \
                    and not line.strip().startswith(optional):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


def test_the_learner_holds_no_algorithm_branch():
    """The Learner runs models and the optimizer; what the loss is and what it needs is its objective's
    (rlvr.algorithms.objective). No algorithm's name or option reaches learner.py, and it stays small."""
    source = (ROOT / "rlvr" / "train" / "learner.py").read_text()
    for word in ("algorithm.advantage", "policy_loss", "kimi", "gae", "token_adv", "value_model", "algorithm.beta",
                 "is_cap", "overlong", "GroupPolicyGradient", "TOKEN_ADVANTAGES", "self.rank", "self.world"):
        assert word not in source, word
    assert len(source.splitlines()) < 200
