"""The code verifier and its sandbox. Every hostile program (`hostile_programs.py`) scores 0, ends
within its timeout and leaves this process and the host as they were, as root and as an
unprivileged user. The fork bomb runs last."""

import ast
import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import hostile_programs
from rlvr.sandbox import python as sandbox
from rlvr.rewards.base import RewardConfigError
from rlvr.rewards.code import CodeReward, extract_code, pass_fraction
from rlvr.sandbox.python import SandboxError, SandboxLimits, _live_pids_of, resolve_isolation, run_python

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4, nproc=16, test_timeout=2)
SLACK = 10.0  # seconds beyond the wall-clock limit for start-up and clean-up on a busy machine (two xdist workers,
# Ray, load 70 on 2 cores: seconds of stall); what is bounded is a program that alone would never end
TESTS = {"tests": ["assert f(1) == 2", "assert f(5) == 6"]}
GOOD = "def f(x):\n    return x + 1\n"


def score(code: str, example=TESTS, limits=LIMITS) -> float:
    start = time.monotonic()
    got = pass_fraction(code, example, limits)
    assert time.monotonic() - start < limits.wall_seconds * max(1, len(example.get("test_cases", [1]))) + SLACK
    return got


def test_fraction_of_assert_tests():
    half = "def f(x):\n    return 2 if x == 1 else 0\n"
    assert score(GOOD) == 1.0 and score(half) == 0.5
    assert score("def f(x):\n    return x + 1\n", {"tests": ["assert f(1) == 2", "assert f(2) == 4", "assert g()"]}) \
        == pytest.approx(1 / 3)
    assert score("syntax error (") == 0.0


def test_stdin_stdout_cases():
    code = "import sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums))  \n"
    cases = {"test_cases": [{"input": "1 2 3", "output": "6\n"}, {"input": "5", "output": "5"},
                            {"input": "1 1", "output": "3"}]}
    assert score(code, cases) == pytest.approx(2 / 3)
    assert score("import sys\nprint(6)\nsys.exit(0)\n", {"test_cases": [{"input": "", "output": "6"}]}) == 1.0


def test_code_extraction_and_batched_reward():
    completion = "Here:\n```python\ndef f(x):\n    return x + 1\n```\nDone."
    assert extract_code(completion) == GOOD
    reward = CodeReward(LIMITS, max_workers=2)
    batch = reward.score_batch(["p"] * 3, [completion, "def f(x): return 0", "while True: pass"], [TESTS] * 3)
    assert batch.scores == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="tests"):
        reward("p", GOOD, {"answer": "1"})


def test_environment_is_scrubbed_and_private():
    r = run_python("import json, os\nprint(json.dumps(sorted(os.environ)))\nprint(os.getcwd())", stdin="",
                   limits=LIMITS)
    assert r.exit_code == 0 and not r.timed_out
    names = json.loads(r.stdout.splitlines()[0])
    assert set(names) <= {"PATH", "HOME", "TMPDIR", "LANG", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                          "MKL_NUM_THREADS", "LC_CTYPE"}
    assert r.stdout.splitlines()[1] != os.getcwd()


# Not loaded before the code runs (heapq, fractions, ...) and loaded already (math, re, ...); `xml.etree` is a
# package imported fresh, the codec lookup imports from the already-loaded `encodings` package.
STDLIB = ("heapq", "fractions", "string", "decimal", "dataclasses", "statistics", "bisect", "json", "typing",
          "random", "math", "itertools", "functools", "collections", "re", "datetime", "array", "operator",
          "xml.etree.ElementTree")


@pytest.mark.parametrize("isolation", ["bwrap", "namespaces", "none"])
def test_correct_code_may_import_the_standard_library(isolation):
    """The per-run uid must reach the interpreter's library even where it lives under a folder it cannot
    traverse (pyenv under /root, 0700)."""
    try:
        resolve_isolation(isolation)
    except SandboxError:
        pytest.skip(f"isolation {isolation!r} is not available here")
    code = "".join(f"import {m}\n" for m in STDLIB) + "assert 'é'.encode('cp1252') == b'\\xe9'\n" + GOOD
    r = run_python(code, exprs=["f(1)"], limits=LIMITS, isolation=isolation)
    assert r.values == ["2"], r.stderr[-2000:]


# --- hostile programs ------------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_the_guard_refuses_a_descriptor_of_proc(isolation):
    """A user probe read other processes' command lines by open('1/cmdline', dir_fd=<a descriptor of /proc>), which
    the guard's check of /proc/<pid> paths never saw; bubblewrap's pid namespace held, isolation none has the guard."""
    code = ("import os\ndef f():\n    try:\n        fd = os.open('/proc', os.O_RDONLY)\n"
            "    except PermissionError as e:\n        return str(e)\n"
            "    return os.read(os.open('1/cmdline', os.O_RDONLY, dir_fd=fd), 100)\n")
    r = run_python(code, exprs=["f()"], limits=LIMITS, isolation=isolation)
    assert r.values and ast.literal_eval(r.values[0]) == "sandbox: may not open '/proc' this way", r.values


def test_inside_its_directory_is_fine():
    code = "open('notes.txt', 'w').write('ok')\nassert open('notes.txt').read() == 'ok'\n" + GOOD
    assert score(code) == 1.0


def test_the_network_is_out_of_reach_without_the_guard():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        # The OS layer alone (no audit hook): the code has its own empty network namespace
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n",
                       exprs=["1"], limits=LIMITS, guard=False)
        assert r.isolation == "bwrap" and r.values is None
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()


def test_killing_its_parent():
    me = os.getpid()
    assert score("import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)\n" + GOOD) == 0.0
    r = run_python(f"import os, signal\nos.kill({me}, signal.SIGKILL)\n", exprs=["1"], limits=LIMITS,
                   guard=False)  # the OS layer alone: our pid does not exist in its pid namespace
    assert r.values is None
    assert os.getpid() == me  # still here


@pytest.mark.parametrize("case", hostile_programs.CASES, ids=lambda c: c.name)
def test_hostile_program(case):
    host = hostile_programs.Host()
    try:
        assert hostile_programs.run_case(case, host) is None
    finally:
        host.close()


@pytest.mark.parametrize("name", hostile_programs.THROUGH_THE_TOOL)
def test_hostile_program_through_the_python_tool(name):
    """The `python` tool runs a model's program in the same sandbox as the code reward: a hostile program sent as a
    tool call is contained as one sent as an answer (a representative share of the cases above)."""
    host = hostile_programs.Host()
    try:
        assert hostile_programs.run_case_as_tool(next(c for c in hostile_programs.CASES if c.name == name), host) \
            is None
    finally:
        host.close()


@contextlib.contextmanager
def _traversable(paths):
    """The unprivileged uid must reach the checkout and the venv: a checkout in a private folder
    (`mktemp -d` is 0700) gets search permission (o+x, not read) on its folders for the test only."""
    changed = []
    for path in paths:
        for folder in Path(path).parents:
            mode = folder.stat().st_mode
            if not mode & stat.S_IXOTH and folder not in (f for f, _ in changed):
                changed.append((folder, mode))
                folder.chmod(mode | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed:
            folder.chmod(stat.S_IMODE(mode))


def test_hostile_programs_as_an_unprivileged_user():
    """CI runs as root; the same suite from an unprivileged uid (setpriv), where bubblewrap uses a
    user namespace instead of root's namespaces and uid drop."""
    if os.geteuid() != 0:
        assert hostile_programs.run_all() == {}
        return
    script = os.path.abspath(hostile_programs.__file__)
    with _traversable([script, sys.executable, os.path.realpath(sys.executable)]):
        out = subprocess.run([shutil.which("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups",
                              sys.executable, script], capture_output=True, text=True, timeout=600,
                             cwd="/tmp", env={"PATH": os.environ["PATH"], "HOME": "/tmp", "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {}


def test_no_isolation_is_refused_unless_asked_for(monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "_bwrap_works", lambda: False)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    with pytest.raises(SandboxError, match="install bubblewrap .* isolation: none"):
        resolve_isolation("auto")
    with pytest.raises(RewardConfigError, match="isolation: none"):
        CodeReward(LIMITS)
    assert resolve_isolation("none") == "none"
    with caplog.at_level("WARNING", logger="rlvr.rewards"):
        CodeReward(LIMITS, isolation="none")
    assert "NO isolation" in caplog.text
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 0)  # root without bubblewrap, asking for it by name
    with pytest.raises(SandboxError, match=r"isolation: namespaces \(no network; host files stay readable\) or none"):
        resolve_isolation("bwrap")
    with pytest.raises(ValueError, match="unknown sandbox isolation 'chroot'"):
        resolve_isolation("chroot")


def test_start_up_says_what_protects_the_host(caplog):
    with caplog.at_level("WARNING", logger="rlvr.rewards"):
        reward = CodeReward(LIMITS)
    assert reward.isolation == "bwrap"
    assert "code reward sandbox: bubblewrap" in caplog.text and "no network" in caplog.text
    if os.geteuid() == 0:
        assert "per-run unprivileged uid" in caplog.text


def test_namespaces_without_bubblewrap_keep_the_network_and_tmp_out():
    """Root's fallback when bubblewrap is missing; host files stay readable there (said at start-up)."""
    if os.geteuid() != 0:
        with pytest.raises(SandboxError):
            resolve_isolation("namespaces")
        return
    target = f"/tmp/rlvr-escape-{uuid.uuid4().hex}"
    host = hostile_programs.Host()
    try:
        r = run_python(f"open({target!r}, 'w').write('x')\nimport socket\n"
                       f"socket.create_connection(('127.0.0.1', {host.port}), timeout=1)\n", exprs=["1"],
                       limits=LIMITS, guard=False, isolation="namespaces")
        assert r.isolation == "namespaces" and r.values is None and not os.path.exists(target)
        assert host.nobody_connected()
    finally:
        host.close()
    assert "host files stay readable" in sandbox.describe_isolation("namespaces")


def test_fork_bomb_is_capped_and_leaves_nothing_behind():
    limits = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=3, nproc=16)
    counted = run_python("import os, time\nn = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
                         "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n"
                         "        os._exit(0)\n    n += 1\nprint(n)\n", stdin="", limits=limits)
    assert int(counted.stdout) < limits.nproc  # RLIMIT_NPROC holds (root would ignore it: we drop uid)
    if counted.uid is not None:
        assert _live_pids_of(counted.uid) == []
    start = time.monotonic()
    bomb = run_python("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
                      + GOOD, exprs=["f(1)"], limits=limits)
    assert time.monotonic() - start < limits.wall_seconds + SLACK
    assert bomb.values is None and (bomb.timed_out or bomb.exit_code != 0)
    if bomb.uid is not None:
        assert _live_pids_of(bomb.uid) == []
    os.kill(os.getpid(), 0)  # and we are alive
