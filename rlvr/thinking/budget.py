"""A thinking-token budget at inference, on top of any `RolloutEngine`.

Qwen3 (Yang et al. 2025, Sec. 4.3, "thinking budget"): when the thinking reaches the user's budget,
the thinking is stopped by inserting "Considering the limited time by the user, I have to give the
solution based on the thinking directly now." and `</think>`, and the model writes its answer from the
partial reasoning. Here that is two `generate` calls through the engine protocol, so it works with any
engine:

1. thinking: `max_new_tokens = budget`, stop string `</think>`;
2. if the thinking closed by itself, continue from `prompt + thinking + </think>`; if it hit the budget,
   continue from `prompt + thinking + early-stop text`; if it ended otherwise (EOS), it is returned as is.

The two parts are joined into one `Completion`. Tokens the wrapper inserted (the early-stop text) were
not sampled: they get log-prob 0.0 and `extra["sampled_mask"]` marks them False, so a trainer can mask
them. Engines report which stop string ended a completion in `extra["stop_reason"]` (`HFEngine` does);
an engine that reports nothing is taken to have stopped on `</think>`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import torch

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.thinking.fusion import THINK_END, split_thinking

EARLY_STOP_PHRASE = ("Considering the limited time by the user, I have to give the solution based on the "
                     "thinking directly now.")
# Qwen3 Sec. 4.3, phrase then the closing tag. The report writes `</think>.`; the period is left out on
# purpose: the chat template follows `</think>` with a blank line, and a stray "." would open the answer.
EARLY_STOP_TEXT = f"\n\n{EARLY_STOP_PHRASE}\n{THINK_END}\n\n"


class ThinkingBudgetEngine:
    """Wrap `engine` so that thinking is cut at `budget` new tokens (a `RolloutEngine` itself).

    answer_tokens: most new tokens for the answer after the thinking (default: the caller's
        `sampling.max_new_tokens`). The caller's stop strings apply to the answer, not the thinking.
    early_stop_text: inserted after cut thinking; must end the thinking block (contain `</think>`).
    """

    def __init__(self, engine: RolloutEngine, budget: int, *, answer_tokens: int | None = None,
                 early_stop_text: str = EARLY_STOP_TEXT):
        if not isinstance(budget, int) or budget < 1:
            raise ValueError(f"thinking budget must be a positive int, got {budget!r}")
        if answer_tokens is not None and answer_tokens < 1:
            raise ValueError(f"answer_tokens must be >= 1, got {answer_tokens}")
        if THINK_END not in early_stop_text:
            raise ValueError(f"early_stop_text must close the thinking with {THINK_END!r}")
        self.engine, self.budget, self.answer_tokens = engine, budget, answer_tokens
        self.early_stop_text = early_stop_text

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.engine.load_weights(named_tensors)

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams) -> list[Completion]:
        think = replace(sampling, max_new_tokens=self.budget, stop=(THINK_END,))
        thoughts = self.engine.generate(prompts, n, think)  # (P * n,) flat, groups contiguous
        inserts = [self._insert(c) for c in thoughts]  # None: finished without an answer phase
        todo = [i for i, ins in enumerate(inserts) if ins is not None]
        answer = replace(sampling, max_new_tokens=self.answer_tokens or sampling.max_new_tokens,
                         seed=None if sampling.seed is None else sampling.seed + 1)
        answers = self.engine.generate([thoughts[i].prompt + thoughts[i].text + inserts[i] for i in todo], 1,
                                       answer) if todo else []
        out = [_unchanged(c) for c in thoughts]
        for i, a in zip(todo, answers):
            out[i] = _join(thoughts[i], inserts[i], a, exhausted=thoughts[i].finish_reason == "length")
        return out

    def _insert(self, c: Completion) -> str | None:
        """Text to append to the thinking before the answer phase, or None to return `c` unchanged."""
        if c.finish_reason == "length":
            return self.early_stop_text
        if c.extra.get("stop_reason", THINK_END) == THINK_END:
            return THINK_END
        return None


def _unchanged(c: Completion) -> Completion:
    thinking, answer = split_thinking(c.text)
    extra = {**c.extra, "thinking_tokens": len(c.token_ids), "budget_exhausted": False,
             "thinking": thinking, "answer": answer, "sampled_mask": [True] * len(c.token_ids)}
    return replace(c, extra=extra)


def _common_prefix(a: list[int], b: list[int]) -> int:
    k = 0
    for x, y in zip(a, b):
        if x != y:
            break
        k += 1
    return k


def _join(thought: Completion, insert: str, answer: Completion, exhausted: bool) -> Completion:
    """One completion from the thinking, the inserted text and the answer, aligned on token ids.

    The answer call re-tokenised prompt + thinking + insert; its prompt ids agree with the thinking's
    ids up to some point (all of them for a tokenizer that does not merge across the boundary). Ids up
    to there keep their sampled log-probs, the rest of the answer prompt is inserted text (0.0).
    """
    n_prompt = len(thought.prompt_ids)
    if answer.prompt_ids[:n_prompt] != thought.prompt_ids:
        raise ValueError("the engine tokenised the prompt differently when continuing after the thinking; "
                         "cannot align the two parts of the completion")
    kept = _common_prefix(thought.prompt_ids + thought.token_ids, answer.prompt_ids) - n_prompt
    inserted = answer.prompt_ids[n_prompt + kept:]
    token_ids = answer.prompt_ids[n_prompt:] + answer.token_ids
    logprobs = thought.logprobs[:kept] + [0.0] * len(inserted) + answer.logprobs
    sampled = [True] * kept + [False] * len(inserted) + [True] * len(answer.token_ids)
    thinking, _ = split_thinking(thought.text + THINK_END)
    extra = {**answer.extra, "thinking_tokens": len(thought.token_ids), "budget_exhausted": exhausted,
             "thinking": thinking, "answer": answer.text.strip(), "sampled_mask": sampled}
    return Completion(prompt=thought.prompt, prompt_ids=list(thought.prompt_ids), token_ids=token_ids,
                      logprobs=logprobs, text=thought.text + insert + answer.text,
                      finish_reason=answer.finish_reason, extra=extra)
