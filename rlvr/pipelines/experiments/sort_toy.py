"""The lecture's sorting toy: policy gradient with four choices of delta on a 3-number sorting task.

Source: Stanford CS336 (Spring 2025), lecture 17 "Policy gradient" (Percy Liang), whose code trains
this exact setup: prompts [1 0 2], [3 2 4], [1 2 3] over a vocabulary of 5; a non-autoregressive
model (a shared embedding, one encoder matrix per prompt position, one decoder matrix per response
position, each response position sampled independently); 10 responses per prompt; 100 epochs, each
sampling once and then taking 10 Adam steps (lr 1e-3) on the same responses; the loss
-mean(delta * log pi). The update is the policy-gradient template grad log pi(a|s) * delta; only delta
changes between runs, and it comes from `rlvr.core`'s advantage registry:

    raw        delta = R                                (REINFORCE)
    centered   delta = R - mean of the prompt's group    (baseline = group mean)
    normalized delta = (R - mean) / (std + eps)          (GRPO's z-score)
    max_only   delta = R for the group's best, else 0    (learn from the best sample only)

Reward (the lecture's `sort_inclusion_ordering_reward`): one point per prompt token that appears in the
response plus one point per adjacent response pair in non-decreasing order, so 0..5 for length 3.
Since positions are independent, the expected reward of a policy is computed exactly by enumerating
all 5^3 responses, which gives a noise-free learning curve beside the sampled batch mean.
"""

from __future__ import annotations

import itertools
import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from rlvr.core import aggregate_loss, get_advantage_fn, pg_loss

# delta name on the command line -> rlvr.core advantage registry name
DELTAS: dict[str, str] = {"raw": "raw", "centered": "centered", "normalized": "grpo", "max_only": "max_only"}
LECTURE_PROMPTS = ((1, 0, 2), (3, 2, 4), (1, 2, 3))


def inclusion_ordering_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """CS336 lecture 17 `sort_inclusion_ordering_reward`, vectorised.

    prompts (..., L) and responses (..., L) integer tensors with matching leading dims -> (...) float:
    #{prompt tokens x (with multiplicity) that occur anywhere in the response}
    + #{adjacent response pairs with r_t <= r_{t+1}}.
    """
    if prompts.shape[-1] != responses.shape[-1]:
        raise ValueError(f"prompt and response lengths differ: {tuple(prompts.shape)} vs {tuple(responses.shape)}")
    present = (prompts.unsqueeze(-1) == responses.unsqueeze(-2)).any(dim=-1)  # (..., L) prompt token found
    ordered = responses[..., 1:] >= responses[..., :-1]  # (..., L-1)
    return (present.sum(-1) + ordered.sum(-1)).to(torch.get_default_dtype())


class SortModel(nn.Module):
    """The lecture's non-autoregressive model, as K independent replicas trained side by side.

    Replica k: logits[b, j] = (sum_i E[p_bi] W_enc[i]) W_dec[j] E^T, with E the shared (tied)
    embedding, one encoder matrix per prompt position and one decoder matrix per response position.
    Replicas share no parameter and their losses are summed, so gradients (and Adam, which is
    elementwise) keep them independent: K seeds for the price of about one run.
    """

    def __init__(self, vocab_size: int, embedding_dim: int, prompt_length: int, response_length: int,
                 replicas: int = 1):
        super().__init__()
        k, d, scale = replicas, embedding_dim, 1 / math.sqrt(embedding_dim)
        self.embedding = nn.Parameter(torch.randn(k, vocab_size, d))  # (K, V, D) as nn.Embedding's N(0, 1)
        self.encode = nn.Parameter(torch.randn(k, prompt_length, d, d) * scale)  # (K, L, D, D)
        self.decode = nn.Parameter(torch.randn(k, response_length, d, d) * scale)  # (K, L, D, D)

    def forward(self, prompts: Tensor) -> Tensor:
        """prompts (B, L) -> logits (K, B, L, V)."""
        emb = self.embedding[:, prompts]  # (K, B, L, D)
        encoded = torch.einsum("kbld,klde->kbe", emb, self.encode)  # (K, B, D) one vector per prompt
        decoded = torch.einsum("kbe,kmed->kbmd", encoded, self.decode)  # (K, B, L, D) one per response position
        return decoded @ self.embedding.transpose(1, 2).unsqueeze(1)  # (K, B, L, V) tied embedding


@dataclass
class SortToyConfig:
    delta: str = "normalized"  # one of DELTAS
    epochs: int = 100  # sampling rounds (lecture: 100)
    inner_steps: int = 10  # optimizer steps on each round's samples (lecture: 10)
    responses: int = 10  # samples per prompt, the group size G (lecture: 10)
    lr: float = 1e-3  # Adam (lecture: 1e-3)
    embedding_dim: int = 10
    vocab_size: int = 5
    seed: int = 5  # the lecture's torch.manual_seed(5)
    seeds: int = 1  # independent replicas trained side by side (K); results report their mean and spread
    prompts: tuple[tuple[int, ...], ...] = LECTURE_PROMPTS

    def __post_init__(self) -> None:
        if self.delta not in DELTAS:
            raise ValueError(f"unknown delta {self.delta!r}; choose from {list(DELTAS)}")
        for name in ("epochs", "inner_steps", "responses", "embedding_dim", "vocab_size", "seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.delta == "normalized" and self.responses < 2:
            raise ValueError("the normalized delta needs at least 2 responses per prompt (a std)")
        lengths = {len(p) for p in self.prompts}
        if len(lengths) != 1 or not all(0 <= t < self.vocab_size for p in self.prompts for t in p):
            raise ValueError(f"prompts must share one length and use tokens 0..{self.vocab_size - 1}")


@dataclass
class SortToyResult:
    config: SortToyConfig
    steps: list[int] = field(default_factory=list)
    loss: list[list[float]] = field(default_factory=list)  # (steps, K) loss each replica minimised
    sampled_reward: list[list[float]] = field(default_factory=list)  # (steps, K) batch mean reward
    expected_reward: list[list[float]] = field(default_factory=list)  # (steps, K) exact E[R] at the step
    final_expected_reward: list[float] = field(default_factory=list)  # (K,) exact E[R] after training
    max_reward: float = float("nan")  # best achievable reward (the sorted answer scores it)

    @property
    def final_mean(self) -> float:
        return sum(self.final_expected_reward) / len(self.final_expected_reward)


def expected_reward(model: SortModel, prompts: Tensor, vocab_size: int) -> Tensor:
    """Exact E_{a ~ pi(.|s)}[R(s, a)] per replica, averaged over prompts, by enumerating all V^L
    responses -> (K,)."""
    length = prompts.shape[1]
    every = torch.tensor(list(itertools.product(range(vocab_size), repeat=length)))  # (V^L, L)
    with torch.no_grad():
        logp = torch.log_softmax(model(prompts), dim=-1)  # (K, B, L, V)
        seq_logp = logp[:, :, torch.arange(length), every].sum(-1)  # (K, B, V^L) positions independent
        rewards = inclusion_ordering_reward(prompts.unsqueeze(1), every.unsqueeze(0))  # (B, V^L)
        return (seq_logp.exp() * rewards).sum(-1).mean(-1)


def sample_responses(logits: Tensor, n: int) -> Tensor:
    """logits (K, B, L, V) -> responses (K, B, n, L), every position sampled independently."""
    *lead, length, v = logits.shape
    probs = torch.softmax(logits.detach(), dim=-1).reshape(-1, v)
    draws = torch.multinomial(probs, n, replacement=True)  # (K*B*L, n)
    return draws.reshape(*lead, length, n).transpose(-1, -2)


def response_logprobs(model: SortModel, prompts: Tensor, responses: Tensor) -> Tensor:
    """log pi of each response token: prompts (B, L), responses (K, B, G, L) -> (K*B*G, L)."""
    logp = torch.log_softmax(model(prompts), dim=-1)  # (K, B, L, V)
    logp = logp.unsqueeze(2).expand(-1, -1, responses.shape[2], -1, -1)  # (K, B, G, L, V)
    return logp.gather(-1, responses.unsqueeze(-1)).squeeze(-1).reshape(-1, responses.shape[-1])


def run_sort_toy(config: SortToyConfig) -> SortToyResult:
    """Train the toy policy with one delta; record loss and reward at every inner step."""
    torch.manual_seed(config.seed)
    prompts = torch.tensor(config.prompts)  # (B, L)
    (b, length), k, g = prompts.shape, config.seeds, config.responses
    model = SortModel(config.vocab_size, config.embedding_dim, length, length, replicas=k)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    advantage_fn = get_advantage_fn(DELTAS[config.delta])
    mask = torch.ones(k * b * g, length, dtype=torch.bool)
    result = SortToyResult(config, max_reward=float(2 * length - 1))
    for epoch in range(config.epochs):
        # --- rollout and rewards: once per epoch, reused by the inner steps (as in the lecture) ---
        responses = sample_responses(model(prompts), g)  # (K, B, G, L)
        rewards = inclusion_ordering_reward(prompts.unsqueeze(1), responses)  # (K, B, G)
        deltas = advantage_fn(rewards.reshape(-1), g)  # (K*B*G,) groups of G contiguous
        e_reward = expected_reward(model, prompts, config.vocab_size).tolist()
        for step in range(config.inner_steps):
            # --- update: -delta * log pi per token; mean over each replica's tokens, summed over replicas ---
            logprobs = response_logprobs(model, prompts, responses)  # (K*B*G, L)
            per_token, _ = pg_loss(logprobs, deltas)  # (K*B*G, L)
            loss = aggregate_loss(per_token, mask, "token_mean", denominator=b * g * length)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            result.steps.append(epoch * config.inner_steps + step)
            result.loss.append(per_token.detach().reshape(k, -1).mean(-1).tolist())
            result.sampled_reward.append(rewards.reshape(k, -1).mean(-1).tolist())
            result.expected_reward.append(e_reward)
    result.final_expected_reward = expected_reward(model, prompts, config.vocab_size).tolist()
    return result


def run_deltas(deltas: list[str], **overrides) -> dict[str, SortToyResult]:
    """One run per delta, same seed (so the same initial policies) and everything else equal."""
    return {d: run_sort_toy(SortToyConfig(delta=d, **overrides)) for d in deltas}


LOSS_CAPTION = (
    "Why the loss is not a progress signal: it is the surrogate -mean(delta * log pi), and only its gradient "
    "is the policy gradient. Its value depends on the deltas, which are recomputed from every new batch: "
    "centered and normalized deltas have mean 0, so their loss hovers near 0 whatever the reward; raw "
    "deltas are all >= 0, so their loss falls toward 0 as the policy turns deterministic (log pi -> 0), "
    "whether or not the reward it settles on is high. Judge progress by the reward (left): the exact "
    "expected reward of the policy (solid) and the batch mean of the sampled rewards (faint)."
)


def _mean(rows: list[list[float]]) -> list[float]:
    return [sum(r) / len(r) for r in rows]


def _sem(rows: list[list[float]]) -> list[float]:
    k = len(rows[0])
    return [(sum((x - sum(r) / k) ** 2 for x in r) / (k - 1) / k) ** 0.5 for r in rows]


def plot_sort_toy(results: dict[str, SortToyResult], path: str | Path) -> Path:
    """Reward (left) and loss (right) against steps, one line per delta, with the caption on the loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_r, ax_l) = plt.subplots(1, 2, figsize=(13, 5.2))
    for i, (delta, res) in enumerate(results.items()):
        color = f"C{i}"
        ax_r.plot(res.steps, _mean(res.expected_reward), color=color, label=f"{delta} (exact E[R])")
        ax_r.plot(res.steps, _mean(res.sampled_reward), color=color, alpha=0.25, linewidth=0.8)
        if res.config.seeds > 1:  # +- one standard error of the mean over seeds
            mean, sem = _mean(res.expected_reward), _sem(res.expected_reward)
            ax_r.fill_between(res.steps, [m - e for m, e in zip(mean, sem)], [m + e for m, e in zip(mean, sem)],
                              color=color, alpha=0.15)
        ax_l.plot(res.steps, _mean(res.loss), color=color, label=delta, linewidth=0.9)
    first = next(iter(results.values()))
    ax_r.axhline(first.max_reward, color="gray", linestyle=":", linewidth=1, label="max reward")
    seeds = f", mean of {first.config.seeds} seeds (band: +-1 s.e.)" if first.config.seeds > 1 else ""
    ax_r.set(xlabel="step", ylabel="reward", title=f"Reward{seeds}")
    ax_l.set(xlabel="step", ylabel="loss", title="Loss (surrogate)")
    ax_r.legend(fontsize=8)
    ax_l.legend(fontsize=8)
    fig.text(0.01, 0.01, textwrap.fill(LOSS_CAPTION, 190), fontsize=8, va="bottom")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_table(results: dict[str, SortToyResult]) -> str:
    """One row per delta: final exact expected reward (mean, min, max over seeds) and last sampled reward."""
    lines = [f"{'delta':<11} {'final E[R]':>10} {'min':>6} {'max':>6} {'last batch R':>13}   (max reward "
             f"{next(iter(results.values())).max_reward:g})"]
    for delta, res in results.items():
        f = res.final_expected_reward
        lines.append(f"{delta:<11} {res.final_mean:>10.3f} {min(f):>6.3f} {max(f):>6.3f} "
                     f"{sum(res.sampled_reward[-1]) / len(f):>13.3f}")
    return "\n".join(lines)


def save_metrics(results: dict[str, SortToyResult], path: str | Path) -> Path:
    """Every step of every run as jsonl: delta, step, loss / rewards averaged over seeds."""
    rows = [{"delta": d, "step": s, "loss": sum(lo) / len(lo), "sampled_reward": sum(sr) / len(sr),
             "expected_reward": sum(er) / len(er)}
            for d, res in results.items()
            for s, lo, sr, er in zip(res.steps, res.loss, res.sampled_reward, res.expected_reward)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
