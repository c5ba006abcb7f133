"""The rlvr -> TRL GRPOConfig mapping of benchmarks/bench_trl.py (TRL itself is not needed).

The benchmark is only fair if TRL trains on the same batch shapes, so the mapping's invariants are
checked here: TRL generates `train.batch_size` completions at once, each optimizer step sees
`mini_batch_size` of them, split in micro-batches of `micro_batch_size`, and one RL step is
mu x (batch / mini) optimizer steps.
"""

import ctypes
import importlib.util
import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.config import load_config

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_trl", ROOT / "benchmarks" / "bench_trl.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
import _trl_report as report  # noqa: E402  (bench_trl put benchmarks/ on sys.path)
DEMO = ROOT / "configs" / "demo.yaml"


def _cfg(*overrides):
    return load_config(DEMO, list(overrides))


def _shapes_hold(cfg, args, steps):
    t = cfg.train
    assert args["per_device_train_batch_size"] * args["steps_per_generation"] == t.batch_size  # one generation
    assert args["per_device_train_batch_size"] * args["gradient_accumulation_steps"] == cfg.mini_batch_size
    assert args["per_device_train_batch_size"] == cfg.micro_batch_size
    assert args["num_generations"] == t.group_size and args["num_iterations"] == cfg.algorithm.mu
    assert args["max_steps"] == steps * cfg.algorithm.mu * (t.batch_size // cfg.mini_batch_size)


def test_demo_config_maps_hyperparameters_one_to_one():
    cfg = _cfg()
    args = bench.trl_arguments(cfg, cfg.train.steps)
    _shapes_hold(cfg, args, cfg.train.steps)
    a, o = cfg.algorithm, cfg.optim
    assert args["loss_type"] == "grpo"  # seq_mean_token_mean: each sequence divided by its own length
    assert args["scale_rewards"] == "group"  # GRPO's group z-score
    assert (args["epsilon"], args["epsilon_high"], args["beta"]) == (a.clip_low, a.clip_high, a.beta)
    assert args["use_bias_correction_kl"] is a.kl_unbiased is False  # plain k3 on both sides (TRL's default: on)
    assert bench.trl_arguments(_cfg("algorithm.kl_unbiased=true"), 1)["use_bias_correction_kl"] is True
    assert (args["learning_rate"], args["warmup_steps"], args["max_grad_norm"]) == (o.lr, o.warmup_steps,
                                                                                     o.max_grad_norm)
    assert (args["adam_beta1"], args["adam_beta2"]) == tuple(o.betas)
    assert args["lr_scheduler_type"] == "cosine_with_min_lr"
    assert args["lr_scheduler_kwargs"] == {"min_lr_rate": o.min_lr_ratio}
    assert args["max_completion_length"] == cfg.rollout.max_new_tokens
    assert args["temperature"] == cfg.rollout.temperature
    assert (args["bf16"], args["gradient_checkpointing"], args["use_cpu"]) == (False, False, True)


@settings(max_examples=25, deadline=None)
@given(groups=st.integers(1, 8), group_size=st.integers(2, 8), minis=st.integers(1, 4), micros=st.integers(1, 4),
       mu=st.integers(1, 3), steps=st.integers(1, 1000))
def test_batch_shapes_hold_for_any_divisible_split(groups, group_size, minis, micros, mu, steps):
    batch = groups * group_size * minis * micros
    cfg = _cfg(f"train.batch_size={batch}", f"train.group_size={group_size}",
               f"train.mini_batch_size={batch // minis}", f"train.micro_batch_size={batch // minis // micros}",
               f"algorithm.mu={mu}")
    _shapes_hold(cfg, bench.trl_arguments(cfg, steps), steps)


@pytest.mark.parametrize("aggregation, loss_type", sorted(bench.AGGREGATIONS.items()))
def test_aggregations_map_to_trl_loss_types(aggregation, loss_type):
    cfg = _cfg(f"algorithm.aggregation={aggregation}")
    assert bench.trl_arguments(cfg, 1)["loss_type"] == loss_type


@pytest.mark.parametrize("override, named", [
    ("algorithm.dynamic_sampling=true", "dynamic_sampling"),
    ("algorithm.advantage=rloo", "advantage"),
    ("algorithm.kl_estimator=k1", "kl_estimator"),
    ("algorithm.policy_loss=gspo", "policy_loss"),
])
def test_settings_without_a_trl_equivalent_are_refused(override, named):
    with pytest.raises(ValueError, match=named):
        bench.trl_arguments(_cfg(override), 1)


def test_linear_decay_to_a_floor_is_refused():
    with pytest.raises(ValueError, match="schedule"):
        bench.trl_arguments(_cfg("optim.schedule=linear", "optim.min_lr_ratio=0.1"), 1)


def _result(steps, evals, rss=400.0):
    """A child's result: per step (step, wall, CPU, rollout wall, rollout CPU); evals (step, wall, CPU, acc)."""
    return {"steps": [(s, *v) for s, *v in steps], "evals": evals, "peak_rss_mib": rss}


def test_summary_counts_steps_after_the_first_and_the_first_evaluation_at_the_target():
    # steps 1..3 at wall 1, 3, 5 s (CPU 1, 2.5, 4; rollout CPU 0.5, 1.0, 1.5): steps 2..3 = 2 s and 1.5 CPU-s each
    steps = [(1, 1.0, 1.0, 0.5, 0.5), (2, 3.0, 2.5, 1.0, 1.0), (3, 5.0, 4.0, 1.5, 1.5)]
    evals = [(0, 0.0, 0.0, 0.5), (2, 3.0, 2.5, 0.91), (3, 5.0, 4.0, 0.95)]
    row = report.summarize(_result(steps, evals), 3, target=0.9)
    assert row["s_per_step"] == pytest.approx(2.0) and row["cpu_per_step"] == pytest.approx(1.5)
    assert row["rollout_cpu_per_step"] == pytest.approx(0.5) and row["update_cpu_per_step"] == pytest.approx(1.0)
    assert (row["to_target_s"], row["to_target_step"], row["acc_final"], row["last_step"]) == (3.0, 2, 0.95, 3)
    assert report.summarize(_result(steps, evals), 3, target=0.99)["to_target_s"] is None


def test_a_run_stopped_at_the_target_is_summarized_only_when_stopping_was_asked_for():
    steps = [(1, 1.0, 1.0, 0.5, 0.5), (2, 3.0, 2.5, 1.0, 1.0)]
    evals = [(0, 0.0, 0.0, 0.5), (2, 3.0, 2.5, 0.91)]
    with pytest.raises(SystemExit, match="expected steps 1..600"):
        report.summarize(_result(steps, evals), 600)
    assert report.summarize(_result(steps, evals), 600, stopped=True)["last_step"] == 2


def test_ratios_are_trl_over_rlvr_and_none_without_a_figure():
    rlvr = {"s_per_step": 0.2, "cpu_per_step": 0.25, "rollout_cpu_per_step": 0.05, "update_cpu_per_step": 0.2,
            "to_target_s": 60.0, "peak_rss_mib": 440.0}
    trl = {**{k: 3 * v for k, v in rlvr.items()}, "to_target_s": None}
    got = report.ratios({"rlvr": rlvr, "trl": trl})
    assert got.pop("to_target_s") is None
    assert got == pytest.approx({k: 3.0 for k in got})


def test_shared_accuracy_averages_the_evaluations_both_sides_ran_after_step_0():
    rlvr = [(0, 0.0, 0.0, 0.5), (10, 1.0, 1.0, 0.6), (20, 2.0, 2.0, 0.8), (30, 3.0, 3.0, 0.9)]
    trl = [(0, 0.0, 0.0, 0.5), (10, 1.0, 1.0, 0.7), (20, 2.0, 2.0, 0.9)]  # stopped at the target at step 20
    assert report.shared_accuracy(rlvr, trl) == pytest.approx((0.7, 0.8, 2))
    assert report.shared_accuracy(rlvr, trl[:1]) is None  # only step 0 in common


@given(st.lists(st.tuples(st.integers(1, 50), st.floats(0, 1)), min_size=1, max_size=20))
def test_shared_accuracy_of_a_curve_with_itself_is_its_own_mean(points):
    evals = [(s, 0.0, 0.0, acc) for s, acc in dict(points).items()]
    mine, theirs, n = report.shared_accuracy(evals, evals)
    assert mine == theirs and n == len(evals)
    assert mine == pytest.approx(sum(e[3] for e in evals) / n)


def test_report_gives_a_table_per_seed_and_the_median_ratios():
    def side(cpu, rss, reach_wall):  # steps 1..3 at `cpu` CPU-s each; target reached at step 3, `reach_wall` s in
        steps = [(s, s * cpu, s * cpu, 0.0, 0.0) for s in (1, 2, 3)]
        evals = [(0, 0.0, 0.0, 0.5), (3, reach_wall, reach_wall, 0.95)]
        return {**_result(steps, evals, rss), "threads": 1, "versions": {}}

    runs = [{"seed": s, "rlvr": side(0.1, 400.0, 10.0), "trl": side(0.1 * k, 500.0, 10.0 * k)}
            for s, k in ((0, 2.0), (1, 3.0), (2, 5.0))]
    text = report.report(runs, 3, target=0.9)
    assert [line for line in text.splitlines() if line.startswith("RL seed")] == ["RL seed 0", "RL seed 1", "RL seed 2"]
    assert "CPU-s/step                        2.00    3.00    5.00  median 3.00" in text
    assert "training time to 0.9              2.00    3.00    5.00  median 3.00" in text
    assert "rlvr is 3.00x faster than TRL per step" in text
    assert "held-out acc, mean of 1 shared evals" in text  # step 3 on both sides
    assert "held-out acc over the shared evaluations, mean of 3 seeds: rlvr 0.950, TRL 0.950" in text


@given(st.lists(st.floats(0.1, 10), min_size=1, max_size=9))
def test_median_splits_the_values_in_half(values):
    m = report.median([*values, None])  # a seed without a figure does not count
    assert sum(v < m for v in values) <= len(values) // 2 and sum(v > m for v in values) <= len(values) // 2
    assert report.median([1.0, 4.0]) == 2.5 and report.median([None]) is None


@pytest.mark.parametrize("argv, says", [
    (["--only", "rlvr", "--seeds", "2", "--schedule", "sequential"], "--only rlvr/trl"),
    (["--only", "trl"], "--only rlvr/trl"),
    (["--seeds", "0"], "--seeds must be >= 1"),
])
def test_bad_arguments_get_one_line_and_exit_2(argv, says, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.parse_args(argv)
    assert stop.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("installed", ["/usr/lib/libtcmalloc_minimal.so.4", None])
def test_trl_runs_with_tcmalloc_where_installed_unless_told_otherwise(installed, monkeypatch):
    import rlvr.allocator

    monkeypatch.setattr(rlvr.allocator, "find_library", lambda name: installed if name == "tcmalloc" else None)
    assert bench.trl_allocator("system") == ("system", None)
    assert bench.trl_allocator("auto") == (("tcmalloc", installed) if installed else ("system", None))
    if installed:
        assert bench.trl_allocator("tcmalloc") == ("tcmalloc", installed)
    else:
        with pytest.raises(SystemExit, match="not installed"):
            bench.trl_allocator("tcmalloc")


def _resident_pages(path: Path) -> int:
    """Pages of `path` in the page cache: mincore(2) over a private mapping of it that nothing touches."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        start = ctypes.c_char.from_buffer(m)
        code = libc.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), vec)
        del start  # the mapping closes only without it
    assert code == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec)


def test_evict_drops_a_files_pages_from_the_page_cache(tmp_path):
    """Peak RSS is compared with both venvs' libraries read back from disk (`bench_trl.evict`)."""
    path = tmp_path / "lib.so"
    with open(path, "wb") as f:
        f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())  # clean pages: DONTNEED drops only those
    path.read_bytes()
    assert _resident_pages(path) == (1 << 20) // mmap.PAGESIZE  # every page, just written and read
    assert bench.evict([path, tmp_path / "missing.so"]) == 1
    assert _resident_pages(path) == 0
    assert any(p.name == "libtorch_cpu.so" for p in bench.library_files(sys.executable))  # what it is given


def test_the_warm_start_is_built_in_a_child_so_the_parent_never_maps_torch(tmp_path):
    """`evict` cannot drop pages that a running process maps: were torch imported by the benchmark's own
    process, rlvr's side (same venv) would count those pages in its peak RSS and TRL's would not."""
    code = (f"import json, sys; from pathlib import Path; sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            "import bench_trl\n"
            f"work, sets = Path({str(tmp_path)!r}), ['sft.steps=2', 'sft.batch_size=4']\n"
            "first = bench_trl.warm_start(sets, bench_trl.DEMO_CONFIG, work)\n"
            "stamp = (work / 'warm' / 'bench_stamp.json').stat().st_mtime_ns\n"
            "again = bench_trl.warm_start(sets, bench_trl.DEMO_CONFIG, work)\n"
            "print(json.dumps({'torch': 'torch' in sys.modules, 'first': str(first), 'again': str(again),\n"
            "                  'rebuilt': (work / 'warm' / 'bench_stamp.json').stat().st_mtime_ns != stamp}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    warm = str(tmp_path / "warm" / "sft_model")
    assert got == {"torch": False, "first": warm, "again": warm, "rebuilt": False}
    assert out.stdout.count("warm start: 2 SFT steps") == 1  # built once, then reused
    assert (tmp_path / "warm" / "sft_model" / "config.json").is_file()
    assert any((tmp_path / "warm" / "sft_model").glob("*.safetensors"))


def test_a_real_models_warm_start_is_its_own_folder(tmp_path):
    """A config that trains a model as it is (model.path, no SFT) is benchmarked from that model's folder (a GGUF's
    or an embedded model's converted one; here a folder, returned as given)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")  # what the config's check looks for (the child loads nothing)
    sets = [f"model.path={folder}", "sft.steps=0"]
    assert bench.warm_start(sets, bench.DEMO_CONFIG, tmp_path / "work") == folder
    assert not (tmp_path / "work" / "warm").exists()  # nothing trained or saved


def test_the_trl_side_renders_prompts_with_the_trained_models_tokenizer(tmp_path):
    """A task that takes a tokenizer (the chat template) gets the warm start's, as `rlvr train` gives it the
    trained model's, unless the config names one; a task without one is given its options as they are."""
    model = tmp_path / "model"
    assert bench.task_options("math_file", {"path": "q.jsonl"}, model) == {"tokenizer": str(model), "path": "q.jsonl"}
    assert bench.task_options("math_file", {"tokenizer": "other"}, model) == {"tokenizer": "other"}
    assert bench.task_options("sort", {"length": 5}, model) == {"length": 5}
