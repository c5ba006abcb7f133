import json
from pathlib import Path

import pytest

import rlvr.commands.data as data_command
from rlvr.cli import main as rlvr_main


def main(argv):
    return rlvr_main(["data", *argv])
from rlvr.jsonl import write_jsonl


def test_decontaminate_dedup_and_fusion_commands(tmp_path, capsys):
    long_q = "a farmer has twelve cows and buys seven more cows at the market on monday morning"
    train = write_jsonl(tmp_path / "train.jsonl", [{"question": long_q + " then sells two"},
                                                   {"question": "what is two plus two"},
                                                   {"question": "What is two plus two?"}])
    test = write_jsonl(tmp_path / "test.jsonl", [{"question": long_q}])
    assert main(["decontaminate", str(train), "--eval", f"t={test}", "--text-key", "question",
                 "--out", str(tmp_path / "dc")]) == 0
    kept = [json.loads(x) for x in (tmp_path / "dc" / "decontaminate.kept.jsonl").read_text().splitlines()]
    assert [k["question"] for k in kept] == ["what is two plus two", "What is two plus two?"]
    assert main(["dedup", str(tmp_path / "dc" / "decontaminate.kept.jsonl"), "--text-key", "question",
                 "--out", str(tmp_path / "dd")]) == 0
    assert len((tmp_path / "dd" / "deduplicate.kept.jsonl").read_text().splitlines()) == 1
    assert "exact_duplicate: 1" in capsys.readouterr().out

    traces = write_jsonl(tmp_path / "traces.jsonl", [{"prompt": "2+2=", "c": "<think>two and two</think>4"}])
    assert main(["fusion", str(traces), "--completion-key", "c", "--out", str(tmp_path / "f.jsonl")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "f.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == ["2+2= /think", "2+2= /no_think"]


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert main(["dedup", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith("rlvr data: error: input file")
    bad = write_jsonl(tmp_path / "x.jsonl", [{"question": "q"}])
    assert main(["dedup", str(bad), "--out", str(tmp_path)]) == 2  # default --text-key prompt is missing
    assert f"{bad}:1: missing field(s) ['prompt']" in capsys.readouterr().err
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [{"question": "q r s"}, {"question": 5}])
    good = write_jsonl(tmp_path / "good.jsonl", [{"question": "q r s"}])
    for argv in (["dedup", str(mixed), "--text-key", "question"],
                 ["decontaminate", str(mixed), "--eval", f"e={good}", "--text-key", "question"],
                 ["decontaminate", str(good), "--eval", f"e={mixed}", "--text-key", "question"]):
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2  # every bad row named by file and line
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{mixed}:2: field(s) ['question'] must be strings" in err, err
    assert not (tmp_path / "out").exists()


def _refused(capsys, argv, *expected):
    """`rlvr data ARGV` exits 2 with one stderr line holding each of `expected`, and prints nothing else."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("rlvr data: error: "), err
    assert all(text in err for text in expected), err
    return err


@pytest.fixture
def three(tmp_path, monkeypatch):
    """Three questions in tmp_path/three.jsonl, with tmp_path as the working folder."""
    monkeypatch.chdir(tmp_path)
    return write_jsonl(Path("three.jsonl"), [{"question": f"question number {i} about apples"} for i in range(3)])


def test_decontaminate_eval_name_given_twice(three, capsys):
    empty = write_jsonl(Path("empty.jsonl"), [])
    _refused(capsys, ["decontaminate", "three.jsonl", "--eval", f"a={three}", "--eval", f"a={empty}",
                      "--text-key", "question", "--out", "e2"], "--eval: name 'a' given twice")
    assert not Path("e2").exists()


def test_decontaminate_small_n_is_stricter_and_min_words_above_n_refused(three, capsys):
    greek = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu"
    write_jsonl(Path("tr.jsonl"), [{"q": greek}])
    write_jsonl(Path("ev.jsonl"), [{"q": f"xx yy {greek} zz"}])
    for n in ("13", "5", "1"):  # all 12 words are in the eval item: any n finds it
        assert main(["decontaminate", "tr.jsonl", "--eval", "e=ev.jsonl", "--text-key", "q", "--n", n,
                     "--out", f"n{n}"]) == 0
        assert "kept 0 of 1" in capsys.readouterr().out
    _refused(capsys, ["decontaminate", "tr.jsonl", "--eval", "e=ev.jsonl", "--text-key", "q", "--n", "5",
                      "--min-words", "6", "--out", "bad"], "--min-words", "--n", "got 6")
    _refused(capsys, ["decontaminate", "tr.jsonl", "--eval", "e=ev.jsonl", "--text-key", "q", "--n", "0",
                      "--out", "bad"], "--n must be >= 1")
    assert not Path("bad").exists()


def test_out_that_cannot_be_written_is_refused_before_any_work(three, capsys, monkeypatch):
    Path("afile").write_text("keep me")
    Path("afolder").mkdir()
    write_jsonl(Path("tr.jsonl"), [{"prompt": "Q1", "thinking": "t", "answer": "x"}])
    dc = ["decontaminate", "three.jsonl", "--eval", "a=three.jsonl", "--text-key", "question"]
    _refused(capsys, [*dc, "--out", "afile"], "--out: 'afile' is an existing file")
    _refused(capsys, ["dedup", "three.jsonl", "--text-key", "question", "--out", "afile"], "--out: 'afile'")
    _refused(capsys, ["dedup", "three.jsonl", "--text-key", "question", "--out", "afile/sub"], "--out: 'afile'")
    _refused(capsys, ["fusion", "tr.jsonl", "--out", "afolder"], "--out: 'afolder' is a folder")
    _refused(capsys, ["fusion", "tr.jsonl", "--out", "afile/f.jsonl"], "--out: 'afile'")
    _refused(capsys, ["fusion", "tr.jsonl", "--out", "tr.jsonl"], "--out: writing 'tr.jsonl' would replace an input")
    Path("cur").mkdir()
    write_jsonl(Path("cur/deduplicate.kept.jsonl"), [{"question": "q"}])
    _refused(capsys, ["dedup", "cur/deduplicate.kept.jsonl", "--text-key", "question", "--out", "cur"],
             "--out: writing 'cur/deduplicate.kept.jsonl' would replace an input")
    assert Path("afile").read_text() == "keep me" and list(Path("afolder").iterdir()) == []
    assert Path("cur/deduplicate.kept.jsonl").read_text() == '{"question": "q"}\n'
    assert sorted(p.name for p in Path("cur").iterdir()) == ["deduplicate.kept.jsonl"]
    if Path("/proc/self").is_dir():  # not writable even as root: refused before the work (it failed at the write)
        monkeypatch.setattr(data_command, "decontaminate", _no_work)
        monkeypatch.setattr(data_command, "build_fusion_data", _no_work)
        _refused(capsys, [*dc, "--out", "/proc/x"], "--out: cannot write '/proc/x'")
        _refused(capsys, ["fusion", "tr.jsonl", "--out", "/proc/x"], "--out: cannot write '/proc/x'")


def _no_work(*_, **__):
    raise AssertionError("the work started before --out was found unwritable")


def test_fusion_row_errors_name_file_and_line(tmp_path, capsys):
    ok = '{"prompt": "Q1", "thinking": "t", "answer": "x"}\n\n'  # a blank line 2: lines still count from 1
    (tmp_path / "c5.jsonl").write_text(ok + '{"prompt": "Q2", "thinking": "t"}\n')
    (tmp_path / "c4.jsonl").write_text('{"prompt": "Q1", "thinking": 5, "answer": "x"}\n')
    (tmp_path / "c6.jsonl").write_text('{"prompt": "Q1", "completion": "<think>t</think>x"}\n')
    out = str(tmp_path / "g.jsonl")
    _refused(capsys, ["fusion", str(tmp_path / "c5.jsonl"), "--out", out], f"{tmp_path / 'c5.jsonl'}:3: missing "
             "string field 'answer'")
    _refused(capsys, ["fusion", str(tmp_path / "c4.jsonl"), "--out", out],
             f"{tmp_path / 'c4.jsonl'}:1: field 'thinking' is an int, not a string")
    _refused(capsys, ["fusion", str(tmp_path / "c6.jsonl"), "--out", out],
             f"{tmp_path / 'c6.jsonl'}:1: missing string field 'thinking'", "--completion-key")
    _refused(capsys, ["fusion", str(tmp_path / "c4.jsonl"), "--unflagged-think", "2", "--out", out],
             "--unflagged-think must be in [0, 1]")
    assert not (tmp_path / "g.jsonl").exists()
    assert main(["fusion", str(tmp_path / "c6.jsonl"), "--completion-key", "completion", "--out", out]) == 0


def test_flag_and_input_errors_name_the_flag_or_folder(three, capsys):
    dd = ["dedup", "three.jsonl", "--text-key", "question", "--out", "x"]
    _refused(capsys, [*dd, "--threshold", "1.5"], "--threshold must be in (0, 1], got 1.5")
    _refused(capsys, [*dd, "--threshold", "0"], "--threshold")
    _refused(capsys, [*dd, "--shingle", "0"], "--shingle must be >= 1, got 0")
    _refused(capsys, [*dd, "--num-perm", "0"], "--num-perm must be >= 1, got 0")
    _refused(capsys, ["decontaminate", ".", "--eval", "a=three.jsonl", "--text-key", "question", "--out", "x"],
             "input: '.' is a folder, not a jsonl file")
    _refused(capsys, ["decontaminate", "three.jsonl", "--eval", "a=.", "--text-key", "question", "--out", "x"],
             "--eval a: '.' is a folder, not a jsonl file")
    _refused(capsys, ["dedup", ".", "--text-key", "question", "--out", "x"], "input: '.' is a folder")
    assert not Path("x").exists()


def test_an_empty_eval_set_is_refused(three, capsys):
    """`--eval t=empty.jsonl` (a 0-byte file, likely a wrong path) kept every item, exit 0: decontamination
    against nothing."""
    Path("empty.jsonl").write_text("")
    _refused(capsys, ["decontaminate", "three.jsonl", "--eval", "t=empty.jsonl", "--text-key", "question",
                      "--out", "cur"], "--eval t file 'empty.jsonl' is empty")
    assert not Path("cur").exists()


def _windows_jsonl(path: Path, rows: list) -> Path:
    """`rows` as a jsonl with a byte-order mark and CRLF ends; None is a blank line (lines still count)."""
    lines = ["" if row is None else json.dumps(row) for row in rows]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    return path


def test_rows_with_empty_text_are_refused_in_every_step_not_called_duplicates(three, capsys):
    """dedup kept one of two blank questions and removed the other as an "exact_duplicate" of it (rc 0);
    decontaminate kept them unchecked. Now every step refuses an empty text at file:LINE, before any work."""
    q = "question"
    _windows_jsonl(Path("blank.jsonl"), [{q: "what is two plus two"}, None, {q: ""}, {q: "  \t "}, None,
                                         {q: "What is two plus two?"}, {q: "?!"}])
    dd = ["dedup", "blank.jsonl", "--text-key", q, "--out", "out"]
    for argv in (dd, [*dd, "--exact-only"], ["decontaminate", "blank.jsonl", "--eval", "e=three.jsonl",
                                               "--text-key", q, "--out", "out"]):
        _refused(capsys, argv, "blank.jsonl:3: field 'question' has no words (empty, blank or punctuation only)",
                 "2 more rows have none (blank.jsonl:4, blank.jsonl:7)")
    write_jsonl(Path("ev.jsonl"), [{q: "an eval question"}, {q: " "}])
    _refused(capsys, ["decontaminate", "three.jsonl", "--eval", "e=ev.jsonl", "--text-key", q, "--out", "out"],
             "ev.jsonl:2: field 'question' has no words")
    write_jsonl(Path("tr.jsonl"), [{"prompt": "Q1", "thinking": "t", "answer": "x"},
                                   {"prompt": "Q2", "thinking": "t", "answer": " \n"}])
    _refused(capsys, ["fusion", "tr.jsonl", "--out", "out/f.jsonl"], "tr.jsonl:2: field 'answer' is empty")
    assert not Path("out").exists()


def test_removal_reports_name_the_file_and_line_not_the_list_index(three, capsys):
    """The reports gave each removed row's index in the loaded list (2 for the row on line 6 here: a BOM,
    CRLF ends and blank lines before it), and the row it duplicates by index too."""
    long_q = "a farmer has twelve cows and buys seven more cows at the market on monday morning"
    _windows_jsonl(Path("train.jsonl"), [{"q": "what is two plus two"}, None, {"q": long_q + " then sells two"},
                                         None, None, {"q": "What is two plus two?"}])
    write_jsonl(Path("test.jsonl"), [{"q": "unrelated words"}])
    Path("test.jsonl").write_text(Path("test.jsonl").read_text() + "\n" + json.dumps({"q": long_q}) + "\n")
    assert main(["dedup", "train.jsonl", "--text-key", "q", "--out", "dd"]) == 0
    [row] = [json.loads(line) for line in Path("dd/deduplicate.removed.jsonl").read_text().splitlines()]
    assert (row["where"], row["reason"], row["detail"]["duplicate_of_where"]) == (
        "train.jsonl:6", "exact_duplicate", "train.jsonl:1")
    assert "| train.jsonl:6 | What is two plus two? | duplicate_of_where=train.jsonl:1 |" in \
        Path("dd/deduplicate.md").read_text()
    assert main(["decontaminate", "train.jsonl", "--eval", "gsm=test.jsonl", "--text-key", "q", "--out", "dc"]) == 0
    [row] = [json.loads(line) for line in Path("dc/decontaminate.removed.jsonl").read_text().splitlines()]
    assert (row["where"], row["detail"]["eval_set"], row["detail"]["eval_where"]) == (
        "train.jsonl:3", "gsm", "test.jsonl:3")
    assert "| train.jsonl:3 |" in Path("dc/decontaminate.md").read_text()
    capsys.readouterr()


def test_outputs_of_an_earlier_run_are_refused_without_overwrite(three, capsys):
    """dedup, decontaminate and fusion silently wrote over an earlier run's outputs in --out (the trainers refuse)."""
    write_jsonl(Path("tr.jsonl"), [{"prompt": "Q1", "thinking": "t", "answer": "x"}])
    steps = {"dedup": ["dedup", "three.jsonl", "--text-key", "question", "--out", "cur"],
             "decontaminate": ["decontaminate", "three.jsonl", "--eval", "a=three.jsonl", "--text-key", "question",
                               "--out", "cur"],
             "fusion": ["fusion", "tr.jsonl", "--out", "f.jsonl"]}
    for name, argv in steps.items():
        assert main(argv) == 0
        capsys.readouterr()
        before = {p: p.read_bytes() for p in [Path("f.jsonl"), *Path("cur").iterdir()] if p.exists()}
        held = "'f.jsonl' already exists" if name == "fusion" else "'cur' already holds " + (
            "deduplicate.kept.jsonl, deduplicate.removed.jsonl, deduplicate.md" if name == "dedup" else
            "decontaminate.kept.jsonl, decontaminate.removed.jsonl, decontaminate.md")
        _refused(capsys, argv, f"--out: {held} from an earlier run; choose another --out or pass --overwrite")
        assert {p: p.read_bytes() for p in before} == before
        assert main([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in Path("cur").iterdir()) == sorted(
        f"{step}.{kind}" for step in ("deduplicate", "decontaminate") for kind in ("kept.jsonl", "removed.jsonl", "md"))
