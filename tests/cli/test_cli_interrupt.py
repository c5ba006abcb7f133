"""Ctrl-C is one line and exit code 130 at any moment, the first seconds included (the subcommands' imports
in `build_parser` ran outside main's error handling and printed a KeyboardInterrupt traceback)."""

from __future__ import annotations

import pytest

from rlvr import cli


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("argv", [["train", "cfg.yaml"], None], ids=["from-python", "from-the-shell"])
def test_ctrl_c_while_the_parser_is_built(monkeypatch, capsys, argv):
    monkeypatch.setattr(cli, "setup_allocator", lambda: None)  # no re-exec of the test process
    monkeypatch.setattr(cli, "build_parser", _interrupt)
    assert cli.main(argv) == 130
    captured = capsys.readouterr()
    assert captured.err == "rlvr: interrupted\n" and captured.out == ""


def test_ctrl_c_while_the_allocator_is_set_up(monkeypatch, capsys):
    monkeypatch.setattr(cli, "setup_allocator", _interrupt)
    assert cli.main() == 130
    assert capsys.readouterr().err == "rlvr: interrupted\n"


def test_ctrl_c_in_a_command_names_it(monkeypatch, capsys):
    monkeypatch.setattr("rlvr.commands.report._doctor", _interrupt)
    assert cli.main(["doctor", "runs/x"]) == 130
    assert capsys.readouterr().err == "rlvr doctor: interrupted\n"
