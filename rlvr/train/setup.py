"""The roles of a run, built from a validated Config: run folder, Learner, Rollout, evaluation set,
sinks; on resume, restored from the latest checkpoint."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Config, ConfigError, save_config, with_absolute_paths
from rlvr.logging.sinks import MetricsLogger
from rlvr.logging.throughput import ModelShape, Throughput, gpu_peak_tflops
from rlvr.logging.trackers import open_trackers
from rlvr.models import make_tiny_model_dir, resolve_placement
from rlvr.seeds import seed_everything
from rlvr.tasks import Example, Task, TooFewExamples
from rlvr.train.checkpoint import load_state, set_rng_state
from rlvr.train.learner import Learner
from rlvr.train.memory import check_learner_memory
from rlvr.train.preflight import check_context, model_config, model_path, plain, preflight, run_task, run_tokenizer
from rlvr.rollout.engines import build_engine
from rlvr.train.episodes import first_prompts
from rlvr.train.rollout import Rollout
from rlvr.train.validate import check_registries
from rlvr.train.warm_start import BUILT_WITH, warm_start


@dataclass
class Run:
    cfg: Config
    run_dir: Path
    task: Task
    learner: Learner
    rollout: Rollout
    eval_examples: list[Example]
    logger: MetricsLogger
    start_step: int
    throughput: Throughput | None = None  # the perf/ record of each step (timings.jsonl)


def held_out_examples(cfg: Config, task: Task) -> list[Example]:
    """The run's fixed held-out set; a task without task.eval_size distinct held-out examples is a
    ConfigError naming the key (a data file's own errors name the file)."""
    try:
        return task.eval_examples(cfg.task.eval_size, cfg.task.eval_seed)
    except TooFewExamples as err:
        raise ConfigError(f"task.eval_size={cfg.task.eval_size}: {err}") from None




def _reusable(path: Path, settings: dict) -> bool:
    """Whether the folder `path` holds a model this run built earlier from `settings` (a resume, or a start
    again after a failure). One built from other settings (a failed start's, re-run with a changed config) is
    removed, so it is built again rather than silently used; a folder without a record (an older rlvr) is kept."""
    if not (path / "config.json").is_file():
        return False
    record = path / BUILT_WITH
    if not record.is_file() or json.loads(record.read_text()) == settings:
        return True
    shutil.rmtree(path)
    return False


def start_model(cfg: Config, run_dir: Path, task: Task, on_sft=None, checkpointed: bool = False) -> Path:
    """The model RL starts from (and the KL reference): the configured folder or a tiny model built
    in the run folder, after the SFT warm start if configured (`rlvr.train.warm_start`; `checkpointed`:
    with checkpoints, resumed from them). Each stage is saved once, with the settings it was built from, so a
    resumed run reuses it instead of redoing it."""
    m = cfg.model
    tiny = {"tiny_arch": m.tiny_arch, "tiny_preset": m.tiny_preset, "tiny_sizes": m.tiny_sizes, "seed": cfg.seed}
    path = model_path(cfg) or run_dir / "init_model"
    if not m.path and not _reusable(path, plain(tiny)):
        make_tiny_model_dir(path, arch=m.tiny_arch, preset=m.tiny_preset, seed=cfg.seed, **m.tiny_sizes)
        (path / BUILT_WITH).write_text(json.dumps(plain(tiny)))
    if cfg.sft.steps == 0:
        return path
    sft_dir = run_dir / "sft_model"
    warm = plain({"model": m.path or tiny, "sft": asdict(cfg.sft), "seed": cfg.seed,
                  "task": {"name": cfg.task.name, "options": cfg.task.options, "train_size": cfg.task.train_size},
                  **({"env": asdict(cfg.env)} if cfg.env.name else {})})
    if not _reusable(sft_dir, warm):
        warm_start(cfg, run_dir, path, task, sft_dir, warm, on_sft, checkpointed)
    return sft_dir


def local_roles(cfg: Config, task: Task, policy_path: Path, init_path: Path) -> tuple[Learner, Rollout]:
    """Both roles in this process, the engine sampling from the Learner's own policy."""
    learner = Learner(cfg, policy_path, init_path)
    engine = build_engine(cfg, learner.policy, learner.tokenizer, init_path)
    if Path(policy_path) != Path(init_path):
        # resume: an engine holding its own copy (vLLM) starts from `init`: give it the checkpoint's policy
        # as every sync does (a LoRA checkpoint folder holds adapters only, so not the folder): the merged
        # weights, or to an engine serving LoRA itself (`serves_adapters`) the adapters alone
        engine.load_weights(learner.named_weights())
    return learner, Rollout(cfg, task, engine)


def prepare_run(cfg: Config, resume: bool = False, on_sft=None, or_start: bool = False,
                build_roles=local_roles) -> Run:
    """Check everything (config, files, checkpoint) and only then create the run folder and the roles.
    `build_roles(cfg, task, policy_path, init_path) -> (learner, rollout)` places the roles
    (`rlvr.distributed.ray_roles` puts them on Ray)."""
    check_registries(cfg)
    run_dir = Path(cfg.out_dir)
    checkpoint = preflight(cfg, resume, or_start)
    if checkpoint is None and (run_dir / "metrics.jsonl").exists():
        raise ConfigError(f"run folder {str(run_dir)!r} already holds a run; resume it with --resume {run_dir} "
                          f"(--resume-or-start also starts it again if it stopped before its first checkpoint), or "
                          f"choose another out_dir")
    task = run_task(cfg)
    eval_examples = held_out_examples(cfg, task)  # drawn before any work: a task may not have that many
    longest = check_context(cfg, first_prompts(cfg, task, eval_examples, run_tokenizer(cfg)))
    check_learner_memory(cfg, model_config(cfg), model_path(cfg), longest)  # a set-up that cannot fit: one line
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(with_absolute_paths(cfg), run_dir / "config.yaml")  # resumable from any folder
    init = start_model(cfg, run_dir, task, on_sft, checkpointed=True)
    learner, rollout = build_roles(cfg, task, checkpoint / "model" if checkpoint else init, init)
    start_step = 0
    if checkpoint is not None:
        state = load_state(checkpoint)
        learner.load_state_dict(state)
        rollout.load_state_dict(state["data"])
        set_rng_state(state["rng"])
        start_step = rollout.version = int(state["step"])
    resume_step = start_step if checkpoint else None
    trackers = open_trackers(cfg.log.report_to, run_dir, cfg.log.project, asdict(cfg), resume_step)
    logger = MetricsLogger(run_dir, resume_step, trackers)
    return Run(cfg, run_dir, task, learner, rollout, eval_examples, logger, start_step, throughput(cfg, init, learner))


def throughput(cfg: Config, model_dir: Path, learner: Any = None) -> Throughput:
    """The step's throughput meter: FLOPs from the start model's folder, MFU against log.peak_tflops or else the
    stated peak in model.dtype of the GPU the policy trains on (this process's, or under Ray the learners' as
    `learner.gpu_name()` tells) times the GPUs the run holds (`run_gpus`)."""
    device = resolve_placement(cfg.model).device
    cuda = device if device.type == "cuda" and cfg.distributed.backend == "none" else None
    ray = cfg.distributed.backend == "ray"
    name = torch.cuda.get_device_name(cuda) if cuda is not None else \
        getattr(learner, "gpu_name", lambda: None)() if ray else None
    per_gpu = gpu_peak_tflops(name, cfg.model.dtype) if name else None
    peak = cfg.log.peak_tflops or (per_gpu * run_gpus(cfg) if per_gpu else None)
    return Throughput(ModelShape.from_folder(model_dir), cfg.algorithm.mu, peak, cuda)


def run_gpus(cfg: Config) -> float:
    """GPUs a run computes on: one in one process; under Ray those its learners and rollout workers reserve
    (fractions sharing a GPU add up to it)."""
    d = cfg.distributed
    return 1.0 if d.backend == "none" else d.learners * d.learner_gpus + d.rollout_workers * d.rollout_gpus
