"""Stop strings: detect, while decoding, the step at which a completion's text first contains one.

Only a window of the last tokens is decoded each step (a stop string that completes at step t lies
in the text of the last few tokens), so the cost does not grow with the completion length.
"""

from __future__ import annotations

import torch
from torch import Tensor


class StopChecker:
    """Tracks which sequences hit a stop string; `reasons` maps sequence id -> the stop string."""

    def __init__(self, tokenizer, stops: tuple[str, ...]):
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"stop strings must be non-empty strings, got {stops!r}")
        self.tokenizer, self.stops = tokenizer, tuple(stops)
        # A character takes at most 4 byte-level tokens; +4 covers a partial character at the edge.
        self.window = 4 * max(map(len, stops)) + 4 if stops else 0
        self.reasons: dict[int, str] = {}

    def hits(self, tokens: Tensor, seq: Tensor, t: int) -> Tensor:
        """tokens: (N, T) generated ids by sequence id, filled up to column t; seq: (R,) the live
        sequences. Returns (R,) bool: the text of sequence seq[i] now contains a stop string."""
        found = torch.zeros(seq.numel(), dtype=torch.bool)
        if not self.stops:
            return found
        recent = tokens[seq, max(0, t + 1 - self.window): t + 1].tolist()
        texts = self.tokenizer.batch_decode(recent, skip_special_tokens=True)
        for i, text in enumerate(texts):
            matched = [s for s in self.stops if s in text]
            if matched:
                found[i] = True
                self.reasons[int(seq[i])] = matched[0]
        return found


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """The text before the earliest occurrence of any stop string (the whole text if none occurs)."""
    starts = [text.find(s) for s in stops if s in text]
    return text[: min(starts)] if starts else text
