"""Rollout workers on Ray: the same batches as one in-process Rollout, also across a killed worker."""

import gc
import os
import re
import time

import pytest

from ray_helpers import busy, cpu_hog, ray_sections, same_batch, tiny_config
from rlvr.config import load_config
from rlvr.distributed.cluster import start_ray
from rlvr.distributed.ray_learner import RemoteWeights
from rlvr.distributed.ray_rollout import RayRollout, RolloutFailed
from rlvr.distributed.workers import RolloutWorker
from rlvr.tasks import get_task
from rlvr.train.setup import local_roles

HOG_SECONDS = 20  # the hog's span: the kill and the restart's start (a new process importing torch) run beside it


@pytest.mark.parametrize("hog", [0, busy()], ids=["quiet", "beside_a_cpu_hog"])
def test_two_workers_equal_one_process_and_survive_a_kill(ray_cluster, tmp_path, warm_model, hog):
    """Two workers take the steps in turn; the prompt stream's state (failure-rate sampling: it learns
    from every batch) travels between them, weights change after every step. Worker 0 is killed
    after step 2: Ray restarts it, it gets its weights back, step 3 is requested again, and every
    batch is still exactly the one-process batch. Beside a CPU hog (every core busy twice over while the worker
    is killed and restarted) Ray takes far longer to restart the worker and answers the requests sent meanwhile
    with ActorUnavailableError, each of which counted as a restart: "rollout workers failed 7 times
    (distributed.max_restarts=3 per worker)". The one death is one restart, counted from the new process."""
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, train={"steps": 5, "batch_size": 16, "group_size": 4},
        task={"prompt_sampler": "failure_rate"}, distributed=ray_sections(rollout_workers=2)))
    assert not start_ray(cfg)  # joins the session's cluster
    learner, local = local_roles(cfg, get_task(cfg.task.name, **cfg.task.options), warm_model, warm_model)
    cls = ray_cluster.remote(RolloutWorker).options(num_cpus=0.5, max_restarts=2)
    workers = [cls.remote(cfg, warm_model) for _ in range(2)]
    remote = RayRollout(cfg, workers, RemoteWeights([ray_cluster.put(dict(learner.named_weights()))]))
    for step in range(1, 6):
        batch = local.collect(step)
        with cpu_hog(hog if step == 3 else 0, HOG_SECONDS):  # loaded while Ray restarts the worker
            if step == 3:
                ray_cluster.kill(workers[0], no_restart=False)
            same_batch(remote.collect(step), batch)
        learner.update(batch)
        weights = list(learner.named_weights())
        local.load_weights(weights)
        remote.load_weights(weights)
    assert remote.restarts == 1
    assert remote.state_dict() == local.state_dict()
    for worker in workers:
        ray_cluster.kill(worker)


@pytest.mark.parametrize("staleness, partial", [(0, False), (1, True)])
def test_a_step_split_over_two_workers_is_the_one_process_batch(ray_cluster, tmp_path, warm_model, staleness,
                                                                partial):
    """`rollout.data_parallel: 2` with two workers: worker 0 draws and scores each step, its engine samples one part
    and worker 1's the other, at the same time; every batch equals the one process's (one engine sampling both parts
    in turn), with the weights changing after every step and, asynchronous, each batch from the weights of its
    request. Worker 1 (a peer) is killed before step 3: Ray restarts it, the step is requested again and the peer
    takes its weights from the parts it is sent (a call to a restarting actor waits for it: no failure). With
    partial rollouts the samples carried between steps travel in the rollout's state from request to request."""
    partial_rollouts = {"partial": True, "partial_tokens": 3, "max_new_tokens": 10} if partial else {}
    cfg = load_config(None, [], base=tiny_config(
        tmp_path / "run", warm_model, train={"steps": 5, "batch_size": 16, "group_size": 4},
        rollout={"data_parallel": 2, "max_staleness": staleness, **partial_rollouts}, algorithm={"is_cap": 2.0},
        task={"prompt_sampler": "failure_rate"}, distributed=ray_sections(rollout_workers=2)))
    task = get_task(cfg.task.name, **cfg.task.options)
    learner, _ = local_roles(cfg, task, warm_model, warm_model)
    _, local = local_roles(cfg, task, warm_model, warm_model)  # its engine samples from a module of its own
    cls = ray_cluster.remote(RolloutWorker).options(num_cpus=0.5, max_restarts=2)
    workers = [cls.remote(cfg, warm_model) for _ in range(2)]
    history = [[(name, t.clone()) for name, t in learner.named_weights()]]  # the weights of each policy version
    remote = RayRollout(cfg, workers, RemoteWeights([ray_cluster.put(dict(history[0]))]))
    peer = lambda w: (w.rollout.engine.parts, os.getpid(), w.rollout.version)  # noqa: E731
    parts, pid, _ = ray_cluster.get(workers[1].__ray_call__.remote(peer))
    for step in range(1, 6):
        if step == 3:
            ray_cluster.kill(workers[1], no_restart=False)
        version = max(0, step - 1 - staleness)
        local.load_weights(history[version])
        local.version = version
        batch = local.collect(step)
        same_batch(remote.collect(step), batch)
        learner.update(batch)
        history.append([(name, t.clone()) for name, t in learner.named_weights()])
        remote.load_weights(history[-1])
    _, restarted, held = _when_up(ray_cluster, lambda: workers[1].__ray_call__.remote(peer))
    assert parts == 2 and restarted != pid and held == max(0, 4 - staleness)  # the last part's weights, relayed
    assert not partial or remote.state_dict()["partial_pool"] == local.state_dict()["partial_pool"]
    assert remote.restarts == 0  # the parts waited for the restarted worker: no step failed
    for worker in workers:
        ray_cluster.kill(worker)


def _when_up(ray, call, seconds: float = 300.0):
    """`call()`'s result once its actor is up (Ray restarts a killed one: its calls fail until then)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return ray.get(call())
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


@pytest.mark.parametrize("workers, killed", [(1, 0), (2, 1)], ids=["one_worker", "data_parallel_peer"])
def test_workers_dying_past_max_restarts_stop_the_run(ray_cluster, tmp_path, warm_model, workers, killed):
    """max_restarts=0: Ray does not restart the killed worker and reports it dead for good, and the run stops
    with one line that names the worker and the command to go on with (no checkpoint yet: --resume-or-start).
    With data-parallel generation the dead worker is a peer sampling parts of worker 0's steps: named alike."""
    split = {"rollout": {"data_parallel": 2}} if workers > 1 else {}
    cfg = load_config(None, [], base=tiny_config(tmp_path / "run", warm_model, **split,
                                                 distributed=ray_sections(max_restarts=0, rollout_workers=workers)))
    learner, _ = local_roles(cfg, get_task(cfg.task.name, **cfg.task.options), warm_model, warm_model)
    cls = ray_cluster.remote(RolloutWorker).options(num_cpus=0.5, max_restarts=0)
    actors = [cls.remote(cfg, warm_model) for _ in range(workers)]
    remote = RayRollout(cfg, actors, RemoteWeights([ray_cluster.put(dict(learner.named_weights()))]))
    ray_cluster.kill(actors[killed])
    with pytest.raises(RolloutFailed, match=rf"^rollout worker {killed} failed: Ray reports it dead for good "
                                            rf"\(ActorDiedError"
                                            rf".*\); 0 restart\(s\) of the workers before \(distributed.max_restarts=0 "
                                            rf"per worker\); the run stops\. .* --resume-or-start "
                                            rf"\({re.escape(str(tmp_path / 'run'))}\)$"):
        remote.collect(1)
    for actor in actors:
        ray_cluster.kill(actor)



def _slow_start_worker() -> type:
    """A rollout worker whose start-up (process, imports, model, engine) takes `seconds`; defined in a function so
    that Ray pickles it by value (its workers cannot import a test module)."""

    class SlowStart:
        def __init__(self, seconds: float) -> None:
            time.sleep(seconds)
            self.built = time.time()

        def built_at(self) -> float:
            return self.built

        def stream_state(self) -> dict:
            return {}

        def load_weights(self, weights: dict, version: int | None = None, relay=None) -> None:
            pass

        def ready(self) -> bool:
            return False

        def collect(self, step: int, stream_state: dict, version: int) -> tuple[int, dict]:
            return step, {}

    return SlowStart


def test_worker_start_up_is_not_the_first_steps_rollout_time(ray_cluster, tmp_path):
    """Before, the roles returned before the workers were built, so a resumed run (no step-0 evaluation to
    absorb it) counted ~11 s of actor start-up as its first step's rollout_s and the doctor saw a throughput
    drop."""
    cfg = load_config(None, [f"out_dir={tmp_path / 'run'}", "distributed.backend=ray"])
    tic = time.perf_counter()
    rollout = RayRollout(cfg, [ray_cluster.remote(_slow_start_worker()).options(num_cpus=0.1).remote(4.0)], {})
    returned_at, built = time.time(), time.perf_counter() - tic
    # the roles return once the worker is built (its constructor's end, by the same clock), not before: no wall-clock
    # bound on the first collect, which a busy machine may stretch
    assert built >= 4.0 and returned_at >= ray_cluster.get(rollout.actors[0].built_at.remote())
    assert rollout.collect(1) == 1
    ray_cluster.kill(rollout.actors[0])


def _stopping_worker() -> type:
    """A rollout worker whose reward keeps timing out (by value, as `_slow_start_worker`)."""
    from rlvr.rewards.breaker import RewardTimingOut

    class Stopping(_slow_start_worker()):
        def collect(self, step: int, stream_state: dict, version: int) -> tuple[int, dict]:
            raise RewardTimingOut("reward 'judge' timed out on 5 samples in a row")

        def evaluate(self, examples: list, seed: int) -> tuple[dict, list]:
            raise RewardTimingOut("reward 'judge' timed out on 4 of a batch's 4 samples")

    return Stopping


def test_a_worker_whose_reward_stops_the_run_stops_the_driver_with_its_own_line(ray_cluster, tmp_path):
    """The worker's RewardTimingOut reached the driver inside Ray's task error: the CLI printed Ray's traceback."""
    from rlvr.rewards.breaker import RewardTimingOut

    cfg = load_config(None, [f"out_dir={tmp_path / 'run'}", "distributed.backend=ray"])
    rollout = RayRollout(cfg, [ray_cluster.remote(_stopping_worker()).options(num_cpus=0.1).remote(0.0)], {})
    with pytest.raises(RewardTimingOut) as stopped:
        rollout.collect(1)
    assert str(stopped.value) == "reward 'judge' timed out on 5 samples in a row" and stopped.value.exit_code == 1
    with pytest.raises(RewardTimingOut, match="^reward 'judge' timed out on 4 of a batch's 4 samples$"):
        rollout.evaluate([], 0)
    ray_cluster.kill(rollout.actors[0])
    del rollout, stopped  # the failed request's other result, never read, is reported (a warning) here, not later
    gc.collect()
