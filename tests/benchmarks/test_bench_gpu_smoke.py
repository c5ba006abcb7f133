"""benchmarks/gpu/bench_grpo_vllm.py --cpu-smoke: the GPU benchmark's whole path (vLLM rollout,
GRPO update, weight sync) on a tiny float32 model on the CPU, in .venv-vllm (marker vllm); and with
`--engine hf` (rlvr's HFEngine on the policy itself) in the main suite."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _smoke(*flags: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "bench_grpo_vllm.py"), "--cpu-smoke",
                          *flags], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _steps(stdout: str) -> list[tuple[str, ...]]:
    steps = re.findall(r"^step (\d): rollout (\d+) tokens .* = (\d+) tok/s \| update (\d+) tokens .* weight sync "
                       r"([\d.]+) s \| mean reward ([\d.]+)$", stdout, flags=re.M)
    assert [s[0] for s in steps] == ["0", "1"]
    parts = re.findall(r"\(forward\+backward ([\d.]+) s, optimizer ([\d.]+) s, padding (\d+)%\)", stdout)
    assert len(parts) == 2 and all(float(p) > 0 and 0 <= int(pad) < 100 for p, _, pad in parts)
    assert "median over 1 step(s)" in stdout and "peak memory: process peak RSS" in stdout
    return steps


@pytest.mark.vllm
def test_cpu_smoke_runs_two_grpo_steps_and_reports_every_figure():
    out = _smoke()
    assert "vllm engine up in" in out
    for _, generated, rate, processed, sync, reward in _steps(out):
        assert int(generated) > 0 and int(rate) > 0 and int(processed) > int(generated)
        assert float(sync) > 0 and 0 < float(reward) <= 1


def test_cpu_smoke_with_the_hf_engine_samples_from_the_policy_itself():
    out = _smoke("--engine", "hf")
    assert "hf engine up in" in out
    for _, generated, rate, processed, sync, reward in _steps(out):
        assert int(generated) > 0 and int(rate) > 0 and int(processed) > int(generated)
        assert float(sync) == 0 and 0 < float(reward) <= 1  # nothing to move: the engine runs the policy
