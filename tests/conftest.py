"""Fixtures shared by every test package."""

import os
import signal
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# The experiment trackers (log.report_to) stay on this machine in every test: wandb writes offline into the run
# folder, trackio into a folder of the session (its path is read when trackio is imported), MLflow into the run
# folder's file store (rlvr's default when MLFLOW_TRACKING_URI is unset).
os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", TRACKIO_DIR=tempfile.mkdtemp(prefix="rlvr-trackio-"))
os.environ.pop("MLFLOW_TRACKING_URI", None)

# Property tests hold on a busy machine (two xdist workers, Ray, load 70 on 2 cores): no per-example deadline (200 ms
# by default, which a stalled process overruns, failing as "Unreliable test timings") and no health check on slow data
# generation. A test's own @settings keeps these unless it names them.
settings.register_profile("rlvr", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rlvr")


@pytest.fixture
def sigint_at_step(monkeypatch):
    """`sigint_at_step(k)`: a SIGINT arrives while step k's checkpoint is being saved, as a Ctrl-C there would
    (the run's guard stops at that step boundary). Returns the real save, to put back for a second run."""
    import rlvr.train.loop as loop_module

    real_save = loop_module.save_checkpoint

    def arm(at: int):
        def save(run_dir, step, *args, **kwargs):
            if step == at:
                os.kill(os.getpid(), signal.SIGINT)
            return real_save(run_dir, step, *args, **kwargs)

        monkeypatch.setattr(loop_module, "save_checkpoint", save)
        return real_save

    return arm


@pytest.fixture(scope="session")
def smollm2_folder():
    """The embedded SmolLM2-135M-Instruct as a Hugging Face folder: converted from its GGUF once per machine (into
    rlvr's cache, ~30 s) and reused by every test and test worker after that (`rlvr.models.resolve_model`)."""
    from rlvr.models import resolve_model

    return resolve_model("smollm2-135m-instruct")


@pytest.fixture
def restore_rewards():
    """Rewards a test registers (rlvr.GRPOTrainer registers its functions) leave rlvr.rewards.REWARDS as it was."""
    from rlvr.rewards import REWARDS

    before = dict(REWARDS)
    yield
    REWARDS.clear()
    REWARDS.update(before)
