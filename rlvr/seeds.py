"""Seed derivation: one seed per (run seed, step, purpose, ...), the only place seeds are derived."""

from __future__ import annotations

import random

import numpy as np
import torch

ROLLOUT, EVAL_SAMPLING, SHUFFLE, EPISODE_TURN, ENGINE_PART = 0, 1, 2, 3, 4  # purposes of derived seeds


def derive_seed(seed: int, step: int, purpose: int, *more: int) -> int:
    """A seed for (run seed, step, purpose, *more): sampling at step k never depends on earlier steps,
    so a resumed run samples exactly what the uninterrupted one did. Extra keys (e.g. a dynamic-sampling
    round) give independent streams; without them the seed is that of the plain key."""
    return int(np.random.SeedSequence([seed, step, purpose, *more]).generate_state(1)[0])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
