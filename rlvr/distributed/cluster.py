"""The Ray cluster a run uses: started here (`address: local`) or joined by address, and checked to hold
the roles' reservations before anything is placed or written (`rlvr.distributed.run.train_distributed`)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from typing import Any

from rlvr.config import Config, ConfigError
from rlvr.config.distributed import head_address

try:
    import ray
except ImportError:
    ray = None

log = logging.getLogger("rlvr.distributed")


def require_ray() -> Any:
    if ray is None:
        raise ConfigError("distributed.backend=ray needs Ray: pip install 'rlvr[ray]'")
    return ray


def start_ray(cfg: Config) -> bool:
    """Connect to (or start) the cluster of `distributed.address`; True when this call started it."""
    require_ray()
    if ray.is_initialized():
        return False
    address = cfg.distributed.address
    if address == "local":  # a new instance, even if one runs on this node (a killed driver's, `ray start`)
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
    else:
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except ConnectionError as err:  # nothing there: the key's value is what to fix
            hint = "start one with `ray start --head`" if address == "auto" else "is its head running and reachable?"
            raise ConfigError(f"distributed.address={address}: {str(err).splitlines()[0]} ({hint})") from None
    _exit_on_sigterm()
    return True


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A head at HOST:PORT (or ray://HOST:PORT) must answer before `ray.init`, which otherwise retries for
    minutes, printing its client's warnings. `auto` is resolved as Ray does (RAY_ADDRESS, then the last
    `ray start` on this node, which a killed head leaves behind); with nothing found Ray's own error says so."""
    target = _resolve_auto() if address == "auto" else address
    head = head_address(target)
    if head is None:
        return
    host, port = head
    try:
        socket.create_connection(head, timeout=timeout).close()
    except OSError as err:
        where = f"distributed.address={address}" + (f" (found: {target})" if target != address else "")
        raise ConfigError(f"{where}: nothing answers at {host}:{port} ({err.strerror or err}); is the Ray head "
                          f"running there (`ray start --head --port={port}`) and reachable from here?") from None


def _resolve_auto() -> str:
    try:
        from ray._private.services import get_ray_address_from_environment
        return get_ray_address_from_environment("auto", None) or ""
    except Exception:  # nothing found (ray.init says so), or another Ray version's internals
        return os.environ.get("RAY_ADDRESS", "")


def cpu_shares(learners: int, learner_cpus: float | None, workers: int, rollout_cpus: float | None,
               cluster_cpus: float) -> tuple[float, float]:
    """(CPUs per learner actor, CPUs per rollout actor): each share as set, or, left empty (None), the cluster's
    CPUs that the set shares leave, shared out evenly over the actors left, at most 1 each (an actor runs
    `threads` or 1 torch thread). ConfigError when the set shares leave nothing for the others."""
    unset = learners * (learner_cpus is None) + workers * (rollout_cpus is None)
    if not unset:  # a role without actors (colocated rollout) may leave its share empty
        return learner_cpus or 0.0, rollout_cpus or 0.0
    left = cluster_cpus - learners * (learner_cpus or 0.0) - workers * (rollout_cpus or 0.0)
    if left <= 1e-9:
        empty = " and ".join(key for key, value in (("learner_cpus", learner_cpus), ("rollout_cpus", rollout_cpus))
                             if value is None)
        raise ConfigError(f"distributed: the set CPU shares reserve all {cluster_cpus:g} CPUs of the Ray cluster, none "
                          f"is left for the actors of {empty}; lower the set shares or set {empty} too")
    share = min(1.0, left / unset)
    return (share if learner_cpus is None else learner_cpus), (share if rollout_cpus is None else rollout_cpus)


def role_cpus(cfg: Config) -> tuple[float, float]:
    """`cpu_shares` of this config on the Ray cluster this process joined."""
    d = cfg.distributed
    return cpu_shares(d.learners, d.learner_cpus, rollout_actors(cfg), d.rollout_cpus,
                      ray.cluster_resources().get("CPU", 0.0))


def rollout_actors(cfg: Config) -> int:
    """Rollout actors of their own: none where the learner ranks hold the engines (`distributed.colocate`)."""
    return 0 if cfg.distributed.colocate else cfg.distributed.rollout_workers


def check_resources(cfg: Config) -> None:
    """The roles' reservations fit the cluster's CPUs and GPUs: otherwise Ray would hold the actors that do
    not fit pending, and the run would wait for ever without a word. CPU shares left empty are taken from the
    cluster (`cpu_shares`: on a 2-core machine 1 learner and 2 rollout workers get 2/3 CPU each). A cluster this
    run started (`address: local`) cannot grow: one ConfigError line; a cluster joined by address may have an
    autoscaler: a warning."""
    d, actors = cfg.distributed, rollout_actors(cfg)
    cpus = dict(zip(("learner", "rollout"), role_cpus(cfg)))
    need = {"CPU": (d.learners * cpus["learner"], actors * cpus["rollout"], "cpus"),
            "GPU": (d.learners * d.learner_gpus, actors * d.rollout_gpus, "gpus")}
    have = ray.cluster_resources()
    for kind, (learners, workers, key) in need.items():
        if learners + workers > have.get(kind, 0.0) + 1e-9:
            each = {role: cpus[role] if kind == "CPU" else getattr(d, f"{role}_gpus") for role in cpus}
            message = (f"distributed: the roles reserve {learners + workers:g} {kind}s ({d.learners} learner(s) x "
                       f"learner_{key} {each['learner']:g} + {actors} rollout worker(s) x "
                       f"rollout_{key} {each['rollout']:g}) but the Ray cluster has "
                       f"{have.get(kind, 0.0):g}; lower distributed.learner_{key} / rollout_{key} (fractions such "
                       f"as 0.5 work) or run on a larger cluster")
            if d.address == "local":
                raise ConfigError(message)
            log.warning("%s (waiting for the cluster to grow)", message)


def _exit_on_sigterm() -> None:
    """ray.init makes a SIGTERM exit the driver with code 15; rlvr's runs exit with 128 + signal (143), as
    a driver killed by it and the loop's guard do. Before the loop (placing actors, loading models) and
    after it, SIGTERM still exits at once, through the callers' cleanup (`train_distributed` stops Ray)."""
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    except ValueError:  # not the main thread: leave signals to whoever owns them
        pass
