"""Helpers of the Ray tests (imported by name; `conftest` is ambiguous across test folders)."""

import importlib.util
from pathlib import Path

# the train tests' tiny config and warm-started model, shared rather than copied
_spec = importlib.util.spec_from_file_location("train_conftest", Path(__file__).parents[1] / "train" / "conftest.py")
_train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_train)
tiny_config, write_config, warm_model = _train.tiny_config, _train.write_config, _train.warm_model
run_rlvr, spawn_rlvr = _train._rlvr, _train._spawn  # `rlvr ...` in a fresh interpreter (and in the background)


def ray_sections(**distributed) -> dict:
    """Fractional CPUs, so a learner and two rollout workers fit in the 2-CPU test cluster."""
    return {"backend": "ray", "rollout_cpus": 0.5, "learner_cpus": 0.5, **distributed}
