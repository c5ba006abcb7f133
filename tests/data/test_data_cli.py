import json

from rlvr.cli import main as rlvr_main


def main(argv):
    return rlvr_main(["data", *argv])
from rlvr.data.text import write_jsonl


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
                 ["decontaminate", str(good), "--eval", f"e={mixed}", "--text-key", "question"],
                 ["fusion", str(mixed), "--prompt-key", "question"]):  # every bad row named by file and line
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{mixed}:2: field(s) ['question'] must be strings" in err, err
    assert not (tmp_path / "out").exists()
