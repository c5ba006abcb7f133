"""The Rollout role as Ray actors: N rollout workers (`rlvr.distributed.workers.RolloutWorker`) behind
`RayRollout`, a proxy with the role's methods, so the loop (`rlvr.train.loop.train`) runs unchanged. Ray does
placement, actor life cycle and restarts.

- Weights come from the learners (`rlvr.distributed.ray_learner`) through the object store: rank 0 returns them
  once as objects (one per bucket), every worker receives the same references. With
  `distributed.weight_sync: collective`, rank 0 broadcasts them instead to a torch.distributed group of its own
  with the workers (`rlvr.distributed.weight_sync`); a worker restarted by Ray is not in it, so from then on the
  weights go through the object store again (one logged line).
- Steps go to the rollout workers in turn; the prompt stream's state is chained from one request to
  the next (an object reference, resolved by Ray), so N workers draw exactly what one worker draws.
  With `rollout.data_parallel`, worker 0 draws and scores every step and spreads each call's parts over the
  others (`RemotePart`).
- `rollout.max_staleness: k` keeps the requests of steps t+1..t+k in flight while the learners
  update on step t; every batch carries the policy version it was sampled from.
- A rollout worker that dies is restarted by Ray (`max_restarts`), reloaded with the weights its
  requests were sampled from, and its requests are sent again: same seeds, same batches, none lost
  or counted twice.
- A checkpoint holds the batches already sampled for later steps, so an asynchronous run resumed
  (even after kill -9 of the driver) continues exactly as it would have.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlvr.config import Config
from rlvr.distributed.ray_learner import (CollectiveWeights, ColocatedWeights, LearnerFailed, RemoteWeights, _cause,
                                         _process_id)
from rlvr.distributed.workers import WrongWeights
from rlvr.rollout.scored import ScoredBatch
from rlvr.tasks import Example
from rlvr.train.guard import RunStopped, continue_hint

try:
    import ray
except ImportError:
    ray = None

log = logging.getLogger("rlvr.distributed")
RESTART_WAIT = 600.0  # seconds a worker that Ray is restarting may take to answer again (a busy machine is slow)
# what Ray answers for a worker it is restarting: unreachable for now, or killed by its memory monitor
RESTARTING = (ray.exceptions.ActorUnavailableError, ray.exceptions.OutOfMemoryError) if ray else ()


def _once_up(call: Callable[[], Any], pause: float) -> Any:
    """`call()` (a `ray.get` of an actor's answer), called again every `pause` seconds while Ray is restarting the
    actor (RESTARTING), for RESTART_WAIT seconds at most; then the last RESTARTING error is raised."""
    deadline = time.monotonic() + RESTART_WAIT
    while True:
        try:
            return call()
        except RESTARTING:
            if time.monotonic() > deadline:
                raise
            time.sleep(pause)


def _own_stop(err: Exception) -> Exception:
    """What an actor raised when its role stopped the run itself (an exception with an `exit_code`: a reward that
    keeps timing out), to be raised as itself: its one line, not Ray's traceback around it; else `err`."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(getattr(cause, "exit_code", None), int) else err


class RolloutFailed(RunStopped):
    """Rollout workers died more often than `distributed.max_restarts` allows; the run stops."""


@dataclass
class Relay:
    """Which weights the parts of a data-parallel call sample from: a policy version and the object references of
    its buckets (None: broadcast to every worker by the collective)."""

    version: int
    refs: list | None

    def buckets(self):
        """The buckets one at a time (fetched as they are loaded)."""
        for ref in self.refs:
            yield ray.get(ref)


class RemotePart:
    """Another rollout worker's engine as a part of the coordinating worker's `DataParallelEngine`
    (`rlvr.rollout.parallel.PartEngine`); `weights()` (set by the coordinator): the `Relay` to sample from. A part
    is the same whoever samples it and whenever (its seed and weights travel with it), so a part whose worker Ray
    is restarting is sent again once it is up (within RESTART_WAIT) instead of failing the step; a worker Ray
    reports dead for good fails the step, and the driver stops the run naming it (`RayRollout._back`)."""

    def __init__(self, actor: Any) -> None:
        self.actor, self.weights = actor, None

    def start(self, prompts: list, n: int, sampling: Any):
        args = (prompts, n, sampling, self.weights())
        sent = [self.actor.generate_part.remote(*args)]  # sampling starts now; a part lost to a restart is sent again
        return lambda: _once_up(lambda: ray.get(sent.pop() if sent else self.actor.generate_part.remote(*args)), 1.0)


@dataclass
class _Request:
    batch: Any  # ObjectRef of the ScoredBatch
    stream_after: Any  # ObjectRef of the prompt-stream state after this step
    stream_before: Any  # the state it was drawn from (ObjectRef or dict)
    weights: Any  # ObjectRefs of the buckets of the weights it samples from (None: restored from a checkpoint,
    # answered; CollectiveWeights: broadcast, held by the workers only)
    version: int  # policy version the worker must hold


class RayRollout:
    """`collect`, `load_weights`, `evaluate`, `state_dict` of the Rollout role over N rollout actors."""

    def __init__(self, cfg: Config, actors: list, weights: RemoteWeights) -> None:
        self.cfg, self.actors = cfg, actors
        self.staleness, self.last_step = cfg.rollout.max_staleness, cfg.train.steps
        self._pending: dict[int, _Request] = {}
        self._submitted = 0  # highest step requested
        self._stream = actors[0].stream_state.remote()  # state the next request draws from
        self._consumed = self._stream  # state after the last step handed to the loop
        self._weights, self._version = _held(weights), 0
        self.restarts = 0  # deaths of a worker that Ray restarted
        # data-parallel generation: worker 0 draws and scores every step, its engine spreads each call's parts over
        # the others (which take their weights from the parts); otherwise steps go to the workers in turn
        self.split = cfg.rollout.data_parallel > 1 and len(actors) > 1
        if self.split:
            ray.get(actors[0].set_peers.remote([RemotePart(actor) for actor in actors[1:]]))
        self._broadcast()
        self._processes = [self._answer(i) for i in range(len(actors))]  # each worker's process, new at a restart
        self._started()

    def _actor_for(self, step: int) -> Any:
        return self.actors[0] if self.split else self.actors[(step - 1) % len(self.actors)]

    def _started(self) -> None:
        """Wait until every worker is built (process, imports, model, engine) and holds its weights: the
        start-up belongs to setting the run up, not to the rollout time of its first step (a resumed run has no
        step-0 evaluation to absorb it; timings.jsonl and the doctor's throughput check read it as a slow step)."""
        while True:
            try:
                ray.get([actor.ready.remote() for actor in self.actors])
                return
            except ray.exceptions.RayActorError:
                for i in range(len(self.actors)):
                    self._back(i)

    def _answer(self, i: int) -> str:
        """The id of worker i's process, once it answers. A worker Ray is restarting (ActorUnavailableError, as
        long as that takes on a busy machine; OutOfMemoryError: Ray's memory monitor killed it) is waited for; one
        Ray reports dead for good (past its max_restarts, or its constructor failed) stops the run."""
        try:
            return _once_up(lambda: ray.get(self.actors[i].__ray_call__.remote(_process_id)), 0.2)
        except RESTARTING as err:
            raise self._failed(i, f"it did not come back within {RESTART_WAIT:g} s ({_cause(err)})") from None
        except ray.exceptions.RayActorError as err:
            raise self._failed(i, f"Ray reports it dead for good ({_cause(err)})") from None

    def _back(self, i: int) -> None:
        """After a failed request of worker i: wait until it answers again, and count a restart when it is
        another process (Ray restarted it after a death). A request that failed for any other reason (Ray could
        not reach a slow worker for a while) counts nothing: the request is simply sent again."""
        process = self._answer(i)
        if process != self._processes[i]:
            self._processes[i] = process
            self.restarts += 1
            log.warning("rlvr: rollout worker %d died and Ray restarted it (%d restart(s) of the workers so far; "
                        "distributed.max_restarts=%d per worker); its requests are sent again", i, self.restarts,
                        self.cfg.distributed.max_restarts)

    def _failed(self, i: int, why: str) -> RunStopped:
        if isinstance(self._weights, ColocatedWeights):  # the workers are learner ranks: Ray restarts none of them
            return LearnerFailed(f"learner rank {i} (colocated rollout) failed: {why}; the run stops. "
                                 f"{continue_hint(Path(self.cfg.out_dir))}")
        return RolloutFailed(f"rollout worker {i} failed: {why}; {self.restarts} restart(s) of the workers before "
                             f"(distributed.max_restarts={self.cfg.distributed.max_restarts} per worker); the run "
                             f"stops. {continue_hint(Path(self.cfg.out_dir))}")

    def _broadcast(self) -> None:
        if isinstance(self._weights, ColocatedWeights):  # the workers are the learner ranks: each loads its own
            self._weights.learner.sync_engines(self._version, Relay(self._version, None))
            return
        if isinstance(self._weights, CollectiveWeights) and self._broadcast_collective():
            return
        for actor in self.actors[:1] if self.split else self.actors:  # split: the peers load from the parts
            _load(actor, self._weights, self._version, self.split)

    def _broadcast_collective(self) -> bool:
        """Rank 0 -> every worker, once all are idle: requests sent earlier are answered first, so the
        broadcast waits for none of them and the group's timeout bounds the transfer alone. False: a
        worker is gone from the group, the object store takes over."""
        learner, sends = self._weights.learner, []
        try:
            if not all(ray.get([actor.ready.remote() for actor in self.actors])):
                self._fall_back("a rollout worker restarted by Ray is not in the weight-sync group")
                return False
            relay = Relay(self._version, None)
            receives = [actor.receive_weights.remote(self._version, relay) for actor in self.actors]
            sends = learner.send_weights()
            ray.get(receives)
        except ray.exceptions.RayActorError:
            self._fall_back("a rollout worker died during a weight sync")
            return False
        except ray.exceptions.RayTaskError:
            learner.wait(sends, "send_weights")  # a dead learner stops the run with its one line
            raise
        learner.wait(sends, "send_weights")
        return True

    def _fall_back(self, why: str) -> None:
        """The group lost a member and cannot be used again: the object store carries the weights from now
        on, starting with today's (rank 0 publishes them). Re-forming the group would need every member
        idle in a new rendezvous, which one more failure would hang; a resumed run forms it afresh."""
        log.warning("rlvr: %s; weights go to the rollout workers through Ray's object store for the rest of "
                    "the run (requests already sent are sampled again from the current weights)", why)
        self._weights = self._weights.learner.fall_back().refs

    def _submit(self, step: int, stream_before: Any, weights: Any, version: int) -> None:
        actor = self._actor_for(step)
        batch, after = actor.collect.options(num_returns=2).remote(step, stream_before, version)
        self._pending[step] = _Request(batch, after, stream_before, weights, version)

    def collect(self, step: int) -> ScoredBatch:
        """Step `step`'s batch; requests up to `max_staleness` later steps before waiting for it."""
        self._submitted = max(self._submitted, step - 1)
        while self._submitted < min(step + self.staleness, self.last_step):
            self._submitted += 1
            self._submit(self._submitted, self._stream, self._weights, self._version)
            self._stream = self._pending[self._submitted].stream_after
        batch = self._wait(step)
        self._consumed = self._pending.pop(step).stream_after
        return batch

    def _wait(self, step: int) -> ScoredBatch:
        while True:
            try:
                return ray.get(self._pending[step].batch)
            except (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError, WrongWeights):
                self._resubmit(step)
            except ray.exceptions.RayTaskError as err:
                raise _own_stop(err) from None

    def _resubmit(self, step: int) -> None:
        """`step`'s request failed (its worker died, or Ray could not reach it): once that worker answers
        again, request `step` and every later pending step again, each from the weights and stream state it was
        first requested with (broadcast weights: today's, now through the object store), then give the workers
        today's weights back."""
        if isinstance(self._weights, CollectiveWeights):
            self._fall_back("a rollout worker died")
        # split, worker 0 ran the step and the peers its parts: any of them may have died
        for i in range(len(self.actors)) if self.split else [(step - 1) % len(self.actors)]:
            self._back(i)
        stream = self._pending[step].stream_before
        for s in range(step, self._submitted + 1):
            old = self._pending[s]
            weights, version = ((self._weights, self._version) if isinstance(old.weights, CollectiveWeights)
                                else (old.weights, old.version))  # broadcast weights are held by no one now
            _load(self._actor_for(s), weights, version, self.split)
            self._submit(s, stream, weights, version)
            stream = self._pending[s].stream_after
        self._stream = stream
        self._broadcast()

    def load_weights(self, weights: RemoteWeights) -> None:
        """Every worker samples its next requests from these weights (one object, N readers; or one
        broadcast)."""
        self._weights = _held(weights)
        self._version += 1
        self._broadcast()

    @property
    def version(self) -> int:
        return self._version

    @version.setter
    def version(self, value: int) -> None:  # resume: the checkpoint's step
        self._version = value
        self._broadcast()

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        try:
            return ray.get(self.actors[0].evaluate.remote(examples, seed))
        except ray.exceptions.RayTaskError as err:
            raise _own_stop(err) from None

    def state_dict(self) -> dict[str, Any]:
        """The prompt stream after the last step the loop consumed and, asynchronous, the batches already
        sampled for the steps after it (waited for): a resume hands the loop the very batches, sampled
        from the very weights, that it would have had without the interruption."""
        state = dict(_value(self._consumed))
        if self._pending:
            state["prefetched"] = [{"batch": self._wait(s), "stream_after": ray.get(self._pending[s].stream_after)}
                                   for s in sorted(self._pending)]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The stream position, and the checkpoint's prefetched batches as requests already answered
        (as many as `max_staleness` still allows)."""
        state = dict(state)
        prefetched = state.pop("prefetched", [])[: self.staleness]
        self._stream = self._consumed = state
        for item in prefetched:
            batch = item["batch"]
            self._pending[batch.step] = _Request(ray.put(batch), ray.put(item["stream_after"]), self._stream, None,
                                                 batch.version)
            self._stream, self._submitted = self._pending[batch.step].stream_after, batch.step


def _held(weights: Any) -> Any:
    """What a request keeps of its weights: the object references of their buckets, or the collective's marker."""
    if isinstance(weights, RemoteWeights):
        return weights.refs
    return weights if isinstance(weights, (CollectiveWeights, ColocatedWeights)) else [ray.put(dict(weights))]


def _load(actor: Any, buckets: Any, version: int, relay: bool = False) -> None:
    """The worker loads the buckets in turn (Ray fetches each when its call runs: one at a time in the worker's
    memory); the last one sets the policy version and, `relay`, hands the bucket references on for its peers. None:
    a request restored from a checkpoint, already answered; ColocatedWeights: the ranks load their own
    (`_broadcast`)."""
    for i, bucket in enumerate(buckets if isinstance(buckets, list) else []):
        last = i == len(buckets) - 1
        actor.load_weights.remote(bucket, version if last else None, Relay(version, buckets) if relay and last else None)


def _value(state: Any) -> Any:
    return ray.get(state) if isinstance(state, ray.ObjectRef) else state
