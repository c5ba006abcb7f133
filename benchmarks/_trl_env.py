"""The two children of benchmarks/bench_trl.py and what they run in: TRL's pinned virtualenv, each side's
allocator, starting one pinned to a core and reading its own peak RSS, and the page cache their libraries are
read from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_PIN = "torch==2.13.0"  # installed first, from the CPU wheel on local disk: a plain `torch` pulls CUDA
TRL_PINS = ["trl==1.16.0", "transformers==5.24.0", "accelerate==1.15.0", "datasets==5.2.0",
            "math-verify[antlr4_13_2]==0.9.0"]  # the math tasks' grader (rlvr's), which the TRL side calls too


def start_child(argv: list[str], threads: int, log_path: Path, preload: str | None = None,
                cpu: int | None = None) -> subprocess.Popen:
    """Start `argv` with `threads` torch/OpenMP threads; `preload`: a library for LD_PRELOAD; `cpu`: the
    one core it may run on (its children too)."""
    env = {**os.environ, **({"LD_PRELOAD": preload} if preload else {}),
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
    with open(log_path, "w") as log:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)


def wait_child(proc: subprocess.Popen, log_path: Path) -> dict:
    """Wait for `proc` -> its own peak RSS in MiB (wait4's rusage of that process, not the running
    maximum over all children that RUSAGE_CHILDREN would give)."""
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code:
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"{proc.args[1]} failed (exit {code}); last lines of {log_path}:\n{tail}")
    return {"peak_rss_mib": usage.ru_maxrss / 1024}  # ru_maxrss is in KiB on Linux


def trl_allocator(choice: str) -> tuple[str, str | None]:
    """TRL's malloc -> (name, library to preload or None). "auto": tcmalloc where installed (TRL's
    fastest setting here: 0.36 vs 0.56-0.68 CPU-s per demo step with glibc), else glibc."""
    if choice == "system":
        return "system", None
    from rlvr.allocator import find_library

    path = find_library("tcmalloc")
    if path is None and choice == "tcmalloc":
        raise SystemExit(f"--trl-allocator {choice}: the library is not installed")
    return ("tcmalloc", path) if path else ("system", None)


def trl_python(venv: Path) -> Path:
    """The TRL virtualenv's python, created with the pinned versions when missing or different."""
    python = venv / "bin" / "python"
    want = {p.split("==")[0].split("[")[0]: p.split("==")[1] for p in [TORCH_PIN, *TRL_PINS]}
    probe = ("import json, importlib.metadata as m; print(json.dumps({n: m.version(n) for n in %r}))" % list(want))
    if python.exists():
        got = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if got.returncode == 0 and {k: v.split("+")[0] for k, v in json.loads(got.stdout).items()} == want:
            return python
    print(f"installing TRL into {venv} (once; a few minutes): {' '.join([TORCH_PIN, *TRL_PINS])}", flush=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH_PIN], check=True)  # first, so TRL's dependency is already satisfied (CPU build)
    subprocess.run([*pip, *TRL_PINS], check=True)
    return python


def library_files(python: Path | str) -> list[Path]:
    """The shared libraries (`*.so*`) under the interpreter `python`'s site-packages."""
    where = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return sorted(Path(where).rglob("*.so*"))


def evict(paths: list[Path]) -> int:
    """Drop the files' clean pages from the page cache (posix_fadvise DONTNEED; pages a running process maps
    stay) -> files evicted. Before each pair, for both venvs' libraries: a library that pip has just written sits
    in the cache in the large folios of the write path, and a process that maps it counts more of it in its RSS
    (`import torch` measured 265 MiB from a torch installed minutes before against 226 from the same bytes read
    back from disk, 218 in the other venv). Evicted, both sides map their libraries as read from disk, so the
    peak RSS compares the trainers, not how recently each venv was installed."""
    evicted = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            evicted += 1
        finally:
            os.close(fd)
    return evicted
