"""A sequence toy whose length is free: where GRPO's length bias and Kimi's length reward can show.

Dr. GRPO (Liu et al. 2025, sec. 3.1) argues that dividing each response's loss by its own length
(`seq_mean_token_mean`, GRPO as published) weighs a token of a long response less than one of a short
response, so a wrong answer (negative advantage) is pushed down less the longer it is, and wrong
answers grow; a constant normaliser (`seq_sum_constant`) weighs every token alike. The effect needs
wrong answers that can be long: in the lecture's LM sort task every answer is 8 tokens, right or wrong.

The toy. Prompt p (one of P) has a right answer p mod V. A response is

    token 0:      the answer a ~ pi(. | p)                 (V choices; commits to a solution path)
    tokens 1..n:  working, one token per step t, continued with probability 1 - sigmoid(s[p, a, t])
    token n + 1:  end of response (the step where the policy stops); none when n reaches the budget T

so its length is 1 + min(n + 1, T) tokens and the working sees the committed answer, as an LM's next
tokens see its earlier ones. Reward 1 when a is right and the working has at least `need` tokens (a
solution needs its work, beyond which more is waste), else 0. The policy is tabular (answer logits
(P, V), stop logits (P, V, T)), K replicas side by side as `SortModel`'s, trained on-policy: each step
samples G responses per prompt, GRPO advantages (`rlvr.core`), `pg_loss`, and `aggregate_loss` with
the run's normaliser, one optimizer step. Optionally Kimi k1.5's length reward (`rlvr.rewards.
kimi_length_reward`, weight 1) is added from a given step. Everything measured is exact, not
sampled: the answer probabilities and the length law give E[length | answer] in closed form
(`exact_stats`).

The optimizer is plain SGD by default, so a drift in length is the gradient's own: under the
constant normaliser a wrong answer's expected gradient on its stop logits is 0 (its advantage does
not depend on its length), and SGD leaves its length where it was. Adam rescales each parameter by
its own gradient noise, which is skewed here (a rare stop, a frequent continue), and moves those
lengths by itself; the report measures both optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from rlvr.core import aggregate_loss, get_advantage_fn, pg_loss
from rlvr.rewards import kimi_length_reward

NORMALISERS = ("seq_mean_token_mean", "seq_sum_constant")
OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


@dataclass
class LengthToyConfig:
    aggregation: str = "seq_mean_token_mean"  # one of NORMALISERS
    kimi_from: int | None = None  # first step with Kimi's length reward (0 = from the start); None = never
    prompts: int = 4  # P
    answers: int = 4  # V
    budget: int = 12  # T: most working steps
    need: int = 6  # working tokens a right answer needs
    responses: int = 8  # G per prompt
    steps: int = 300
    optimizer: str = "sgd"  # one of OPTIMIZERS: sgd steps along the gradient itself (see the module docstring)
    lr: float = 10.0
    stop_init: float = -1.1  # initial stop logit: sigmoid(-1.1) = 0.25 per step, ~3 working tokens
    seed: int = 0
    seeds: int = 32  # K replicas trained side by side

    def __post_init__(self) -> None:
        if self.aggregation not in NORMALISERS:
            raise ValueError(f"unknown aggregation {self.aggregation!r}; choose from {list(NORMALISERS)}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; choose from {list(OPTIMIZERS)}")
        for name in ("prompts", "answers", "budget", "responses", "steps", "seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.need <= self.budget:
            raise ValueError(f"need must be in 0..budget ({self.budget}), got {self.need}")
        if self.responses < 2:
            raise ValueError("GRPO advantages need at least 2 responses per prompt")


class LengthPolicy(nn.Module):
    """K tabular policies: answer logits (K, P, V) and stop logits (K, P, V, T)."""

    def __init__(self, cfg: LengthToyConfig):
        super().__init__()
        k, p, v, t = cfg.seeds, cfg.prompts, cfg.answers, cfg.budget
        self.answer = nn.Parameter(0.5 * torch.randn(k, p, v))
        self.stop = nn.Parameter(cfg.stop_init + 0.5 * torch.randn(k, p, v, t))


@dataclass
class LengthToyResult:
    config: LengthToyConfig
    steps: list[int] = field(default_factory=list)
    accuracy: list[list[float]] = field(default_factory=list)  # (steps, K) exact P(reward 1)
    length: list[list[float]] = field(default_factory=list)  # (steps, K) exact E[tokens]
    wrong_length: list[list[float]] = field(default_factory=list)  # (steps, K) E[tokens | wrong answer token]
    right_length: list[list[float]] = field(default_factory=list)  # (steps, K) E[tokens | right answer token]

    def final(self, name: str) -> list[float]:
        """(K,) the last recorded value of a series (`accuracy`, `length`, ...)."""
        return getattr(self, name)[-1]


def length_law(stop: Tensor) -> tuple[Tensor, Tensor]:
    """stop logits (..., T) -> P(n = j) for j = 0..T (..., T + 1), the last entry the budget, and
    the response length 1 + min(n + 1, T) of each j (T + 1,)."""
    t = stop.shape[-1]
    q = torch.sigmoid(stop)  # (..., T) stop probability at each step
    go = torch.cumprod(torch.cat([torch.ones_like(q[..., :1]), 1 - q], dim=-1), dim=-1)  # (..., T + 1) reach j
    probs = go * torch.cat([q, torch.ones_like(q[..., :1])], dim=-1)  # stop at j, or the budget at j = T
    n = torch.arange(t + 1, dtype=stop.dtype)
    return probs, 1 + torch.clamp(n + 1, max=t)


def exact_stats(model: LengthPolicy, cfg: LengthToyConfig) -> dict[str, Tensor]:
    """Exact accuracy, E[length], E[length | wrong answer token], E[length | right one], each (K,)
    averaged over prompts."""
    with torch.no_grad():
        pi = torch.softmax(model.answer, dim=-1)  # (K, P, V)
        probs, lengths = length_law(model.stop)  # (K, P, V, T + 1), (T + 1,)
        mean_len = (probs * lengths).sum(-1)  # (K, P, V)
        right = torch.nn.functional.one_hot(torch.arange(cfg.prompts) % cfg.answers, cfg.answers).bool()  # (P, V)
        enough = probs[..., cfg.need:].sum(-1)  # (K, P, V) P(n >= need)
        wrong_pi = pi * ~right
        return {"accuracy": (pi * enough * right).sum(-1).mean(-1),
                "length": (pi * mean_len).sum(-1).mean(-1),
                "wrong_length": ((wrong_pi * mean_len).sum(-1) / wrong_pi.sum(-1)).mean(-1),
                "right_length": (mean_len * right).sum(-1).mean(-1)}


def sample(model: LengthPolicy, cfg: LengthToyConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """G responses per prompt and replica -> answers (K, P, G), working lengths n (K, P, G), log-probs
    (K*P*G, 1 + T) of every token (with grad) and its mask (K*P*G, 1 + T)."""
    k, p, g, t = cfg.seeds, cfg.prompts, cfg.responses, cfg.budget
    logp_answer = torch.log_softmax(model.answer, dim=-1)  # (K, P, V)
    answers = torch.multinomial(logp_answer.detach().exp().reshape(-1, cfg.answers), g, replacement=True)
    answers = answers.reshape(k, p, g)
    stop = model.stop.gather(2, answers.unsqueeze(-1).expand(-1, -1, -1, t))  # (K, P, G, T)
    stops = torch.rand(k, p, g, t) < torch.sigmoid(stop.detach())  # (K, P, G, T)
    n = torch.where(stops.any(-1), stops.float().argmax(-1), torch.full_like(answers, t))  # (K, P, G)
    steps = torch.arange(t)
    working = torch.where(steps < n.unsqueeze(-1), torch.nn.functional.logsigmoid(-stop),
                          torch.nn.functional.logsigmoid(stop))  # (K, P, G, T) continue, then stop
    first = logp_answer.gather(-1, answers).unsqueeze(-1)  # (K, P, G, 1)
    logprobs = torch.cat([first, working], dim=-1).reshape(k * p * g, 1 + t)
    mask = torch.cat([torch.ones_like(n.unsqueeze(-1), dtype=torch.bool), steps <= n.unsqueeze(-1)], dim=-1)
    return answers, n, logprobs, mask.reshape(k * p * g, 1 + t)


def rewards_of(answers: Tensor, n: Tensor, cfg: LengthToyConfig, kimi: bool) -> Tensor:
    """(K, P, G) 0/1 correctness, plus Kimi's group length reward when `kimi`."""
    right = answers == (torch.arange(cfg.prompts) % cfg.answers).view(1, -1, 1)
    correct = right & (n >= cfg.need)  # (K, P, G)
    rewards = correct.to(torch.get_default_dtype())
    if kimi:
        lengths = (1 + torch.clamp(n + 1, max=cfg.budget)).reshape(-1, cfg.responses).tolist()
        flags = correct.reshape(-1, cfg.responses).tolist()
        bonus = [kimi_length_reward(ls, cs) for ls, cs in zip(lengths, flags)]  # one group at a time
        rewards = rewards + torch.tensor(bonus, dtype=rewards.dtype).reshape(rewards.shape)
    return rewards


def run_length_toy(cfg: LengthToyConfig) -> LengthToyResult:
    """Train K replicas on-policy; record the exact statistics before every step and after the last."""
    torch.manual_seed(cfg.seed)
    model = LengthPolicy(cfg)
    optimizer = OPTIMIZERS[cfg.optimizer](model.parameters(), lr=cfg.lr)
    advantage_fn = get_advantage_fn("grpo")
    g, result = cfg.responses, LengthToyResult(cfg)
    for step in range(cfg.steps + 1):
        stats = exact_stats(model, cfg)
        result.steps.append(step)
        for name, value in stats.items():
            getattr(result, name).append(value.tolist())
        if step == cfg.steps:
            break
        # --- rollout and rewards ---
        answers, n, logprobs, mask = sample(model, cfg)
        rewards = rewards_of(answers, n, cfg, kimi=cfg.kimi_from is not None and step >= cfg.kimi_from)
        # --- update: each replica's loss aggregated over its own P*G responses, summed over replicas ---
        per_token, _ = pg_loss(logprobs, advantage_fn(rewards.reshape(-1), g))  # (K*P*G, 1 + T)
        loss = aggregate_loss(per_token, mask, cfg.aggregation, constant=1 + cfg.budget,
                              denominator=cfg.prompts * g)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return result
