"""The one jsonl reader and writer: rows back as written, and every error names the file and line."""

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.jsonl import read_jsonl, read_jsonl_located, write_jsonl


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_reads_rows_and_skips_blank_lines(tmp_path):
    rows = [json.dumps({"a": "x", "b": "y", "extra": 1}), "", json.dumps({"a": "z", "b": "w"})]
    path = _write(tmp_path / "d.jsonl", rows)
    assert read_jsonl(path, ["a", "b"], "test") == [{"a": "x", "b": "y", "extra": 1}, {"a": "z", "b": "w"}]


@pytest.mark.parametrize("lines, message", [
    ([], "test file .* is empty"),
    (["", "  "], "is empty"),
    (['{"a": "x"'], r"d.jsonl:1: not valid JSON"),
    ([json.dumps({"a": "x", "b": "y"}), json.dumps({"a": "x"})], r"d.jsonl:2: missing field\(s\) \['b'\]"),
    ([json.dumps({"a": "x", "b": 3})], r"d.jsonl:1: field\(s\) \['b'\] must be strings"),
    ([json.dumps(["a", "b"])], r"d.jsonl:1: expected a JSON object"),
])
def test_errors_name_the_file_and_line(tmp_path, lines, message):
    path = _write(tmp_path / "d.jsonl", lines)
    with pytest.raises(ValueError, match=message):
        read_jsonl(path, ["a", "b"], "test", empty_ok=False)


def test_missing_file_is_an_error_unless_allowed(tmp_path):
    with pytest.raises(FileNotFoundError, match="test file .* does not exist"):
        read_jsonl(tmp_path / "nope.jsonl", ["a"], "test")
    assert read_jsonl(tmp_path / "nope.jsonl", missing_ok=True) == []
    assert read_jsonl(_write(tmp_path / "e.jsonl", []), ["a"]) == []  # empty_ok by default


def test_growing_log_leaves_out_a_last_record_still_being_written(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "lo')  # the writer is in the middle of line 3
    assert read_jsonl(path, growing=True) == [{"step": 1}, {"step": 2}]
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: not valid JSON"):  # a data file: every line counts
        read_jsonl(path)
    path.write_text('{"step": 1}\n{"step": 2}')  # whole, only its newline still to come: kept
    assert read_jsonl(path, growing=True) == [{"step": 1}, {"step": 2}]
    path.write_text('{"step": 1}\n{"step": 2, \n{"step": 3}\n')  # a broken line with its newline is not torn
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        read_jsonl(path, growing=True)


rows_strategy = st.lists(st.dictionaries(st.text(min_size=1, max_size=5),
                                         st.one_of(st.text(max_size=8), st.integers(), st.booleans()), max_size=4),
                         max_size=6)


@settings(max_examples=50, deadline=None)
@given(rows_strategy)
def test_round_trip(tmp_path_factory, rows):
    path = _write(tmp_path_factory.mktemp("j") / "r.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
    assert read_jsonl(path) == rows


@settings(max_examples=50, deadline=None)
@given(rows_strategy, rows_strategy)
def test_written_rows_read_back_and_append_adds(tmp_path_factory, first, more):
    path = tmp_path_factory.mktemp("w") / "sub" / "r.jsonl"  # the folder is made
    assert write_jsonl(path, first) == path and read_jsonl(path) == first
    write_jsonl(path, more, append=True)
    assert read_jsonl(path) == first + more
    write_jsonl(path, more)  # not appending: the file holds these rows alone
    assert read_jsonl(path) == more


@dataclass
class _Point:
    x: int
    label: str


def test_the_writer_keeps_text_writes_dataclasses_and_refuses_the_rest(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"q": "éα", "p": _Point(1, "a")}])
    assert path.read_text(encoding="utf-8") == '{"q": "éα", "p": {"x": 1, "label": "a"}}\n'  # not \u escapes
    with pytest.raises(TypeError, match="cannot write set to JSON"):
        write_jsonl(tmp_path / "bad.jsonl", [{"s": {1, 2}}])


def test_rows_come_with_their_lines_and_a_folder_is_named(tmp_path):
    """The places count from 1 and over blank lines, as every error of the reader does."""
    path = _write(tmp_path / "r.jsonl", ['{"a": 1}', "", "  ", '{"a": 2}'])
    assert read_jsonl_located(path) == [(f"{path}:1", {"a": 1}), (f"{path}:4", {"a": 2})]
    with pytest.raises(ValueError, match="is a folder, not a jsonl file"):
        read_jsonl(tmp_path, what="input")


def test_a_byte_order_mark_and_crlf_line_ends_are_read(tmp_path):
    """A jsonl saved by Windows tools (UTF-8 BOM, CRLF) was refused: `:1: not valid JSON (Unexpected UTF-8 BOM)`."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"q": "a"}\r\n{"q": "b\xc3\xa9"}\r\n')
    assert read_jsonl_located(path, ["q"]) == [(f"{path}:1", {"q": "a"}), (f"{path}:2", {"q": "bé"})]
