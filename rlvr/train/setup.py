"""Everything the loop needs, built from a validated Config: run folder, models, engine, optimizer,
data, sinks; on resume, restored from the latest checkpoint."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr.algorithms.grpo import GroupPolicyGradient
from rlvr.algorithms.sft import pairs_from_jsonl, pairs_from_task, train_sft
from rlvr.config import Config, ConfigError, save_config
from rlvr.logging.sinks import MetricsLogger
from rlvr.rewards import CombinedReward
from rlvr.models import load_model, load_policy, load_reference, load_tokenizer, make_tiny_model_dir, save_model
from rlvr.rollout.hf_engine import HFEngine
from rlvr.tasks import Example, Task, get_task
from rlvr.train.checkpoint import latest_checkpoint, load_state, set_rng_state
from rlvr.train import family
from rlvr.train.data import PromptStream, build_prompt_stream
from rlvr.train.evaluate import build_reward
from rlvr.train.optim import build_optimizer, build_scheduler


@dataclass
class Run:
    cfg: Config
    run_dir: Path
    task: Task
    reward: CombinedReward
    policy: Any
    tokenizer: Any
    engine: HFEngine
    reference: Any | None
    algo: GroupPolicyGradient
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    stream: PromptStream  # or SampledPromptStream (task.prompt_sampler)
    eval_examples: list[Example]
    logger: MetricsLogger
    start_step: int
    pad_id: int
    sampler: Any = None  # rlvr.algorithms.dynamic_sampling.RolloutSampler
    token_adv: Any = None  # rlvr.algorithms.ppo.TokenAdvantages for per-token advantages (gae, reinforce_pp)
    value_model: Any = None  # rlvr.algorithms.ppo.ValueModel, only for advantage gae


ROLLOUT, EVAL_SAMPLING, SHUFFLE = 0, 1, 2  # purposes of derived seeds


def derive_seed(seed: int, step: int, purpose: int) -> int:
    """A seed for (run seed, step, purpose): sampling at step k never depends on earlier steps, so a
    resumed run samples exactly what the uninterrupted one did."""
    return int(np.random.SeedSequence([seed, step, purpose]).generate_state(1)[0])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def optimizer_steps(cfg: Config) -> int:
    return cfg.train.steps * cfg.algorithm.mu * (cfg.train.batch_size // cfg.mini_batch_size)


def start_model(cfg: Config, run_dir: Path, task: Task, on_sft=None) -> Path:
    """The model RL starts from (and the KL reference): the configured folder or a tiny model built
    in the run folder, after the SFT warm start if configured. Each stage is saved once, so a resumed
    run reuses it instead of redoing it."""
    path = Path(cfg.model.path) if cfg.model.path else run_dir / "init_model"
    if not cfg.model.path and not (path / "config.json").is_file():
        make_tiny_model_dir(path, arch=cfg.model.tiny_arch, preset=cfg.model.tiny_preset, seed=cfg.seed,
                            **cfg.model.tiny_sizes)
    if cfg.sft.steps == 0:
        return path
    sft_dir = run_dir / "sft_model"
    if not (sft_dir / "config.json").is_file():
        model, tokenizer = load_model(path), load_tokenizer(path)
        pairs = pairs_from_jsonl(cfg.sft.data) if cfg.sft.data else pairs_from_task(task, cfg.task.train_size,
                                                                                   cfg.seed + 1)
        train_sft(model, tokenizer, pairs, cfg.sft.steps, cfg.sft.batch_size, cfg.sft.lr, cfg.seed, on_sft)
        save_model(model, tokenizer, sft_dir)
    return sft_dir


def prepare_run(cfg: Config, resume: bool = False, on_sft=None) -> Run:
    run_dir = Path(cfg.out_dir)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if not resume and (run_dir / "metrics.jsonl").exists():
        raise ConfigError(f"run folder {str(run_dir)!r} already holds a run; resume it with --resume "
                          f"{run_dir} or choose another out_dir")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seed_everything(cfg.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    task = get_task(cfg.task.name, **cfg.task.options)
    init = start_model(cfg, run_dir, task, on_sft)
    lora = cfg.model.lora.r > 0  # a LoRA checkpoint holds the adapters only: base from `init`
    policy_path = checkpoint / "model" if checkpoint and not lora else init
    policy = load_policy(cfg.model, policy_path, adapter=checkpoint / "model" if checkpoint and lora else None)
    tokenizer = load_tokenizer(checkpoint / "model" if checkpoint else init)
    algo = GroupPolicyGradient.from_config(cfg.algorithm, cfg.rollout.max_new_tokens)
    needs_reference = algo.needs_reference or cfg.algorithm.kl_reward_coef > 0
    reference = load_reference(cfg.model, policy, init) if needs_reference else None
    o = cfg.optim
    optimizer = build_optimizer(policy, o.lr, tuple(o.betas), o.eps, o.weight_decay)
    token_adv = family.token_advantages(cfg)
    value_model = family.value_model(cfg, token_adv, policy, init, optimizer)
    scheduler = build_scheduler(optimizer, o.schedule, o.warmup_steps, optimizer_steps(cfg), o.min_lr_ratio)
    stream = build_prompt_stream(cfg.task.prompt_sampler, cfg.task.sampler_options,
                                 task.train_examples(cfg.task.train_size, cfg.seed), cfg.seed)
    start_step = 0
    if checkpoint is not None:
        state = load_state(checkpoint)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        stream.load_state_dict(state["data"])
        if value_model is not None:
            value_model.load_state_dict(state["value_model"])
        set_rng_state(state["rng"])
        start_step = int(state["step"])
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    reward, engine = build_reward(task, cfg.task.rewards), HFEngine(policy, tokenizer)
    sampler = family.rollout_sampler(cfg, engine, stream, task, reward, ROLLOUT)
    return Run(cfg, run_dir, task, reward, policy, tokenizer, engine, reference,
               algo, optimizer, scheduler, stream, task.eval_examples(cfg.task.eval_size, cfg.task.eval_seed),
               MetricsLogger(run_dir, cfg.log.tensorboard, start_step if checkpoint else None), start_step, pad_id,
               sampler, token_adv, value_model)
