"""benchmarks/bench_data_parallel.py: its argument checks and the timed call it runs in each learner actor."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_data_parallel", ROOT / "benchmarks" / "bench_data_parallel.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("argv", [["--steps", "2"], ["--learners", "1"]])
def test_too_few_steps_or_learners_is_one_clear_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    assert exit_.value.code == 2
    assert "--steps must be >= 3" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["auto", "train"])
def test_timed_update_sets_the_mode_then_times_one_update(mode):
    """The mode is set on the learner before `update` runs, and the update's own CPU time comes back."""
    seen = []

    def update(batch):
        seen.append((batch, worker.learner.skips_zero_advantage))
        sum(i * i for i in range(200_000))  # some CPU time to measure

    worker = SimpleNamespace(learner=SimpleNamespace(skips_zero_advantage=None), update=update)
    cpu, wall = bench.timed_update(worker, "batch", bench.MODES[mode])
    assert seen == [("batch", mode == "auto")]
    assert 0 < cpu and 0 < wall
