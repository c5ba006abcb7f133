"""Experiment trackers (`log.report_to`): wandb, MLflow and trackio through the libraries themselves, beside
TensorBoard (`rlvr.logging.sinks.TensorBoardSink`). Each takes `write(step, values)` and `close()`.

Each library is imported only when its tracker is opened; the config check (`rlvr.config.checks`) refuses a
tracker that is not installed before any work, naming the pip command. A tracker run is named after the run
folder; its id is kept in RUN/trackers.json, so that a resumed run (`rlvr train --resume`) writes on in the same
tracker run. Steps the interrupted run logged after its last checkpoint are logged again by the resumed run with
the same values (the seed makes them so): wandb keeps the first, MLflow and trackio hold both points.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Protocol

from rlvr.config import ConfigError
from rlvr.logging.sinks import TensorBoardSink

IDS = "trackers.json"  # in the run folder: {tracker: its run id}


class Tracker(Protocol):
    def write(self, step: int, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: `train.steps` -> '100', `task.options.length` -> '5', lists as JSON."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flat_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return out


_MLFLOW_NAME = re.compile(r"[^\w\-. ]")  # MLflow names: alphanumerics, _ - . space (and / , not used below)


def mlflow_key(name: str) -> str:
    """`eval/pass@4` -> `eval.pass_4`: MLflow refuses a metric name with other characters, and its file store keeps
    a metric in a file named by its path, so `reward/task` and `reward/task/inclusion` cannot both be one."""
    return _MLFLOW_NAME.sub("_", name.replace("/", "."))


class WandbTracker:
    """`wandb.init(project, name, dir=RUN, config)`; its mode (online, offline, disabled) is wandb's own
    setting (`WANDB_MODE`, `wandb login`)."""

    def __init__(self, run_dir: Path, project: str, config: dict[str, Any], run_id: str | None) -> None:
        import wandb

        self._run = wandb.init(project=project, name=run_dir.name, dir=str(run_dir), config=config, id=run_id,
                               resume="allow" if run_id else None, reinit="create_new")
        self.run_id = self._run.id

    def write(self, step: int, values: dict[str, float]) -> None:
        self._run.log(_numbers(values), step=step)

    def close(self) -> None:
        self._run.finish()


class MlflowTracker:
    """An MLflow run in experiment `project` of MLFLOW_TRACKING_URI, else of a file store in RUN/mlruns (MLflow's
    own default, a sqlite database in the current folder, needs the full `mlflow` and writes outside the run)."""

    def __init__(self, run_dir: Path, project: str, config: dict[str, Any], run_id: str | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for this opt-in
            uri = (run_dir / "mlruns").resolve().as_uri()
        self._client = MlflowClient(uri)
        if run_id is None:
            found = self._client.get_experiment_by_name(project)
            experiment = found.experiment_id if found else self._client.create_experiment(project)
            run_id = self._client.create_run(experiment, run_name=run_dir.name).info.run_id
            params = [Param(k, v[:6000]) for k, v in flat_params(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
                self._client.log_batch(run_id, params=params[i:i + 100])
        else:
            self._client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def write(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(k), v, now, step) for k, v in _numbers(values).items()]
        for i in range(0, len(metrics), 1000):
            self._client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


class TrackioTracker:
    """`trackio.init(project, name)`: trackio's local database (TRACKIO_DIR, default ~/.cache/huggingface/trackio;
    `trackio show` opens its dashboard). Its own CPU/GPU sampling threads are off: rlvr logs its memory per step."""

    def __init__(self, run_dir: Path, project: str, config: dict[str, Any], run_id: str | None) -> None:
        import trackio

        self._trackio = trackio
        self._run = trackio.init(project=project, name=run_id or run_dir.name, config=config,
                                 resume="allow" if run_id else "never", auto_log_cpu=False, auto_log_gpu=False)
        self.run_id = self._run.name

    def write(self, step: int, values: dict[str, float]) -> None:
        self._run.log(_numbers(values), step=step)

    def close(self) -> None:
        self._run.finish()


TRACKER_CLASSES = {"wandb": WandbTracker, "mlflow": MlflowTracker, "trackio": TrackioTracker}


def open_trackers(report_to: list[str], run_dir: Path, project: str, config: dict[str, Any],
                  resume_step: int | None) -> list[Tracker]:
    """The trackers `report_to` names (jsonl is the run's own files, not one of these). A tracker that does not
    start (a server it cannot reach, a login it lacks) is a ConfigError naming it, with the library's first line."""
    ids_file = run_dir / IDS
    ids = json.loads(ids_file.read_text()) if resume_step is not None and ids_file.is_file() else {}
    trackers: list[Tracker] = []
    for name in report_to:
        if name == "tensorboard":
            trackers.append(TensorBoardSink(run_dir / "tensorboard", resume_step))
        elif name in TRACKER_CLASSES:
            try:
                tracker = TRACKER_CLASSES[name](run_dir, project, config, ids.get(name))
            except Exception as err:  # noqa: BLE001  (any library's failure to start: said in one line)
                for opened in trackers:
                    opened.close()
                detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise ConfigError(f"log.report_to: {name} did not start: {detail}") from None
            ids[name] = tracker.run_id
            trackers.append(tracker)
    if ids:
        ids_file.write_text(json.dumps(ids))
    return trackers
