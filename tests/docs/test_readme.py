"""README.md states only what the code has: its links lead to files (and headings) that exist, every
`rlvr ...` command it shows parses with the real parser, every `--set` key is a config key, and the
names it lists (tasks, rewards, presets, extras) are the registries' and pyproject's."""

import re
import shlex
from pathlib import Path

import pytest

from rlvr.cli import build_parser
from rlvr.config import Config, PreferenceConfig, RewardModelConfig, RFTConfig, SFTRunConfig, config_help
from rlvr.presets import PRESETS
from rlvr.rewards import REWARDS
from rlvr.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]
# the config each command's --set reaches (rlvr train's for the others)
CONFIGS = {"sft": SFTRunConfig, "dpo": PreferenceConfig, "reward-model": RewardModelConfig, "rft": RFTConfig}
README = (ROOT / "README.md").read_text()
LINK = re.compile(r"\]\(([^)\s]+)\)")
MAX_LINES = 300


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def _commands() -> list[str]:
    """Every `rlvr ...` line of the README's bash blocks, continuation lines joined, comments cut."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    joined = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [line.split("  #")[0].strip() for line in joined if line.startswith("rlvr ")]


def test_readme_is_a_front_door():
    assert len(README.splitlines()) <= MAX_LINES
    first_block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    assert "bash scripts/demo.sh" in first_block and "bash scripts/test.sh" in first_block


@pytest.mark.parametrize("target", sorted({t for t in LINK.findall(README) if "://" not in t}))
def test_readme_link_resolves(target):
    path, _, anchor = target.partition("#")
    file = ROOT / path
    assert file.is_file(), f"README links to {path}, which does not exist"
    if anchor:
        assert anchor in _anchors(file), f"{path} has no heading #{anchor}"


def test_readme_links_every_docs_page():
    linked = {t.partition("#")[0] for t in LINK.findall(README)}
    pages = {str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, sorted(pages - linked)


@pytest.mark.parametrize("command", _commands())
def test_readme_command_parses(command):
    argv = shlex.split(command)[1:]
    build_parser().parse_args(argv)  # argparse exits (SystemExit) on an unknown command or flag
    keys = {line.split(" (")[0] for line in config_help(CONFIGS.get(argv[0], Config))}
    for i, arg in enumerate(argv):
        if arg == "--set":
            key = argv[i + 1].split("=")[0]
            assert key in keys or key.rsplit(".", 1)[0] in {"task.options", "model.tiny_sizes"}, key


def _shipped(registry) -> set[str]:
    """Names rlvr itself registers (tests in the same process may register their own)."""
    return {name for name, entry in registry.items() if getattr(entry, "__module__", "rlvr").startswith("rlvr")}


def test_readme_names_exist():
    tasks = re.search(r"Tasks by name (.*?)Rewards added", README, re.S).group(1)
    rewards = re.search(r"Rewards added to a task's verifier(.*?)See ", README, re.S).group(1)
    presets = re.search(r"\nPresets: (.*?)\n\(", README, re.S).group(1)
    assert set(re.findall(r"`(\w+)`", presets)) == set(PRESETS)
    shipped_tasks, shipped_rewards = _shipped(TASKS), _shipped(REWARDS)
    listed_tasks = set(re.findall(r"`(\w+)`", tasks)) - {"task", "name"}
    assert listed_tasks == shipped_tasks, listed_tasks ^ shipped_tasks
    listed_rewards = set(re.findall(r"`(\w+)`", rewards)) - {"task"}
    assert listed_rewards == shipped_rewards, listed_rewards ^ shipped_rewards
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^(\w+) = ", section, re.M))  # no tomllib: Python 3.10 is supported
    shown = set(re.findall(r'pip install -e "\.\[(\w+)\]"', README))
    assert shown == extras - {"test"}, shown ^ (extras - {"test"})
