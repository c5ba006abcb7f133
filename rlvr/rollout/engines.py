"""Rollout engines by registry: each entry says how to build its engine and what the engine can do, so that the
train path, the config checks, preflight and the Ray workers ask the registry and never compare engine names.

    EngineSpec("hf", build=..., samples_policy=True, processed_logprobs=True, ...)

Adding an engine is one module (a class with `generate` and `load_weights`, `rlvr.rollout.base.RolloutEngine`)
and one `register(EngineSpec(...))` naming what it can do (docs/architecture.md); `rollout.engine` then accepts
its name. An engine whose extra is missing, or that does not run on the model's device, is one ConfigError line
naming the key and what to install.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlvr.config import Config, ConfigError
from rlvr.models import resolve_placement
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.sampling import SCORED_LOGPROBS

# (cfg, policy, tokenizer, model_path, max_batch_size) -> engine: the policy module (None for an engine that loads
# `model_path` itself), its tokenizer, the Hugging Face folder the run starts from, sequences at once (None: all)
Build = Callable[[Config, Any, Any, Path, "int | None"], RolloutEngine]


@dataclass(frozen=True)
class EngineSpec:
    """How to build one engine, and what it can do."""

    name: str
    build: Build
    summary: str  # one line: what it is (help texts)
    samples_policy: bool = False  # samples from the trained module itself: no copy of the weights to keep in sync
    processed_logprobs: bool = False  # reports each token's log-prob under the processed distribution it was drawn
    # from (logits / T, top-k, top-p: SCORED_LOGPROBS), what the learner scores
    sleeps: bool = False  # frees its memory while the learner updates (rollout.enable_sleep_mode); on a GPU one such
    # engine per process, which runs that follow one another share (`settings` must agree)
    lora_adapters: bool = False  # applies LoRA adapters itself: a weight sync carries the adapters alone
    tensor_parallel: bool = False  # splits one model over several GPUs (rollout.tensor_parallel_size)
    devices: tuple[str, ...] = ("cpu", "cuda")  # the device kinds (model.device) it runs on
    preferred_on: tuple[str, ...] = ()  # device kinds where `auto` picks it when it is installed
    package: str | None = None  # the module its extra installs (None: part of rlvr)
    install: str = ""  # how to install that extra
    settings: Callable[[Config], dict[str, Any]] | None = None  # its arguments for a config, besides the folder
    check_model: Callable[[Any], None] | None = None  # a transformers config it cannot run -> ValueError


ENGINES: dict[str, EngineSpec] = {}
DEFAULT = "hf"  # what `auto` picks where no installed engine is preferred on the device


def register(spec: EngineSpec) -> EngineSpec:
    """Add an engine to the registry (`rollout.engine: <name>`); a name already taken is a ValueError."""
    if spec.name in ENGINES or spec.name == "auto":
        raise ValueError(f"rollout engine {spec.name!r} is already registered")
    ENGINES[spec.name] = spec
    return spec


def names() -> list[str]:
    """The values `rollout.engine` takes."""
    return ["auto", *ENGINES]


def installed(spec: EngineSpec) -> bool:
    # find_spec, not import: importing vllm takes seconds and initialises its platform
    return spec.package is None or importlib.util.find_spec(spec.package) is not None


def engine_spec(cfg: Config) -> EngineSpec:
    """The entry of `rollout.engine`, `auto` resolved: the first installed engine preferred on the model's device
    kind (vLLM on a GPU), else DEFAULT; an unknown name is a ConfigError listing the names. What the entry
    declares is asked of it here; whether it can run is `check_engine`'s."""
    r = cfg.rollout
    if r.engine not in names():
        raise ConfigError(f"rollout.engine: unknown name {r.engine!r}; choose from {names()}")
    if r.engine != "auto":
        return ENGINES[r.engine]
    device = resolve_placement(cfg.model).device.type
    preferred = [s for s in ENGINES.values() if device in s.preferred_on and installed(s)]
    return preferred[0] if preferred else ENGINES[DEFAULT]


def check_engine(cfg: Config) -> EngineSpec:
    """`engine_spec`, and a ConfigError (one line) for an engine that is not installed (naming its extra) or does
    not run on model.device, and for adapters asked of one that has none: before any work."""
    spec = engine_spec(cfg)
    if not installed(spec):
        raise ConfigError(f"rollout.engine={spec.name}: {spec.package} is not installed; install the extra: "
                          f"{spec.install}")
    device = resolve_placement(cfg.model).device.type
    if device not in spec.devices:
        raise ConfigError(f"rollout.engine={spec.name} runs on {' or '.join(spec.devices)}, not model.device="
                          f"{cfg.model.device}; choose another engine or device")
    tp = cfg.rollout.tensor_parallel_size
    if tp > 1 and not (spec.tensor_parallel and device == "cuda"):
        parallel = [s.name for s in ENGINES.values() if s.tensor_parallel]
        raise ConfigError(f"rollout.tensor_parallel_size={tp} splits the engine's model over GPUs: it needs "
                          f"model.device=cuda and rollout.engine={' or '.join(parallel)} (not {spec.name} on {device})")
    if cfg.rollout.vllm_lora == "adapter" and not spec.lora_adapters:
        adapters = [s.name for s in ENGINES.values() if s.lora_adapters]
        raise ConfigError(f"rollout.vllm_lora=adapter loads LoRA adapters into the engine, which rollout.engine="
                          f"{spec.name} does not do; use rollout.engine={' or '.join(adapters + ['auto'])}")
    return spec


def sampler_is_policy(cfg: Config) -> bool:
    """Whether what the engine reports of each sampled token (its log-prob under the processed distribution, the
    entropy there: `SCORED_LOGPROBS`) is what the training forward computes at the sampling weights: an engine
    that samples from the policy module itself, where in float32 only kernel rounding (cached vs full attention)
    differs. `train.old_logprobs: recompute` turns the stand-ins off."""
    spec = engine_spec(cfg)
    return (cfg.train.old_logprobs == "auto" and spec.samples_policy and spec.processed_logprobs
            and cfg.model.dtype == "float32")


# The cap of the behaviour correction where `algorithm.is_cap` is left empty and the sampler is not the policy itself:
# verl's default `rollout_is_threshold`, and the C = 2 of Yao et al. 2025's truncated importance sampling
DEFAULT_IS_CAP = 2.0


def sampler_is_separate(cfg: Config) -> bool:
    """Whether the tokens are sampled by something other than the trained module at the learner's weights: an engine
    that does not sample from the policy module (vLLM: its own kernels, up to 1.2e-2 apart in log-prob on a GPU),
    Ray rollout workers (a copy of the weights in another process), batches up to `rollout.max_staleness`
    updates old, or partial rollouts (`rollout.partial`: tokens carried from steps with older weights)."""
    return (not engine_spec(cfg).samples_policy or cfg.distributed.backend == "ray"
            or cfg.rollout.max_staleness > 0 or cfg.rollout.partial)


def behaviour_cap(cfg: Config) -> float:
    """`algorithm.is_cap` with empty (auto) resolved: DEFAULT_IS_CAP where the sampler is not the policy itself
    (`sampler_is_separate`), 0 (off) where it is; a number as given (0 = off)."""
    cap = cfg.algorithm.is_cap
    if cap is None:
        return DEFAULT_IS_CAP if sampler_is_separate(cfg) else 0.0
    return cap


def serves_adapters(cfg: Config) -> bool:
    """Whether the engine applies the LoRA adapters itself (`rollout.vllm_lora`), so that a weight sync carries
    the adapter tensors only, instead of the merged weights."""
    return cfg.model.lora.r > 0 and engine_spec(cfg).lora_adapters and cfg.rollout.vllm_lora != "merge"


def build_engine(cfg: Config, policy: Any, tokenizer: Any, model_path: str | Path,
                 max_batch_size: int | None = None) -> RolloutEngine:
    """The one place an engine is built from the config (`EngineSpec.build`)."""
    return check_engine(cfg).build(cfg, policy, tokenizer, Path(model_path), max_batch_size)


# --- the entries ---
def _hf(cfg: Config, policy: Any, tokenizer: Any, model_path: Path, max_batch_size: int | None) -> RolloutEngine:
    """rlvr's sampler on the policy module itself, on the policy's device (no copy of the weights), computing in
    `model.dtype`; its entropies where they stand in for the training forward's (`sampler_is_policy`)."""
    placement = resolve_placement(cfg.model)
    return HFEngine(policy, tokenizer, device=placement.device, max_batch_size=max_batch_size,
                    autocast=placement.dtype, entropies=sampler_is_policy(cfg), logprobs_mode=SCORED_LOGPROBS)


def _vllm(cfg: Config, policy: Any, tokenizer: Any, model_path: Path, max_batch_size: int | None) -> RolloutEngine:
    """A vLLM engine in this process, built from `model_path` in the policy's dtype, the process's one (vLLM
    allows one with sleep mode per process on a GPU), reset to `model_path`; the loop's `load_weights` after
    every step keeps it current (with a LoRA policy, by default as adapters vLLM applies itself)."""
    from rlvr.rollout.vllm_engine import shared_engine  # the optional extra, imported only when asked for

    return shared_engine(model_path, **_vllm_settings(cfg))


def _vllm_settings(cfg: Config) -> dict[str, Any]:
    r, lora = cfg.rollout, cfg.model.lora
    adapter = ({"r": lora.r, "lora_alpha": lora.alpha, "target_modules": list(lora.target_modules)}
               if serves_adapters(cfg) else None)
    return dict(dtype=cfg.model.dtype, logprobs_mode=SCORED_LOGPROBS, gpu_memory_utilization=r.gpu_memory_utilization,
                enable_prefix_caching=r.enable_prefix_caching, enable_sleep_mode=r.enable_sleep_mode, seed=cfg.seed,
                lora_adapter=adapter, tensor_parallel_size=r.tensor_parallel_size,
                # CUDA graphs pay off on a GPU; on a CPU, compiling costs more start-up than it saves
                enforce_eager=resolve_placement(cfg.model).device.type == "cpu")


def _vllm_check_model(hf_config: Any) -> None:
    from rlvr.rollout.vllm_engine import check_head_size  # reads the config only

    check_head_size(hf_config)


register(EngineSpec("hf", _hf, "rlvr's KV-cached sampler on the trained module itself", samples_policy=True,
                    processed_logprobs=True))
register(EngineSpec("vllm", _vllm, "vLLM in the same process, its weights synced after every optimizer step",
                    processed_logprobs=True, sleeps=True, lora_adapters=True, tensor_parallel=True,
                    preferred_on=("cuda",), package="vllm",
                    install="pip install 'rlvr[vllm]' (on a CPU: scripts/setup_vllm.sh)", settings=_vllm_settings,
                    check_model=_vllm_check_model))
