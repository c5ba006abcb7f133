import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.allocator import (CHOICE_VAR, GUARD_VAR, AllocatorError, find_library, loaded_allocator, plan)

ROOT = Path(__file__).resolve().parents[2]
TCMALLOC = "/opt/lib/libtcmalloc_minimal.so.4"


def finder(installed: dict[str, str]):
    return lambda name: installed.get(name)


def test_auto_reexecs_with_tcmalloc_preloaded_before_any_existing_preload():
    env = {"PATH": "/bin", "LD_PRELOAD": "/x/libfoo.so"}
    new_env, line = plan(env, None, finder({"tcmalloc": TCMALLOC, "jemalloc": "/opt/lib/libjemalloc.so.2"}))
    assert new_env == {"PATH": "/bin", "LD_PRELOAD": f"{TCMALLOC}:/x/libfoo.so", GUARD_VAR: "1"}
    assert line == "" and env == {"PATH": "/bin", "LD_PRELOAD": "/x/libfoo.so"}  # the input is not mutated
    assert plan({}, None, finder({"tcmalloc": TCMALLOC}))[0]["LD_PRELOAD"] == TCMALLOC


def test_an_active_allocator_is_reported_and_never_reexecuted():
    assert plan({GUARD_VAR: "1"}, "tcmalloc", finder({"tcmalloc": TCMALLOC})) == (None, "rlvr: allocator: tcmalloc")
    assert plan({}, "jemalloc", finder({})) == (None, "rlvr: allocator: jemalloc")


def test_guard_stops_a_second_reexec_when_the_preload_did_not_take():
    new_env, line = plan({GUARD_VAR: "1", "LD_PRELOAD": TCMALLOC}, None, finder({"tcmalloc": TCMALLOC}))
    assert new_env is None and "did not take effect" in line and TCMALLOC in line


def test_system_switches_it_off():
    new_env, line = plan({CHOICE_VAR: "system"}, None, finder({"tcmalloc": TCMALLOC}))
    assert new_env is None and line == f"rlvr: allocator: system malloc ({CHOICE_VAR}=system)"


def test_missing_library_warns_with_the_install_hint_under_auto_and_fails_when_named():
    new_env, line = plan({}, None, finder({"jemalloc": "/opt/lib/libjemalloc.so.2"}))  # auto tries tcmalloc only
    assert new_env is None and line.startswith("rlvr: warning:") and "apt-get install libtcmalloc-minimal4" in line
    with pytest.raises(AllocatorError, match="RLVR_ALLOCATOR=mimalloc but libmimalloc.so.2 is not installed"):
        plan({CHOICE_VAR: "mimalloc"}, None, finder({"tcmalloc": TCMALLOC}))
    new_env, _ = plan({CHOICE_VAR: "jemalloc"}, None, finder({"jemalloc": "/opt/lib/libjemalloc.so.2"}))
    assert new_env["LD_PRELOAD"] == "/opt/lib/libjemalloc.so.2"


def test_bad_choice_names_the_variable_and_the_choices():
    with pytest.raises(AllocatorError, match=r"RLVR_ALLOCATOR='tc' is not an allocator; choose from \['auto'"):
        plan({CHOICE_VAR: "tc"}, None, finder({}))


def test_loaded_allocator_reads_proc_maps():
    line = "7f00-7f01 r-xp 00000000 08:01 42 /usr/lib/x86_64-linux-gnu/{}\n"
    assert loaded_allocator(line.format("libtcmalloc_minimal.so.4.5.10")) == "tcmalloc"
    assert loaded_allocator(line.format("libjemalloc.so.2")) == "jemalloc"
    assert loaded_allocator(line.format("libc.so.6")) is None


def test_find_library_searches_the_given_folders(tmp_path):
    assert find_library("tcmalloc", (str(tmp_path),)) is None
    (tmp_path / "libtcmalloc.so.4").write_bytes(b"")
    assert find_library("tcmalloc", (str(tmp_path),)) == str(tmp_path / "libtcmalloc.so.4")
    (tmp_path / "libtcmalloc_minimal.so.4").write_bytes(b"")  # the minimal build is preferred
    assert find_library("tcmalloc", (str(tmp_path),)) == str(tmp_path / "libtcmalloc_minimal.so.4")


def run(argv: list[str], **env):
    base = {k: v for k, v in os.environ.items() if k not in (CHOICE_VAR, GUARD_VAR, "LD_PRELOAD")}
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT,
                          env={**base, "PYTHONPATH": str(ROOT), **env}, timeout=300)


# The real re-exec, without the CLI's heavy imports: the child prints its LD_PRELOAD.
SETUP = ["-c", "import os, sys; from rlvr.allocator import setup_allocator; setup_allocator(); "
               "print(os.environ['RLVR_ALLOCATOR_STATUS'], file=sys.stderr); print(os.environ.get('LD_PRELOAD', ''))"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD re-exec is Linux only")
def test_setup_reexecs_once_and_reports_the_allocator():
    out = run(SETUP)
    assert out.returncode == 0
    lines = out.stderr.splitlines()
    installed = find_library("tcmalloc")
    if installed is not None:
        assert lines == ["rlvr: allocator: tcmalloc"] and out.stdout.strip() == installed
    else:
        assert len(lines) == 1 and "apt-get install libtcmalloc-minimal4" in lines[0] and out.stdout.strip() == ""
    out = run(SETUP, RLVR_ALLOCATOR="system")
    assert out.stderr.splitlines() == ["rlvr: allocator: system malloc (RLVR_ALLOCATOR=system)"]
    assert out.returncode == 0 and out.stdout.strip() == ""  # no re-exec, nothing preloaded
    out = run(SETUP, RLVR_ALLOCATOR_REEXEC="1")  # as if the preload had failed: warn, no loop
    assert out.returncode == 0 and "did not take effect" in out.stderr and out.stdout.strip() == ""


def test_cli_rejects_a_bad_choice_in_one_line_with_exit_code_2():
    out = run(["-m", "rlvr.cli", "presets"], RLVR_ALLOCATOR="bogus")
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1
    assert "RLVR_ALLOCATOR='bogus' is not an allocator" in out.stderr
    out = run(["-m", "rlvr.cli", "--version"], RLVR_ALLOCATOR="bogus")  # help runs nothing: no allocator set up
    assert out.returncode == 0 and out.stdout.startswith("rlvr ") and out.stderr == ""
