"""The `rlvr` command line: argv -> config -> run; nothing else.

Each subcommand lives in a module that provides `add_parser(subparsers)`; the parser it adds sets
`func` (args -> exit code). Adding a command = adding its module to COMMAND_MODULES.

Errors, the same for every subcommand and for `python -m rlvr`: bad input (config, argument, missing
file, bad data row) prints one line and exits with 2; anything else is an internal error, one line and
exit code 1. RLVR_DEBUG=1 shows the traceback instead. A run that stops itself (too many non-finite
steps, a full disk: exit 1; SIGINT/SIGTERM after its checkpoint: 130/143) says so in one line. Ctrl-C
at any other moment, start-up included, is one line `rlvr [COMMAND]: interrupted` and exit code 130.
Subcommands raise; only `main` maps.

Run from the shell (argv None), `main` first re-executes itself with a fast allocator preloaded
(`rlvr.allocator`; RLVR_ALLOCATOR=system switches that off).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rlvr.allocator import AllocatorError, setup_allocator

COMMAND_MODULES = [  # each provides add_parser(subparsers) (or add_parsers, for several commands)
    "rlvr.commands.train",  # demo, train, sft
    "rlvr.commands.eval",  # eval
    "rlvr.commands.offline",  # dpo, reward-model, rft
    "rlvr.commands.data",  # data decontaminate | dedup | ...
    "rlvr.commands.experiments",  # experiment sort-toy | two-state
    "rlvr.commands.pipelines",  # presets, compare, recipe
    "rlvr.commands.report",  # doctor, report
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


USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError)  # ConfigError is a ValueError


def main(argv: list[str] | None = None) -> int:
    """`rlvr ...` and `python -m rlvr ...`: the one place errors become exit codes."""
    try:  # Ctrl-C in the first seconds (the subcommands' imports) is an interrupt too, not a traceback
        if argv is None:  # the real command line, not a call from Python: set up the allocator first
            setup_allocator()
        args = build_parser().parse_args(argv)
    except AllocatorError as err:
        print(f"rlvr: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlvr: interrupted", file=sys.stderr)
        return 130
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `rlvr train --help-config | head`
        return 0
    except KeyboardInterrupt:
        print(f"rlvr {args.command}: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as err:
        if os.environ.get("RLVR_DEBUG"):
            raise
        print(f"rlvr {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        if isinstance(getattr(err, "exit_code", None), int):  # a run that stopped itself (rlvr.train.guard)
            print(f"rlvr {args.command}: stopped: {err}", file=sys.stderr)
            return err.exit_code
        if os.environ.get("RLVR_DEBUG"):
            raise
        print(f"rlvr {args.command}: internal error: {type(err).__name__}: {err} (RLVR_DEBUG=1 shows the "
              f"traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
