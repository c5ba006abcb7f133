"""The one grammar of rlvr's commands that read a config:

    rlvr COMMAND [CONFIG] [--set KEY=VALUE]... [--out DIR] [--help-config]

CONFIG (a YAML file, or the name of a shipped one: `rlvr configs`) may stand anywhere among the options; `--set`
takes one KEY=VALUE and is repeated; `--out` names the folder the command writes. Old spellings still work, each
with one deprecation line on stderr: several KEY=VALUE after one `--set` (`--set a=1 b=2`), and the per-key flags
of the offline trainers (`rlvr dpo --lr 1e-6` is `--set optim.lr=1e-6`).

This module imports argparse and the standard library only: building every command's parser (`rlvr --help`) must
not import torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlvr.config.sections import ConfigError


def add_config_args(parser: argparse.ArgumentParser, config_help: str, set_help: str | None = None) -> None:
    """CONFIG (anywhere, optional), `--set KEY=VALUE` (repeated) and `--help-config` on `parser`."""
    parser.add_argument("configs", nargs="*", metavar="CONFIG", help=config_help)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help=set_help or "override one config key, typed by its field (dotted: optim.lr=3e-4); "
                                         "repeat --set for each key")
    parser.add_argument("--help-config", action="store_true",
                        help="list every config key with its default, range and help, and exit")


def settle(args: argparse.Namespace, prog: str) -> None:
    """`args.config` (one CONFIG or None) from the positionals; a KEY=VALUE among them (the old greedy `--set a=1
    b=2`) joins `args.overrides` with one deprecation line. Two configs: ConfigError."""
    configs = []
    for item in args.configs:
        key, sep, _ = item.partition("=")
        if sep and key and not Path(item).exists():
            print(f"{prog}: deprecated: {item!r} without its own --set (one --set takes one KEY=VALUE); write --set "
                  f"{item}", file=sys.stderr)
            args.overrides.append(item)
        else:
            configs.append(item)
    if len(configs) > 1:
        raise ConfigError(f"one CONFIG expected, got {', '.join(map(repr, configs))} (a KEY=VALUE goes after --set)")
    args.config = configs[0] if configs else None
    del args.configs


class DeprecatedFlag(argparse.Action):
    """An old per-key flag (`--lr 1e-6`): becomes `--set KEY=VALUE` with one deprecation line. `--no-X` of a
    boolean key sets it false."""

    def __init__(self, option_strings: list[str], dest: str, key: str, boolean: bool = False, **kwargs: Any) -> None:
        self.key, self.boolean = key, boolean
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0 if boolean else None,
                         help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        value = str(not option_string.startswith("--no-")).lower() if self.boolean else values
        print(f"{parser.prog}: deprecated: {option_string} is now the config key {self.key}; write --set "
              f"{self.key}={value}", file=sys.stderr)
        namespace.overrides = [*getattr(namespace, "overrides", []), f"{self.key}={value}"]


def add_deprecated_flags(parser: argparse.ArgumentParser, keys: dict[str, tuple[str, bool]]) -> None:
    """{old flag name (`lr`): (its key, boolean)}: each `--lr` (and `--no-dedup` for a boolean) accepted, hidden."""
    for name, (key, boolean) in keys.items():
        flag = "--" + name.replace("_", "-")
        flags = [flag, "--no-" + flag[2:]] if boolean else [flag]
        parser.add_argument(*flags, action=DeprecatedFlag, key=key, boolean=boolean)


def out_override(args: argparse.Namespace, key: str = "out_dir") -> list[str]:
    """`--out DIR` as the config key it names (`out_dir=DIR`), after the --set items; both given is an error."""
    out = getattr(args, "out", None)
    if out is None:
        return list(args.overrides)
    if any(item.partition("=")[0] == key for item in args.overrides):
        raise ConfigError(f"--out and --set {key} both name the output folder; give one of them")
    return [*args.overrides, f"{key}={out}"]


def set_args(items: list[str]) -> list[str]:
    """`--set KEY=VALUE` once per item: the argv of overrides for a command line built in code (tests, scripts)."""
    return [arg for item in items for arg in ("--set", item)]
