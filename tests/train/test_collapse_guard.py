"""A run whose update broke the policy stops at that step: one line naming the step, the signal and the
likely cause, exit code 1, the checkpoints of the broken weights removed and `latest` on the last good one;
`rlvr doctor` names the same cause. optim.lr=1e6 on configs/sort.yaml ran 8 steps of a uniform policy
(entropy ln 101) and exited 0, and the doctor blamed "no learning signal"."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.cli import main
from rlvr.config import GuardConfig, load_config, save_config
from rlvr.report.collapse import NONFINITE_WEIGHTS, collapse_signal, likely_cause, vocab_size
from rlvr.report.doctor import diagnose
from rlvr.train.checkpoint import latest_checkpoint
from rlvr.train.guard import RunGuard, RunStopped, nonfinite_weights
from rlvr.train.loop import train
from rlvr.train.preflight import check_checkpoint
from rlvr.train.setup import prepare_run
from rlvr.commands.grammar import set_args

# configs/sort.yaml made small: a 20-step warm start (entropy 3.30 of ln 101 = 4.62 at step 1), 64 samples a step
SORT = ["sft.steps=20", "train.steps=6", "train.batch_size=64", "train.mini_batch_size=32", "task.eval_size=16",
        "eval.samples=0", "log.progress=false", "log.tensorboard=false", "log.plots=false", "threads=1"]
ONE_STEP = ["algorithm.mu=1", "train.mini_batch_size=0"]  # no importance ratio: only the next step's entropy shows it
LIMITS = GuardConfig()
V = 101
TOP = LIMITS.max_entropy * math.log(V)


def _records(run):
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}


def test_lr_1e6_on_the_sort_config_stops_with_one_line_and_the_doctor_names_the_cause(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "configs/sort.yaml", *set_args([*SORT, "optim.lr=1e6", f"out_dir={run}"])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlvr train: stopped: step 1: policy collapse: the importance "
                                                   "ratio exploded within the update: KL to the sampling policy")
    assert "the update of step 1 broke the policy. Likely cause: too high a learning rate, optim.lr=1e+06" in err
    assert "No checkpoint was written before it" in err and f"rlvr doctor {run}" in err
    assert max(_records(run)) == 1 and not (run / "final_model").exists()  # stopped at that step
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[1]
    assert first.startswith("[problem] policy collapse (steps 1): the importance ratio exploded") and \
        "try: too high a learning rate, optim.lr=1e+06" in out and "no learning signal" not in out


def test_a_uniform_policy_stops_the_next_step_and_its_checkpoint_never_stays_latest(tmp_path, capsys):
    """mu = 1, one minibatch: the update that breaks the policy shows nothing itself; the next step samples noise
    (entropy ln V). Step 2's update is the broken one and was checkpointed: it is removed, step 1 is `latest`, and
    the run resumes from there (with the guard off it then goes on)."""
    cfg = load_config("configs/sort.yaml", [*SORT, *ONE_STEP, "checkpoint.every=1", "checkpoint.keep=3",
                                            f"out_dir={tmp_path / 'run'}"])
    run = prepare_run(cfg)
    update = run.learner.update

    def lr_1e6_at_step_2(batch):
        if batch.step == 2:
            for group in run.learner.optimizer.param_groups:
                group["lr"] = 1e6
        return update(batch)

    run.learner.update = lr_1e6_at_step_2
    with pytest.raises(RunStopped) as stopped:
        train(cfg, run=run)
    message = str(stopped.value)
    assert message.startswith("step 3: policy collapse: the policy is uniform noise: token entropy 4.615 is 1.000 of "
                              "its maximum log 101 = 4.615, from 3.304 at the first step (guard.max_entropy=0.99); "
                              "the update of step 2 broke the policy")
    assert "The checkpoints of its weights (step_000002) were removed; the last good one" in message
    assert latest_checkpoint(tmp_path / "run").name == "step_000001"
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")) == ["step_000001"]
    check_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert _records(tmp_path / "run")[3]["entropy"] == pytest.approx(math.log(V), abs=1e-3)
    assert main(["train", "--resume", str(tmp_path / "run"), "--set", "guard.collapse=false"]) == 0
    assert latest_checkpoint(tmp_path / "run").name == "step_000006"


def test_nan_weights_after_an_update_stop_that_step_before_its_checkpoint(tmp_path):
    cfg = load_config("configs/sort.yaml", [*SORT, "checkpoint.every=1", f"out_dir={tmp_path / 'run'}"])
    run = prepare_run(cfg)
    update = run.learner.update

    def overflow_at_step_2(batch):
        metrics = update(batch)
        if batch.step == 2:  # as a finite step of a huge lr overflowing a weight would leave it
            with torch.no_grad():
                next(run.learner.policy.parameters())[0, 0] = math.inf
            metrics[NONFINITE_WEIGHTS] = float(nonfinite_weights(run.learner.params))
        return metrics

    run.learner.update = overflow_at_step_2
    with pytest.raises(RunStopped, match=r"^step 2: policy collapse: 1 weight tensor\(s\) hold NaN or inf after the "
                                         r"update; the update of step 2 broke the policy\. .* The last good "
                                         r"checkpoint, .*step_000001, is kept\."):
        train(cfg, run=run)
    assert latest_checkpoint(tmp_path / "run").name == "step_000001"
    assert not (tmp_path / "run" / "checkpoints" / "step_000002").exists()


def test_the_off_switch_lets_the_run_go_on_and_the_doctor_still_names_it(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "configs/sort.yaml", *set_args([*SORT, *ONE_STEP, "optim.lr=1e6", "guard.collapse=false"])]
    assert main([*argv, f"out_dir={run}"]) == 0
    assert max(_records(run)) == 6 and (run / "final_model").is_dir()
    findings = diagnose(run)
    assert [f.title for f in findings][:1] == ["policy collapse"] and findings[0].steps == (2,)
    assert "the update of step 1 broke the policy" in findings[0].detail and "optim.lr=1e+06" in findings[0].hint
    assert not {"no learning signal", "reward collapse"} & {f.title for f in findings}  # its consequences


def test_every_weight_counted_by_hand():
    weights = [torch.zeros(3), torch.tensor([1.0, math.nan]), torch.tensor([[math.inf]]), torch.ones(2, 2)]
    assert nonfinite_weights(weights).item() == 2
    assert nonfinite_weights(weights[::3]).item() == 0


def _row(**values):
    return {"step": 5, **values}


def test_collapse_signals_by_hand():
    assert collapse_signal(_row(entropy=TOP - 1e-6, approx_kl=0.5, kl=10.0), 3.3, V, LIMITS) is None  # KLs at, not over
    assert collapse_signal(_row(entropy=TOP), 3.3, V, LIMITS).culprit == 4  # entropy at its share
    uniform = collapse_signal(_row(entropy=math.log(V)), 3.3, V, LIMITS)
    assert (uniform.step, uniform.culprit) == (5, 4) and "1.000 of its maximum log 101 = 4.615" in uniform.signal
    assert collapse_signal(_row(entropy=4.6), TOP + 0.001, V, LIMITS) is None  # started uniform: a random-init model
    assert collapse_signal(_row(entropy=4.6), 3.3, None, LIMITS) is None  # vocabulary unknown
    ratio = collapse_signal(_row(approx_kl=0.51, entropy=4.6), 3.3, V, LIMITS)
    assert ratio.culprit == 5 and ratio.signal.startswith("the importance ratio exploded")  # the first signal wins
    assert collapse_signal(_row(kl=10.5), 3.3, V, LIMITS).culprit == 4
    assert collapse_signal(_row(**{NONFINITE_WEIGHTS: 1.0, "approx_kl": "nan"}), 3.3, V, LIMITS).culprit == 5
    assert collapse_signal(_row(approx_kl="nan", kl="nan", entropy="nan"), 3.3, V, LIMITS) is None
    off = GuardConfig(max_entropy=0.0, max_kl=0.0, max_policy_kl=0.0)
    assert collapse_signal(_row(entropy=math.log(V), kl=1e9, approx_kl=1e9), 3.3, V, off) is None


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.sampled_from(["entropy", "kl", "approx_kl"]))
def test_a_signal_fires_exactly_when_its_value_passes_its_threshold(entropy, kl, policy_kl, key):
    """Below every threshold nothing fires; one value raised over its own threshold fires, blaming this step's
    update (approx_kl) or the previous one's (the sampled policy's entropy, its KL to the reference)."""
    quiet = _row(entropy=entropy * TOP * 0.999, kl=kl * LIMITS.max_kl, approx_kl=policy_kl * LIMITS.max_policy_kl)
    assert collapse_signal(quiet, 1.0, V, LIMITS) is None
    loud = {"entropy": math.log(V), "kl": LIMITS.max_kl * 1.01, "approx_kl": LIMITS.max_policy_kl * 1.01}
    found = collapse_signal({**quiet, key: loud[key]}, 1.0, V, LIMITS)
    assert found is not None and found.culprit == (5 if key == "approx_kl" else 4)


def test_the_likely_cause_names_the_missing_clipping():
    assert likely_cause(3e-4, 0.0).startswith("updates too large: optim.max_grad_norm=0 leaves the gradient unclipped")
    assert likely_cause(3e-4, 1.0).startswith("too high a learning rate, optim.lr=0.0003")


def test_the_vocabulary_comes_from_the_start_models_config(tmp_path):
    (tmp_path / "init_model").mkdir()
    (tmp_path / "init_model" / "config.json").write_text(json.dumps({"vocab_size": 101}))
    (tmp_path / "vlm").mkdir()
    (tmp_path / "vlm" / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 151936}}))
    assert vocab_size(tmp_path, None) == 101 and vocab_size(tmp_path, str(tmp_path / "vlm")) == 151936
    assert vocab_size(tmp_path / "nowhere", None) is None
    gguf = tmp_path / "gguf_run"  # a GGUF file or an embedded model's name has no config.json: the run's models do
    (gguf / "checkpoints" / "step_000002" / "model").mkdir(parents=True)
    (gguf / "checkpoints" / "step_000002" / "model" / "config.json").write_text(json.dumps({"vocab_size": 7}))
    assert vocab_size(gguf, str(tmp_path / "model.gguf")) == 7


def test_a_guard_without_the_rule_never_stops_for_collapse(tmp_path):
    assert RunGuard(tmp_path, 3).collapsed(1, {"approx_kl": 1e9}) is None


@pytest.mark.parametrize("override, words", [("guard.max_entropy=1.5", "guard.max_entropy must be in [0, 1], got 1.5"),
                                             ("guard.max_kl=-1", "guard.max_kl must be >= 0, got -1.0")])
def test_bad_thresholds_are_one_line_before_any_work(tmp_path, capsys, override, words):
    save_config(load_config("configs/sort.yaml", [f"out_dir={tmp_path / 'run'}"]), tmp_path / "c.yaml")
    assert main(["train", str(tmp_path / "c.yaml"), "--set", override]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and not (tmp_path / "run").exists()
