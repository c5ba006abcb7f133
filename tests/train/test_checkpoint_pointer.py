"""`checkpoints/latest` is read as a step folder's name and nothing else: a broken pointer is one line that
names the newest intact checkpoint to resume from, and never advice to delete a folder that still holds one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rlvr.config import ConfigError
from rlvr.train.checkpoint import BadPointer, latest_checkpoint
from rlvr.train.preflight import find_checkpoint


def fake_checkpoint(run: Path, step: int, intact: bool = True) -> Path:
    """A checkpoint folder that passes the preflight's checks (config, safetensors, tokenizer, state.pt)."""
    folder = run / "checkpoints" / f"step_{step:06d}"
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (folder / "model" / "tokenizer.json").write_text("{}")
    save_file({"w": torch.zeros(2)}, folder / "model" / "model.safetensors")
    torch.save({"step": step}, folder / "state.pt")
    if not intact:
        (folder / "state.pt").write_bytes(b"torn")
    return folder


@pytest.fixture
def run(tmp_path) -> Path:
    run = tmp_path / "run"
    for step in (7, 8):
        fake_checkpoint(run, step)
    (run / "checkpoints" / "latest").write_text("step_000008")
    return run


def refusal(run: Path) -> str:
    with pytest.raises(ConfigError) as err:
        find_checkpoint(run)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("pointer, shown", [(b"", "''"), (b"..", "'..'"), (b"step_000008/..", "'step_000008/..'"),
                                            (b"\x00\x01\xff\xfegarb\n", r"b'\x00\x01\xff\xfegarb'")])
def test_a_corrupt_pointer_names_the_newest_intact_checkpoint(run, pointer, shown):
    """Before, an empty pointer resolved to checkpoints/ itself and `..` to the run folder, and the advice was
    to delete the run (or its checkpoints) although step_000007 and step_000008 were intact; garbage was
    printed raw."""
    (run / "checkpoints" / "latest").write_bytes(pointer)
    message = refusal(run)
    assert f"holds {shown}, not the name of a checkpoint" in message
    assert "newest complete checkpoint is step_000008" in message and "delete" not in message
    assert f"echo step_000008 > {run / 'checkpoints' / 'latest'}" in message


def test_a_pointer_to_another_runs_checkpoint_is_refused(run, tmp_path):
    """Before, an absolute path in `latest` was joined as it was: the run resumed from another run's weights."""
    other = fake_checkpoint(tmp_path / "other", 3)
    (run / "checkpoints" / "latest").write_text(str(other))
    with pytest.raises(BadPointer, match="is corrupt"):
        latest_checkpoint(run)
    assert "newest complete checkpoint is step_000008" in refusal(run)


def test_steps_are_compared_as_numbers(tmp_path):
    """Before, names were compared as text, so `latest` naming a missing step_999 was 'below' step_000008 and
    none was offered; now the previous intact one by step number is."""
    run = tmp_path / "run"
    fake_checkpoint(run, 8)
    fake_checkpoint(run, 1000, intact=False)
    (run / "checkpoints" / "latest").write_text("step_999")
    assert "previous complete checkpoint is step_000008" in refusal(run)
    (run / "checkpoints" / "latest").write_text("step_001000")
    assert "previous complete checkpoint is step_000008" in refusal(run)


def test_only_the_checkpoints_folder_is_to_be_deleted_when_none_is_intact(tmp_path):
    """Before, a pointer that resolved to checkpoints/ advised deleting the run folder itself."""
    run = tmp_path / "run"
    fake_checkpoint(run, 1, intact=False)
    (run / "checkpoints" / "latest").write_text("")
    message = refusal(run)
    assert f"no complete checkpoint is left: delete {run / 'checkpoints'} and start" in message


def test_an_intact_pointer_is_followed(run, tmp_path):
    assert find_checkpoint(run) == run / "checkpoints" / "step_000008"
    assert find_checkpoint(tmp_path / "new_run") is None


def test_a_missing_pointer_resumes_from_the_newest_intact_step_folder(run, caplog):
    """Before, a run whose `latest` was missing (a crash between the first checkpoint's rename and the pointer's
    write, a deleted pointer) had "no checkpoint": --resume-or-start started it over and lost its progress."""
    (run / "checkpoints" / "latest").unlink()
    fake_checkpoint(run, 9, intact=False)
    assert find_checkpoint(run) == run / "checkpoints" / "step_000008"
    [warning] = [r.getMessage() for r in caplog.records]
    assert f"{run / 'checkpoints' / 'latest'} is missing; resuming from" in warning
    assert "step_000008 (step 8)" in warning


def test_a_missing_pointer_with_no_intact_step_folder_is_refused(tmp_path):
    run = tmp_path / "run"
    fake_checkpoint(run, 3, intact=False)
    message = refusal(run)
    assert message.startswith(f"{run / 'checkpoints' / 'latest'} is missing and no complete checkpoint is left")
