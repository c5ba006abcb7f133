"""Build the payload that carries vLLM to a lent GPU machine (the `device` tool), in parts it can carry.

The lent machine (an H200 so far) runs its own image: python3 3.12 with torch 2.11+cu130, transformers,
PEFT, pytest and more, but no vLLM, and it reaches no registry. So this script, run here, where PyPI is
reachable, builds what `benchmarks/gpu/device_checks.sh` unpacks there:

1. vLLM's wheel (VLLM_VERSION, the newest release built for the image's torch), less what a dense
   model on one Hopper GPU never loads (FlashAttention-2, MoE, Blackwell-only and DeepGEMM kernels, the
   Rust front end): FlashAttention-3 and vLLM's own kernels stay;
2. vLLM's requirements and math-verify (rlvr's), resolved for CPython 3.12 on x86-64 from their metadata,
   less what the image already has (IMAGE_HAS, from the device tool's KINDS.md) and the GPU kernel
   packages vLLM lists but a dense bf16 model does not need (KERNELS: xgrammar and llguidance among them,
   which vLLM 0.26 loads lazily for structured outputs); a requirement whose tree does not resolve here is
   carried alone with its carried requirements (`resolve`);
3. all of it as one folder (`site/`, to go on PYTHONPATH), packed as .tar.xz and split into parts that
   fit one call's 64 MiB with the working tree (PART_MIB), with a manifest of their sha256;
4. a model for the device checks to train, the embedded SmolLM2-135M-Instruct GGUF (94 MiB) by default, split
   as it is (quantized weights do not compress) into two parts (`model.gguf.00`, `.01`), the whole file's sha256
   in the manifest: the device reassembles it and checks that before it trains (`--model ''` leaves it out).

    .venv/bin/python scripts/gpu_payload.py            # -> .gpu/ (ignored by git)

Then on the device, one call per part, back to back (a machine stays warm 30 s after a call), each
carrying `.gpu/manifest.json` and its part: see benchmarks/gpu/device_checks.sh. Round sixteen did the same
by hand on 2026-12-04 (70 MB of vLLM and 44 MB of requirements, two calls); this script built 103.4 MiB in
two parts on 2026-12-05.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as canonical

VLLM_VERSION = "0.26.0"
PLATFORM = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--abi", "cp312",
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64",
            "--platform", "manylinux2014_x86_64"]
EXTRA = ["math-verify[antlr4_13_2]>=0.7", "gguf>=0.10"]  # rlvr's requirement and its GGUF reader (`smollm` extra)
MODEL = "smollm2-135m-instruct"  # the model the device checks train (rlvr.config.sources.EMBEDDED_MODELS)
STRIP = ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs", "vllm/_moe_C_stable_libtorch.abi3.so",
         "vllm/third_party/fmha_sm100", "vllm/third_party/deep_gemm/include")
KERNELS = {"torch", "torchaudio", "torchvision", "torchcodec", "triton", "pynvvideocodec", "flashinfer-python",
           "flashinfer-cubin", "tilelang", "nvidia-cudnn-frontend", "fastsafetensors", "nvidia-cutlass-dsl",
           "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu13", "quack-kernels", "tokenspeed-mla",
           "humming-kernels", "numba", "llvmlite", "xgrammar", "llguidance", "opencv-python-headless"}
KEEP = {"apache-tvm-ffi", "pycountry"}  # `from vllm import LLM` imports them (seen on the H200)
# The image's packages (KINDS.md, read 2026-11-17): carried only for another version, so not carried here.
IMAGE_HAS = set("""absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub
humanize hypothesis idna imageio iniconfig interface-meta jax jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader
lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja
numba numba-cuda numpy numpyro nvidia-ml-py onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax
opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy
portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp""".split())
PART_MIB = 56  # a call carries 64 MiB with the working tree (~3 MiB)


# the device's Python for requirement markers (the rest of the environment is this machine's)
DEVICE = {"python_version": "3.12", "python_full_version": "3.12.3", "platform_machine": "x86_64",
          "sys_platform": "linux", "platform_system": "Linux", "extra": ""}


def pip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=check)


def requirements(wheel: Path) -> list[str]:
    """The wheel's requirements that apply on the device (`on_device`)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    return on_device([line[len("Requires-Dist: "):] for line in lines if line.startswith("Requires-Dist: ")])


def on_device(requires_dist: list[str]) -> list[str]:
    """The requirements whose markers hold on the device (no extras asked for), without their markers."""
    kept = []
    for text in requires_dist:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(DEVICE):
            req.marker = None
            kept.append(str(req))
    return kept


def name_of(req: str) -> str:
    return canonical(Requirement(req).name)


def resolve(reqs: list[str], work: Path) -> dict[str, str]:
    """{canonical name: version} of the carried packages that `reqs` install with their dependencies on the
    device's Python, from the registry's metadata (no wheels downloaded), resolved together so that their
    versions agree. A requirement whose tree does not resolve (one on torch pulls CUDA libraries this registry
    lacks) is taken alone, with those of its own requirements that are carried and not already chosen; one
    that does not resolve even so is reported and left out."""
    failing = [req for req in reqs if _report([req], work, deps=True)[1]]
    items, error = _report([req for req in reqs if req not in failing], work, deps=True)
    if error:
        raise SystemExit(f"vLLM's requirements do not resolve together: {error}")
    wanted = {canonical(i["name"]): i["version"] for i in items}
    for req in failing:
        alone, error = _report([req], work, deps=False)
        if error:
            print(f"left out {req}: {error}")
            continue
        wanted[canonical(alone[0]["name"])] = alone[0]["version"]
        subs = [sub for sub in on_device(alone[0].get("requires_dist") or [])
                if carried(name_of(sub)) and name_of(sub) not in wanted]
        if subs:
            wanted.update({name: version for name, version in resolve(subs, work).items() if name not in wanted})
    return {name: version for name, version in wanted.items() if carried(name)}


def _report(reqs: list[str], work: Path, deps: bool) -> tuple[list[dict], str | None]:
    report = work / "report.json"
    out = pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *PLATFORM,
              *([] if deps else ["--no-deps"]), "--target", str(work / "t"), *reqs, check=False)
    if out.returncode:
        errors = [line for line in out.stderr.splitlines() if line.startswith("ERROR")]
        return [], errors[-1] if errors else out.stderr[-200:]
    return [i["metadata"] for i in json.loads(report.read_text())["install"]], None


def carried(name: str) -> bool:
    return name in KEEP or not (name in IMAGE_HAS or name in KERNELS or name.startswith(("nvidia-", "cuda-")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(".gpu"))
    parser.add_argument("--model", default=MODEL,
                        help="a .gguf file or an embedded model's name to carry for the device checks ('': none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlvr-gpu-") as tmp:
        work = Path(tmp)
        pip("download", "--no-deps", *PLATFORM, "-d", str(work / "vllm"), f"vllm=={VLLM_VERSION}")
        wheel = next((work / "vllm").glob("vllm-*.whl"))
        wanted = resolve([req for req in [*requirements(wheel), *EXTRA] if carried(name_of(req))], work)
        print(f"{len(wanted)} requirements carried: {', '.join(f'{n}=={v}' for n, v in sorted(wanted.items()))}")
        site = work / "site"
        pip("install", "--no-deps", "--quiet", *PLATFORM, "--target", str(site),
            *[f"{name}=={version}" for name, version in sorted(wanted.items())])
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
        for rel in STRIP:
            path = site / rel
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        for stray in (site / "vllm/third_party/deep_gemm").glob("_C.cpython-3*"):  # other Pythons' builds
            if "cpython-312" not in stray.name:
                stray.unlink()
        packed = work / "payload.tar.xz"
        with tarfile.open(packed, "w:xz", preset=6) as tar:
            tar.add(site, arcname="site")
        write_parts(packed, args.out, model_file(args.model) if args.model else None)


def model_file(model: str) -> Path:
    """The GGUF file `model` names (a path or an embedded model's name, as `model.path` takes it)."""
    from rlvr.config.sources import model_source

    file = model_source(model, "--model")
    if not file.is_file():
        raise SystemExit(f"--model {model!r}: a folder; the device checks carry a .gguf file")
    return file


def split(source: Path, out: Path, stem: str, size: int) -> list[dict]:
    """`source` as out/STEM.00, .01, ... of `size` bytes at most -> [{name, bytes, sha256}] in order."""
    parts = []
    with source.open("rb") as f:
        while chunk := f.read(size):
            part = out / f"{stem}.{len(parts):02d}"
            part.write_bytes(chunk)
            parts.append({"name": part.name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    return parts


def write_parts(packed: Path, out: Path, model: Path | None = None) -> None:
    """`packed` as out/payload.tar.xz.00, .01, ... of PART_MIB at most, the GGUF `model` (when given) as
    out/model.gguf.00, .01 (two halves, each under PART_MIB), and out/manifest.json naming every part with its
    sha256 (the model's whole file too, checked after it is reassembled)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    parts = split(packed, out, "payload.tar.xz", PART_MIB << 20)
    manifest: dict = {"vllm": VLLM_VERSION, "parts": parts}
    if model is not None:
        half = -(-model.stat().st_size // 2)
        if half > PART_MIB << 20:
            raise SystemExit(f"{model}: {model.stat().st_size / 2**20:.0f} MiB does not go in two parts of "
                             f"{PART_MIB} MiB")
        pieces = split(model, out, "model.gguf", half)
        manifest["model"] = {"file": model.name, "bytes": model.stat().st_size,
                             "sha256": hashlib.sha256(model.read_bytes()).hexdigest(), "parts": pieces}
        manifest["parts"] = parts + pieces
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    total = sum(p["bytes"] for p in manifest["parts"]) / 2**20
    print(f"{out}: {len(manifest['parts'])} parts, {total:.1f} MiB; carry one part per call, back to back "
          f"(benchmarks/gpu/device_checks.sh)")


if __name__ == "__main__":
    main()
