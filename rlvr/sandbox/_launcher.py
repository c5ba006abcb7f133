"""Sandbox launcher: `python -I -B _launcher.py HEADER_FD STATUS_FD VALUES_FD`. Standalone
on purpose (stdlib only, no rlvr import), since it runs before and around untrusted code.

The header (JSON on HEADER_FD, read to EOF and closed before any untrusted code runs) carries the
code, the expressions to evaluate after it, the limits and the isolation the parent chose. It
never carries a test's expected value: the parent keeps those and grades on its side, so nothing
this process says can be a verdict, only a value. The process forks:

- the supervisor (this process) becomes a child subreaper, so every orphan of the untrusted code
  is re-parented to it; when the worker exits it kills and reaps every remaining descendant, then
  reports the worker's exit status on STATUS_FD, which the worker closed. It is not dumpable, so
  a worker of the same uid cannot open its descriptors through /proc; under root it stays root.
- the worker applies resource limits, leaves the network namespace and covers the world-writable
  directories (isolation "namespaces", root only; bubblewrap did that already for "bwrap"), drops
  to the sandbox uid (root only), installs the audit-hook guard, then runs the code and writes the
  serialised value of each expression on VALUES_FD.
"""

import ctypes
import json
import os
import resource
import signal
import sys

PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE = 36, 4
CLONE_NEWNET, CLONE_NEWNS = 0x40000000, 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 1 << 14, 1 << 18
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm")
PRIVATE_WORKDIR = "/tmp/sandbox"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Events refused outright: network, new programs, signals to others, native code, introspection
# that could reach the launcher's frames.
_BLOCKED = {
    "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.sendto", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
    "os.killpg", "pty.spawn", "os.forkpty", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "sys.settrace", "sys.setprofile", "sys._current_frames", "gc.get_objects", "gc.get_referrers",
    "gc.get_referents", "os.chroot", "os.setuid", "os.setreuid", "os.setresuid",
}
_PATH_EVENTS = {"os.remove": 1, "os.rename": 2, "os.mkdir": 1, "os.rmdir": 1, "os.symlink": 2,
                "os.link": 2, "os.chmod": 1, "os.chown": 1, "os.truncate": 1, "os.utime": 1,
                "shutil.rmtree": 1, "os.mkfifo": 1, "os.mknod": 1}


def _read_all(fd):
    chunks = []
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            os.close(fd)
            return b"".join(chunks)
        chunks.append(data)


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _limit(name, value):
    resource.setrlimit(getattr(resource, name), (value, value))


def _keep_imports_reachable():
    """The interpreter may live under a directory the sandbox uid cannot traverse (/root is 0700
    with pyenv). A directory descriptor opened now, as root, stays usable after the uid drop, and
    `/proc/self/fd/N/...` walks from it without re-checking the ancestors' permissions."""
    moved = {}
    for entry in sys.path:
        if os.path.isdir(entry):
            moved[entry] = f"/proc/self/fd/{os.open(entry, os.O_RDONLY | os.O_DIRECTORY)}"
    sys.path[:] = list(moved.values())

    def relocate(path):
        for old, new in moved.items():
            if path == old or path.startswith(old + os.sep):
                return new + path[len(old):]
        return path

    for module in list(sys.modules.values()):  # packages already imported, e.g. collections
        package_path = getattr(module, "__path__", None)
        if isinstance(package_path, list):
            package_path[:] = [relocate(p) for p in package_path]
    sys.path_importer_cache.clear()


def _apply_limits(lim):
    cpu = int(lim["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL a second later
    _limit("RLIMIT_AS", int(lim["memory_mb"]) << 20)
    _limit("RLIMIT_FSIZE", int(lim["file_size_mb"]) << 20)
    _limit("RLIMIT_NPROC", int(lim["nproc"]))
    _limit("RLIMIT_CORE", 0)
    _limit("RLIMIT_NOFILE", int(lim["nofile"]))


def _private_tmp(libc, disk_mb):
    """A mount namespace where every world-writable directory is a fresh, size-capped tmpfs: the
    code can write nowhere on the host, and its files vanish with it."""
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:  # no propagation to the host
        return False
    for path in _WORLD_WRITABLE:
        if os.path.isdir(path):
            size = disk_mb if path == "/tmp" else 1
            opts = f"size={size}m,mode=1777".encode()
            if libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
                return False
    return True


def _isolate(header):
    """Runs in the worker, as root if the launcher is root; ends unprivileged. Returns
    (network isolation, filesystem isolation, working directory)."""
    uid, workdir, mode = header.get("uid"), header["workdir"], header["isolation"]
    net = fs = "guard"
    if mode != "bwrap" and uid is not None:
        _keep_imports_reachable()  # on the host's files; before /tmp is covered: sys.path may point there
    if mode == "bwrap":
        net, fs = "namespace", "bwrap"
        os.makedirs(workdir, 0o700, exist_ok=True)
        if uid is not None:
            os.chown(workdir, uid, uid)
    elif mode == "namespaces" and uid is not None:
        libc = _libc()
        if libc.unshare(CLONE_NEWNET) == 0:
            net = "namespace"
        if _private_tmp(libc, int(header["limits"]["disk_mb"])):
            fs, workdir = "private", PRIVATE_WORKDIR
            os.mkdir(workdir, 0o700)
            os.chown(workdir, uid, uid)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    _apply_limits(header["limits"])
    os.chdir(workdir)
    os.environ.update(HOME=workdir, TMPDIR=workdir)
    os.environ.pop("PWD", None)  # bubblewrap sets it
    return net, fs, workdir


def _guard(workdir):
    """Audit hook (PEP 578): best-effort, defence in depth on top of the OS limits."""
    root = os.path.realpath(workdir)

    def inside(path):
        if isinstance(path, int):
            return True  # an already-open descriptor
        real = os.path.realpath(os.fsdecode(path))
        return real == root or real.startswith(root + os.sep) or real == "/dev/null"

    def other_proc(path):
        if isinstance(path, int):
            return False
        parts = os.path.realpath(os.fsdecode(path)).split(os.sep)
        if parts == ["", "proc"]:  # /proc itself as a descriptor: open("1/cmdline", dir_fd=...) gets past the rest
            return True
        return len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != os.getpid()

    def hook(event, args):
        if event in _BLOCKED:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, _, flags = args
            if (flags & _WRITE_FLAGS and not inside(path)) or other_proc(path):
                raise PermissionError(f"sandbox: may not open {path!r} this way")
        elif event in _PATH_EVENTS:
            if not all(inside(p) for p in args[:_PATH_EVENTS[event]]):
                raise PermissionError(f"sandbox: {event} outside the sandbox directory")
        elif event == "os.kill" and args[0] != os.getpid():
            raise PermissionError("sandbox: may only signal itself")
        elif event == "sys._getframe":
            raise ValueError("sandbox: frame introspection is not allowed")  # namedtuple tolerates this
        elif event == "object.__getattr__" and args[1] in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
            raise AttributeError("sandbox: frame introspection is not allowed")
        elif event == "import" and args[0] in ("ctypes", "_ctypes"):
            raise ImportError("sandbox: ctypes is not available")

    sys.addaudithook(hook)


class _TestTimeout(BaseException):
    pass


_TIMED_OUT = 0  # in the values line: this expression ran past the per-test timer (a value is a string or null)


def _on_alarm(signum, frame):
    raise _TestTimeout()


# Bound before any untrusted code runs, so that reassigning a builtin later changes nothing here.
_type, _repr, _dumps, _float_repr, _int_repr, _str_repr = type, repr, json.dumps, float.__repr__, \
    int.__repr__, str.__repr__
_eval, _compile = eval, compile
_PLAIN = (bool, int, float, str, bytes, type(None))
_INF = float("inf")


def _serialise(value, depth=0):
    """A Python literal for `value` if it is built only of exact builtin types (no subclass, so
    no object of the code's making, whose `__eq__` or `__repr__` could lie), else None."""
    t = _type(value)
    if depth > 50:
        return None
    if t is float and value != value or t is float and value in (_INF, -_INF):
        return f"float({_str_repr(_float_repr(value))})"  # nan and inf have no literal
    if t in _PLAIN:
        return _repr(value) if t in (bool, bytes, type(None)) else \
            (_int_repr if t is int else _float_repr if t is float else _str_repr)(value)
    if t in (list, tuple, set, frozenset):
        items = [_serialise(v, depth + 1) for v in value]
        if None in items:
            return None
        body = ", ".join(items)
        if t is list:
            return f"[{body}]"
        if t is tuple:
            return f"({body},)" if len(items) == 1 else f"({body})"
        return f"{'frozenset' if t is frozenset else 'set'}([{body}])"  # the parent reads these two calls
    if t is dict:
        pairs = [(_serialise(k, depth + 1), _serialise(v, depth + 1)) for k, v in value.items()]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    return None


def _run(header, send):
    code = compile(header["code"], "<solution>", "exec")
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(code, namespace)
    except SystemExit as e:
        if header["mode"] != "stdin" or e.code not in (None, 0):
            raise
    if header["mode"] == "stdin":
        return
    signal.signal(signal.SIGALRM, _on_alarm)
    values = []
    for i, expr in enumerate(header["exprs"]):
        try:
            signal.setitimer(signal.ITIMER_REAL, float(header["test_timeout"]))
            values.append(_serialise(_eval(_compile(expr, f"<expression {i}>", "eval"), namespace)))
        except _TestTimeout:
            values.append(_TIMED_OUT)
        except Exception:
            values.append(None)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    send(_dumps(values))


def _worker(header, status_fd, values_fd):
    os.close(status_fd)  # the supervisor's channel; the code never holds it

    def send(text, _write=os.write):  # bound now: patching os.write later changes nothing here
        _write(values_fd, text.encode() + b"\n")

    _isolate(header)
    if header["guard"]:
        _guard(os.getcwd())
    code = 0
    try:
        _run(header, send)
    except BaseException as e:  # the untrusted code failed: its exit status says so
        code = 1
        _say(sys.stderr, f"{type(e).__name__}: {e}\n")
    _say(sys.stdout, "")
    os._exit(code)


def _say(stream, text):
    try:
        stream.write(text)
        stream.flush()
    except BaseException:  # the code may have closed or replaced the stream
        pass


def _reap_all():
    """Kill and reap every descendant (orphans come to us, the subreaper), until none is left."""
    me = str(os.getpid())
    while True:
        children = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    stat = f.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if stat[1].decode() == me:  # field 4: parent pid
                children.append(int(pid))
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def main():
    header_fd, status_fd, values_fd = (int(a) for a in sys.argv[1:4])
    header = json.loads(_read_all(header_fd))
    libc = _libc()
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # /proc/<this pid>/fd is then closed to the worker
    os.write(status_fd, f"isolation {header['isolation']}\n".encode())
    pid = os.fork()
    if pid == 0:
        _worker(header, status_fd, values_fd)
    os.close(values_fd)
    _, status = os.waitpid(pid, 0)
    _reap_all()
    os.write(status_fd, f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
