"""Containing what rlvr runs but did not write: a model's Python program (`run_python`: bubblewrap, a fresh
interpreter, resource limits, an audit hook; `python.py` and its `_launcher.py`) and a call into code from
outside rlvr in this process (`call_with_deadline`, a SIGALRM timer). Used by the code reward
(`rlvr.rewards.code`), the `python` tool and the environments' steps (`rlvr.environments`), so the same
hostile program is contained the same way whichever way it arrives. Imports nothing of rlvr."""

from rlvr.sandbox.deadline import DeadlineExceeded, call_with_deadline, can_interrupt
from rlvr.sandbox.python import (ISOLATIONS, SandboxError, SandboxLimits, SandboxResult, describe_isolation,
                                 resolve_isolation, run_python)

__all__ = ["DeadlineExceeded", "ISOLATIONS", "SandboxError", "SandboxLimits", "SandboxResult", "call_with_deadline",
           "can_interrupt", "describe_isolation", "resolve_isolation", "run_python"]
