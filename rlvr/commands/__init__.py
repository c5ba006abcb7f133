"""Command-line subcommands: each module provides `add_parser(subparsers)` (or `add_parsers`)."""
