"""Input checks shared by the core: bad input raises `ValueError` naming the shapes or values.

Shape checks are free (no device sync). Checks on values (a 0/1 float mask, NaN in rewards) need one
host sync each; they run on small tensors or once per batch, never per token in a loop. A `bool` mask
skips the value check entirely.
"""

from __future__ import annotations

import torch
from torch import Tensor


def check_tensor(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_same_shape(**named: Tensor) -> None:
    """All tensors must have exactly the same shape: the core never broadcasts silently."""
    shapes = {name: tuple(check_tensor(name, x).shape) for name, x in named.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name}{shape}" for name, shape in shapes.items())
        raise ValueError(f"shape mismatch: {listed}")


def check_ndim(name: str, x: Tensor, ndim: int) -> None:
    if check_tensor(name, x).dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(x.shape)}")


def as_bool_mask(mask: Tensor, like: Tensor, mask_name: str = "mask", like_name: str = "x") -> Tensor:
    """Validate `mask` (bool, or 0/1 of any dtype) against `like`'s shape; return it as bool."""
    check_same_shape(**{like_name: like, mask_name: mask})
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
        bad = mask[(mask != 0) & (mask != 1)].flatten()[:5].tolist()
        raise ValueError(f"{mask_name} must be boolean or contain only 0/1, found values {bad}")
    return mask != 0


def check_finite(name: str, x: Tensor) -> None:
    """Raise on NaN/inf, listing the first offending positions and values (one host sync)."""
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        idx = (~finite).nonzero()[:5]
        found = [(tuple(i.tolist()), x[tuple(i)].item()) for i in idx]
        raise ValueError(f"{name} contains non-finite values at (index, value): {found}")


def check_positive(name: str, value: float | Tensor) -> None:
    """Checks Python numbers only: reading a tensor's value would cost a device sync per call."""
    if isinstance(value, Tensor):
        return
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")


def check_group_size(n: int, group_size: int, minimum: int = 1) -> None:
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ValueError(f"group_size must be an int, got {group_size!r}")
    if group_size < minimum:
        raise ValueError(f"group_size must be >= {minimum}, got {group_size}")
    if n % group_size != 0:
        raise ValueError(f"group_size {group_size} does not divide the number of rewards {n}")
