"""The performance docs' tables are benchmarks/tables.py's output from benchmarks/results/*.jsonl, and the
results files are complete records (every row says which run, when, where and how)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tables)


@pytest.mark.parametrize("doc", tables.DOCS, ids=lambda p: p.name)
def test_the_committed_tables_are_the_scripts_output(doc):
    text = doc.read_text(encoding="utf-8")
    assert tables.update(text) == text, f"run .venv/bin/python benchmarks/tables.py to refresh {doc.name}"
    named = {m.group("name") for m in tables.MARK.finditer(text)}
    assert named and named <= set(tables.TABLES)


def test_every_table_is_in_a_doc_and_every_results_row_is_a_full_record():
    shown = {m.group("name") for doc in tables.DOCS for m in tables.MARK.finditer(doc.read_text(encoding="utf-8"))}
    assert shown == set(tables.TABLES)
    machines = tables.machines()
    for path in sorted(tables.RESULTS.glob("*.jsonl")):
        if path.stem == "machines":
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            row = json.loads(line)
            missing = [k for k in ("run", "date", "machine", "command") if not row.get(k)]
            assert not missing, f"{path.name}:{i} lacks {missing}"
            assert row["machine"] in machines, f"{path.name}:{i}: unknown machine {row['machine']!r}"


def test_the_newest_run_of_each_group_by_date_then_time_then_line():
    rows = [{"run": "a", "task": "x", "date": "2026-12-02"}, {"run": "b", "task": "x", "date": "2026-12-01"},
            {"run": "c", "task": "y", "date": "2026-12-02", "time_utc": "09:00"},
            {"run": "d", "task": "y", "date": "2026-12-02", "time_utc": "08:00"},
            {"run": "e", "task": "x", "date": "2026-12-02"}]  # same date as a, a later line: newer
    assert tables.latest_runs(rows, ["task"]) == ["c", "e"]
    assert tables.latest_runs(rows, []) == ["c"]


def test_trl_medians_by_hand():
    rows = [{"task": "demo", "per_step": 1.7, "to_target": 1.2, "rss_rlvr_mib": 440, "rss_trl_mib": 600},
            {"task": "demo", "per_step": 1.9, "to_target": 1.6, "rss_rlvr_mib": 450, "rss_trl_mib": 600},
            {"task": "demo", "per_step": 1.8, "to_target": 1.3, "rss_rlvr_mib": 430, "rss_trl_mib": 600}]
    (med,) = tables._trl_medians(rows)
    assert (med["per_step"], med["to_target"], med["rss_ratio"], med["rollout_ratio"]) == (1.8, 1.3, "0.73", None)


def test_history_prints_every_run():
    text = tables.history("bench_update")
    runs = {json.loads(line)["run"] for line in (tables.RESULTS / "bench_update.jsonl").read_text().splitlines()}
    assert {line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("## ")} == runs


def test_seed_means_by_hand():
    """The real model's recipe table: mean ± standard error over seeds (sample sd / sqrt(n)), the gain per seed."""
    rows = [{"variant": "full", "seed": s, "accuracy_before": 0.25, "accuracy_after": a, "family_accuracy_before": b,
             "family_accuracy_after": 0.5, "format_after": 0.0, "formatted_wrong_after": 0.0,
             "family_format_after": 0.0, "wall_min": w, "cpu_s": c, "gsm8k_before": 0.0, "gsm8k_after": None}
            for s, a, b, w, c in [(0, 0.5, 0.25, 10.0, 400), (1, 0.75, 0.125, 12.0, 500)]]
    (mean,) = tables._seed_means(rows)
    # gains 0.25 and 0.5: mean 0.375, sd 0.1768, SE 0.125; family gains 0.25, 0.375: SE 0.0625
    assert mean["accuracy_cell"] == "0.250 ± 0.000 -> 0.625 ± 0.125 (**+0.375 ± 0.125**)"
    assert mean["family_accuracy_cell"] == "0.188 ± 0.062 -> 0.500 ± 0.000 (**+0.312 ± 0.062**)"
    assert (mean["wall_min"], mean["cpu_s"], mean["gsm8k_after"]) == ("11.0 ± 1.0", "450 ± 50", None)
    assert tables.mean_se([0.3]) == "0.300"


def test_welch_by_hand_and_against_students_t_with_four_degrees_of_freedom():
    t, df, p = tables.welch([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])  # variances 1 and 1: t = 1 / sqrt(2/3), df = 4
    assert t == pytest.approx(1.5 ** 0.5) and df == pytest.approx(4.0)
    u = t / (1 + t * t / 4) ** 0.5  # Student's t CDF for 4 degrees of freedom, in closed form
    cdf = 0.5 + 3 / 8 * u * (1 - t * t / (12 * (1 + t * t / 4)))
    assert p == pytest.approx(2 * (1 - cdf), rel=1e-9)
    assert tables.welch([0.5, 0.5], [0.5, 0.5])[2] == 1.0  # no spread, no difference


def test_tool_means_by_hand():
    rows = [{"base_accuracy": 0.0, "sft_accuracy": 0.25, "rl_accuracy": 0.5, "base_family_accuracy": 0.0,
             "sft_family_accuracy": 0.5, "rl_family_accuracy": 0.5, "sft_call_share": 1.0, "rl_call_share": 1.0},
            {"base_accuracy": 0.0, "sft_accuracy": 0.75, "rl_accuracy": 1.0, "base_family_accuracy": 0.0,
             "sft_family_accuracy": 0.5, "rl_family_accuracy": 0.75, "sft_call_share": 0.5, "rl_call_share": 1.0}]
    mean, test = tables._tool_means(rows)
    assert mean["accuracy_cell"] == "0.000 / 0.500 ± 0.250 / 0.750 ± 0.250"
    assert mean["call_share_cell"] == "– / 0.750 ± 0.250 / 1.000 ± 0.000"  # no base figure: –
    assert mean["correct_calls_cell"] == "– / – / –"
    assert test["accuracy_cell"].startswith("t = 0.71, df = 2.0, p = ")  # 0.25 / sqrt(0.125)
