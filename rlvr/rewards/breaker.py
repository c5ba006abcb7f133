"""What bounds a reward's time beyond its per-sample timeout, for a run: one deadline for a whole batch
(`reward.step_timeout`) and a circuit breaker that stops the run when the reward keeps timing out
(`reward.max_timeouts_in_a_row`, `reward.max_timeout_share`). Without them a reward that hangs on every sample
costs `reward.timeout` per sample of every step (64 x 10 s) and the run trains on fallback scores.

`SafeReward` alone never stops anything (its limits default to off, as its contract is to never raise): a run
turns them on from its config (`TimeoutLimits.from_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config import RewardConfig


@dataclass(frozen=True)
class TimeoutLimits:
    """0 turns each off: `step` seconds for one batch's rewards, `in_a_row` samples timing out one after another,
    `share` of one batch timing out."""

    step: float = 0.0
    in_a_row: int = 0
    share: float = 0.0

    @classmethod
    def from_config(cls, reward: RewardConfig) -> "TimeoutLimits":
        return cls(reward.step_timeout, reward.max_timeouts_in_a_row, reward.max_timeout_share)


class RewardTimingOut(RuntimeError):
    """A reward kept timing out: the run stops (the CLI prints this one line, exit code 1); nothing of the step
    under way was trained, so the last checkpoint resumes it once the reward is fixed."""

    exit_code = 1


class Breaker:
    """Counts one reward's timeouts and trips (raises RewardTimingOut, naming the reward) past the limits."""

    def __init__(self, name: str, limits: TimeoutLimits, timeout: float | None) -> None:
        self.name, self.limits, self.timeout = name, limits, timeout
        self.in_a_row = 0  # samples that ran past their own timeout one after another, across batches

    def sample(self, timed_out: bool) -> None:
        """One sample's outcome, in the order they end: a timeout of its own (not a cut by the batch's deadline)
        lengthens the run of timeouts, any other outcome ends it."""
        self.in_a_row = self.in_a_row + 1 if timed_out else 0
        if self.limits.in_a_row and self.in_a_row >= self.limits.in_a_row:
            raise RewardTimingOut(f"reward {self.name!r} timed out on {self.in_a_row} samples in a row "
                                  f"(reward.timeout={self.timeout:g} s each, reward.max_timeouts_in_a_row="
                                  f"{self.limits.in_a_row}): it hangs, or is far slower than its timeout; test it on "
                                  f"a few samples (samples.jsonl), or raise reward.timeout if it is only slow. "
                                  f"{self._stopped}")

    def batch(self, timeouts: int, n: int) -> None:
        """A batch of `n` samples ended with `timeouts` of them timed out (their own timeout or the batch's)."""
        share = self.limits.share
        if share and n and timeouts >= share * n:
            limits = ", ".join([f"reward.timeout={self.timeout:g} s a sample"] * (self.timeout is not None)
                               + [f"reward.step_timeout={self.limits.step:g} s a batch"] * bool(self.limits.step))
            raise RewardTimingOut(f"reward {self.name!r} timed out on {timeouts} of a batch's {n} samples "
                                  f"({timeouts / n:.0%}, reward.max_timeout_share={share:g}; {limits}): the batch's "
                                  f"scores would be mostly fallbacks; make the reward faster or raise its limits. "
                                  f"{self._stopped}")

    _stopped = "The run stops; nothing of the step under way was trained (its last checkpoint is intact)"
