"""The Rollout role: engine + reward + prompt sampler. `collect(step) -> ScoredBatch`,
`load_weights(named_tensors)`.

Everything a rollout worker needs is built here from the Config plus the policy weights it starts
from, so placing the role in a Ray actor or on a vLLM engine changes `build_engine`, not the loop.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Iterable

import torch

from rlvr.algorithms.dynamic_sampling import RolloutSampler
from rlvr.config import Config, ConfigError
from rlvr.models import load_model, load_tokenizer, resolve_model, resolve_placement
from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.sampling import SCORED_LOGPROBS
from rlvr.rollout.scored import ScoredBatch
from rlvr.rewards.breaker import TimeoutLimits
from rlvr.rewards.combine import CombinedReward
from rlvr.rewards.scoring import build_reward
from rlvr.seeds import ROLLOUT
from rlvr.tasks import Example, Task
from rlvr.data.stream import build_prompt_stream
from rlvr.train.evaluate import evaluate_heldout


def engine_name(cfg: Config) -> str:
    """`rollout.engine` with `auto` resolved: vLLM where it is installed and the model is on a GPU (the
    fastest engine there), rlvr's HF engine otherwise."""
    if cfg.rollout.engine != "auto":
        return cfg.rollout.engine
    on_gpu = resolve_placement(cfg.model).device.type == "cuda"
    return "vllm" if on_gpu and importlib.util.find_spec("vllm") is not None else "hf"


def sampler_is_policy(cfg: Config) -> bool:
    """Whether what the engine reports of each sampled token (its log-prob under the processed distribution, the
    entropy there: `SCORED_LOGPROBS`) is what the training forward computes at the sampling weights: rlvr's
    in-process engine runs the policy module itself, and in float32 only kernel rounding (cached vs full
    attention) differs. `train.old_logprobs: recompute` turns the stand-ins off."""
    return cfg.train.old_logprobs == "auto" and engine_name(cfg) == "hf" and cfg.model.dtype == "float32"


def serves_adapters(cfg: Config) -> bool:
    """Whether the engine applies the LoRA adapters itself (vLLM LoRA, `rollout.vllm_lora`), so that a
    weight sync carries the adapter tensors only, instead of the merged weights."""
    return cfg.model.lora.r > 0 and engine_name(cfg) == "vllm" and cfg.rollout.vllm_lora != "merge"


def build_engine(cfg: Config, policy: Any, tokenizer: Any, model_path: str | Path,
                 max_batch_size: int | None = None) -> RolloutEngine:
    """The one place an engine is chosen from the config.

    `hf`: rlvr's sampler on the policy module itself, on the policy's device (no copy of the weights),
    computing in `model.dtype`, at most `max_batch_size` sequences at once (None: all).
    `vllm`: a vLLM engine in this process, built from the Hugging Face folder `model_path` (the run's
    start model) in the policy's dtype; the loop's `load_weights` after every step keeps it current
    (with a LoRA policy, by default as adapters that vLLM applies itself: `serves_adapters`).
    """
    placement = resolve_placement(cfg.model)
    if engine_name(cfg) == "hf":
        return HFEngine(policy, tokenizer, device=placement.device, max_batch_size=max_batch_size,
                        autocast=placement.dtype, entropies=sampler_is_policy(cfg), logprobs_mode=SCORED_LOGPROBS)
    from rlvr.rollout.vllm_engine import shared_engine  # the optional extra, imported only when asked for

    # the process's one engine (vLLM allows one with sleep mode per process on a GPU), reset to model_path
    return shared_engine(model_path, **vllm_settings(cfg))


def vllm_settings(cfg: Config) -> dict[str, Any]:
    """The vLLM engine's arguments for this config, besides its model folder."""
    r, lora = cfg.rollout, cfg.model.lora
    adapter = ({"r": lora.r, "lora_alpha": lora.alpha, "target_modules": list(lora.target_modules)}
               if serves_adapters(cfg) else None)
    return dict(dtype=cfg.model.dtype, logprobs_mode=SCORED_LOGPROBS, gpu_memory_utilization=r.gpu_memory_utilization,
                enable_prefix_caching=r.enable_prefix_caching, enable_sleep_mode=r.enable_sleep_mode, seed=cfg.seed,
                lora_adapter=adapter,
                # CUDA graphs pay off on a GPU; on a CPU, compiling costs more start-up than it saves
                enforce_eager=resolve_placement(cfg.model).device.type == "cpu")


def start_model(model: Any) -> Any:
    """What a run's start model means to a vLLM engine: a folder's architecture and tokenizer (one engine serves
    another folder of the same by loading its weights), else the tiny model's description or the hub name."""
    from rlvr.rollout.vllm_engine import folder_key  # reads files only; vllm itself is not imported

    path = resolve_model(model.path) if model.path else None
    if path is not None and (path / "config.json").exists():
        return folder_key(path)
    return (model.path, model.tiny_arch, model.tiny_preset, model.tiny_sizes)


def check_one_vllm_engine(configs: dict[str, Config], what: str, models: bool = True) -> None:
    """Runs that follow one another in one process (`what`s, label -> config in run order) share one vLLM engine
    (`shared_engine`), and on a GPU vLLM allows one engine with sleep mode per process: the runs that would sleep
    on a GPU must ask for the same engine settings and a start model of the same architecture and tokenizer.
    ConfigError naming the first two that differ, before any run (else the later run would stop there, after the
    earlier ones trained). `models=False` leaves the start models out: a recipe's stages train one model in turn."""
    sleeping = {label: (vllm_settings(cfg), start_model(cfg.model))
                for label, cfg in configs.items()
                if engine_name(cfg) == "vllm" and cfg.rollout.enable_sleep_mode
                and resolve_placement(cfg.model).device.type == "cuda"}
    if not sleeping:
        return
    (first, (settings, model)), *rest = sleeping.items()
    for label, (other_settings, other_model) in rest:
        keys = ((["the start model's architecture or tokenizer"] if models and model != other_model else [])
                + [k for k in settings if settings[k] != other_settings[k]])
        if keys:
            raise ConfigError(f"{what}s {first!r} and {label!r} ask for different vLLM engines ({', '.join(keys)}), "
                              f"and on a GPU vLLM allows one engine with sleep mode per process; run them in "
                              f"processes of their own, or set rollout.enable_sleep_mode=false")


def inference_engine(cfg: Config, model_path: str | Path, max_batch_size: int | None = None) -> RolloutEngine:
    """An engine on the model folder alone, no trainer beside it (`rlvr eval`, `rlvr sft`'s held-out check):
    `build_engine`'s, rlvr's on a float32 copy on model.device computing in model.dtype, or vLLM's."""
    policy = load_model(model_path, device=resolve_placement(cfg.model).device) if engine_name(cfg) == "hf" else None
    return build_engine(cfg, policy, load_tokenizer(model_path), model_path, max_batch_size)


class Rollout:
    """Samples `train.group_size` completions per prompt, scores them and learns which prompts fail."""

    def __init__(self, cfg: Config, task: Task, engine: RolloutEngine) -> None:
        self.cfg, self.task, self.engine = cfg, task, engine
        self.stream = build_prompt_stream(cfg.task.prompt_sampler, cfg.task.sampler_options,
                                          task.train_examples(cfg.task.train_size, cfg.seed), cfg.seed)
        r, a, G = cfg.rollout, cfg.algorithm, cfg.train.group_size
        sampling = SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                  max_new_tokens=r.max_new_tokens)
        self.reward = build_reward(task, cfg.task.rewards, cfg.reward.timeout, cfg.reward.workers,
                                   TimeoutLimits.from_config(cfg.reward))
        # held-out grading: the task's verifier alone, the same SafeReward (one set of reward workers)
        self.eval_reward = CombinedReward.single(self.reward.parts[0][0])
        self.sampler = RolloutSampler(engine, self.stream, task, self.reward, sampling, G,
                                      cfg.train.batch_size // G, cfg.seed, ROLLOUT, a.dynamic_sampling,
                                      a.dynamic_sampling_rounds, a.dynamic_sampling_metric)
        self.version = 0

    def collect(self, step: int) -> ScoredBatch:
        """The step's batch: group_size scored samples per prompt, contiguous (DAPO refills flat groups)."""
        rollout = self.sampler.sample(step)
        if hasattr(self.engine, "sleep"):  # vLLM on a GPU frees its KV cache for the update; wakes on use
            self.engine.sleep()
        completions, scores = rollout.completions, rollout.scores
        self.stream.update(rollout.examples, scores.correct)  # failure-rate sampling learns what fails
        return ScoredBatch(
            prompts=[c.prompt for c in completions], prompt_ids=[list(c.prompt_ids) for c in completions],
            completion_ids=[list(c.token_ids) for c in completions],
            sampler_logprobs=[list(c.logprobs) for c in completions],
            rewards=torch.tensor(scores.rewards, dtype=torch.float32), correct=list(scores.correct),
            finish_reasons=[c.finish_reason for c in completions], group_size=self.cfg.train.group_size, step=step,
            components=dict(scores.components), stats=dict(rollout.stats), version=self.version,
            sampler_entropies=None if any(c.entropies is None for c in completions) else
            [list(c.entropies) for c in completions])

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Sample the next batch from these policy weights."""
        self.engine.load_weights(named_tensors)
        self.version += 1

    def evaluate(self, examples: list[Example], seed: int) -> tuple[dict[str, float], list[dict]]:
        """Held-out metrics and sample rows, sampled with `eval.*` settings from the current weights."""
        cfg = self.cfg
        return evaluate_heldout(self.engine, self.task, examples, cfg.rollout.max_new_tokens, cfg.eval.samples,
                                cfg.eval.temperature, seed, cfg.log.samples_per_eval, self.eval_reward)

    def state_dict(self) -> dict[str, Any]:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state)
