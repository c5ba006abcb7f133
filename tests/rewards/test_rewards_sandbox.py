"""The code verifier and its sandbox. Every hostile program of issue 3 scores 0, ends within its
timeout and leaves this process and the host as they were. The fork bomb runs last."""

import json
import os
import socket
import time
import uuid

import pytest

from rlvr.rewards.code import CodeReward, extract_code, pass_fraction
from rlvr.rewards.sandbox import SandboxLimits, _live_pids_of, run_python

LIMITS = SandboxLimits(cpu_seconds=1, memory_mb=256, wall_seconds=4, nproc=16, test_timeout=2)
SLACK = 3.0  # seconds beyond the wall-clock limit for start-up and clean-up on a loaded machine
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
    assert r.done and r.exit_code == 0
    names = json.loads(r.stdout.splitlines()[0])
    assert set(names) <= {"PATH", "HOME", "TMPDIR", "LANG", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                          "MKL_NUM_THREADS", "LC_CTYPE"}
    assert r.stdout.splitlines()[1] != os.getcwd()


# --- hostile programs ------------------------------------------------------------------------------


def test_infinite_loop():
    assert score("while True:\n    pass\n" + GOOD) == 0.0
    assert score(GOOD + "import time\ndef g():\n    while True: time.sleep(1)\n",
                 {"tests": ["assert f(1) == 2 and g()"]}) == 0.0  # per-test alarm


def test_memory_bomb():
    assert score("x = bytearray(1 << 34)\n" + GOOD) == 0.0
    assert score("x = []\nwhile True:\n    x.append(bytearray(10**6))\n" + GOOD) == 0.0


def test_writing_outside_its_directory(tmp_path):
    targets = [tmp_path / "escaped.txt", f"/tmp/rlvr-escape-{uuid.uuid4().hex}", "/var/tmp/rlvr-escape"]
    for target in targets:
        code = f"open({str(target)!r}, 'w').write('x')\n" + GOOD
        assert score(code) == 0.0
        assert not os.path.exists(target)
    raw = f"import os\nfd = os.open({str(targets[1])!r}, os.O_WRONLY | os.O_CREAT)\n" + GOOD
    assert score(raw) == 0.0 and not os.path.exists(targets[1])
    assert score("import os\nos.remove('/etc/hostname')\n" + GOOD) == 0.0
    assert os.path.exists("/etc/hostname")


def test_inside_its_directory_is_fine():
    code = "open('notes.txt', 'w').write('ok')\nassert open('notes.txt').read() == 'ok'\n" + GOOD
    assert score(code) == 1.0


def test_opening_a_socket():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        for code in [f"import socket\nsocket.create_connection(('127.0.0.1', {port}))\n" + GOOD,
                     "import socket\ns = socket.socket()\n" + GOOD,
                     "import urllib.request\nurllib.request.urlopen('http://example.com')\n" + GOOD]:
            assert score(code) == 0.0
        # The OS layer alone (no audit hook): under root the code has its own empty network namespace
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\n",
                       tests=["assert True"], limits=LIMITS, guard=False)
        if os.geteuid() == 0:
            assert r.network == "namespace" and r.tests == {}
        else:
            assert r.network == "guard"
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()


def test_reading_the_parents_environment(monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLVR_TEST_SECRET", secret)
    check = {"tests": [f"assert f() == {secret!r}"]}
    via_env = "import os\ndef f():\n    return os.environ.get('RLVR_TEST_SECRET')\n"
    via_proc = ("import os\ndef f():\n    data = open(f'/proc/{os.getppid()}/environ').read()\n"
                "    return data.split('RLVR_TEST_SECRET=')[1].split('\\0')[0]\n")
    via_walk = ("import os\ndef f():\n    for pid in os.listdir('/proc'):\n        try:\n"
                "            data = open(f'/proc/{pid}/environ').read()\n        except Exception:\n"
                "            continue\n        if 'RLVR_TEST_SECRET=' in data:\n"
                "            return data.split('RLVR_TEST_SECRET=')[1].split('\\0')[0]\n")
    for code in (via_env, via_proc, via_walk):
        assert score(code, check) == 0.0


def test_killing_its_parent():
    me = os.getpid()
    for code in ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + GOOD,
                 f"import os, signal\nos.kill({me}, signal.SIGKILL)\n" + GOOD,
                 "import os, signal\nos.kill(-1, signal.SIGKILL)\n" + GOOD,
                 "import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)\n" + GOOD]:
        assert score(code) == 0.0
    if os.geteuid() == 0:  # the OS layer alone: another uid may not signal us
        r = run_python(f"import os, signal\nos.kill({me}, signal.SIGKILL)\n", tests=["assert True"],
                       limits=LIMITS, guard=False)
        assert r.tests == {}
    assert os.getpid() == me  # still here


def test_forged_verdicts_and_early_exits():
    fake = "import os, sys\nfor fd in range(3, 40):\n    try:\n        os.write(fd, b'x test 0 1\\ntest 1 1\\n')\n" \
           "    except OSError:\n        pass\nprint('test 0 1')\n"
    for code in [fake, "import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n",
                 "import atexit, os\natexit.register(lambda: os._exit(0))\nraise SystemExit(0)\n"]:
        assert score(code) == 0.0


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
                      + GOOD, tests=TESTS["tests"], limits=limits)
    assert time.monotonic() - start < limits.wall_seconds + SLACK
    assert bomb.tests == {} and (bomb.timed_out or bomb.exit_code != 0)
    if bomb.uid is not None:
        assert _live_pids_of(bomb.uid) == []
    os.kill(os.getpid(), 0)  # and we are alive
