"""PPO for language models: a value model, per-token KL-shaped rewards, GAE and a clipped value loss.

The policy side is the group family's loss unchanged (`GroupPolicyGradient`: clipped surrogate,
aggregation, optional KL in the loss); only the advantages differ. They are per token (B, W):

    R_t = -kl_coef * KL_t (+ score on the last token)      Ziegler et al. 2019; Ouyang et al. 2022 eq. 2
    A_t, G_t = GAE(R, V, gamma, lam)                        Schulman et al. 2016, eq. 16
    A_t <- whiten(A_t) over the batch (optional)            OpenAI lm-human-preferences, TRL
    L = L_policy(A) + vf_coef * 0.5 max((V - G)^2, (V_old + clip(V - V_old) - G)^2)

With no value model (V = 0), gamma = lam = 1 this is REINFORCE++ (Hu et al. 2025, eq. 8-10): A_t =
score - kl_coef * sum_{i>=t} KL_i, normalised over the global batch. So `advantage: gae` is PPO and
`advantage: reinforce_pp` is its critic-free sibling; both live here, and only `gae` builds a value
model ("the value model only exists when the algorithm needs it").

Value model layout: V(s) is read at the positions whose logits predict the completion tokens, so
`values[:, w]` is the value of the state before label `w`, aligned with the (B, W) log-probs of
`rlvr.rollout.batch`. `shared` puts a linear head on the policy's own last hidden state (one forward
pass for both heads, Ziegler et al. 2019 style); `separate` is a critic with its own trunk loaded
from a Hugging Face folder (InstructGPT, TRL's PPOTrainer), trained by the same optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from rlvr.algorithms.grpo import GroupObjective, GroupPolicyGradient
from rlvr.config import Config
from rlvr.config.sections import VALUE_MODELS  # the value.model field's choices
from rlvr.core import (
    TOKEN_ADVANTAGES,
    aggregate_loss,
    clipped_value_loss,
    gae,
    get_kl_estimator,
    kl_shaped_rewards,
    masked_mean,
    masked_whiten,
)
from rlvr.models import load_model, resolve_model
from rlvr.models.forward import completion_index, packed_call, packs, policy_logprobs, to_completions
from rlvr.models.head import scores_of_hidden
from rlvr.rollout.batch import RolloutBatch
from rlvr.rollout.scored import ScoredBatch


def token_level_advantages(
    scores: Tensor,
    mask: Tensor,
    values: Tensor | None = None,
    logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k1",
    gamma: float = 1.0,
    lam: float = 1.0,
    whiten: bool = False,
    eps: float = 1e-8,
) -> tuple[Tensor, Tensor]:
    """Per-token advantages and returns, both (B, W), 0 on masked positions.

    scores (B,) sequence rewards; mask (B, W); values (B, W) V(s_t) of the sampling-time value model
    (None: V = 0, no critic); logprobs / ref_logprobs (B, W) of pi_old and pi_ref, needed iff
    kl_coef > 0. Returns are the GAE lambda-returns before whitening (the value target); `eps` is
    the whitening's variance floor, (A - mean) / sqrt(var + eps).
    """
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and (logprobs is None or ref_logprobs is None):
        raise ValueError("kl_coef > 0 needs the sampling policy's and the reference's log-probs")
    with torch.no_grad():
        if kl_coef == 0:  # the score alone, on the last token
            logprobs = ref_logprobs = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
        rewards = kl_shaped_rewards(scores.float(), logprobs.detach(), ref_logprobs.detach(), mask, kl_coef,
                                    kl_estimator)  # (B, W)
        values = torch.zeros_like(rewards) if values is None else values.detach()
        advantages, returns = gae(rewards, values, mask, gamma, lam)  # (B, W) each
        if whiten:
            advantages = masked_whiten(advantages, mask, eps)
    return advantages, returns


VALUE_MODEL_FILE = "value_model.safetensors"  # the critic's weights in a run's final_model/


class ValueHead(nn.Module):
    """hidden (B, S, H) -> values (B, S). Zero-initialised: V = 0 before training, so the first
    advantages are the plain returns rather than returns minus random noise."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.proj(hidden.float()).squeeze(-1)


class ValueModel(nn.Module):
    """A value head on a trunk. `trunk=None`: the head reads the policy's hidden states (shared);
    else `trunk` is a Hugging Face base model (a causal LM's `base_model`) of its own (separate).
    The shared policy is never registered here, so its parameters are not counted twice."""

    def __init__(self, head: ValueHead, trunk: nn.Module | None = None) -> None:
        super().__init__()
        self.head, self.trunk = head, trunk

    @property
    def shared(self) -> bool:
        return self.trunk is None

    def values(self, batch, packing: str = "never") -> Tensor:
        """V (B, W) of a `RolloutBatch` from the separate trunk (packed as `packs` decides: without padding,
        0 off the completions)."""
        if self.trunk is None:
            raise ValueError("a shared value head reads the policy's hidden states; use forward_with_values")
        if packs(self.trunk.config, batch, packing):
            hidden = packed_call(self.trunk, batch).last_hidden_state[0, completion_index(batch)]  # (M, H)
            return to_completions(self.head(hidden), batch.mask)
        hidden = self.trunk(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(),
                            use_cache=False).last_hidden_state  # (B, L, H)
        return self.head(hidden[:, batch.start : -1])  # (B, W)


def build_value_model(kind: str, policy: nn.Module, critic_path: str | Path | None = None) -> ValueModel:
    """`shared`: a head on `policy`; `separate`: a critic trunk loaded from `critic_path` (a Hugging
    Face causal-LM folder, usually the RL start model) plus a fresh head."""
    if kind not in VALUE_MODELS:
        raise ValueError(f"unknown value model {kind!r}; choose from {list(VALUE_MODELS)}")
    if kind == "shared":
        _check_plain_lm_head(policy)
        return ValueModel(ValueHead(policy.config.hidden_size))
    if critic_path is None:
        raise ValueError("a separate value model needs a critic path (a Hugging Face model folder)")
    trunk = load_model(critic_path).base_model
    return ValueModel(ValueHead(trunk.config.hidden_size), trunk)


def _check_plain_lm_head(policy: nn.Module) -> None:
    """The shared forward computes logits as lm_head(last hidden state); models that post-process
    logits (e.g. Gemma 2's final soft-capping) would be trained on other log-probs than they sample."""
    if getattr(policy.config, "final_logit_softcapping", None):
        raise ValueError("a shared value head needs plain lm_head logits; this model soft-caps them, "
                         "use value.model=separate")


def forward_with_values(policy: nn.Module, value_model: ValueModel, batch, temperature: float,
                        with_entropy: bool = False, packing: str = "never", top_k: int = 0, top_p: float = 1.0,
                        chunk: int = 0) -> tuple[Tensor, Tensor | None, Tensor]:
    """(log pi (B, W), entropy (B, W) or None, V (B, W)) of a `RolloutBatch`.

    Shared: one pass through the policy trunk feeds both the LM head and the value head. Separate:
    the policy as `rlvr.models.forward.policy_logprobs` computes it, then the critic's own pass.
    `packing` (`train.packing`): each without padding where `rlvr.models.forward.packs` says so, 0 off the
    completions.
    """
    if not value_model.shared:
        logprobs, entropy = policy_logprobs(policy, batch, temperature, with_entropy, packing=packing, top_k=top_k,
                                            top_p=top_p, chunk=chunk)
        return logprobs, entropy, value_model.values(batch, packing)
    packed = packs(policy.config, batch, packing)
    if packed:
        hidden = packed_call(policy.base_model, batch).last_hidden_state[0, completion_index(batch)]  # (M, H)
        labels = batch.input_ids[:, batch.start + 1 :][batch.mask]  # (M,)
    else:
        hidden = policy.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask.long(),
                                   use_cache=False).last_hidden_state[:, batch.start : -1]  # (B, W, H)
        labels = batch.input_ids[:, batch.start + 1 :]  # (B, W)
    logprobs, entropy = scores_of_hidden(policy, hidden, labels, temperature, top_k, top_p, with_entropy,
                                         chunk)  # (B, W), packed (M,)
    values = value_model.head(hidden)
    columns = partial(to_completions, mask=batch.mask) if packed else lambda x: x  # packed (M,) -> (B, W)
    return columns(logprobs), None if entropy is None else columns(entropy), columns(values)


@torch.no_grad()
def sampling_values(policy: nn.Module, value_model: ValueModel, batch, micro_batch_size: int,
                    packing: str = "never") -> Tensor:
    """V_old (B, W) of the whole batch at sampling time, in micro-batches, without gradient."""
    out = torch.zeros(batch.mask.shape, dtype=torch.float32, device=batch.mask.device)
    for lo in range(0, len(batch), micro_batch_size):
        part = batch.select(slice(lo, lo + micro_batch_size))
        _, _, values = forward_with_values(policy, value_model, part, 1.0, packing=packing)
        out[lo : lo + micro_batch_size, : values.shape[1]] = values
    return out


@dataclass
class TokenAdvantages:
    """Settings of the per-token estimators (`gae` with a value model, `reinforce_pp` without)."""

    estimator: str = "gae"
    gamma: float = 1.0
    lam: float = 0.95
    whiten: bool = True
    kl_coef: float = 0.0
    kl_estimator: str = "k1"
    value_coef: float = 0.1
    value_clip: float = 0.2
    eps: float = 1e-4  # algorithm.advantage_eps: the whitening's variance floor

    def __post_init__(self) -> None:
        if self.estimator not in TOKEN_ADVANTAGES:
            raise ValueError(f"unknown token-level advantage {self.estimator!r}; choose from {list(TOKEN_ADVANTAGES)}")
        for name in ("gamma", "lam"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.kl_coef < 0 or self.value_coef < 0 or not self.value_clip > 0:
            raise ValueError(f"need kl_coef >= 0, value_coef >= 0, value_clip > 0; got {self.kl_coef}, "
                             f"{self.value_coef}, {self.value_clip}")
        if self.estimator == "reinforce_pp" and (self.gamma, self.lam) != (1.0, 1.0):
            raise ValueError("reinforce_pp is the undiscounted return-to-go: gamma = lam = 1")

    @property
    def needs_value_model(self) -> bool:
        return self.estimator == "gae"

    def annotate(self, batch, policy: nn.Module, value_model: ValueModel | None, micro_batch_size: int,
                 packing: str = "never") -> None:
        """Fill `batch.advantages` (B, W), `batch.returns` and `batch.old_values` in place.

        KL shaping reads `batch.old_logprobs` (pi_old) and `batch.ref_logprobs`, so the caller caches
        them first whenever kl_coef > 0.
        """
        values = None
        if value_model is not None:
            values = sampling_values(policy, value_model, batch, micro_batch_size, packing)  # (B, W)
        batch.advantages, batch.returns = token_level_advantages(
            batch.rewards, batch.mask, values, batch.old_logprobs, batch.ref_logprobs, self.kl_coef,
            self.kl_estimator, self.gamma, self.lam, self.whiten, self.eps)
        batch.old_values = values

    def kl_metrics(self, logprobs: Tensor, batch) -> dict[str, Tensor]:
        """`kl`: mean per-token KL(pi || pi_ref) of one micro-batch by `kl_estimator`, as GroupPolicyGradient logs
        it for its loss penalty; here the penalty sits in the rewards (kl_coef), which no loss metric shows."""
        if not self.kl_coef or batch.ref_logprobs is None:
            return {}
        kl = get_kl_estimator(self.kl_estimator)(logprobs.detach(), batch.ref_logprobs)  # (b, W)
        return {"kl": masked_mean(kl, batch.mask)}

    def value_loss(self, values: Tensor, batch, aggregation: str, constant: float | None,
                   denominator: Tensor | int) -> tuple[Tensor, dict[str, Tensor]]:
        """vf_coef * aggregated clipped value loss of one micro-batch, aggregated like the policy loss
        (same mode and minibatch denominator, so gradient accumulation stays exact)."""
        per_token, metrics = clipped_value_loss(values, batch.old_values, batch.returns, self.value_clip, batch.mask)
        loss = aggregate_loss(per_token, batch.mask, aggregation, constant, denominator=denominator)
        metrics["value_loss"] = masked_mean(per_token.detach(), batch.mask)  # per token, whatever the split
        metrics["value_mean"] = masked_mean(values.detach(), batch.mask)
        return self.value_coef * loss, metrics


def token_advantages(cfg: Config) -> TokenAdvantages | None:
    """The per-token estimator's settings of a config; None for a group estimator."""
    a = cfg.algorithm
    if a.advantage not in TOKEN_ADVANTAGES:
        return None
    return TokenAdvantages(a.advantage, a.gamma, a.lam, a.whiten_advantages, a.kl_reward_coef, a.kl_estimator,
                           cfg.value.coef, cfg.value.clip, a.advantage_eps)


class TokenObjective(GroupObjective):
    """PPO (`gae`, with a value model) and REINFORCE++ as an Objective: the group family's loss on per-token
    advantages computed after the passes (KL shaping reads pi_old and pi_ref), plus, with a value model, its
    clipped value loss aggregated alike. `value_model` is `shared` or `separate` (from `value_path`, else the
    start model), trained at `value_lr` in its own optimizer group."""

    def __init__(self, pg: GroupPolicyGradient, token: TokenAdvantages, value_model: str = "shared",
                 value_path: str | None = None, value_lr: float = 1e-5, **settings: Any) -> None:
        super().__init__(pg, **settings)
        self.token, self.value_kind, self.value_path, self.value_lr = token, value_model, value_path, value_lr
        self.value_model: ValueModel | None = None
        self.needs_reference = pg.needs_reference or token.kl_coef > 0
        self.zero_advantage_is_inert = False  # the value loss and the KL-shaped rewards act on every row

    @property
    def needs_old_logprobs(self) -> bool:
        return super().needs_old_logprobs or self.token.kl_coef > 0  # the KL-shaped rewards read pi_old

    def attach(self, policy: nn.Module, init_path: Path, device: torch.device) -> list[dict[str, Any]]:
        """PPO's critic when the estimator needs one, in an optimizer group of its own (no weight decay)."""
        if not self.token.needs_value_model:
            return []
        trunk = resolve_model(self.value_path, "value.path") if self.value_path else init_path
        self.value_model = build_value_model(self.value_kind, policy, trunk).to(device)
        return [{"params": list(self.value_model.parameters()), "lr": self.value_lr, "weight_decay": 0.0}]

    def advantages(self, rows: RolloutBatch, batch: ScoredBatch) -> None:
        pass  # per token, once pi_old, pi_ref and the values are known (`annotate`)

    def annotate(self, rows: RolloutBatch, passes: Any) -> None:
        self.token.annotate(rows, passes.policy, self.value_model, self.micro_batch_size, self.packing)

    def forward(self, policy: nn.Module, mb: RolloutBatch, with_entropy: bool
                ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        if self.value_model is None:
            return super().forward(policy, mb, with_entropy)
        return forward_with_values(policy, self.value_model, mb, self.temperature, with_entropy=with_entropy,
                                   packing=self.packing, **self.scoring)

    def loss(self, mb: RolloutBatch, logprobs: Tensor, values: Tensor | None, denominator: Tensor | int
             ) -> tuple[Tensor, dict[str, Tensor]]:
        """The policy loss (its KL to the reference is in the rewards: logged here) + value.coef x the clipped
        value loss."""
        loss, metrics = super().loss(mb, logprobs, values, denominator)
        metrics = {**self.token.kl_metrics(logprobs, mb), **metrics}
        if values is not None:
            value_loss, value_metrics = self.token.value_loss(values, mb, self.pg.aggregation, self.pg.loss_constant,
                                                              denominator)
            loss, metrics = loss + value_loss, {**metrics, **value_metrics}
        return loss, metrics

    def state_dict(self) -> dict[str, Any]:
        return {} if self.value_model is None else {"value_model": self.value_model.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.value_model is not None:
            self.value_model.load_state_dict(state["value_model"])

    def save(self, path: Path) -> None:
        """The critic (head, and trunk when separate) beside the policy."""
        if self.value_model is not None:
            save_file(self.value_model.state_dict(), path / VALUE_MODEL_FILE)
