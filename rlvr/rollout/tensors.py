"""Completions -> the padded tensors a trainer feeds to the policy.

Layout (B completions, P = longest prompt, T = longest completion):

    input_ids       (B, P + T)  [pad ... pad prompt | completion pad ... pad]
    attention_mask  (B, P + T)  1 on prompt and completion tokens, 0 on padding
    position_ids    (B, P + T)  0, 1, 2, ... counted over real tokens only (left padding shifts
                                nothing); pass it to the model, which would otherwise count pads
    completion_ids  (B, T)      = input_ids[:, P:]
    completion_mask (B, T)      1 on generated tokens (EOS included), 0 on padding
    old_logprobs    (B, T)      the sampler's log-prob of each generated token, 0 on padding
    prompt_length   int         P

The log-prob of completion token j comes from the logits at column P - 1 + j:

    logits = model(input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    logp = logits[:, P - 1 : -1].log_softmax(-1).gather(-1, completion_ids[..., None])[..., 0]  # (B, T)

Values at padded positions are meaningless: select with `torch.where(completion_mask.bool(), x, 0)`,
which (unlike multiplying by the mask) stays finite even if an attention kernel returns NaN for a
padding query that sees no key.
"""

from __future__ import annotations

import torch

from rlvr.rollout.base import Completion


def completions_to_tensors(completions: list[Completion], pad_id: int) -> dict:
    """Pack completions as documented in the module docstring (all tensors on CPU)."""
    if not completions:
        raise ValueError("completions must be a non-empty list")
    bad = [i for i, c in enumerate(completions) if len(c.logprobs) != len(c.token_ids) or not c.prompt_ids]
    if bad:
        raise ValueError(f"completion {bad[0]} has an empty prompt or a logprob count != token count")
    batch = len(completions)
    width = max(len(c.prompt_ids) for c in completions)  # P
    span = max(max(len(c.token_ids) for c in completions), 1)  # T (>= 1 keeps shapes non-empty)
    input_ids = torch.full((batch, width + span), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, width + span), dtype=torch.long)
    old_logprobs = torch.zeros((batch, span), dtype=torch.float32)
    for b, c in enumerate(completions):
        start, stop = width - len(c.prompt_ids), width + len(c.token_ids)
        input_ids[b, start:width] = torch.tensor(c.prompt_ids, dtype=torch.long)
        input_ids[b, width:stop] = torch.tensor(c.token_ids, dtype=torch.long)
        attention_mask[b, start:stop] = 1
        old_logprobs[b, : len(c.logprobs)] = torch.tensor(c.logprobs, dtype=torch.float32)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # (B, P + T)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "completion_ids": input_ids[:, width:].clone(),
        "completion_mask": attention_mask[:, width:].clone(),
        "old_logprobs": old_logprobs,
        "prompt_length": width,
    }
