"""The three reward designs of the sorting toy, and its prompt sets.

Source: Stanford CS336 (Spring 2025), lecture 17 "Policy gradient", which writes three rewards for
"sort the prompt's tokens" and argues about each:

    exact      1 if the response is sorted(prompt), else 0         correct but sparse
    position   #{positions t: response_t == sorted(prompt)_t}        partial credit, 0..L
    inclusion  #{prompt tokens found in the response}                denser partial credit, 0..2L-1
               + #{adjacent response pairs with r_t <= r_{t+1}}      (`sort_inclusion_ordering_reward`)

and shows that the last one can be hacked: a response can collect every point without being the
sorted prompt. With the lecture's prompts (no repeated token) it cannot: including all L distinct
tokens in L slots forces a permutation, and the only ordered permutation is the sorted one. A prompt
that repeats a token opens the hack: for [1, 0, 2, 2] (sorted [0, 1, 2, 2]) the responses [0, 0, 1, 2],
[0, 1, 1, 2], [0, 1, 2, 3] and [0, 1, 2, 4] also score the maximum 7 (the slot freed by the repeat can
hold any token that keeps the order). `REPEATED_PROMPTS` are such prompts; each has five
maximum-reward responses, one of which is correct.

Every reward maps prompts (..., L) and responses (..., L) integer tensors with matching leading dims
to (...) float rewards.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

SortReward = Callable[[Tensor, Tensor], Tensor]

LECTURE_PROMPTS: tuple[tuple[int, ...], ...] = ((1, 0, 2), (3, 2, 4), (1, 2, 3))
# Each repeats a token; each has five responses of maximum inclusion reward (7), only one sorted.
REPEATED_PROMPTS: tuple[tuple[int, ...], ...] = ((1, 0, 2, 2), (3, 2, 4, 3), (1, 2, 3, 1))
PROMPT_SETS: dict[str, tuple[tuple[int, ...], ...]] = {"lecture": LECTURE_PROMPTS, "repeated": REPEATED_PROMPTS}


def _check(prompts: Tensor, responses: Tensor) -> None:
    if prompts.shape[-1] != responses.shape[-1]:
        raise ValueError(f"prompt and response lengths differ: {tuple(prompts.shape)} vs {tuple(responses.shape)}")


def exact_match(prompts: Tensor, responses: Tensor) -> Tensor:
    """1.0 where the response is the sorted prompt, else 0.0."""
    _check(prompts, responses)
    return (prompts.sort(dim=-1).values == responses).all(dim=-1).to(torch.get_default_dtype())


def position_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """The number of positions where the response matches the sorted prompt (0..L)."""
    _check(prompts, responses)
    return (prompts.sort(dim=-1).values == responses).sum(dim=-1).to(torch.get_default_dtype())


def inclusion_ordering_reward(prompts: Tensor, responses: Tensor) -> Tensor:
    """CS336 lecture 17 `sort_inclusion_ordering_reward`, vectorised:
    #{prompt tokens x (with multiplicity) that occur anywhere in the response}
    + #{adjacent response pairs with r_t <= r_{t+1}}."""
    _check(prompts, responses)
    present = (prompts.unsqueeze(-1) == responses.unsqueeze(-2)).any(dim=-1)  # (..., L) prompt token found
    ordered = responses[..., 1:] >= responses[..., :-1]  # (..., L-1)
    return (present.sum(-1) + ordered.sum(-1)).to(torch.get_default_dtype())


SORT_REWARDS: dict[str, SortReward] = {
    "exact": exact_match,
    "position": position_reward,
    "inclusion": inclusion_ordering_reward,
}


def max_sort_reward(name: str, length: int) -> float:
    """The best reward a response of `length` tokens can score (the sorted prompt scores it)."""
    return {"exact": 1.0, "position": float(length), "inclusion": float(2 * length - 1)}[name]
