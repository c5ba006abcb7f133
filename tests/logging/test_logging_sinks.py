"""Resuming a run's jsonl files: records after the checkpoint are dropped (the resumed run writes them again);
a record up to the checkpoint that cannot be read is dropped with one warning line, never in silence."""

from __future__ import annotations

import json
import logging

import pytest

from rlvr.logging.sinks import JsonlSink, truncate_after


def _write(path, steps, tail: str = "") -> None:
    path.write_text("".join(json.dumps({"step": s, "x": 1.0}) + "\n" for s in steps) + tail)


@pytest.mark.parametrize("tail, what", [('{"step": 8, "x"', "the record of step 8"),
                                        ('{"step": 8', "a record of an unknown step"),  # may be 80: not guessed
                                        ('{"st', "a record of an unknown step")])
def test_a_cut_record_the_checkpoint_covers_is_named(tmp_path, caplog, tail, what):
    """Before, a torn last line holding step 8 was dropped without a word when resuming from the step-8
    checkpoint: metrics.jsonl went on from step 7 to step 9."""
    path = tmp_path / "metrics.jsonl"
    _write(path, range(8), tail)
    with caplog.at_level(logging.WARNING, logger="rlvr"):
        JsonlSink(path, resume_step=8).close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == list(range(8))
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}:9: {what} is cut short or corrupt and is dropped; the run resumes after step 8, so it is not "
        "written again"]


def test_a_cut_record_after_the_checkpoint_is_written_again_silently(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    _write(path, range(5), '{"step": 5, "x"')
    with caplog.at_level(logging.WARNING, logger="rlvr"):
        assert truncate_after(path, 3) == []
    assert not caplog.records
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2, 3]


def test_a_corrupt_line_in_the_middle_is_named(tmp_path):
    """Before, any line that did not parse (binary garbage too, which raised UnicodeDecodeError) vanished."""
    path = tmp_path / "samples.jsonl"
    path.write_bytes(b'{"step": 0}\n\xff\xfe{garbage\n{"step": 2}\n')
    assert truncate_after(path, 2) == [f"{path}:2: a record of an unknown step is cut short or corrupt and is "
                                       "dropped; the run resumes after step 2, so it is not written again"]
    assert path.read_text() == '{"step": 0}\n{"step": 2}\n'
