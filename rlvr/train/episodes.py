"""What a run with an environment (`env.name`) adds to the Rollout role: the function that plays its episodes, the
first prompts its episodes open with (checked against the model's chat template and context before any work), and
its demonstration episodes for the SFT warm start."""

from __future__ import annotations

import functools
from typing import Any, Callable

from rlvr.config import Config, ConfigError
from rlvr.environments import environment_factory
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.chat import ChatRenderer, TemplateError
from rlvr.rollout.env_guard import check_messages
from rlvr.rollout.episode import EpisodeLimits, demonstration_episodes, run_episodes
from rlvr.tasks import Example, Task
from rlvr.train.evaluate import Episodes


def episode_player(cfg: Config, task: Task, engine: RolloutEngine) -> Episodes | None:
    """With `env.name`, the function that plays an environment's episodes (items, n, sampling) -> episodes, on
    `engine` (its `tokenizer` renders the messages); None without one."""
    if not cfg.env.name:
        return None
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        raise ConfigError(f"env.name={cfg.env.name}: rollout.engine={cfg.rollout.engine} has no tokenizer to render "
                          "episodes with (an engine that plays episodes keeps its tokenizer as `tokenizer`)")
    make_env, limits = _make_env(cfg, task)
    return functools.partial(run_episodes, engine, tokenizer, make_env, limits=limits)


def _make_env(cfg: Config, task: Task) -> tuple[Callable[[], Any], EpisodeLimits]:
    e = cfg.env
    return (environment_factory(e.name, e.options, task),
            EpisodeLimits(e.max_turns, e.max_tokens, e.max_observation_tokens, e.step_timeout, e.workers,
                          e.kv_cache_mb))


def first_prompts(cfg: Config, task: Task, examples: list[Example], tokenizer: Any) -> list[str]:
    """What the model first sees of each example: its prompt, or with `env.name` the environment's reset messages
    as the chat template renders them. ConfigError, naming env.name, when the template cannot render episodes
    (none, or one that rewrites earlier turns: probed on a two-turn conversation)."""
    if not cfg.env.name:
        return [ex.prompt for ex in examples]
    make_env, _ = _make_env(cfg, task)
    prompts, failed = [], None
    try:
        renderer = ChatRenderer(tokenizer, getattr(make_env(), "tools", None))
        for ex in examples:
            try:
                env = make_env()
                messages = check_messages(env, env.reset(ex), "reset()")
            except Exception as err:  # noqa: BLE001 - a reset that fails is contained (and counted) in the run
                failed = failed or err
                continue
            prompts.append(renderer.render(messages, generation_prompt=True))
            renderer.suffix_ids(messages, "1", None, [{"role": "user", "content": "2"}])
    except TemplateError as err:
        raise ConfigError(f"env.name={cfg.env.name}: {err}") from None
    if examples and not prompts:  # not one episode could start: the environment does not fit the task's items
        raise ConfigError(f"env.name={cfg.env.name}: reset() fails on every held-out item of task {cfg.task.name!r} "
                          f"({type(failed).__name__}: {failed})")
    return prompts


def demonstrations(cfg: Config, task: Task, tokenizer: Any) -> list[tuple[list[int], list[int], list[int]]]:
    """The SFT warm start's rows of a run with an environment, on `task.train_size` training items: its
    demonstration episodes, or one-turn episodes of the task's answers (prompt ids, ids, loss mask)."""
    make_env, limits = _make_env(cfg, task)
    return demonstration_episodes(tokenizer, make_env, task.train_examples(cfg.task.train_size, cfg.seed + 1),
                                  limits, cfg.seed + 1)
