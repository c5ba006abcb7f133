"""The controller: prompts -> Rollout -> ScoredBatch -> Learner -> weights back to the Rollout.

One function, top to bottom, over the roles (`rlvr.train.rollout.Rollout`, `rlvr.train.learner.Learner`),
evaluation, the logger and checkpoints. What varies between algorithms is the Learner's business; the
loop never branches on the algorithm.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rlvr.config import Config
from rlvr.logging.plots import plot_metrics
from rlvr.logging.progress import TrainProgress
from rlvr.jsonl import read_jsonl
from rlvr.logging.sinks import METRICS, SAMPLES, TIMINGS
from rlvr.seeds import EVAL_SAMPLING, derive_seed
from rlvr.train.checkpoint import CHECKPOINTS, LATEST, save_checkpoint, step_folders
from rlvr.train.guard import CollapseRule, RunGuard
from rlvr.train.setup import Run, prepare_run


# what a run writes in its folder besides the models it builds (init_model, sft_model) and its final model
RUN_LOGS = ("config.yaml", METRICS, SAMPLES, TIMINGS, "tensorboard", "plots", CHECKPOINTS)


@dataclass
class RunResult:
    run_dir: Path
    first_eval: dict[str, float]  # held-out metrics before the first RL step (read back when resumed)
    final_eval: dict[str, float]  # held-out metrics after the last step
    steps: int


def _evaluate(run: Run, step: int, guard: RunGuard) -> dict[str, float]:
    metrics, rows = run.rollout.evaluate(run.eval_examples, derive_seed(run.cfg.seed, step, EVAL_SAMPLING))
    with guard.writing(run.run_dir / SAMPLES):
        run.logger.log_samples(step, rows)
    return metrics


def _floats(metrics: dict) -> dict[str, float]:
    return {k: v.item() if hasattr(v, "item") else v for k, v in metrics.items()}


def _logged_evals(records: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """(first, last) held-out metrics in a run folder's metrics.jsonl records: what a resumed run evaluated before."""
    evals = [{k: v for k, v in r.items() if k.startswith("eval/")} for r in records]
    evals = [e for e in evals if e]
    return (evals[0], evals[-1]) if evals else ({}, {})


def _log(run: Run, guard: RunGuard, step: int, record: dict[str, float], timings: dict[str, float]) -> None:
    with guard.writing(run.run_dir / METRICS):
        run.logger.log(step, record, timings)


def _plot(run: Run, guard: RunGuard) -> None:
    if run.cfg.log.plots:
        with guard.writing(run.run_dir / "plots"):
            plot_metrics(read_jsonl(run.run_dir / METRICS), run.run_dir / "plots")


def train(cfg: Config, resume: bool = False, run: Run | None = None, or_start: bool = False) -> RunResult:
    """Run (or resume) the RL loop described by `cfg`; returns the held-out metrics before and after.
    `or_start`: a resume of a folder without a checkpoint starts the run."""
    run = run or prepare_run(cfg, resume, or_start=or_start)
    rollout, learner = run.rollout, run.learner
    history = read_jsonl(run.run_dir / METRICS) if run.start_step else []  # what the resumed run logged before
    guard = RunGuard(run.run_dir, cfg.train.max_nonfinite_steps, CollapseRule.from_config(cfg, history))
    first_eval, last_eval = _logged_evals(history)
    label = cfg.algorithm.preset or cfg.algorithm.advantage  # what the bar names: kimi, ppo, ... or grpo, rloo
    with TrainProgress(cfg.train.steps, run.start_step, cfg.log.progress, description=label) as progress, \
            guard.signals():
        if run.start_step == 0:
            first_eval = last_eval = _evaluate(run, 0, guard)
            _log(run, guard, 0, first_eval, {})
            progress.update(0, first_eval)
        for step in range(run.start_step + 1, cfg.train.steps + 1):
            tic = time.perf_counter()
            # --- rollout + rewards: group_size scored samples per prompt ---
            batch = rollout.collect(step)
            t_rollout = time.perf_counter() - tic

            # --- update: advantages, then mu epochs x minibatches x micro-batches (NaN/inf steps skipped) ---
            update = learner.update(batch)
            t_update = time.perf_counter() - tic - t_rollout
            guard.after_update(step, update)
            record = {**_floats(batch.metrics()), **update}
            timings = {"s_per_step": time.perf_counter() - tic, "rollout_s": t_rollout, "update_s": t_update}

            # --- collapse: an update that broke the policy stops the run here, before a sync or a checkpoint ---
            collapsed = guard.collapsed(step, record)
            if collapsed is not None:  # its record and the curves show it
                _log(run, guard, step, record, timings)
                _plot(run, guard)
                raise collapsed

            # --- sync: the engine samples the next batch from the new weights ---
            rollout.load_weights(learner.named_weights())
            timings["sync_s"] = time.perf_counter() - tic - t_rollout - t_update
            timings["s_per_step"] = time.perf_counter() - tic

            # --- eval/log/checkpoint ---
            if run.throughput is not None:  # tokens/s, samples/s, memory, MFU (rlvr.logging.throughput)
                timings.update(run.throughput.measure([len(p) for p in batch.prompt_ids],
                                                      [len(c) for c in batch.completion_ids], timings))
            if step % max(cfg.eval.every, 1) == 0 and cfg.eval.every or step == cfg.train.steps:
                tic = time.perf_counter()
                last_eval = _evaluate(run, step, guard)
                record.update(last_eval)
                timings["eval_s"] = time.perf_counter() - tic
            _log(run, guard, step, record, timings)
            progress.update(step, {**record, **timings})
            for warning in guard.collapse_warnings(step, record):
                progress.warn(warning)
            if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == cfg.train.steps \
                    or guard.signal is not None:
                state = {**learner.state_dict(), "data": rollout.state_dict()}
                with guard.writing(run.run_dir / CHECKPOINTS):
                    save_checkpoint(run.run_dir, step, learner.policy, learner.tokenizer, state, cfg.checkpoint.keep)
            if guard.signal is not None:  # stopped by Ctrl-C/SIGTERM: the curves so far too
                _plot(run, guard)
            guard.stop_if_signalled(step)
    with guard.writing(run.run_dir / "final_model"):
        learner.save(run.run_dir / "final_model", run.run_dir / "final_adapter")
    _plot(run, guard)
    run.logger.close()
    return RunResult(run.run_dir, first_eval, last_eval, cfg.train.steps)


def train_to_end(cfg: Config, log=print, run_train=train) -> RunResult:
    """Bring the run folder `cfg.out_dir` to its last step whatever state an interruption left it in (a
    pipeline's own run: a recipe's RL stage, a `rlvr compare` variant; `rlvr train --resume-or-start`):
    started when empty, resumed from its latest checkpoint, not trained again when finished (the resume finds
    nothing left to do; a finished run whose checkpoints were deleted is left as it is). A run stopped before
    its first checkpoint (kill -9) has logs but nothing to resume from: its logs are cleared and the run
    started again (the models it built are reused when built from the same settings), which the seed makes
    draw the same steps. Step folders without `latest` are not "nothing": the preflight resumes from the newest
    intact one. `run_train`: `train`, or `rlvr.distributed.run.train_distributed`."""
    run_dir = Path(cfg.out_dir)
    if (run_dir / METRICS).exists() and not (run_dir / CHECKPOINTS / LATEST).is_file():
        if (run_dir / "final_model").is_dir():  # finished, its checkpoints deleted since: kept as it is
            return RunResult(run_dir, *_logged_evals(read_jsonl(run_dir / METRICS)), cfg.train.steps)
        if not step_folders(run_dir / CHECKPOINTS):  # step folders without `latest`: the preflight resumes
            log(f"{run_dir}: stopped before its first checkpoint; started again")
            for name in RUN_LOGS:
                path = run_dir / name
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    return run_train(cfg, resume=True, or_start=True)
