"""benchmarks/gpu/bench_grpo_vllm.py --cpu-smoke: the GPU benchmark's whole path (vLLM rollout,
GRPO update, weight sync) on a tiny float32 model on the CPU. Runs in .venv-vllm (marker vllm)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.vllm


def test_cpu_smoke_runs_two_grpo_steps_and_reports_every_figure():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "bench_grpo_vllm.py"), "--cpu-smoke"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    steps = re.findall(r"^step (\d): rollout (\d+) tokens .* = (\d+) tok/s \| update (\d+) tokens .* weight sync "
                       r"([\d.]+) s \| mean reward ([\d.]+)$", out.stdout, flags=re.M)
    assert [s[0] for s in steps] == ["0", "1"]
    for _, generated, rate, processed, sync, reward in steps:
        assert int(generated) > 0 and int(rate) > 0 and int(processed) > int(generated)
        assert float(sync) > 0 and 0 < float(reward) <= 1
    assert "median over 1 step(s)" in out.stdout and "peak memory: process peak RSS" in out.stdout
