"""Fixtures shared by every test package."""

import os
import signal

import pytest


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
