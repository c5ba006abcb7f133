"""Checks of registry names in a Config (task, advantage, loss, KL, aggregation, schedule, rewards),
so that a typo fails with one line before any model is loaded."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from rlvr import core
from rlvr.algorithms.objective import build_objective
from rlvr.config import Config, ConfigError, validate
from rlvr.environments import environment_factory
from rlvr.models import PRESETS, build_char_tokenizer, resolve_placement, tiny_config
from rlvr.rewards.safe import worker_problem
from rlvr.rollout.engines import check_engine
from rlvr.rewards.scoring import build_reward
from rlvr.models.tiny import ARCHS
from rlvr.tasks import TASKS, TaskOptionError
from rlvr.tasks.base import Example
from rlvr.data.stream import PROMPT_SAMPLERS, build_prompt_stream
from rlvr.train.family import check_family_options
from rlvr.train.preflight import run_task


def _check_name(key: str, name: str, lookup: Any) -> None:
    try:
        lookup(name)
    except (KeyError, ValueError) as err:
        raise ConfigError(f"{key}: {str(err).strip(chr(34) + chr(39))}") from None


def _check_member(key: str, name: str, registry: Any) -> None:
    if name not in registry:
        raise ConfigError(f"{key}: unknown name {name!r}; choose from {sorted(registry)}")


def check_model(cfg: Config) -> None:
    """The model section (device, dtype, attention, LoRA) and what today's RL loop can run."""
    placement = resolve_placement(cfg.model)
    if placement.dtype == torch.float16:
        # float16 gradients underflow without loss scaling (a GradScaler), which the update does not do
        raise ConfigError("model.dtype=float16: training has no loss scaling for float16 gradients; "
                          "use bfloat16 (or float32)")
    if cfg.model.lora.r > 0 and cfg.algorithm.ref_refresh_every:
        raise ConfigError("algorithm.ref_refresh_every needs model.lora.r=0: a LoRA policy's reference is its own "
                          "base with the adapters off, which a refresh cannot move")
    if cfg.model.lora.r > 0 and cfg.algorithm.advantage == "gae":
        raise ConfigError("model.lora.r > 0 with algorithm.advantage=gae: PPO's value model on a LoRA policy "
                          "is not supported; use a group advantage or model.lora.r=0")


def check_registries(cfg: Config) -> Config:
    """Raise ConfigError naming the key of the first unknown name or bad option; return cfg unchanged. The sections'
    own checks (ranges, choices, the rules within a section: `rlvr.config.validate`) run first, also for a Config
    built in Python rather than loaded."""
    validate(cfg)
    a = cfg.algorithm
    check_model(cfg)
    check_engine(cfg)  # rollout.engine: a registered engine, installed, that runs on model.device
    if a.advantage not in core.TOKEN_ADVANTAGES:
        _check_name("algorithm.advantage", a.advantage, core.get_advantage_fn)
    _check_name("algorithm.policy_loss", a.policy_loss, core.get_policy_loss)
    _check_name("algorithm.kl_estimator", a.kl_estimator, core.get_kl_estimator)
    if not cfg.model.path:
        _check_member("model.tiny_arch", cfg.model.tiny_arch, ARCHS)
        _check_member("model.tiny_preset", cfg.model.tiny_preset, PRESETS)
        known = [k for k in inspect.signature(tiny_config).parameters if k not in ("tokenizer", "arch")]
        if unknown := sorted(set(cfg.model.tiny_sizes) - set(known)):
            raise ConfigError(f"model.tiny_sizes: unknown {unknown}; choose from {known}")
        try:  # the sizes as the tiny model will be built
            tiny_config(build_char_tokenizer(), cfg.model.tiny_arch,
                        **{**PRESETS[cfg.model.tiny_preset], **cfg.model.tiny_sizes})
        except ValueError as err:
            raise ConfigError(f"model.tiny_sizes: {err}") from None
    _check_member("task.name", cfg.task.name, TASKS)
    try:
        build_objective(cfg)
    except ValueError as err:
        raise ConfigError(f"algorithm: {err}") from None
    try:
        task = run_task(cfg)
    except ConfigError:  # the model's tokenizer, which the task reads: named as model.path's
        raise
    except TaskOptionError as err:  # named as the user writes it: task.options.length
        raise ConfigError(f"task.options{'' if err.missing else '.' + err.key}: {err}") from None
    except (TypeError, ValueError) as err:
        raise ConfigError(f"task.options: {err}") from None
    except FileNotFoundError as err:  # the option that names the file, else the task that reads a shared one
        key = next((f"task.options.{k}" for k, v in cfg.task.options.items() if isinstance(v, str) and v
                    and v in str(err)), f"task.name={cfg.task.name}")
        raise ConfigError(f"{key}: {err}") from None
    try:
        reward = build_reward(task, cfg.task.rewards)  # reward.workers is checked below (workers start on use)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"task.rewards: {err}") from None
    for safe, _, name in reward.parts if cfg.reward.workers and cfg.reward.timeout else ():
        if problem := worker_problem(safe.fn):
            raise ConfigError(f"reward.workers={cfg.reward.workers}: reward {name!r} {problem}")
    check_environment(cfg, task)
    check_reward_budget(cfg)
    check_prompt_sampler(cfg, task)
    check_family_options(cfg)
    check_advantage_batch(cfg)
    return cfg


def check_environment(cfg: Config, task: Any) -> None:
    """env.name resolves and takes env.options (built once here), and nothing asks for what an environment's run
    does not do: its step rewards are the reward, so task.rewards terms would not be scored."""
    if not cfg.env.name:
        return
    try:
        environment_factory(cfg.env.name, cfg.env.options, task)
    except ValueError as err:
        raise ConfigError(f"env.options: {err}" if "option" in str(err) else f"env.name: {err}") from None
    if cfg.task.rewards:
        raise ConfigError(f"task.rewards: with env.name={cfg.env.name} the environment's step rewards are the reward, "
                          "so these terms would not be scored; remove them or shape the reward in the environment")


def check_reward_budget(cfg: Config) -> None:
    """Reward terms whose options depend on the run's settings, checked against them: overlong's cache_len must fit
    its max_len (default rollout.max_new_tokens), else every sample fails, and must be able to fire; kimi_length
    compares the lengths within a group (train.group_size >= 2) and must switch on within train.steps."""
    new, g, steps = cfg.rollout.max_new_tokens, cfg.train.group_size, cfg.train.steps
    for i, term in enumerate(cfg.task.rewards):
        opts, key = term.get("options", {}), f"task.rewards[{i}] {term['name']}"
        if term["name"] == "overlong":
            cache, max_len = opts["cache_len"], opts.get("max_len") or new
            budget = f"max_len={max_len}" if opts.get("max_len") else f"rollout.max_new_tokens={new}"
            if cache > max_len:  # DAPO eq. 13 ramps over the last cache_len of max_len tokens
                raise ConfigError(f"{key}: cache_len={cache} is larger than {budget}; lower cache_len to at most "
                                  f"{max_len}")
            if max_len - cache >= new:
                raise ConfigError(f"{key}: max_len={max_len} - cache_len={cache} leaves {max_len - cache} tokens "
                                  f"free, but rollout.max_new_tokens={new} stops sampling first, so no completion "
                                  "is ever penalised; lower max_len or raise cache_len")
        elif term["name"] == "kimi_length":
            if g < 2:  # one completion per group: min_len == max_len, every score 0
                raise ConfigError(f"{key}: compares lengths within a group, but train.group_size={g}; raise "
                                  "train.group_size to at least 2")
            if (start := opts.get("start_step", 0)) > steps:
                raise ConfigError(f"{key}: start_step={start} is after the last step (train.steps={steps}), so "
                                  "the term never switches on; lower start_step or raise train.steps")


def _fits(advantage: str, eps: float, n: int, group_size: int) -> bool:
    """Whether group estimator `advantage` accepts n rewards in groups of `group_size` (distinct stand-ins)."""
    try:
        core.get_advantage_fn(advantage, eps)(torch.arange(n, dtype=torch.float32), group_size)  # (N,)
    except ValueError:
        return False
    return True


def check_advantage_batch(cfg: Config) -> None:
    """The advantage tried on a stand-in batch of train.batch_size rewards in groups of train.group_size, so a
    group too small for it (grpo and rloo need >= 2) or a batch too small (whitened) fails here, before any
    work, not at step 1 after the run folder is written."""
    a, b, g = cfg.algorithm, cfg.train.batch_size, cfg.train.group_size
    if a.advantage in core.TOKEN_ADVANTAGES:
        if a.whiten_advantages and b < 2:  # core.masked_whiten: an unbiased variance needs 2 tokens
            raise ConfigError(f"train.batch_size={b}: algorithm.whiten_advantages whitens over the batch, which "
                              "needs at least 2 completions; raise train.batch_size or set "
                              "algorithm.whiten_advantages=false")
        return
    if _fits(a.advantage, a.advantage_eps, b, g):
        return
    fitting = [name for name in sorted(core.ADVANTAGES) if _fits(name, a.advantage_eps, b, g)]
    if not _fits(a.advantage, a.advantage_eps, 2 * g, g):  # fails whatever the batch: the group is too small
        raise ConfigError(f"train.group_size={g}: algorithm.advantage={a.advantage} needs groups of at least 2 "
                          f"completions to compare; raise train.group_size or choose one of {fitting}")
    raise ConfigError(f"train.batch_size={b}: algorithm.advantage={a.advantage} normalises over the batch, which "
                      f"needs at least 2 completions; raise train.batch_size or choose one of {fitting}")


def check_prompt_sampler(cfg: Config, task: Any) -> None:
    """task.prompt_sampler and its options, tried on a stand-in pool (a curriculum's difficulty field on a few
    real examples); every sampling round must find enough distinct prompts (a curriculum: in its first bucket)."""
    t, prompts = cfg.task, cfg.train.batch_size // cfg.train.group_size
    _check_member("task.prompt_sampler", t.prompt_sampler, PROMPT_SAMPLERS)
    options = dict(t.sampler_options)
    if t.prompt_sampler == "curriculum" and options.get("difficulty", "prompt_length") != "prompt_length":
        sample = task.train_examples(min(t.train_size, 4), cfg.seed)
        pool = [sample[i % len(sample)] for i in range(t.train_size)]
    else:
        pool = [Example("", "")] * t.train_size
    try:
        stream = build_prompt_stream(t.prompt_sampler, options, pool, cfg.seed)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"task.sampler_options of {t.prompt_sampler}: {err}") from None
    first = len(stream.sampler.buckets[0]) if t.prompt_sampler == "curriculum" else t.train_size
    if t.prompt_sampler != "uniform" and first < prompts:
        raise ConfigError(f"task.prompt_sampler {t.prompt_sampler!r} draws {prompts} distinct prompts per step "
                          f"(train.batch_size / group_size) but only {first} are available; raise task.train_size"
                          f"{' or lower n_buckets' if t.prompt_sampler == 'curriculum' else ''}")
