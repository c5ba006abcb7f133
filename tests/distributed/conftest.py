"""Ray tests: one local Ray instance (2 CPUs) for the whole session, since starting one costs seconds.
Skipped cleanly where Ray is not installed (the test command installs the `ray` extra)."""

import importlib.util
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

# the train tests' tiny config and warm-started model, shared rather than copied
_spec = importlib.util.spec_from_file_location("train_conftest", Path(__file__).parents[1] / "train" / "conftest.py")
_train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_train)
tiny_config, write_config, warm_model = _train.tiny_config, _train.write_config, _train.warm_model


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/distributed" in str(item.fspath):
            item.add_marker(pytest.mark.distributed)


@pytest.fixture(scope="session")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def ray_sections(**distributed) -> dict:
    """Fractional CPUs, so a learner and two rollout workers fit in the 2-CPU test cluster."""
    return {"backend": "ray", "rollout_cpus": 0.5, "learner_cpus": 0.5, **distributed}
