"""The one field helper of every config section, and the checks each field and section carries with it.

A field is declared with its default, its help text (where the value comes from) and, where it has one, its
range or its choices: `steps: int = f(100, "RL steps.", gt=0)`. `check_section` walks a section (and the
sections inside it), checks every field against what it declares, and then calls the section's own
`check(prefix)` for the rules that tie its fields together; errors are one `ConfigError` line naming the key as
the user writes it (`train.steps must be > 0, got 0`).
"""

from __future__ import annotations

import copy
import difflib
import math
import typing
from dataclasses import MISSING, field, fields, is_dataclass
from numbers import Real
from typing import Any, Sequence


class ConfigError(ValueError):
    """A config problem, reported by the CLI as one line on stderr and exit code 2."""


def check_finite_number(name: str, value: object) -> float:
    """`value` as a float; ValueError for a bool, a non-number, NaN or +-inf. NaN passes every `<`/`>` range
    check and one NaN hyper-parameter makes every weight NaN, so ranges alone do not catch it."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def f(default: Any, help: str, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
      le: float | None = None, choices: Sequence[Any] | None = None) -> Any:
    """A dataclass field with help text and, optionally, its range (`gt` >, `ge` >=, `lt` <, `le` <=) or the
    values it may take (`choices`); a mutable default (dict, list, a section) goes through a factory."""
    meta = {"help": help, "gt": gt, "ge": ge, "lt": lt, "le": le, "choices": tuple(choices) if choices else None}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if is_dataclass(default):  # a section with defaults of its own, e.g. OptimConfig(lr=1e-6)
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


_UNSET = object()


def like(section: type, name: str, default: Any = _UNSET, help: str | None = None) -> Any:
    """The field `name` of another `section`, declared again: a command that reads the same setting in a config of
    its own (`rlvr eval`'s model.device is `rlvr train`'s) shares its help, range and choices, and its default
    unless `default` is given; `help`, if given, replaces the help."""
    fld = section.__dataclass_fields__[name]
    meta = fld.metadata
    return f(field_default(fld) if default is _UNSET else default, meta["help"] if help is None else help,
             **{bound: meta.get(bound) for bound in ("gt", "ge", "lt", "le", "choices")})


def bound_text(meta: dict) -> str | None:
    """`> 0`, `>= 0` or `in (0, 1]`: the range a field declares, None when it declares none."""
    lo, lo_in = (meta.get("gt"), False) if meta.get("gt") is not None else (meta.get("ge"), True)
    hi, hi_in = (meta.get("lt"), False) if meta.get("lt") is not None else (meta.get("le"), True)
    if lo is None and hi is None:
        return None
    if hi is None:
        return f"{'>=' if lo_in else '>'} {lo}"
    if lo is None:
        return f"{'<=' if hi_in else '<'} {hi}"
    return f"in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"


_TESTS = {"gt": lambda v, b: v > b, "ge": lambda v, b: v >= b, "lt": lambda v, b: v < b, "le": lambda v, b: v <= b}


def _in_bounds(value: float, meta: dict) -> bool:
    return all(meta.get(name) is None or test(value, meta[name]) for name, test in _TESTS.items())


def check_value(key: str, value: Any, meta: dict) -> None:
    """One field's value against its declared range or choices (None, an optional value left empty, passes)."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, float):  # every float, ranged or not: a NaN weight or rate passes any later `<` test
        try:
            check_finite_number(key, value)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{key}: unknown {value!r}; choose from {list(choices)}")
    bound = bound_text(meta)
    if bound and isinstance(value, Real) and not _in_bounds(value, meta):
        raise ConfigError(f"{key} must be {bound}, got {value}")


def check_section(section: Any, prefix: str = "") -> None:
    """Every field of `section` against what it declares, sub-sections first-to-last as declared, then the
    section's own `check(prefix)` (the rules between its fields), if it has one."""
    for fld in fields(section):
        value = getattr(section, fld.name)
        if is_dataclass(value):
            check_section(value, f"{prefix}{fld.name}.")
        else:
            check_value(f"{prefix}{fld.name}", value, fld.metadata)
    own = getattr(section, "check", None)
    if own is not None:
        own(prefix)


def key_meant(name: str, cls: type) -> str | None:
    """The key of `cls` meant by the unknown `name`: the key of that name in one section of `cls` (an offline
    trainer's `lr` is `optim.lr`), else the closest key of `cls`, else None."""
    hints = typing.get_type_hints(cls)
    moved = [f"{section}.{name}" for section, tp in hints.items()
             if is_dataclass(tp) and name in typing.get_type_hints(tp)]
    close = moved if len(moved) == 1 else difflib.get_close_matches(name, list(hints), n=1)
    return close[0] if close else None


def field_default(fld: Any) -> Any:
    """The default a field gives a new section (its factory called), None when it has none."""
    if fld.default is not MISSING:
        return fld.default
    return fld.default_factory() if fld.default_factory is not MISSING else None
