"""log.report_to: every tracker through its own library, read back from what the library stored (wandb offline in
the run folder, an MLflow file store, trackio's local database, TensorBoard event files); a tracker that is not
installed or not known is one line and exit code 2 before any work; a resumed run writes on in the same tracker
runs."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.logging.trackers import IDS, flat_params, mlflow_key, open_trackers
from rlvr.logging.sinks import tracker_values
from rlvr.commands.grammar import set_args

ROOT = Path(__file__).resolve().parents[2]
TINY = ["model.tiny_preset=test", "task.train_size=64", "task.eval_size=4", "sft.steps=2", "sft.batch_size=8",
        "train.steps=2", "train.batch_size=8", "train.group_size=4", "train.mini_batch_size=0", "eval.every=0",
        "eval.samples=2", "log.progress=false", "log.plots=false", "checkpoint.every=0", "threads=1"]
ALL = "log.report_to=[tensorboard,wandb,mlflow,trackio,jsonl]"


def wandb_history(run_dir: Path) -> list[dict[str, float]]:
    """The history records of the offline wandb runs in a run folder, read from their .wandb files (LevelDB
    log blocks of 32 KiB, each record a 7-byte header: crc32, length, type 1 full / 2 first / 3 middle / 4 last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for file in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        data, pos, part = file.read_bytes(), 7, b""  # 7: the ':W&B' header, magic and version
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if kind == 0:
                break
            part += data[pos + 7:pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):
                record = pb.Record()
                record.ParseFromString(part)
                part = b""
                if record.WhichOneof("record_type") == "history":
                    rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                 for item in record.history.item})
    return rows


def mlflow_history(run_dir: Path, key: str) -> list[tuple[int, float]]:
    from mlflow.tracking import MlflowClient

    ids = json.loads((run_dir / IDS).read_text())
    client = MlflowClient((run_dir / "mlruns").resolve().as_uri())
    return sorted((m.step, m.value) for m in client.get_metric_history(ids["mlflow"], key))


def trackio_logs(run_name: str) -> list[dict]:
    from trackio import SQLiteStorage

    return SQLiteStorage.get_logs("rlvr", run_name)


def tensorboard_scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def same(points: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """The same steps, the same values to float32 (TensorBoard's precision)."""
    return [s for s, _ in points] == [s for s, _ in expected] and \
        [v for _, v in points] == pytest.approx([v for _, v in expected], rel=1e-6)


def test_a_run_reports_to_every_tracker(tmp_path):
    """A 2-step tiny run with all five: each tracker holds the steps' completion length (and the timings under
    time/, the throughput under perf/) as metrics.jsonl and timings.jsonl do."""
    run = tmp_path / "tracked"
    assert main(["train", str(ROOT / "configs" / "sort.yaml"), *set_args([*TINY, ALL, f"out_dir={run}"])]) == 0
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    timings = [json.loads(line) for line in (run / "timings.jsonl").read_text().splitlines() if '"s_per_step"' in line]
    lengths = [(r["step"], r["completion_length"]) for r in metrics if "completion_length" in r]
    assert [s for s, _ in lengths] == [1, 2] and all(v > 0 for _, v in lengths)
    samples_per_s = [(t["step"], t["perf/samples_per_s"]) for t in timings]
    assert same(tensorboard_scalars(run, "completion_length"), lengths)
    assert same(tensorboard_scalars(run, "perf/samples_per_s"), samples_per_s)
    history = [h for h in wandb_history(run) if "completion_length" in h]
    assert same([(h["_step"], h["completion_length"]) for h in history], lengths)
    assert same([(h["_step"], h["perf/samples_per_s"]) for h in history], samples_per_s)
    assert same(mlflow_history(run, "completion_length"), lengths)
    assert mlflow_history(run, "eval.greedy_accuracy")[0][0] == 0  # `/` is `.` in MLflow names
    assert same(mlflow_history(run, "time.s_per_step"), [(t["step"], t["s_per_step"]) for t in timings])
    logs = [r for r in trackio_logs(run.name) if "completion_length" in r]
    assert same([(r["step"], r["completion_length"]) for r in logs], lengths)
    assert {"perf/rollout_tokens_per_s", "perf/update_tokens_per_s", "perf/peak_rss_mib",
            "perf/tflops_per_s"} <= set(timings[-1])


def test_a_resumed_run_writes_on_in_the_same_tracker_runs(tmp_path):
    run, config = tmp_path / "run", {"train": {"steps": 2}}
    trackers = ["wandb", "mlflow", "trackio"]
    opened = open_trackers(trackers, run_mkdir(run), "rlvr", config, resume_step=None)
    for tracker in opened:
        tracker.write(1, {"reward": 0.25, "eval/pass@2": 0.5})
        tracker.close()
    first = json.loads((run / IDS).read_text())
    assert set(first) == set(trackers)
    opened = open_trackers(trackers, run, "rlvr", config, resume_step=1)
    assert json.loads((run / IDS).read_text()) == first
    for tracker in opened:
        tracker.write(2, {"reward": 0.75})
        tracker.close()
    assert mlflow_history(run, "reward") == [(1, 0.25), (2, 0.75)] and mlflow_history(run, "eval.pass_2") == [(1, 0.5)]
    assert [(r["step"], r["reward"]) for r in trackio_logs(run.name)] == [(1, 0.25), (2, 0.75)]
    assert [(h["_step"], h["reward"]) for h in wandb_history(run)] == [(1, 0.25), (2, 0.75)]
    assert {p.name for p in run.glob("wandb/offline-run-*/run-*.wandb")} == {f"run-{first['wandb']}.wandb"}  # one run id


def run_mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_a_tracker_that_does_not_start_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://here")
    with pytest.raises(ConfigError, match=r"^log.report_to: mlflow did not start: "):
        open_trackers(["tensorboard", "mlflow"], run_mkdir(tmp_path / "run"), "rlvr", {}, None)


@pytest.mark.parametrize("report_to, error", [
    ("[tensorbord]", "log.report_to: unknown tracker 'tensorbord'; choose from ['tensorboard', 'wandb', 'mlflow', "
                     "'trackio', 'jsonl']"),
    ("[wandb,wandb]", "log.report_to names a tracker twice: ['wandb', 'wandb']")])
def test_bad_tracker_names_are_refused(report_to, error):
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "sort.yaml", [f"log.report_to={report_to}"])
    assert str(err.value) == error


def test_a_tracker_that_is_not_installed_is_one_line_naming_the_pip_command(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    run = tmp_path / "run"
    assert main(["train", str(ROOT / "configs" / "sort.yaml"), "--set", "log.report_to=[wandb]",
                 "--set", f"out_dir={run}"]) == 2
    err = capsys.readouterr().err
    assert err == ("rlvr train: error: log.report_to: wandb is not installed; pip install 'rlvr[wandb]' "
                   "(or pip install wandb)\n")
    assert not run.exists()


@pytest.mark.parametrize("old, report_to", [("true", ["tensorboard", "wandb"]), ("false", ["wandb"])])
def test_the_deprecated_tensorboard_key_still_reads(old, report_to, caplog):
    """Run folders written before log.report_to hold `log.tensorboard`: they still resume."""
    cfg = load_config(ROOT / "configs" / "sort.yaml", [f"log.tensorboard={old}", "log.report_to=[wandb]"])
    assert cfg.log.report_to == report_to and cfg.log.tensorboard is None
    assert "log.tensorboard is deprecated" in caplog.text


def test_values_for_the_trackers():
    assert tracker_values({"reward": 1.0}, {"s_per_step": 2.0, "perf/mfu": 0.5}) == {
        "reward": 1.0, "time/s_per_step": 2.0, "perf/mfu": 0.5}
    assert mlflow_key("eval/pass@4") == "eval.pass_4" and mlflow_key("reward/task/inclusion") == "reward.task.inclusion"
    assert flat_params({"train": {"steps": 3}, "task": {"options": {"length": 5}, "rewards": []}, "seed": 0}) == {
        "train.steps": "3", "task.options.length": "5", "task.rewards": "[]", "seed": "0"}
