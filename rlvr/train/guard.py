"""What keeps a run from harming itself: non-finite updates skipped and counted, a stop after too
many in a row, a stop at the step where an update broke the policy (collapse: `guard.*`), collapse
warnings while the run goes on, write errors turned into one line, and SIGINT/SIGTERM handled at the
next step boundary (with a checkpoint) instead of mid-write.

The controller (`rlvr.train.loop`) asks the guard at fixed points; the Learner only reports whether
its gradient was finite (`finite_step`) and how many weight tensors are not (`nonfinite_weights`)."""

from __future__ import annotations

import errno
import logging
import math
import shutil
import signal
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch
from torch import Tensor

from rlvr.config import Config, GuardConfig
from rlvr.report.collapse import (NONFINITE_WEIGHTS, collapse_signal, first_entropy, likely_cause, number,
                                  vocab_size)
from rlvr.report.doctor import RunLog, check_entropy, check_reward_collapse, check_spikes
from rlvr.train.checkpoint import (CHECKPOINTS, LATEST, WARM_START, latest_checkpoint, step_folders, step_number,
                                   write_atomic_text)
from rlvr.train.preflight import model_path

logger = logging.getLogger(__name__)

SKIPPED = "train/skipped_nonfinite"
COLLAPSE_CHECKS = (check_entropy, check_spikes, check_reward_collapse)  # the doctor's detectors, run live
REWARN_GAP = 50  # steps a finding must stay away before it is warned of again (a value on the bar flickers)


class RunStopped(RuntimeError):
    """The run stopped itself (non-finite steps, a write error); the last checkpoint is intact."""

    exit_code = 1


class Interrupted(RuntimeError):
    """SIGINT/SIGTERM: a checkpoint was written at the step boundary; exit code 128 + signal. `what`
    happened, and the command that continues (a pipeline around the run names its own)."""

    def __init__(self, what: str, signum: int, continue_with: str):
        super().__init__(f"{what}; continue with {continue_with}")
        self.what, self.signum, self.exit_code = what, signum, 128 + signum

    def continued_with(self, command: str) -> "Interrupted":
        return Interrupted(self.what, self.signum, command)


class StoppedAtOnce(KeyboardInterrupt):
    """A second SIGINT/SIGTERM: the run stopped at once, mid-step, without this step's checkpoint; `hint` says
    how to continue (a pipeline around the run names its own command). A KeyboardInterrupt: exit code 130."""

    def __init__(self, what: str, hint: str):
        super().__init__(f"{what}. {hint}")
        self.what = what

    def continued_with(self, command: str) -> "StoppedAtOnce":
        return StoppedAtOnce(self.what, f"Continue with {command}")


def continue_hint(run_dir: Path, failed: bool = True) -> str:
    """How to go on after the run stopped: resume from its checkpoint, or, with none yet (an actor that died
    while being set up, a second Ctrl-C before the first checkpoint), start it again; after a failure
    (`failed`), once its cause is fixed."""
    try:
        checkpointed = latest_checkpoint(run_dir) is not None or any(
            step_folders(Path(run_dir, *stage, CHECKPOINTS)) for stage in ((), (WARM_START,)))
    except FileNotFoundError:  # `latest` names a missing step: --resume says which earlier one is intact
        checkpointed = True
    if checkpointed:
        return f"Resume it from its last checkpoint: rlvr train --resume {run_dir}"
    return (f"It has no checkpoint yet: {'once the cause is fixed, ' * failed}start it again with --resume-or-start "
            f"({run_dir})")


def finite_step(losses: list[Tensor], norm: Tensor) -> bool:
    """Whether an optimizer step may be taken: every micro-batch loss and the gradient norm finite."""
    return bool(torch.isfinite(torch.stack([*losses, norm.reshape(())])).all())


def nonfinite_weights(params: Iterable[Tensor]) -> Tensor:
    """How many of `params` hold a NaN or inf after an update (0-dim; a sharded parameter counts its own shard).
    `finite_step` keeps NaN/inf gradients out, but a finite step can still overflow a weight (a huge optim.lr)."""
    local = [p.to_local() if hasattr(p, "to_local") else p for p in params]
    return torch.stack([~torch.isfinite(p.detach()).all() for p in local]).sum()


@dataclass
class CollapseRule:
    """`guard.*` applied to this run: its thresholds, the size of its policy's vocabulary, its optimizer settings
    (for the likely cause) and its first step's entropy (read back from metrics.jsonl when resumed)."""

    limits: GuardConfig
    vocab: int | None
    lr: float
    max_grad_norm: float
    first_entropy: float = math.nan

    @classmethod
    def from_config(cls, cfg: Config, history: list[dict[str, Any]]) -> "CollapseRule | None":
        """None when guard.collapse is off. `history`: the records a resumed run logged before."""
        if not cfg.guard.collapse:
            return None
        return cls(cfg.guard, vocab_size(cfg.out_dir, model_path(cfg)), cfg.optim.lr, cfg.optim.max_grad_norm,
                   first_entropy(history))


class RunGuard:
    """`max_nonfinite`: updates in a row with a skipped step before the run stops; `collapse`: when an update
    broke the policy (None: never stop for it)."""

    def __init__(self, run_dir: Path, max_nonfinite: int, collapse: CollapseRule | None = None):
        self.run_dir, self.max_nonfinite, self.collapse = Path(run_dir), max_nonfinite, collapse
        self.nonfinite_in_a_row = 0
        self.signal: int | None = None
        self._rows: list[dict[str, Any]] = []
        self._last_seen: dict[str, int] = {}  # finding title -> the last step it held at

    def after_update(self, step: int, metrics: dict[str, float]) -> None:
        """Count updates with skipped steps; raise RunStopped after `max_nonfinite` in a row."""
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if metrics.get(SKIPPED, 0) > 0 else 0
        if self.nonfinite_in_a_row >= self.max_nonfinite:
            raise RunStopped(f"step {step}: the loss or gradients were NaN/inf in {self.nonfinite_in_a_row} updates "
                             f"in a row (train.max_nonfinite_steps); nothing was applied, the last checkpoint in "
                             f"{self.run_dir / 'checkpoints'} is intact. Lower optim.lr, keep "
                             f"optim.max_grad_norm > 0, check the reward; `rlvr doctor {self.run_dir}` says more")

    def collapsed(self, step: int, record: dict[str, Any]) -> RunStopped | None:
        """The stop for a step whose record shows that an update broke the policy (`rlvr.report.collapse`), else
        None. Checkpoints of the broken weights (the update it blames and later) are removed first and `latest`
        put back on the newest one before them: a resume must not continue from noise."""
        rule = self.collapse
        if rule is None:
            return None
        if math.isnan(rule.first_entropy):
            rule.first_entropy = number(record.get("entropy"))
        found = collapse_signal({**record, "step": step}, rule.first_entropy, rule.vocab, rule.limits)
        if found is None:
            return None
        with self.writing(self.run_dir / CHECKPOINTS):
            kept = self._keep_checkpoints_before(found.culprit)
        return RunStopped(f"step {step}: policy collapse: {found.signal}; the update of step {found.culprit} broke "
                          f"the policy. Likely cause: {likely_cause(rule.lr, rule.max_grad_norm)}. {kept}. "
                          f"`rlvr doctor {self.run_dir}` says more; guard.collapse=false lets such a run go on")

    def _keep_checkpoints_before(self, culprit: int) -> str:
        """Remove the step folders of step `culprit` and later, `latest` first moved to the newest one before
        (or removed with none left); says what is kept, as a sentence."""
        root = self.run_dir / CHECKPOINTS
        folders = step_folders(root)
        bad = [p for p in folders if step_number(p.name) >= culprit]
        good = [p for p in folders if step_number(p.name) < culprit]
        if good:
            write_atomic_text(root / LATEST, good[0].name)
        elif bad:
            (root / LATEST).unlink(missing_ok=True)
        for folder in bad:
            shutil.rmtree(folder)
        if not bad:
            return f"The last good checkpoint, {root / good[0].name}, is kept" if good else \
                "No checkpoint was written before it"
        removed = f"The checkpoints of its weights ({', '.join(p.name for p in bad)}) were removed"
        if good:
            return f"{removed}; the last good one, {root / good[0].name}, is `latest`"
        return f"{removed}; none from before it is left: start the run again"

    def collapse_warnings(self, step: int, record: dict[str, Any]) -> list[str]:
        """The doctor's entropy, KL/gradient spike and reward-collapse findings that hold at `step` and held at the
        step before, each title once, and again only after it stayed away for `REWARN_GAP` steps. A one-step
        outlier the next step does not repeat (the demo's KL and importance ratio have several) is no reason to
        stop a run, and entropy on the threshold flickers across it; `rlvr doctor` lists every step range."""
        self._rows.append({"step": step, **{k: v for k, v in record.items() if isinstance(v, (int, float))}})
        log, lines = RunLog(self._rows, []), []
        current = {f.title: f for check in COLLAPSE_CHECKS for f in check(log) if {step - 1, step} <= set(f.steps)}
        for title, finding in current.items():
            if step - self._last_seen.get(title, -REWARN_GAP - 1) > REWARN_GAP:
                lines.append(f"step {step}: warning: {finding.title}: {finding.detail}; try: {finding.hint}")
            self._last_seen[title] = step
        return lines

    @contextmanager
    def writing(self, path: Path) -> Iterator[None]:
        """A failed write (disk full, read-only, quota) becomes RunStopped naming the path."""
        try:
            yield
        except (OSError, RuntimeError) as err:  # torch.save reports a full disk as a RuntimeError
            if isinstance(err, RunStopped):
                raise
            where = getattr(err, "filename", None) or path
            full = getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "write failed" in str(err) \
                or "No space left" in str(err)
            what = "no space left on device" if full else f"write error ({str(err).splitlines()[0]})"
            raise RunStopped(f"{what} while writing {where}; the last complete checkpoint in "
                             f"{self.run_dir / 'checkpoints'} is intact: free space and resume with "
                             f"`rlvr train --resume {self.run_dir}`") from err

    @contextmanager
    def signals(self) -> Iterator[None]:
        """SIGINT/SIGTERM set a flag the loop reads at the next step boundary; a second one stops at once
        (StoppedAtOnce, saying how to continue)."""
        def handle(signum: int, frame: Any) -> None:
            if self.signal is not None:
                raise StoppedAtOnce(f"{signal.Signals(signum).name} again: stopped at once, mid-step",
                                    continue_hint(self.run_dir, failed=False))
            self.signal = signum
            logger.warning("%s: writing a checkpoint at the end of this step, then stopping (again: stop now)",
                           signal.Signals(signum).name)

        try:
            previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: leave signals to whoever owns them
            previous = {}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def stop_if_signalled(self, step: int, what: str = "step") -> None:
        """Interrupted, when a signal came: its checkpoint at `what` `step` (an RL step, an SFT step) is written."""
        if self.signal is not None:
            name = signal.Signals(self.signal).name
            raise Interrupted(f"{name} at {what} {step}: checkpoint written in {self.run_dir}", self.signal,
                              f"`rlvr train --resume {self.run_dir}`")
