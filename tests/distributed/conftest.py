"""Ray tests: one local Ray instance (2 CPUs) for the whole session, since starting one costs seconds.
Skipped cleanly where Ray is not installed (the test command installs the `ray` extra)."""

import pytest

ray = pytest.importorskip("ray")

from ray_helpers import warm_model, write_config  # noqa: E402,F401  the train tests' fixtures


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/distributed" in str(item.fspath):
            item.add_marker(pytest.mark.distributed)


@pytest.fixture(scope="session")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()

