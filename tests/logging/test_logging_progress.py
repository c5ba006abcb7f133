"""Progress with no terminal attached: plain lines every N steps or S seconds, with the figures."""

import io

from rlvr.logging import progress as progress_module
from rlvr.logging.progress import TrainProgress


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line]


def test_a_line_every_n_steps_and_at_the_end():
    out = io.StringIO()
    with TrainProgress(25, stream=out, every_steps=10, every_seconds=1e9) as bar:
        for step in range(1, 26):
            bar.update(step, {"reward": step / 100, "kl": 0.001, "completion_length": 12.0})
    lines = _lines(out)
    assert [line.split()[2] for line in lines] == ["10/25", "20/25", "25/25"]
    assert lines[0].startswith("RL step 10/25  reward 0.100  kl 0.0010  len 12.0")
    assert lines[-1].startswith("RL step 25/25  reward 0.250")


def test_a_line_every_s_seconds(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    with TrainProgress(100, stream=out, every_steps=1000, every_seconds=30) as bar:
        for step in range(1, 8):
            clock[0] = step * 11.0  # 11 s a step: a line at 33 s, 66 s (steps 3 and 6)
            bar.update(step, {"accuracy": 0.5})
    lines = _lines(out)
    assert [line.split()[2] for line in lines] == ["3/100", "6/100"]
    assert "acc 0.50" in lines[0] and lines[0].endswith("[0:00:33]")


def test_resumed_runs_count_from_the_start_step_and_disabled_is_silent():
    out = io.StringIO()
    with TrainProgress(30, start=20, stream=out, every_steps=5, description="SFT ") as bar:
        for step in range(21, 26):
            bar.update(step, {"sft_loss": 1.5})
    assert _lines(out) == [_lines(out)[0]] and _lines(out)[0].startswith("SFT step 25/30  loss 1.500")
    quiet = io.StringIO()
    with TrainProgress(5, enabled=False, stream=quiet) as bar:
        for step in range(1, 6):
            bar.update(step, {"reward": 1.0})
        bar.print("hello")
    assert quiet.getvalue() == ""
