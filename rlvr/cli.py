"""The `rlvr` command line: argv -> config -> run; nothing else.

Each subcommand lives in a module that provides `add_parser(subparsers)`; the parser it adds sets
`func` (args -> exit code). Adding a command = adding its module to COMMAND_MODULES.

Errors: a bad config or argument prints one line and exits with 2, a runtime problem the user can fix
(missing file, bad data) one line and 1; RLVR_DEBUG=1 shows the traceback instead.

Run from the shell (argv None), `main` first re-executes itself with a fast allocator preloaded
(`rlvr.allocator`; RLVR_ALLOCATOR=system switches that off).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = [  # each provides add_parser(subparsers) (or add_parsers, for several commands)
    "rlvr.train.commands",  # demo, train, sft
    "rlvr.eval.cli",  # eval
    "rlvr.algorithms.cli",  # dpo, reward-model, rft
    "rlvr.data.cli",  # data decontaminate | dedup | ...
    "rlvr.experiments.cli",  # experiment sort-toy | two-state
    "rlvr.algorithms.commands",  # presets, compare, recipe
]


def build_parser() -> argparse.ArgumentParser:
    from rlvr import __version__

    parser = argparse.ArgumentParser(prog="rlvr", description="Post-train language models with RL from "
                                     "verifiable rewards. Start with `rlvr demo`.")
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        (getattr(module, "add_parser", None) or module.add_parsers)(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # the real command line, not a call from Python: set up the allocator first
        from rlvr.allocator import AllocatorError, setup_allocator

        try:
            setup_allocator()
        except AllocatorError as err:
            print(f"rlvr: error: {err}", file=sys.stderr)
            return 2
    from rlvr.config import ConfigError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as err:
        if os.environ.get("RLVR_DEBUG"):
            raise
        print(f"rlvr {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, NotADirectoryError, ValueError) as err:
        if os.environ.get("RLVR_DEBUG"):
            raise
        print(f"rlvr {args.command}: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `rlvr train --help-config | head`
        return 0
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
