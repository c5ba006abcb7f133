"""The `algorithm` section: the advantage estimator, the policy loss and its aggregation, clipping, the KL penalty,
dynamic sampling and the behaviour-policy (importance) correction."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import ConfigError, f

IS_MODES = ("truncate", "mask", "sequence_truncate", "sequence_mask")  # rlvr.core.IS_MODES (config imports no torch)
AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_sum_constant")  # rlvr.core's
DYNAMIC_SAMPLING_METRICS = ("reward", "accuracy")  # rlvr.algorithms.dynamic_sampling: what must vary in a kept group


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
