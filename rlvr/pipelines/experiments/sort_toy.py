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

Reward: one of the lecture's three designs (`rlvr.pipelines.experiments.sort_rewards`): `exact` (0/1), `position`
(matching positions) or `inclusion` (the lecture's `sort_inclusion_ordering_reward`, the default: one
point per prompt token that appears in the response plus one per ordered adjacent pair, 0..5 for length
3). Since positions are independent, the expected reward of a policy and its exact-match probability
are computed exactly by enumerating all V^L responses, which gives noise-free learning curves beside
the sampled batch mean; exact match beside an `inclusion` reward shows when the reward is hacked.
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

from rlvr.core import aggregate_loss, flat_group_share, get_advantage_fn, pg_loss
from rlvr.pipelines.experiments.figures import band, mean_and_se, pyplot, save
from rlvr.pipelines.experiments.sort_rewards import LECTURE_PROMPTS, SORT_REWARDS, max_sort_reward

# delta name on the command line -> rlvr.core advantage registry name
DELTAS: dict[str, str] = {"raw": "raw", "centered": "centered", "normalized": "grpo", "max_only": "max_only"}


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
    reward: str = "inclusion"  # one of sort_rewards.SORT_REWARDS (lecture's main run: inclusion)

    def __post_init__(self) -> None:
        if self.delta not in DELTAS:
            raise ValueError(f"unknown delta {self.delta!r}; choose from {list(DELTAS)}")
        if self.reward not in SORT_REWARDS:
            raise ValueError(f"unknown reward {self.reward!r}; choose from {list(SORT_REWARDS)}")
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
    exact_match: list[list[float]] = field(default_factory=list)  # (steps, K) exact P(response = sorted)
    final_exact_match: list[float] = field(default_factory=list)  # (K,) exact P(response = sorted) at the end
    final_at_max: list[float] = field(default_factory=list)  # (K,) exact P(reward = its maximum) at the end
    hacked: list[list[float]] = field(default_factory=list)  # (steps, K) exact P(reward at its maximum, unsorted)
    flat_share: list[list[float]] = field(default_factory=list)  # (steps, K) share of groups with one reward
    max_reward: float = float("nan")  # best achievable reward (the sorted answer scores it)

    @property
    def final_mean(self) -> float:
        return sum(self.final_expected_reward) / len(self.final_expected_reward)

    @property
    def final_exact_mean(self) -> float:
        return sum(self.final_exact_match) / len(self.final_exact_match)


def expected_reward(model: SortModel, prompts: Tensor, vocab_size: int, reward: str = "inclusion",
                    at_max: bool = False) -> Tensor:
    """Exact E_{a ~ pi(.|s)}[R(s, a)] per replica, averaged over prompts, by enumerating all V^L
    responses -> (K,). `reward="exact"` gives the exact-match probability; `at_max=True` the probability
    that the reward reaches its maximum."""
    length = prompts.shape[1]
    every = torch.tensor(list(itertools.product(range(vocab_size), repeat=length)))  # (V^L, L)
    with torch.no_grad():
        logp = torch.log_softmax(model(prompts), dim=-1)  # (K, B, L, V)
        seq_logp = logp[:, :, torch.arange(length), every].sum(-1)  # (K, B, V^L) positions independent
        rewards = SORT_REWARDS[reward](prompts.unsqueeze(1), every.unsqueeze(0))  # (B, V^L)
        if at_max:
            rewards = (rewards == max_sort_reward(reward, length)).to(rewards.dtype)
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
    advantage_fn, reward_fn = get_advantage_fn(DELTAS[config.delta]), SORT_REWARDS[config.reward]
    mask = torch.ones(k * b * g, length, dtype=torch.bool)
    result = SortToyResult(config, max_reward=max_sort_reward(config.reward, length))
    for epoch in range(config.epochs):
        # --- rollout and rewards: once per epoch, reused by the inner steps (as in the lecture) ---
        responses = sample_responses(model(prompts), g)  # (K, B, G, L)
        rewards = reward_fn(prompts.unsqueeze(1), responses)  # (K, B, G)
        deltas = advantage_fn(rewards.reshape(-1), g)  # (K*B*G,) groups of G contiguous
        e_reward = expected_reward(model, prompts, config.vocab_size, config.reward).tolist()
        e_exact = expected_reward(model, prompts, config.vocab_size, "exact").tolist()
        at_max = expected_reward(model, prompts, config.vocab_size, config.reward, at_max=True).tolist()
        flat = [float(flat_group_share(r.reshape(-1), g)) for r in rewards]  # (K,) all deltas 0 in those groups
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
            result.exact_match.append(e_exact)
            result.hacked.append([m - e for m, e in zip(at_max, e_exact)])
            result.flat_share.append(flat)
    result.final_expected_reward = expected_reward(model, prompts, config.vocab_size, config.reward).tolist()
    result.final_exact_match = expected_reward(model, prompts, config.vocab_size, "exact").tolist()
    result.final_at_max = expected_reward(model, prompts, config.vocab_size, config.reward, at_max=True).tolist()
    return result


def run_deltas(deltas: list[str], **overrides) -> dict[str, SortToyResult]:
    """One run per delta, same seed (so the same initial policies) and everything else equal."""
    return {d: run_sort_toy(SortToyConfig(delta=d, **overrides)) for d in deltas}


def run_rewards(rewards: list[str], **overrides) -> dict[str, SortToyResult]:
    """One run per reward design, same seed and everything else equal."""
    return {r: run_sort_toy(SortToyConfig(reward=r, **overrides)) for r in rewards}


LOSS_CAPTION = (
    "Why the loss is not a progress signal: it is the surrogate -mean(delta * log pi), and only its gradient "
    "is the policy gradient. Its value depends on the deltas, which are recomputed from every new batch: "
    "centered and normalized deltas have mean 0, so their loss hovers near 0 whatever the reward; raw "
    "deltas are all >= 0, so their loss falls toward 0 as the policy turns deterministic (log pi -> 0), "
    "whether or not the reward it settles on is high. Judge progress by the reward (left): the exact "
    "expected reward of the policy (solid) and the batch mean of the sampled rewards (faint), as a share of "
    "the reward's maximum; and by exact match (middle), the probability of answering the sorted prompt, "
    "which a hacked reward does not raise."
)


def plot_sort_toy(results: dict[str, SortToyResult], path: str | Path) -> Path:
    """Reward as a share of its maximum (left), exact match (middle) and loss (right) against steps,
    one line per run, with the caption on the loss."""
    fig, (ax_r, ax_x, ax_l) = pyplot().subplots(1, 3, figsize=(17, 5.2))
    for i, (label, res) in enumerate(results.items()):
        color, top = f"C{i}", res.max_reward
        band(ax_r, res.steps, res.expected_reward, color, f"{label} (exact E[R])", scale=top)
        ax_r.plot(res.steps, [m / top for m in mean_and_se(res.sampled_reward)[0]], color=color, alpha=0.25,
                  linewidth=0.8)
        band(ax_x, res.steps, res.exact_match, color, label)
        ax_l.plot(res.steps, mean_and_se(res.loss)[0], color=color, label=label, linewidth=0.9)
    first = next(iter(results.values()))
    ax_r.axhline(1.0, color="gray", linestyle=":", linewidth=1, label="max reward")
    seeds = f", mean of {first.config.seeds} seeds (band: +-1 s.e.)" if first.config.seeds > 1 else ""
    ax_r.set(xlabel="step", ylabel="reward / max reward", title=f"Reward{seeds}")
    ax_x.set(xlabel="step", ylabel="P(response = sorted prompt)", title="Exact match (exact, not sampled)", ylim=(0, 1))
    ax_l.set(xlabel="step", ylabel="loss", title="Loss (surrogate)")
    for ax in (ax_r, ax_x, ax_l):
        ax.legend(fontsize=8)
    fig.text(0.01, 0.01, textwrap.fill(LOSS_CAPTION, 240), fontsize=8, va="bottom")
    return save(fig, path, rect=(0, 0.12, 1, 1))


TABLE_COLUMNS = (("run", 11), ("final E[R]", 10), ("min", 6), ("max", 6), ("of max", 6), ("last batch R", 13),
                 ("exact match", 11))  # (header, least width): a column widens to its longest cell


def format_table(results: dict[str, SortToyResult]) -> str:
    """One row per run: final exact expected reward (mean, min, max over seeds), its maximum, the last
    sampled reward and the final exact-match probability; the run label left-aligned, numbers right-aligned."""
    rows = [[label, f"{res.final_mean:.3f}", f"{min(res.final_expected_reward):.3f}",
             f"{max(res.final_expected_reward):.3f}", f"{res.max_reward:g}",
             f"{sum(res.sampled_reward[-1]) / len(res.final_expected_reward):.3f}", f"{res.final_exact_mean:.3f}"]
            for label, res in results.items()]
    cells = [[header for header, _ in TABLE_COLUMNS], *rows]
    widths = [max(least, *(len(row[i]) for row in cells)) for i, (_, least) in enumerate(TABLE_COLUMNS)]
    return "\n".join(" ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])])
                     for row in cells)


def save_metrics(results: dict[str, SortToyResult], path: str | Path) -> Path:
    """Every step of every run as jsonl: run label, delta, reward design, step, loss / rewards / exact
    match averaged over seeds."""
    rows = [{"run": label, "delta": res.config.delta, "reward_fn": res.config.reward, "step": s,
             "loss": sum(lo) / len(lo), "sampled_reward": sum(sr) / len(sr), "expected_reward": sum(er) / len(er),
             "exact_match": sum(em) / len(em)}
            for label, res in results.items()
            for s, lo, sr, er, em in zip(res.steps, res.loss, res.sampled_reward, res.expected_reward,
                                         res.exact_match)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
