"""Run untrusted Python (a model's completion) against tests, with the host out of its reach.

Layers, outermost first (see `_sandbox_launcher.py` for the inside):
1. a fresh interpreter (`python -I -B`) in its own session/process group, with a scrubbed
   environment (PATH, HOME, TMPDIR, LANG only), a private temporary directory as cwd, and a
   wall-clock timeout after which the whole group is SIGKILLed;
2. a supervisor that is a child subreaper: every orphan of the code is re-parented to it and
   killed when the code exits, so nothing outlives a run;
3. resource limits on the code: RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE, RLIMIT_NPROC
   (fork bombs), RLIMIT_NOFILE, no core dumps;
4. when run as root: a fresh network namespace (no interface but a down loopback), a mount
   namespace where /tmp, /var/tmp, /run/lock and /dev/shm are fresh size-capped tmpfs (the
   working directory lives there: nothing is written to the host), and a drop to a per-run
   unprivileged uid, so RLIMIT_NPROC is enforced (root ignores it), the parent's files,
   /proc/<pid>/environ and signals are out of reach, and leftovers are found by uid;
5. an audit-hook guard (PEP 578) inside the interpreter: no sockets, no exec/subprocess, no
   signals to other processes, no writes outside the directory, no ctypes, no frame introspection.
Residual risks, stated plainly: without root, layer 4 is absent, so the network and file-system
blocks are only layer 5, which native code (a C extension already installed) could bypass, and the
disk used in the private directory is bounded by RLIMIT_FSIZE per file, not in total; the
test verdicts come back over a nonce-tagged channel that resists printing, early exits and
patching, but code that defeats the guard could forge them.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

_LAUNCHER = str(Path(__file__).with_name("_sandbox_launcher.py"))
_UID_BASE = 0x5EED0000  # per-run uids are drawn above this, far from any real account


class SandboxError(RuntimeError):
    """The sandbox itself failed to start (not the untrusted code)."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 5  # RLIMIT_CPU per process
    memory_mb: int = 512  # RLIMIT_AS
    file_size_mb: int = 16  # RLIMIT_FSIZE
    disk_mb: int = 64  # size of the private /tmp (root only; holds the working directory)
    nproc: int = 16  # RLIMIT_NPROC (processes of the sandbox uid)
    nofile: int = 64  # RLIMIT_NOFILE
    wall_seconds: float = 10.0  # the whole run, killed after this
    test_timeout: float = 5.0  # each assert test
    max_output_bytes: int = 1 << 20  # stdout/stderr kept per run; the rest is dropped

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {value}")


@dataclass
class SandboxResult:
    exit_code: int | None  # of the untrusted code; negative = killed by that signal; None = unknown
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    tests: dict[int, bool] = field(default_factory=dict)  # assert mode: verdict per test index
    done: bool = False  # stdin mode: the code ran to completion
    network: str = "unknown"  # "namespace" (kernel-isolated) or "guard" (audit hook only)
    filesystem: str = "unknown"  # "private" (tmpfs mount namespace) or "guard" (audit hook only)
    uid: int | None = None  # the per-run uid the code ran as (root only), for auditing


def _scrubbed_env(workdir: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _new_uid() -> int | None:
    return _UID_BASE + secrets.randbelow(1 << 24) if os.geteuid() == 0 else None


def _live_pids_of(uid: int) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z":  # a zombie is already dead; its new parent reaps it
            pids.append(int(pid))
    return pids


def _kill_uid(uid: int) -> None:
    """SIGKILL every live process owned by `uid` (a per-run uid, so nothing else owns it)."""
    for _ in range(200):
        pids = _live_pids_of(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)


def _pump(proc: subprocess.Popen, pipes: dict[int, bytearray], deadline: float, cap: int) -> bool:
    """Read the pipes until the supervisor exits or the deadline passes; True on timeout."""
    sel = selectors.DefaultSelector()
    for fd in pipes:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    timed_out = False
    while sel.get_map():
        left = deadline - time.monotonic()
        if proc.poll() is not None:
            left = min(left, 0.5)  # its descendants are dead; drain what is left, briefly
        if left <= 0:
            timed_out = proc.poll() is None
            break
        for key, _ in sel.select(timeout=min(left, 0.1)):
            try:
                data = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fd)
            elif len(pipes[key.fd]) < cap:
                pipes[key.fd] += data[: cap - len(pipes[key.fd])]
    sel.close()
    return timed_out


def _parse_results(raw: bytes, nonce: str, result: SandboxResult) -> bool:
    """Fill `result` from the nonce-tagged lines; returns whether the sandbox reported its start."""
    started = False
    for line in raw.decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != nonce:
            continue  # not from the launcher
        if parts[1] == "isolation" and len(parts) == 4:
            result.network, result.filesystem, started = parts[2], parts[3], True
        elif parts[1] == "test" and len(parts) == 4 and parts[2].isdigit():
            result.tests.setdefault(int(parts[2]), parts[3] == "1")
        elif parts[1] == "done":
            result.done = True
        elif parts[1] == "exit" and len(parts) == 3:
            result.exit_code = int(parts[2])
    return started


def run_python(code: str, *, tests: list[str] | None = None, stdin: str = "",
               limits: SandboxLimits = SandboxLimits(), guard: bool = True) -> SandboxResult:
    """Run `code`; with `tests` (Python statements, e.g. asserts) run each after it, in its
    namespace, and report a verdict per test; without, feed it `stdin` and capture stdout.
    `guard=False` drops the audit-hook layer; it exists to test the OS layers alone."""
    nonce = secrets.token_hex(16)
    uid = _new_uid()
    workdir = tempfile.mkdtemp(prefix="rlvr-sandbox-")
    if uid is not None:
        os.chown(workdir, uid, uid)
    header = {"code": code, "tests": list(tests or []), "mode": "tests" if tests is not None else "stdin",
              "nonce": nonce, "workdir": workdir, "uid": uid, "limits": asdict(limits), "guard": guard,
              "test_timeout": limits.test_timeout}
    header_r, header_w = os.pipe()
    result_r, result_w = os.pipe()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-B", _LAUNCHER, str(header_r), str(result_w)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(header_r, result_w), cwd=workdir, env=_scrubbed_env(workdir),
            start_new_session=True)
    except OSError as e:
        raise SandboxError(f"could not start the sandbox: {e}") from e
    finally:
        os.close(header_r)
        os.close(result_w)
    try:
        result = _communicate(proc, header, header_w, result_r, stdin, limits, start)
        result.uid = uid
        return result
    finally:
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
        if uid is not None:
            _kill_uid(uid)
        os.close(result_r)
        shutil.rmtree(workdir, ignore_errors=True)


def _communicate(proc, header, header_w, result_r, stdin, limits, start) -> SandboxResult:
    with os.fdopen(header_w, "wb") as f:
        f.write(json.dumps(header).encode())
    try:
        proc.stdin.write(stdin.encode())
    except BrokenPipeError:
        pass
    proc.stdin.close()
    pipes = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray(), result_r: bytearray()}
    timed_out = _pump(proc, pipes, start + limits.wall_seconds, limits.max_output_bytes)
    _kill_group(proc)
    proc.wait()
    result = SandboxResult(None, pipes[proc.stdout.fileno()].decode(errors="replace"),
                           pipes[proc.stderr.fileno()].decode(errors="replace"), timed_out,
                           time.monotonic() - start)
    proc.stdout.close()
    proc.stderr.close()
    if not _parse_results(bytes(pipes[result_r]), header["nonce"], result) and not timed_out:
        raise SandboxError(f"the sandbox did not start (exit {proc.returncode}): {result.stderr[-2000:]}")
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
