"""The Rollout role: engine + reward + prompt sampler. `collect(step) -> ScoredBatch`,
`load_weights(named_tensors)`.

Everything a rollout worker needs is built here from the Config plus the policy weights it starts
from, so placing the role in a Ray actor or on another engine (`rlvr.rollout.engines`) changes where it runs, not
the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import torch

from rlvr.algorithms.dynamic_sampling import RolloutSampler
from rlvr.algorithms.partial import PartialSampler
from rlvr.config import Config, ConfigError
from rlvr.models import load_model, load_tokenizer, resolve_model, resolve_placement
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.engines import build_engine, engine_spec
from rlvr.rollout.episode import episode_metrics, model_tokens
from rlvr.rollout.parallel import DataParallelEngine
from rlvr.rollout.scored import ScoredBatch
from rlvr.rewards.breaker import TimeoutLimits
from rlvr.rewards.combine import CombinedReward
from rlvr.rewards.scoring import build_reward
from rlvr.seeds import ROLLOUT
from rlvr.tasks import Example, Task
from rlvr.data.stream import build_prompt_stream
from rlvr.train.episodes import episode_player
from rlvr.train.evaluate import evaluate_episodes, evaluate_heldout


def start_model(model: Any) -> Any:
    """What a run's start model means to a vLLM engine: a folder's architecture and tokenizer (one engine serves
    another folder of the same by loading its weights), else the tiny model's description or the hub name."""
    from rlvr.rollout.vllm_engine import folder_key  # reads files only; vllm itself is not imported

    path = resolve_model(model.path) if model.path else None
    if path is not None and (path / "config.json").exists():
        return folder_key(path)
    return (model.path, model.tiny_arch, model.tiny_preset, model.tiny_sizes)


def check_one_engine(configs: dict[str, Config], what: str, models: bool = True) -> None:
    """Runs that follow one another in one process (`what`s, label -> config in run order) share an engine that
    sleeps (`EngineSpec.sleeps`: vLLM's `shared_engine`), and on a GPU one engine with sleep mode is allowed per
    process: the runs that would sleep on a GPU must ask for the same engine, with the same settings, and a start
    model of the same architecture and tokenizer. ConfigError naming the first two that differ, before any run (else
    the later run would stop there, after the earlier ones trained). `models=False` leaves the start models out: a
    recipe's stages train one model in turn."""
    sleeping = {}
    for label, cfg in configs.items():
        spec = engine_spec(cfg)
        if spec.sleeps and cfg.rollout.enable_sleep_mode and resolve_placement(cfg.model).device.type == "cuda":
            settings = {"rollout.engine": spec.name, **(spec.settings(cfg) if spec.settings else {})}
            sleeping[label] = (settings, start_model(cfg.model))
    if not sleeping:
        return
    (first, (settings, model)), *rest = sleeping.items()
    for label, (other_settings, other_model) in rest:
        keys = ((["the start model's architecture or tokenizer"] if models and model != other_model else [])
                + [k for k in settings if settings[k] != other_settings.get(k)])
        if keys:
            raise ConfigError(f"{what}s {first!r} and {label!r} ask for different {settings['rollout.engine']} engines "
                              f"({', '.join(keys)}), and on a GPU it allows one engine with sleep mode per process; run "
                              f"them in processes of their own, or set rollout.enable_sleep_mode=false")


def inference_engine(cfg: Config, model_path: str | Path, max_batch_size: int | None = None) -> RolloutEngine:
    """An engine on the model folder alone, no trainer beside it (`rlvr eval`, `rlvr sft`'s held-out check):
    `build_engine`'s; one that samples from the policy module gets a float32 copy on model.device."""
    samples_policy = engine_spec(cfg).samples_policy
    policy = load_model(model_path, device=resolve_placement(cfg.model).device) if samples_policy else None
    return build_engine(cfg, policy, load_tokenizer(model_path), model_path, max_batch_size)


class Rollout:
    """Samples `train.group_size` completions (or an environment's episodes) per prompt, scores them and learns
    which prompts fail."""

    def __init__(self, cfg: Config, task: Task, engine: RolloutEngine) -> None:
        self.cfg, self.task = cfg, task
        # each generate call's groups in rollout.data_parallel parts (under Ray, spread over the rollout workers)
        self.engine = engine if cfg.rollout.data_parallel == 1 else DataParallelEngine(engine, cfg.rollout.data_parallel)
        self.stream = build_prompt_stream(cfg.task.prompt_sampler, cfg.task.sampler_options,
                                          task.train_examples(cfg.task.train_size, cfg.seed), cfg.seed)
        r, a, G = cfg.rollout, cfg.algorithm, cfg.train.group_size
        sampling = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                  max_new_tokens=r.max_new_tokens)
        self.reward = build_reward(task, cfg.task.rewards, cfg.reward.timeout, cfg.reward.workers,
                                   TimeoutLimits.from_config(cfg.reward))
        # held-out grading: the task's verifier alone, the same SafeReward (one set of reward workers)
        self.eval_reward = CombinedReward.single(self.reward.parts[0][0])
        self.play = episode_player(cfg, task, self.engine)
        if r.partial:  # segments of rollout.partial_tokens, unfinished samples carried to the next step
            self.sampler = PartialSampler(self.engine, self.stream, task, self.reward, sampling, G,
                                          cfg.train.batch_size // G, cfg.seed, ROLLOUT, r.segment_tokens)
        else:
            self.sampler = RolloutSampler(self.engine, self.stream, task, self.reward, sampling, G,
                                          cfg.train.batch_size // G, cfg.seed, ROLLOUT, a.dynamic_sampling,
                                          a.dynamic_sampling_rounds, a.dynamic_sampling_metric, self.play)
        self.version = 0

    def collect(self, step: int) -> ScoredBatch:
        """The step's batch: group_size scored samples per prompt, contiguous (DAPO refills flat groups)."""
        self.sampler.version = self.version  # what the tokens sampled now are tagged with
        rollout = self.sampler.sample(step)
        if hasattr(self.engine, "sleep"):  # vLLM on a GPU frees its KV cache for the update; wakes on use
            self.engine.sleep()
        completions, scores = rollout.completions, rollout.scores
        self.stream.update(rollout.examples, scores.correct)  # failure-rate sampling learns what fails
        episodes = self.play is not None
        versions = [c.extra["versions"] for c in completions] if "versions" in completions[0].extra else None
        return ScoredBatch(
            prompts=[c.prompt for c in completions], prompt_ids=[list(c.prompt_ids) for c in completions],
            completion_ids=[list(c.token_ids) for c in completions],
            sampler_logprobs=[model_tokens(c.logprobs, c.loss_mask) for c in completions],
            rewards=torch.tensor(scores.rewards, dtype=torch.float32), correct=list(scores.correct),
            finish_reasons=[c.finish_reason for c in completions], group_size=self.cfg.train.group_size, step=step,
            components=dict(scores.components),
            # the oldest weights any token was sampled from (partial rollouts carry tokens from earlier steps)
            version=min([self.version, *(min(v) for v in versions or [] if v)]), token_versions=versions,
            stats={**rollout.stats, **(episode_metrics(completions) if episodes else {})},
            sampler_entropies=None if any(c.entropies is None for c in completions) else
            [model_tokens(c.entropies, c.loss_mask) for c in completions],
            loss_masks=[list(c.loss_mask) for c in completions] if episodes else None)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Sample the next batch from these policy weights."""
        self.engine.load_weights(named_tensors)
        self.version += 1

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        """Held-out metrics and sample rows, sampled with `eval.*` settings from the current weights (an
        environment's episodes where there is one)."""
        cfg = self.cfg
        if self.play is not None:
            return evaluate_episodes(self.play, examples, cfg.rollout.max_new_tokens, cfg.eval.samples,
                                     cfg.eval.temperature, seed, cfg.log.samples_per_eval)
        return evaluate_heldout(self.engine, self.task, examples, cfg.rollout.max_new_tokens, cfg.eval.samples,
                                cfg.eval.temperature, seed, cfg.log.samples_per_eval, self.eval_reward)

    def state_dict(self) -> dict[str, Any]:
        """The prompt stream's position and, with partial rollouts, the samples carried to the next step."""
        carried = self.sampler.state_dict() if hasattr(self.sampler, "state_dict") else {}
        return {**self.stream.state_dict(), **carried}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state)
        if hasattr(self.sampler, "load_state_dict"):
            self.sampler.load_state_dict(state)
