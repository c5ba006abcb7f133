"""The lent GPU machine's side of the payload that `scripts/gpu_payload.py` builds: what one device call carried is
staged, and the call that completes the set unpacks vLLM onto PYTHONPATH and reassembles the model.

    python3 benchmarks/gpu/stage.py STAGE [--vllm-installed]      # run by benchmarks/gpu/device_checks.sh

Each call carries the manifest and one or two parts in `.gpu/`; they are copied into STAGE (a folder that outlives
the call while the machine stays warm) and checked against the manifest's sha256, so that a part that did not
arrive whole is carried again. Exit 1 (and which parts are missing) until every part the machine needs is there:
the vLLM payload's (`payload.tar.xz.*`, none where vLLM is already installed) and the model's (`model.gguf.*`).
Then `STAGE/site` is the unpacked payload and `STAGE/model/FILE.gguf` the model, its size and the whole file's
sha256 checked against the manifest (a mismatch removes it and exits 1). Only the standard library: the device's
python3 has no rlvr dependencies before the payload is unpacked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tarfile
from pathlib import Path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def carry_in(carried: Path, stage: Path) -> None:
    """Copy this call's `.gpu/` files (the manifest and its parts) into the stage."""
    for file in sorted(carried.glob("*")) if carried.is_dir() else []:
        if file.name == "manifest.json" or file.name.startswith(("payload.tar.xz.", "model.gguf.")):
            shutil.copyfile(file, stage / file.name)


def needed(manifest: dict, vllm_installed: bool) -> list[dict]:
    """The parts this machine needs: the model's always, the vLLM payload's where vLLM is not installed."""
    return [p for p in manifest["parts"] if not (vllm_installed and p["name"].startswith("payload."))]


def missing(stage: Path, parts: list[dict]) -> list[str]:
    return [p["name"] for p in parts if not (stage / p["name"]).is_file() or sha256(stage / p["name"]) != p["sha256"]]


def unpack(stage: Path, parts: list[dict]) -> None:
    """The vLLM payload's parts, joined in order, unpacked into STAGE/site (once)."""
    names = [p["name"] for p in parts if p["name"].startswith("payload.")]
    if not names or (stage / "site").is_dir():
        return
    print(f"unpacking the payload into {stage / 'site'}", flush=True)
    joined = stage / "payload.tar.xz"
    with joined.open("wb") as out:
        for name in names:
            out.write((stage / name).read_bytes())
    try:
        with tarfile.open(joined, "r:xz") as tar:
            tar.extractall(stage, filter="fully_trusted")
    except (tarfile.TarError, OSError, EOFError):
        shutil.rmtree(stage / "site", ignore_errors=True)
        raise
    finally:
        joined.unlink()


def reassemble(stage: Path, model: dict) -> Path:
    """STAGE/model/FILE from the model's parts in order; its size and sha256 are the manifest's, else ValueError
    (and nothing is left there). Done once: a later call finds the checked file."""
    target = stage / "model" / model["file"]
    if target.is_file():
        return target
    target.parent.mkdir(exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with partial.open("wb") as out:
        for part in model["parts"]:
            out.write((stage / part["name"]).read_bytes())
    size, digest = partial.stat().st_size, sha256(partial)
    if size != model["bytes"] or digest != model["sha256"]:
        partial.unlink()
        raise ValueError(f"{model['file']}: reassembled {size} bytes with sha256 {digest[:16]}..., the manifest says "
                         f"{model['bytes']} bytes, {model['sha256'][:16]}...")
    partial.rename(target)
    print(f"model reassembled and checked: {target} ({size / 2**20:.1f} MiB, sha256 {digest[:16]}...)")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", type=Path)
    parser.add_argument("--carried", type=Path, default=Path(".gpu"), help="this call's files")
    parser.add_argument("--vllm-installed", action="store_true", help="vLLM imports here: its payload is not needed")
    args = parser.parse_args(argv)
    args.stage.mkdir(parents=True, exist_ok=True)
    carry_in(args.carried, args.stage)
    if not (args.stage / "manifest.json").is_file():
        if args.vllm_installed:
            return 0  # nothing carried and nothing needed: the checks that need a model say so
        print("no payload staged: build it with scripts/gpu_payload.py and carry .gpu/manifest.json and a part",
              file=sys.stderr)
        return 1
    manifest = json.loads((args.stage / "manifest.json").read_text())
    parts = needed(manifest, args.vllm_installed)
    absent = missing(args.stage, parts)
    have = [p["name"] for p in parts if p["name"] not in absent]
    print(f"payload parts staged in {args.stage}: {', '.join(have) or 'none'}; missing: {', '.join(absent) or 'none'}")
    if absent:
        return 1
    unpack(args.stage, parts)
    if "model" in manifest:
        try:
            reassemble(args.stage, manifest["model"])
        except ValueError as err:
            print(err, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
