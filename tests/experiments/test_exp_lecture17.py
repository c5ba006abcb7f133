"""`rlvr experiment lecture17 --quick`: the whole pipeline at tiny sizes writes a report with every claim."""

import math
import re

import pytest

from rlvr.cli import main as rlvr_main
from rlvr.pipelines.experiments.claims import QUICK_BANNER, Claim, fmt, write_report
from rlvr.pipelines.experiments.lecture17_lm import std_weights
from rlvr.pipelines.experiments.lecture17_thinking import CUT_SHARE, budget_tests, thinking_rows
from rlvr.pipelines.experiments.stats import CONTRADICTED, HOLDS, UNDECIDED
from rlvr.tasks import get_task
from rlvr.thinking import EARLY_STOP_TEXT, THINK_END, THINK_START


def main(argv):
    return rlvr_main(["experiment", *argv])


CLAIM_KEYS = ("centered-beats-raw", "normalized-close-to-centered", "max-only", "baseline-variance",
              "k3-unbiased-low-variance", "flat-groups", "loss-vs-reward", "std-scaling", "inclusion-hacked",
              "length-bias", "kimi-late", "kimi-early", "thinking-budget")
FIGURES = ("sort_toy_deltas.png", "sort_toy_reward_hack.png", "flat_groups.png", "loss_vs_reward.png",
           "length_bias.png", "kimi_length.png", "thinking_budget.png")


def test_quick_run_writes_every_claim_and_its_figures(tmp_path, capsys):
    out, runs = tmp_path / "report", tmp_path / "runs"
    assert main(["lecture17", "--quick", "--out", str(out), "--runs", str(runs)]) == 0
    text = (out / "report.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| [")]
    assert len(table) == len(CLAIM_KEYS)  # one line per claim
    for key in CLAIM_KEYS:
        assert f'<a id="{key}"></a>' in text and f"(#{key})" in text
    # a quick run decides nothing: a banner says so and no verdict is printed, in the table or the sections
    assert text.startswith(f"# CS336 lecture 17, reproduced by rlvr\n\n{QUICK_BANNER}\n")
    assert "Quick run (`--quick`): checks the pipeline only; too few runs and steps to test any claim" in text
    assert not re.search(r"\*\*(holds|contradicted|undecided)\*\*", text)
    assert text.count("**not tested (quick)**") == 2 * len(CLAIM_KEYS)
    for line in table:  # every line carries a measured number
        assert "±" in line or "(n=" in line or "exact" in line
        assert not re.search(r"\bnan\b", line), line
        assert line.endswith("| **not tested (quick)** |")
    for key in CLAIM_KEYS:  # every section states its test
        assert re.search(rf'<a id="{key}"></a>\n## .*\n\nMeasured: .*\n\nTest: .*Verdict: ', text), key
    for name in FIGURES:
        assert (out / name).stat().st_size > 0 and f"({name})" in text
    assert not (out / "runs").exists() and (runs / "seed0" / "grpo" / "metrics.jsonl").is_file()
    printed = capsys.readouterr().out
    assert "report:" in printed and "no claim is tested" in printed
    assert not re.search(r"\b(holds|contradicted|undecided)\b", printed)  # nor on the terminal


def test_undefined_values_print_no_nan():
    """A seed whose groups were all uniform has no share of |A| mass (NaN): the claim read 'nan ± nan (n=2)'."""
    nan = float("nan")
    assert fmt([nan, nan]) == "n/a (n=0 of 2 defined)"
    assert fmt([0.5, nan, 0.7], 2) == "0.60 ± 0.14 (n=2 of 3 defined)"
    assert fmt([nan, 0.53], 2) == "0.53 (n=1 of 2 defined)"


def test_report_verdicts_come_from_the_claims(tmp_path):
    claims = [Claim("a", "A beats B", "1 vs 0", HOLDS, "Welch t: +1", 3),
              Claim("b", "C", "n/a", UNDECIDED, "exact", 0, "setup", ["f.png"])]
    text = write_report(claims, tmp_path, "T", "intro").read_text()
    assert "| [A beats B](#a) | 1 vs 0 | 3 | **holds** |" in text
    assert "| [C](#b) | n/a | exact | **undecided** |" in text and "![b](f.png)" in text
    assert "Test: Welch t: +1. Verdict: **holds**." in text and "**contradicted** when it rejects" in text
    with pytest.raises(ValueError, match="not one of"):
        Claim("c", "D", "1", "does not hold", "t", 3)


def test_quick_report_has_a_banner_and_no_verdicts(tmp_path):
    claims = [Claim("a", "A beats B", "1 vs 0", HOLDS, "t", 3), Claim("b", "C", "n/a", CONTRADICTED, "t", 0, "setup")]
    full = write_report(claims, tmp_path / "full", "T", "intro", "foot").read_text()
    quick = write_report(claims, tmp_path / "quick", "T", "intro", "foot", quick=True).read_text()
    assert "Quick run" not in full and "not tested" not in full  # the full report is as before
    assert full.startswith("# T\n\nintro\n\nVerdicts:") and "Verdict: **contradicted**." in full
    assert quick.startswith("# T\n\n> **Quick run (`--quick`): checks the pipeline only; too few runs and steps "
                            "to test any claim.**")
    assert "**holds**" not in quick and "| [A beats B](#a) | 1 vs 0 | 3 | **not tested (quick)** |" in quick
    assert "Verdict: **not tested (quick)**." in quick
    assert QUICK_BANNER in quick and QUICK_BANNER not in full


def test_std_weights_by_hand():
    """Groups of 4 with 1 and 2 correct: GRPO divides |A| by std + eps, centered does not."""
    import torch

    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0])
    k, grpo, centered = std_weights(rewards, 4)
    assert k.tolist() == [1.0, 2.0]
    # group 1: |A_c| = (0.75 + 3 * 0.25) / 4 = 0.375, std = 0.5; group 2: |A_c| = 0.5, std = sqrt(1/3)
    torch.testing.assert_close(centered, torch.tensor([0.375, 0.5]))
    torch.testing.assert_close(grpo, torch.tensor([0.375 / (0.5 + 1e-4), 0.5 / (math.sqrt(1 / 3) + 1e-4)]))


def test_thinking_rows_teach_the_format_and_the_early_stop():
    rows = thinking_rows(get_task("sort", length=4, reward="sparse"), 400, 0)
    cut = [r for r in rows if EARLY_STOP_TEXT in r["completion"]]
    assert 0.1 < len(cut) / len(rows) < 0.4 and abs(len(cut) / len(rows) - CUT_SHARE) < 0.1
    for r in rows:
        answer = r["completion"].split(THINK_END)[-1].strip()
        assert r["completion"].startswith("<think>\n") and answer.split() == sorted(answer.split(), key=int)
    # cuts fall inside the closing tag too (budgets 17-23 of the character tokenizer), never after it
    thoughts = [r["completion"].split(EARLY_STOP_TEXT)[0] for r in cut]
    assert all(THINK_END not in t and len(t) > len(THINK_START) for t in thoughts)
    assert any(t.endswith("</") for t in thoughts) and any(t.endswith("\n") for t in thoughts)


def test_budget_tests_by_hand():
    budgets = [2, 4, 6]
    rising = [[0.1, 0.5, 0.9], [0.2, 0.6, 0.9], [0.0, 0.4, 1.0]]
    verdict, stated = budget_tests(budgets, rising)
    assert verdict == HOLDS and "no step lowers accuracy at level 0.05 / 2 = 0.0250" in stated
    dip = [[0.1, 0.9, 0.20], [0.2, 0.9, 0.21], [0.1, 0.8, 0.15], [0.15, 0.85, 0.2]]  # 4 -> 6 drops in every seed
    verdict, stated = budget_tests(budgets, dip)
    assert verdict == CONTRADICTED and "significant drops at level 0.0250: 4 -> 6" in stated
    flat = [[0.5, 0.6, 0.5], [0.5, 0.4, 0.5], [0.6, 0.5, 0.5]]
    assert budget_tests(budgets, flat)[0] == UNDECIDED
