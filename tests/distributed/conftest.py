"""Ray tests: one local Ray instance (2 CPUs) for the whole session, since starting one costs seconds.
Skipped cleanly where Ray is not installed (the test command installs the `ray` extra)."""

import pytest

ray = pytest.importorskip("ray")

from ray_helpers import resumable_config, warm_model, write_config  # noqa: E402,F401  the train tests' fixtures
from rlvr.config import load_config  # noqa: E402
from rlvr.distributed.run import train_distributed  # noqa: E402


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/distributed" in str(item.fspath):
            item.add_marker(pytest.mark.distributed)


@pytest.fixture(scope="session")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def uninterrupted(ray_cluster, warm_model, tmp_path_factory):
    """`uninterrupted(k)`: the run folder of `resumable_config` at staleness k left alone, run once per
    session (the kill and signal tests compare their resumed runs with it)."""
    runs = {}

    def run(k: int):
        if k not in runs:
            cfg = resumable_config(tmp_path_factory.mktemp(f"uninterrupted_k{k}") / "run", warm_model, k)
            runs[k] = train_distributed(load_config(None, [], base=cfg)).run_dir
        return runs[k]

    return run
