"""A fast memory allocator for the `rlvr` command, set up by re-executing it with LD_PRELOAD.

Why: a training step frees and reallocates the same activation and gradient buffers every
micro-batch; glibc's malloc returns large blocks to the kernel and faults them back in each time.
tcmalloc keeps them: the update of a 20M model measured 1-10% faster with it and peak RSS 16% lower
(figures and the command in docs/performance.md). A library cannot swap the allocator of a process
that is already running, so the CLI re-executes itself once with the library preloaded, before any
heavy import.

    RLVR_ALLOCATOR=auto      (default) tcmalloc if installed, else glibc's malloc with a warning
    RLVR_ALLOCATOR=tcmalloc | jemalloc | mimalloc    that one; an error if it is not installed
    RLVR_ALLOCATOR=system    glibc's malloc, no re-exec, no warning

Linux only (LD_PRELOAD and /proc/self/maps); elsewhere nothing happens.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Mapping

CHOICE_VAR = "RLVR_ALLOCATOR"
GUARD_VAR = "RLVR_ALLOCATOR_REEXEC"  # set in the re-executed process, so it never re-executes again
STATUS_VAR = "RLVR_ALLOCATOR_STATUS"  # the line a run prints when it starts (rlvr.logging.progress)
LIBRARIES = {  # allocator -> shared objects, preferred first (Debian/Ubuntu package names in HINTS)
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
    "jemalloc": ("libjemalloc.so.2",),
    "mimalloc": ("libmimalloc.so.2",),
}
HINTS = {"tcmalloc": "libtcmalloc-minimal4", "jemalloc": "libjemalloc2", "mimalloc": "libmimalloc2.0"}
CHOICES = ("auto", *LIBRARIES, "system")
AUTO_ORDER = ("tcmalloc",)  # jemalloc and mimalloc measured slower on the update (docs/performance.md)
SEARCH_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
               "/usr/local/lib", "/lib/x86_64-linux-gnu")


class AllocatorError(ValueError):
    """A bad RLVR_ALLOCATOR value, or a named allocator that is not installed."""


def find_library(name: str, dirs: tuple[str, ...] = SEARCH_DIRS) -> str | None:
    """Path of the first installed shared object of allocator `name`, or None."""
    for filename in LIBRARIES[name]:
        for folder in dirs:
            path = Path(folder) / filename
            if path.is_file():
                return str(path)
    return None


def loaded_allocator(maps: str) -> str | None:
    """The allocator whose library appears in a /proc/<pid>/maps text, or None (glibc's malloc)."""
    for name, files in LIBRARIES.items():
        if any(f"/{filename.split('.so')[0]}.so" in maps for filename in files):
            return name
    return None


def plan(env: Mapping[str, str], loaded: str | None,
         find: Callable[[str], str | None]) -> tuple[dict[str, str] | None, str]:
    """Decide from the environment, the allocator already loaded and a library finder.

    Returns (environment to re-execute with, or None to go on in this process; the line to print
    when going on). Raises AllocatorError for a bad choice or a named allocator that is missing."""
    choice = env.get(CHOICE_VAR, "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise AllocatorError(f"{CHOICE_VAR}={env[CHOICE_VAR]!r} is not an allocator; choose from {list(CHOICES)}")
    if loaded is not None:
        return None, f"rlvr: allocator: {loaded}"
    if choice == "system":
        return None, f"rlvr: allocator: system malloc ({CHOICE_VAR}=system)"
    wanted = AUTO_ORDER if choice == "auto" else (choice,)
    if env.get(GUARD_VAR):  # we already re-executed and the library still is not mapped
        return None, (f"rlvr: warning: allocator: system malloc; preloading {env.get('LD_PRELOAD', '')!r} "
                      f"did not take effect (set {CHOICE_VAR}=system to silence this)")
    for name in wanted:
        path = find(name)
        if path is not None:
            preload = ":".join(p for p in (path, env.get("LD_PRELOAD", "")) if p)
            return {**env, "LD_PRELOAD": preload, GUARD_VAR: "1"}, ""
    if choice != "auto":
        raise AllocatorError(f"{CHOICE_VAR}={choice} but {LIBRARIES[choice][0]} is not installed in "
                             f"{', '.join(SEARCH_DIRS)}; install it with: apt-get install {HINTS[choice]}")
    return None, (f"rlvr: warning: allocator: system malloc, training is slower; install tcmalloc with "
                  f"`apt-get install {HINTS['tcmalloc']}` (or set {CHOICE_VAR}=system to silence this)")


def setup_allocator() -> None:
    """Re-execute this process with the chosen allocator preloaded, or print which one is active.

    Call first thing in the CLI's entry point: the re-exec replaces the process (argv as typed)."""
    maps = Path("/proc/self/maps")
    if not sys.platform.startswith("linux") or not maps.exists():
        return
    new_env, line = plan(os.environ, loaded_allocator(maps.read_text()), find_library)
    if new_env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, new_env)
    os.environ[STATUS_VAR] = line
