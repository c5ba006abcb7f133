"""The `rlvr` command line: argv -> config -> run; nothing else.

Each subcommand lives in a module that provides `add_parser(subparsers)`; the parser it adds sets
`func` (args -> exit code). Adding a command = adding its module to COMMAND_MODULES.

Errors, the same for every subcommand and for `python -m rlvr`: bad input (config, argument, missing
file, bad data row) prints one line and exits with 2; anything else is an internal error, one line and
exit code 1. RLVR_DEBUG=1 shows the traceback instead. argparse's own errors (unknown flag or command,
missing or bad argument) are one line too, naming the (sub)command and its --help, exit code 2. A run that
stops itself (too many non-finite steps, a full disk: exit 1; SIGINT/SIGTERM after its checkpoint: 130/143)
says so in one line. Ctrl-C at any other moment, start-up included, is one line `rlvr [COMMAND]: interrupted`
and exit code 130; a second Ctrl-C during a run adds how to continue it.
Subcommands raise; only `main` maps.

Run from the shell (argv None), `main` first re-executes itself with a fast allocator preloaded
(`rlvr.allocator`; RLVR_ALLOCATOR=system switches that off), unless it only prints help (--help, --help-config,
--version): building the parser imports no heavy module (torch, transformers: each command imports them when it
runs), so help answers in a fraction of a second.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rlvr.allocator import AllocatorError, setup_allocator
from rlvr.commands.grammar import settle

COMMAND_MODULES = [  # each provides add_parser(subparsers) (or add_parsers, for several commands)
    "rlvr.commands.train",  # demo, train, sft
    "rlvr.commands.eval",  # eval
    "rlvr.commands.offline",  # dpo, reward-model, rft
    "rlvr.commands.data",  # data decontaminate | dedup | ...
    "rlvr.commands.experiments",  # experiment sort-toy | two-state
    "rlvr.commands.pipelines",  # presets, compare, recipe
    "rlvr.commands.report",  # doctor, report
    "rlvr.commands.model",  # model import
]


_INNERMOST = "_rlvr_innermost_prog"  # the deepest (sub)command that left arguments unparsed


class ArgumentParser(argparse.ArgumentParser):
    """argparse's errors as one line, `rlvr train: error: ... (see rlvr train --help)`, exit code 2, instead
    of the usage block; --help is unchanged. The subparsers of every command inherit the class."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        if getattr(self, "_intermixing", False):  # one of the passes of parse_known_intermixed_args
            return super().parse_known_args(args, namespace)
        if self._subparsers is None:  # a command's own parser: its CONFIG may stand anywhere (`--set a=1 sort`)
            self._intermixing = True
            try:
                namespace, extras = self.parse_known_intermixed_args(args, namespace)
            finally:
                self._intermixing = False
        else:
            namespace, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(namespace, _INNERMOST):  # a subcommand's namespace is copied into its parent's
            setattr(namespace, _INNERMOST, self.prog)
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        """Unknown arguments are reported by the subcommand they followed, not by `rlvr`."""
        namespace, extras = self.parse_known_args(args, namespace)
        prog = vars(namespace).pop(_INNERMOST, self.prog)
        if extras:
            message = f"unrecognized arguments: {' '.join(extras)}"
            self.exit(2, f"{prog}: error: {message} (see {prog} --help)\n")
        return namespace


def build_parser() -> ArgumentParser:
    from rlvr import __version__

    from rlvr.commands.pipelines import shipped_list

    parser = ArgumentParser(prog="rlvr", description="Post-train language models with RL from "
                            "verifiable rewards. Start with `rlvr demo`.",
                            epilog=f"Shipped configs, by name wherever a CONFIG is taken (rlvr configs describes "
                                   f"them): {shipped_list()}. `rlvr COMMAND --help` for a command's options.")
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        (getattr(module, "add_parser", None) or module.add_parsers)(subparsers)
    _describe(subparsers)
    return parser


def _describe(subparsers: argparse._SubParsersAction) -> None:
    """A (sub)command without a description of its own shows its one-line help as one under its usage."""
    helps = {action.dest: action.help for action in subparsers._choices_actions}
    for name, sub in subparsers.choices.items():
        if sub.description is None:
            sub.description = helps.get(name)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                _describe(action)


HELP_FLAGS = ("-h", "--help", "--help-config", "--version")


def _only_help(args: list[str]) -> bool:
    """Whether the command line asks for help only (no run follows): then no re-execution for the allocator,
    which would start Python twice to print a page."""
    return any(arg in HELP_FLAGS for arg in args)


USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError)  # ConfigError is a ValueError


def main(argv: list[str] | None = None) -> int:
    """`rlvr ...` and `python -m rlvr ...`: the one place errors become exit codes."""
    try:  # Ctrl-C in the first seconds (the subcommands' imports) is an interrupt too, not a traceback
        if argv is None and not _only_help(sys.argv[1:]):  # the real command line: set up the allocator first
            setup_allocator()
        args = build_parser().parse_args(argv)
    except AllocatorError as err:
        print(f"rlvr: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlvr: interrupted", file=sys.stderr)
        return 130
    try:
        if hasattr(args, "configs"):  # rlvr.commands.grammar: CONFIG among the positionals
            settle(args, f"rlvr {args.command}")
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `rlvr train --help-config | head`
        return 0
    except KeyboardInterrupt as err:  # a run's second Ctrl-C (rlvr.train.guard.StoppedAtOnce) says how to continue
        print(f"rlvr {args.command}: interrupted" + (f": {err}" if str(err) else ""), file=sys.stderr)
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
