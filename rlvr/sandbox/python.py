"""Run untrusted Python (a model's completion, a `python` tool call) with the host out of its reach; for the
code reward, `rlvr.rewards.grade` turns what comes back into a verdict, on this side.

Layers, outermost first (see `_launcher.py` for the inside):
1. isolation, chosen by `isolation=` ("auto" picks the first available):
   - "bwrap": bubblewrap (Debian package `bubblewrap`), as root or not. The code sees a read-only
     /usr and the interpreter, a private /proc, a minimal /dev and a size-capped tmpfs /tmp; no
     network (own namespace), no host files (so no data set holding the expected answers), no
     other process (own pid namespace); the sandbox dies with its parent.
   - "namespaces" (root only, without bubblewrap): a fresh network namespace and a mount namespace
     where /tmp, /var/tmp, /run/lock and /dev/shm are fresh tmpfs; the rest of the host's files
     stay readable by the unprivileged uid.
   - "none": only the layers below. Untrusted code is refused with no isolation unless this is
     asked for by name.
   Under root the code also runs as a per-run unprivileged uid, so RLIMIT_NPROC is enforced, the
   parent's files, /proc/<pid>/environ and signals are out of reach, and leftovers are found by uid;
2. a fresh interpreter (`python -I -B`) per run with a scrubbed environment and a wall-clock
   timeout, under a supervisor that is a child subreaper and kills every descendant at the end;
3. resource limits: RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, no core;
4. an audit-hook guard (PEP 578) inside the interpreter: no sockets, no exec/subprocess, no
   signals to other processes, no writes outside the directory, no ctypes, no frame introspection.
The verdict cannot come from the sandbox: a run gets the code and the expressions to evaluate
(`f(1)`), never a test's expected value, and sends back serialised plain values, which the parent
compares. Whatever the code does to itself, the most it can send is a value it computed.
"""

from __future__ import annotations

import functools
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
from dataclasses import asdict, dataclass
from pathlib import Path

_LAUNCHER = str(Path(__file__).with_name("_launcher.py"))
_BWRAP_LAUNCHER = "/sandbox/launcher.py"
_BWRAP_WORKDIR = "/tmp/sandbox"
ISOLATIONS = ("auto", "bwrap", "namespaces", "none")
_UID_BASE = 0x5EED0000  # per-run uids are drawn above this, far from any real account


class SandboxError(RuntimeError):
    """The sandbox itself failed to start (not the untrusted code)."""


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 5  # RLIMIT_CPU per process
    memory_mb: int = 512  # RLIMIT_AS
    file_size_mb: int = 16  # RLIMIT_FSIZE
    disk_mb: int = 64  # size of the private /tmp (bwrap and namespaces; holds the working directory)
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
    values: list[str | None] | None = None  # serialised value per expression; None: none came back
    isolation: str = "unknown"  # "bwrap", "namespaces" or "none"
    uid: int | None = None  # the per-run uid the code ran as (root only), for auditing
    test_timed_out: bool = False  # an expression ran past the per-test timer (its value is None)


@functools.lru_cache(maxsize=None)
def _bwrap_works() -> bool:
    argv = _bwrap_argv(4) + ["--", _interpreter()[0], "-I", "-c", "pass"]
    try:
        return shutil.which("bwrap") is not None and subprocess.run(
            argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def resolve_isolation(isolation: str = "auto") -> str:
    """The isolation a run will get; raises SandboxError when the one asked for is not available."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"unknown sandbox isolation {isolation!r}; choose from {list(ISOLATIONS)}")
    if isolation in ("auto", "bwrap") and _bwrap_works():
        return "bwrap"
    if isolation in ("auto", "namespaces") and os.geteuid() == 0:
        return "namespaces"
    if isolation == "none":
        return "none"
    weaker = "namespaces (no network; host files stay readable) or " if os.geteuid() == 0 else ""
    raise SandboxError(f"sandbox isolation {isolation!r} is not available here: install bubblewrap "
                       f"(apt-get install bubblewrap) or set the code reward option isolation: {weaker}none "
                       "(untrusted code with only the audit hook and resource limits)")


def describe_isolation(isolation: str) -> str:
    """One line saying what protects the host, logged when a code reward starts."""
    uid = " as a per-run unprivileged uid" if os.geteuid() == 0 else ""
    return {
        "bwrap": f"bubblewrap{uid}: no network, no host files but /usr and the interpreter (read-only), "
                 "private /tmp, own pid namespace",
        "namespaces": f"namespaces{uid}: no network, private /tmp; host files stay readable",
        "none": "NO isolation: audit hook and resource limits only; the code can reach the network and "
                "the host's files (asked for with isolation: none)",
    }[isolation]


@functools.lru_cache(maxsize=None)
def _interpreter() -> tuple[str, str]:
    """(interpreter, its prefix): this one, or the system's python3 when this one's files are out of
    reach (an unprivileged user running a root-owned pyenv finds the system's library instead)."""
    exe, prefix = os.path.realpath(sys.executable), os.path.realpath(sys.base_prefix)
    if exe.startswith(prefix + os.sep) and os.access(prefix, os.R_OK | os.X_OK):
        return exe, prefix
    system = shutil.which("python3", path="/usr/bin:/bin")
    return (os.path.realpath(system), "/usr") if system else (exe, prefix)


def _bwrap_argv(disk_mb: int) -> list[str]:
    # Under root no user namespace: the code is then dropped to a per-run uid the host can find.
    unshare = ["--unshare-all"] if os.geteuid() else \
        ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    argv = [shutil.which("bwrap") or "bwrap", *unshare, "--die-with-parent", "--new-session"]
    for path in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    prefix = _interpreter()[1]
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        # The parents bubblewrap makes for a bind are 0700 (0.8): the per-run uid could not reach the library
        # under them (pyenv in /root). Empty 0755 folders of our making: traversable, and no host file.
        argv += [arg for parent in reversed(Path(prefix).parents[:-1]) for arg in ("--dir", str(parent))]
        argv += ["--ro-bind", prefix, prefix]
    argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--proc", "/proc", "--dev", "/dev",
             "--size", str(disk_mb << 20), "--tmpfs", "/tmp", "--ro-bind", _LAUNCHER, _BWRAP_LAUNCHER,
             "--chdir", "/tmp"]
    return argv


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


def _parse_status(raw: bytes, result: SandboxResult) -> bool:
    """Fill `result` from the supervisor's lines; returns whether the sandbox reported its start."""
    started = False
    for line in raw.decode(errors="replace").splitlines():
        parts = line.split()
        if parts[:1] == ["isolation"] and len(parts) == 2:
            started = True
        elif parts[:1] == ["exit"] and len(parts) == 2:
            result.exit_code = int(parts[1])
    return started


def _parse_values(raw: bytes, n: int, result: SandboxResult) -> None:
    """The values line into `result` (values None when the code did not get as far as sending one), and whether
    the launcher marked an expression as run past the per-test timer (0 in the line)."""
    lines = raw.decode(errors="replace").splitlines()
    try:
        values = json.loads(lines[-1]) if lines else None
    except ValueError:
        return
    if not isinstance(values, list) or len(values) != n:
        return
    result.values = [v if isinstance(v, str) else None for v in values]
    result.test_timed_out = any(type(v) is int and v == 0 for v in values)


def run_python(code: str, *, exprs: list[str] | None = None, stdin: str = "",
               limits: SandboxLimits = SandboxLimits(), guard: bool = True,
               isolation: str = "auto") -> SandboxResult:
    """Run `code` in a fresh sandbox; with `exprs`, evaluate each after it, in its namespace, and
    return their serialised values (`rlvr.rewards.grade` compares them); without, feed it `stdin`
    and capture stdout. `guard=False` drops the audit-hook layer; it exists to test the OS layers."""
    mode = resolve_isolation(isolation)
    uid = _new_uid()
    hostdir = None if mode == "bwrap" else tempfile.mkdtemp(prefix="rlvr-sandbox-")
    workdir = _BWRAP_WORKDIR if mode == "bwrap" else hostdir
    if uid is not None and hostdir is not None:
        os.chown(hostdir, uid, uid)
    header = {"code": code, "exprs": list(exprs or []), "mode": "values" if exprs is not None else "stdin",
              "workdir": workdir, "uid": uid, "limits": asdict(limits), "guard": guard,
              "isolation": mode, "test_timeout": limits.test_timeout}
    pipes = [os.pipe() for _ in range(3)]  # header, status, values
    python = _interpreter()[0] if mode == "bwrap" else sys.executable
    launch = [python, "-I", "-B", _BWRAP_LAUNCHER if mode == "bwrap" else _LAUNCHER]
    prefix = _bwrap_argv(limits.disk_mb) + ["--"] if mode == "bwrap" else []
    child_fds = (pipes[0][0], pipes[1][1], pipes[2][1])
    start = time.monotonic()
    try:
        proc = subprocess.Popen(prefix + launch + [str(fd) for fd in child_fds], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=child_fds,
                                cwd=hostdir or "/", env=_scrubbed_env(workdir), start_new_session=True)
    except OSError as e:
        raise SandboxError(f"could not start the sandbox: {e}") from e
    finally:
        for fd in child_fds:
            os.close(fd)
    try:
        result = _communicate(proc, header, pipes[0][1], pipes[1][0], pipes[2][0], stdin, limits, start)
        result.uid, result.isolation = uid, mode
        return result
    finally:
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
        if uid is not None:
            _kill_uid(uid)
        os.close(pipes[1][0])
        os.close(pipes[2][0])
        if hostdir is not None:
            shutil.rmtree(hostdir, ignore_errors=True)


def _communicate(proc, header, header_w, status_r, values_r, stdin, limits, start) -> SandboxResult:
    with os.fdopen(header_w, "wb") as f:
        f.write(json.dumps(header).encode())
    try:
        proc.stdin.write(stdin.encode())
    except BrokenPipeError:
        pass
    proc.stdin.close()
    out, err = proc.stdout.fileno(), proc.stderr.fileno()
    pipes = {out: bytearray(), err: bytearray(), status_r: bytearray(), values_r: bytearray()}
    timed_out = _pump(proc, pipes, start + limits.wall_seconds, limits.max_output_bytes)
    _kill_group(proc)
    proc.wait()
    result = SandboxResult(None, pipes[out].decode(errors="replace"), pipes[err].decode(errors="replace"),
                           timed_out, time.monotonic() - start)
    proc.stdout.close()
    proc.stderr.close()
    if not _parse_status(bytes(pipes[status_r]), result) and not timed_out:
        raise SandboxError(f"the sandbox did not start (exit {proc.returncode}): {result.stderr[-2000:]}")
    if header["mode"] == "values":
        _parse_values(bytes(pipes[values_r]), len(header["exprs"]), result)
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
