"""`rlvr doctor`: each planted problem gives its finding with the right steps; a healthy run and a
real tiny run give nothing alarming or plausible things."""

import pytest
import yaml
from run_folders import PROBLEMS, healthy_rows, planted, write_run

from rlvr.cli import main
from rlvr.report.doctor import PROBLEM, WARNING, RunLog, check_reward_collapse, diagnose, step_ranges

LATE = "11-20"
EXPECTED = {  # problem -> (title, severity, steps)
    "flat": ("no learning signal", PROBLEM, LATE),
    "truncation": ("truncation", PROBLEM, LATE),
    "length": ("length blow-up", WARNING, LATE),
    "entropy": ("entropy collapse", PROBLEM, LATE),
    "converged": ("converged", WARNING, LATE),
    "kl": ("approx_kl spikes", WARNING, LATE),
    "grad": ("grad_norm spikes", WARNING, LATE),
    "ratio": ("ratio spikes", WARNING, LATE),
    "clipping": ("heavy clipping", WARNING, LATE),
    "errors": ("reward errors", PROBLEM, LATE),
    "timeouts": ("reward timeouts", PROBLEM, LATE),
    "env_errors": ("environment errors", PROBLEM, LATE),
    "env_timeouts": ("environment timeouts", PROBLEM, LATE),
    "env_bad_output": ("environment bad output", PROBLEM, LATE),
    "cut_observations": ("observations cut", WARNING, LATE),
    "nonfinite": ("non-finite values", PROBLEM, LATE),
    "skipped": ("skipped steps", PROBLEM, LATE),
    "collapse": ("reward collapse", PROBLEM, "18-20"),
    "informative": ("zero-variance groups", WARNING, LATE),
    "flat_groups": ("zero-variance groups", WARNING, LATE),
    "hacking": ("reward hacking", PROBLEM, "1-20"),
    "slow": ("throughput drop", WARNING, "16-20"),
}


def test_step_ranges():
    assert step_ranges([3, 1, 2, 7, 9, 10]) == "1-3, 7, 9-10"
    assert step_ranges([5]) == "5" and step_ranges([]) == ""
    assert step_ranges(list(range(1, 30, 2))) == "1-29, 15 of them"


def test_a_healthy_run_has_no_findings(tmp_path):
    assert diagnose(write_run(tmp_path / "ok", healthy_rows())) == []


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_each_planted_problem_is_found(tmp_path, problem):
    assert set(EXPECTED) == set(PROBLEMS)
    title, severity, steps = EXPECTED[problem]
    findings = {f.title: f for f in diagnose(planted(tmp_path / problem, problem))}
    assert title in findings, findings
    assert findings[title].severity == severity and step_ranges(findings[title].steps) == steps
    if problem == "hacking":  # one finding, with the steps each mean is taken over ("steps 1, 20" read as two steps)
        assert "reward rises, correctness does not" not in findings
        assert findings[title].detail == ("reward steps 1-6 mean 0.24 -> steps 15-20 mean 0.80, while held-out "
                                          "accuracy 0.10 at step 0 -> 0.10 at step 20 and training accuracy steps 1-6 "
                                          "mean 0.20 -> steps 15-20 mean 0.20")


@pytest.mark.parametrize("metric", ["accuracy", "reward", None])
def test_zero_variance_groups_are_worded_in_the_runs_dynamic_sampling_metric(tmp_path, metric):
    run = planted(tmp_path / "run", "informative")
    if metric:
        (run / "config.yaml").write_text(yaml.safe_dump({"algorithm": {"dynamic_sampling_metric": metric}}))
    (finding,) = [f for f in diagnose(run) if f.title == "zero-variance groups"]
    assert f"had one {metric or 'accuracy'} for all their completions" in finding.detail  # the config's default
    (finding,) = [f for f in diagnose(planted(tmp_path / "plain", "flat_groups")) if f.title == "zero-variance groups"]
    assert "had one reward for all their completions" in finding.detail  # flat_group_share is over rewards


def test_cli_prints_findings_and_refuses_a_non_run(tmp_path, capsys):
    run = planted(tmp_path / "run", "entropy")
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "[problem] entropy collapse (steps 11-20): token entropy fell to 0.01 from 1.5" in out
    assert "try: lower optim.lr" in out
    assert main(["doctor", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.strip() == f"rlvr doctor: error: {tmp_path / 'nope'} is not a run folder"
    (tmp_path / "empty").mkdir()
    assert main(["doctor", str(tmp_path / "empty")]) == 2
    assert "has no metrics.jsonl nor config.yaml: not a run folder" in capsys.readouterr().err
    broken = write_run(tmp_path / "broken", healthy_rows())
    (broken / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, \n')
    assert main(["doctor", str(broken)]) == 2
    assert capsys.readouterr().err.strip() == (f"rlvr doctor: error: {broken / 'metrics.jsonl'}:2: not valid JSON "
                                               "(Expecting property name enclosed in double quotes)")
    writing = planted(tmp_path / "writing", "entropy")  # a running run, caught in the middle of a record
    whole = (writing / "metrics.jsonl").read_text()
    (writing / "metrics.jsonl").write_text(whole + '{"step": 21, "entropy": 0.0')
    assert main(["doctor", str(writing)]) == 0
    assert capsys.readouterr().out == out.replace(str(run), str(writing))  # the findings of the finished records
    assert main(["report", str(writing)]) == 0 and (writing / "report.html").is_file()


@pytest.mark.parametrize("command", ["doctor", "report"])
def test_a_folder_of_runs_names_them(tmp_path, capsys, command):
    """`rlvr compare` and `rlvr recipe` write one run per sub-folder: the error lists them."""
    for name in ("grpo", "dr_grpo"):
        write_run(tmp_path / "cmp" / name, healthy_rows())
    (tmp_path / "cmp" / "plots").mkdir()
    assert main([command, str(tmp_path / "cmp")]) == 2
    cmp = tmp_path / "cmp"
    assert capsys.readouterr().err == (f"rlvr {command}: error: {cmp} holds 2 runs, not one: name one of "
                                       f"{cmp / 'dr_grpo'}, {cmp / 'grpo'}\n")


@pytest.mark.parametrize("command", ["doctor", "report"])
def test_a_recipe_folder_names_its_stage_runs(tmp_path, capsys, command):
    """`rlvr recipe` writes OUT/NN_stage/run: the recipe folder was only "not a run folder"."""
    out = tmp_path / "recipe"
    (out / "01_warmup_sft" / "model").mkdir(parents=True)
    write_run(out / "02_rl" / "run", healthy_rows())
    assert main([command, str(out)]) == 2
    assert capsys.readouterr().err == (f"rlvr {command}: error: {out} is not a run folder; it holds one: name "
                                       f"{out / '02_rl' / 'run'}\n")
    write_run(out / "03_rl_more" / "run", healthy_rows())
    assert main([command, str(out)]) == 2
    assert capsys.readouterr().err == (f"rlvr {command}: error: {out} holds 2 runs, not one: name one of "
                                       f"{out / '02_rl' / 'run'}, {out / '03_rl_more' / 'run'}\n")


PLAUSIBLE_IN_A_TINY_RUN = {"converged", "no learning signal", "truncation", "zero-variance groups", "throughput drop",
                           "length blow-up", "approx_kl spikes", "grad_norm spikes"}


@pytest.mark.slow
def test_a_real_tiny_run_shows_nothing_alarming(tiny_run):
    findings = diagnose(tiny_run)
    assert {f.title for f in findings} <= PLAUSIBLE_IN_A_TINY_RUN, [f.line() for f in findings]


@pytest.mark.parametrize("metrics, held", [(None, "does not exist yet"), ("", "is empty"),
                                           ('{"step": 0, "eval/greedy_accuracy": 0.1}\n',
                                            "holds only the evaluation before step 1")])
def test_a_run_without_a_training_step_says_so(tmp_path, capsys, metrics, held):
    """An empty metrics.jsonl said "0 steps logged ... nothing alarming"; a missing one (a run in its warm
    start: config.yaml only) was "not a run folder", exit 2."""
    run = write_run(tmp_path / "run", [])
    if metrics is None:
        (run / "metrics.jsonl").unlink()
    else:
        (run / "metrics.jsonl").write_text(metrics)
    assert main(["doctor", str(run)]) == 0
    captured = capsys.readouterr()
    assert captured.out == (f"{run}: no training step logged yet (metrics.jsonl {held}); nothing to diagnose, "
                            "run `rlvr doctor` again once steps are logged\n") and captured.err == ""


def test_one_lucky_batch_is_no_reward_peak():
    """A run whose reward stays near 0 (one batch of 16 scored 0.03 once) was reported as a reward collapse
    "after a peak of 0.0312"; a level held for three steps is a peak, one batch is noise."""
    noise = [{"step": s, "reward": 0.03125 if s == 4 else 0.0} for s in range(1, 31)]
    assert [f for f in check_reward_collapse(RunLog(noise, [])) if f.title == "reward collapse"] == []
    held = [{"step": s, "reward": 0.5 if 5 <= s <= 10 else (0.2 if s < 5 else 0.0)} for s in range(1, 31)]
    (finding,) = check_reward_collapse(RunLog(held, []))
    assert "after a peak of 0.5" in finding.detail and finding.steps == (28, 29, 30)


@pytest.mark.parametrize("fail_on, exits", [("never", {"healthy": 0, "length": 0, "entropy": 0}),
                                            ("problem", {"healthy": 0, "length": 0, "entropy": 1}),
                                            ("warning", {"healthy": 0, "length": 1, "entropy": 1})])
def test_fail_on_gates_a_ci_job_on_the_findings_severity(tmp_path, capsys, fail_on, exits):
    """`rlvr doctor` exited 0 even when it reported a problem, so it could not gate a CI job. `length` plants a
    warning alone (length blow-up), `entropy` a problem; the findings are printed whatever the exit code."""
    runs = {"healthy": write_run(tmp_path / "healthy", healthy_rows()),
            "length": planted(tmp_path / "length", "length"), "entropy": planted(tmp_path / "entropy", "entropy")}
    for name, run in runs.items():
        assert main(["doctor", str(run), "--fail-on", fail_on]) == exits[name], name
        out = capsys.readouterr().out
        assert ("[problem] entropy collapse" in out) == (name == "entropy")
        assert ("[warning] length blow-up" in out) == (name == "length")
    assert main(["doctor", str(runs["entropy"])]) == 0  # the default is `never`, as before


def test_fail_on_a_run_without_a_training_step_passes_and_a_bad_level_is_refused(tmp_path, capsys):
    run = write_run(tmp_path / "run", [])
    assert main(["doctor", str(run), "--fail-on", "warning"]) == 0  # nothing to judge yet
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["doctor", str(run), "--fail-on", "problems"])
    assert exit_.value.code == 2 and "invalid choice: 'problems'" in capsys.readouterr().err
