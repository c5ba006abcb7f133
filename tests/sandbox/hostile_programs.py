"""Hostile programs for the code sandbox: escapes, resource exhaustion and grade forgery.

Each case is graded against the tests of `f(x) = x + 1` (or its own) by `pass_fraction`. An
escape or forgery that worked would let the program go on to pass, so a case passes when its
score is 0 and the host check after it holds. Run as a script (`python hostile_programs.py`), it
prints the failures as JSON: the sandbox test runs it as an unprivileged user too.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from rlvr.rewards.code import pass_fraction  # noqa: E402
from rlvr.sandbox.python import SandboxLimits  # noqa: E402

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4, nproc=16, test_timeout=2)
SLACK = 10.0  # seconds beyond the wall-clock limit per run for start-up and clean-up on a busy machine (two xdist
# workers, Ray, load 70 on 2 cores: seconds of stall); what is bounded is a program that alone would never end
TESTS = {"tests": ["assert f(1) == 2", "assert f(5) == 6"]}
GOOD = "def f(x):\n    return x + 1\n"
WRONG = "def f(x):\n    return 0\n"


@dataclass
class Host:
    """What a case may touch on the host, made fresh for each run of the suite."""

    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    listener: socket.socket | None = None
    secret_file: str = ""
    secret: str = ""

    def __post_init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.listener.setblocking(False)
        self.secret = uuid.uuid4().hex
        fd, self.secret_file = tempfile.mkstemp(prefix="rlvr-secret-")
        os.write(fd, self.secret.encode())
        os.close(fd)
        os.chmod(self.secret_file, 0o644)

    @property
    def port(self) -> int:
        return self.listener.getsockname()[1]

    def nobody_connected(self) -> bool:
        try:
            self.listener.accept()[0].close()
            return False
        except BlockingIOError:
            return True

    def close(self) -> None:
        self.listener.close()
        os.remove(self.secret_file)


@dataclass(frozen=True)
class Case:
    name: str
    code: Callable[[Host], str]
    example: Callable[[Host], dict] = lambda h: TESTS
    host_ok: Callable[[Host], bool] = lambda h: True


def _leftovers(h: Host) -> bool:
    return not any(name.startswith(f"left-{h.token}") for name in os.listdir(tempfile.gettempdir()))


_FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
_THREADS = ("import threading, time\ndef spin():\n    while True:\n        time.sleep(0.01)\nfor _ in range(10000):\n"
            "    try:\n        threading.Thread(target=spin, daemon=True).start()\n    except Exception:\n        break\n")
_FDS = ("import os\nfds = []\nwhile True:\n    try:\n        fds.append(os.open('.', os.O_RDONLY))\n"
        "    except OSError:\n        break\nwhile True:\n    try:\n        os.pipe()\n    except OSError:\n        break\n")
_PROC_WALK = ("import os\ndef f(x):\n    for pid in os.listdir('/proc'):\n        try:\n"
              "            data = open(f'/proc/{pid}/environ').read()\n        except Exception:\n            continue\n"
              "        if 'RLVR_HOSTILE=' in data:\n            return x + 1\n    return 0\n")
_FORGE_LINES = ("import os\nfor fd in range(0, 64):\n    try:\n        os.write(fd, b'test 0 1\\ntest 1 1\\n[\"2\", \"6\"]\\n"
                "exit 0\\n')\n    except OSError:\n        pass\nprint('passed')\n")
_GC_REPORT = ("import gc, sys\nsys.modules['__main__'].__dict__.clear()\nfor o in gc.get_objects():\n"
              "    if callable(o) and getattr(o, '__name__', '') in ('send', 'report'):\n        o('[\"2\", \"6\"]')\n")
_CTYPES = ("import ctypes\nbuf = ctypes.string_at(id(object()), 1 << 20)\nimport os\n"
           "for fd in range(3, 40):\n    try:\n        os.write(fd, b'[\"2\"]\\n')\n    except OSError:\n        pass\n")
_EQ_ALL = "class A:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"

CASES = [
    # --- escape ---
    Case("connect to 127.0.0.1",
         lambda h: f"import socket\nsocket.create_connection(('127.0.0.1', {h.port}), timeout=1)\n" + GOOD,
         host_ok=Host.nobody_connected),
    Case("raw socket", lambda h: "import socket\ns = socket.socket()\n" + GOOD),
    Case("http request", lambda h: "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)\n"
         + GOOD),
    Case("write in host /tmp", lambda h: f"open('/tmp/left-{h.token}', 'w').write('x')\n" + GOOD,
         host_ok=lambda h: not os.path.exists(f"/tmp/left-{h.token}")),
    Case("write in /var/tmp", lambda h: f"import os\nos.close(os.open('/var/tmp/left-{h.token}', os.O_WRONLY | os.O_CREAT))\n"
         + GOOD, host_ok=lambda h: not os.path.exists(f"/var/tmp/left-{h.token}")),
    Case("delete a host file", lambda h: "import os\nos.remove('/etc/hostname')\n" + GOOD,
         host_ok=lambda h: os.path.exists("/etc/hostname")),
    Case("read a host file", lambda h: f"def f():\n    return open({h.secret_file!r}).read()\n",
         example=lambda h: {"tests": [f"assert f() == {h.secret!r}"]}),
    Case("read the repository", lambda h: f"def f():\n    return open({os.path.abspath(__file__)!r}).read()[:20]\n",
         example=lambda h: {"tests": [f"assert f() == {open(__file__).read()[:20]!r}"]}),
    Case("parent's environment", lambda h: "import os\ndef f(x):\n    return x + 1 if 'RLVR_HOSTILE' in os.environ else 0\n"),
    Case("parent's /proc environ", lambda h: "import os\ndef f(x):\n"
         "    return x + 1 if 'RLVR_HOSTILE=' in open(f'/proc/{os.getppid()}/environ').read() else 0\n"),
    Case("walk /proc environ", lambda h: _PROC_WALK),
    Case("kill its parent", lambda h: "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + GOOD),
    Case("kill the grader", lambda h: f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n" + GOOD),
    Case("kill everything", lambda h: "import os, signal\nos.kill(-1, signal.SIGKILL)\n" + GOOD),
    # --- resource exhaustion ---
    Case("infinite loop", lambda h: "while True:\n    pass\n" + GOOD),
    Case("hang inside a test", lambda h: "import time\ndef f(x):\n    while True:\n        time.sleep(1)\n"),
    Case("huge allocation", lambda h: "x = bytearray(1 << 34)\n" + GOOD),
    Case("growing memory", lambda h: "x = []\nwhile True:\n    x.append(bytearray(10**6))\n" + GOOD),
    Case("fork bomb", lambda h: _FORK_BOMB + GOOD, host_ok=_leftovers),
    Case("thread bomb", lambda h: _THREADS + "while True:\n    pass\n" + GOOD, host_ok=_leftovers),
    Case("fd bomb", lambda h: _FDS + "import time\ntime.sleep(60)\n" + GOOD, host_ok=_leftovers),
    Case("temp files left behind", lambda h: "import os, tempfile\nd = tempfile.mkdtemp()\n"
         f"open(os.path.join(d, 'x'), 'w').write('x')\nopen('/tmp/left-{h.token}', 'w').write('x')\n"
         "if os.fork() == 0:\n    import time\n    time.sleep(60)\n" + WRONG, host_ok=_leftovers),
    Case("disk filler", lambda h: "n = 0\ntry:\n    while True:\n        open(f'fill{n}', 'wb').write(b'x' * (1 << 20))\n"
         "        n += 1\nexcept OSError:\n    pass\n" + WRONG, host_ok=_leftovers),
    # --- grade forgery ---
    Case("reassign builtins.exec", lambda h: "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + WRONG),
    Case("reassign builtins.compile", lambda h: "import builtins\nbuiltins.compile = lambda *a, **k: compile('1', '', 'eval')\n"
         + WRONG),
    Case("reassign builtins.eval", lambda h: "import builtins\nbuiltins.eval = lambda *a, **k: True\n" + WRONG),
    Case("object equal to everything", lambda h: _EQ_ALL + "def f(x):\n    return A()\n"),
    Case("int equal to everything", lambda h: "class A(int):\n    def __eq__(self, other):\n        return True\n"
         "    __hash__ = int.__hash__\ndef f(x):\n    return A(0)\n"),
    Case("repr that lies", lambda h: "class A:\n    def __repr__(self):\n        return '2'\ndef f(x):\n    return A()\n"),
    Case("patched repr and json", lambda h: "import builtins, json\nbuiltins.repr = lambda o: '2'\n"
         "json.dumps = lambda *a, **k: '[\"2\"]'\n" + WRONG),
    Case("ctypes memory read", lambda h: _CTYPES + WRONG),
    Case("gc finds the reporter", lambda h: _GC_REPORT + WRONG),
    Case("fake result lines", lambda h: _FORGE_LINES + WRONG),
    Case("exit 0 early", lambda h: "import sys\nsys.exit(0)\n" + GOOD),
    Case("os._exit(0) early", lambda h: "import os\nos._exit(0)\n" + GOOD),
    Case("exit 0 from atexit", lambda h: "import atexit, os\natexit.register(lambda: os._exit(0))\nraise SystemExit(0)\n"),
    Case("stdout forgery", lambda h: "print('6')\nimport sys\nsys.exit(0)\n",
         example=lambda h: {"test_cases": [{"input": "5", "output": "7"}]}),
]


def run_case(case: Case, host: Host, isolation: str = "auto") -> str | None:
    """None when the case ended as it should, else what went wrong."""
    example = case.example(host)
    runs = len(example.get("tests", example.get("test_cases", [])))
    start = time.monotonic()
    score = pass_fraction(case.code(host), example, LIMITS, isolation)
    took = time.monotonic() - start
    if score != 0.0:
        return f"scored {score}"
    if took > runs * (LIMITS.wall_seconds + SLACK):
        return f"took {took:.1f}s"
    if not case.host_ok(host):
        return "host check failed"
    return None


# the cases a model could send through the `python` tool to reach the host, rather than to forge a grade
THROUGH_THE_TOOL = ("connect to 127.0.0.1", "write in host /tmp", "read a host file", "read the repository",
                    "parent's /proc environ", "kill its parent", "infinite loop", "fork bomb")
_CALL_F = "\nimport inspect as _i\ntry:\n    print(f() if not _i.signature(f).parameters else f(1))\n" \
          "except BaseException as _e:\n    print('raised', type(_e).__name__)\n"


def run_case_as_tool(case: Case, host: Host) -> str | None:
    """None when the case, sent through the `python` tool (its program, then a print of what f returns), came back
    as text in bounded time, printed nothing of the host's files and left the host as it was; else what went wrong."""
    from rlvr.environments.tools import ToolCall, get_tools, run_tool_call

    start = time.monotonic()
    out, _ = run_tool_call(ToolCall("python", {"code": case.code(host) + _CALL_F}), get_tools(["python"]))
    took = time.monotonic() - start
    with open(__file__) as f:
        secrets = (host.secret, f.read()[:20])
    if not isinstance(out, str) or any(secret in out for secret in secrets):
        return f"leaked: {out[:200]!r}"
    if took > 5 + SLACK:
        return f"took {took:.1f}s"
    return None if case.host_ok(host) else "host check failed"


def run_all(names: list[str] | None = None, isolation: str = "auto") -> dict[str, str]:
    os.environ["RLVR_HOSTILE"] = "1"
    host = Host()
    try:
        failures = {c.name: run_case(c, host, isolation) for c in CASES if names is None or c.name in names}
    finally:
        host.close()
    return {name: why for name, why in failures.items() if why is not None}


if __name__ == "__main__":
    print(json.dumps(run_all(isolation=sys.argv[1] if len(sys.argv) > 1 else "auto")))
