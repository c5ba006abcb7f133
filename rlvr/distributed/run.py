"""`rlvr train` with `distributed.backend: ray`: the same loop over roles placed on Ray actors."""

from __future__ import annotations

from rlvr.config import Config
from rlvr.distributed.cluster import check_resources, require_ray, start_ray
from rlvr.distributed.ray_roles import ray_roles, stop_roles
from rlvr.train.loop import RunResult, train
from rlvr.train.setup import prepare_run


def train_distributed(cfg: Config, resume: bool = False, or_start: bool = False) -> RunResult:
    """Start (or join) the Ray cluster, place the roles, run the loop; actors are stopped at the end,
    and Ray too when this call started it. `resume`, `or_start`: as `rlvr.train.loop.train`."""
    started = start_ray(cfg)
    run = None
    try:
        check_resources(cfg)  # before the run folder is written: a misfit waits for ever otherwise
        run = prepare_run(cfg, resume, or_start=or_start, build_roles=ray_roles)
        return train(cfg, resume, run=run)
    finally:
        if run is not None:
            stop_roles(run.learner, run.rollout)
        if started:
            require_ray().shutdown()
