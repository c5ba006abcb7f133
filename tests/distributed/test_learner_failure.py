"""A learner actor that dies stops the run with one line (not a Ray traceback), and the last
checkpoint resumes it."""

import threading
import time

import pytest

import rlvr.distributed.run as ray_run
from ray_helpers import ray_sections, tiny_config, write_config
from rlvr.cli import main
from rlvr.distributed.ray_roles import ray_roles
from rlvr.jsonl import read_jsonl
from rlvr.train.checkpoint import latest_checkpoint

pytestmark = pytest.mark.slow


def _kill_after_checkpoint(ray, run_dir, placed: list, rank: int, done: threading.Event) -> None:
    while not done.is_set():
        if placed and latest_checkpoint(run_dir) is not None:
            ray.kill(placed[0][0].actors[rank], no_restart=True)
            return
        time.sleep(0.01)


def test_a_dead_learner_stops_the_run_and_its_checkpoint_resumes_it(ray_cluster, tmp_path, warm_model,
                                                                    monkeypatch, capsys):
    """Two data-parallel learners; rank 1 is killed once the step-2 checkpoint exists, wherever the
    run is then (rank 0 may be blocked in the gradient all-reduce, waiting for it)."""
    run_dir = tmp_path / "run"
    config = write_config(tmp_path / "run.yaml", tiny_config(
        run_dir, warm_model, train={"steps": 12, "batch_size": 16, "group_size": 4}, eval={"every": 0, "samples": 2},
        checkpoint={"every": 2, "keep": 10}, distributed=ray_sections(learners=2)))
    placed = []
    monkeypatch.setattr(ray_run, "ray_roles", lambda *args: placed.append(ray_roles(*args)) or placed[-1])
    killer = threading.Thread(target=_kill_after_checkpoint,
                              args=(ray_cluster, run_dir, placed, 1, done := threading.Event()))
    killer.start()
    code = main(["train", str(config)])
    done.set()
    killer.join()
    assert code == 1
    lines = capsys.readouterr().err.splitlines()
    assert [line for line in lines if line.startswith("rlvr train:")] == [
        f"rlvr train: stopped: a learner actor died during update (ActorDiedError); the run stops. "
        f"Resume it from its last checkpoint: rlvr train --resume {run_dir}"]
    assert not any("Traceback" in line for line in lines)
    stopped_at = int(latest_checkpoint(run_dir).name.split("_")[1])
    assert 2 <= stopped_at < 12 and not (run_dir / "final_model").exists()

    monkeypatch.setattr(ray_run, "ray_roles", ray_roles)
    assert main(["train", "--resume", str(run_dir)]) == 0
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == list(range(13))
    assert (run_dir / "final_model" / "config.json").is_file()


def test_the_hint_after_a_failure_matches_what_the_run_folder_holds(tmp_path):
    """An actor that died while being set up left no checkpoint: the hint named `rlvr train --resume`, which
    then said there is none. With none it names --resume-or-start; the actor's own error is kept."""
    from rlvr.distributed.ray_learner import _cause, continue_hint

    assert "--resume-or-start" in continue_hint(tmp_path) and "--resume " not in continue_hint(tmp_path)
    (tmp_path / "checkpoints" / "step_000002").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step_000002" / "state.pt").write_bytes(b"")
    (tmp_path / "checkpoints" / "latest").write_text("step_000002")
    assert continue_hint(tmp_path) == f"Resume it from its last checkpoint: rlvr train --resume {tmp_path}"

    class ActorDiedError(Exception):
        pass

    report = "The actor died because of an error raised in its creation task\n  File 'x'\nValueError: model.lora: bad"
    assert _cause(ActorDiedError(report)) == "ActorDiedError: ValueError: model.lora: bad"
    assert _cause(ActorDiedError("The actor was killed by ray.kill.")) == "ActorDiedError"
