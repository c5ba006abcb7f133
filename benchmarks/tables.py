"""The tables of docs/performance.md and docs/performance_update.md, made from the measurements in
benchmarks/results/*.jsonl (one line a measured row, every run since the first: the history is the data).

    .venv/bin/python benchmarks/tables.py                      # write every table into its doc
    .venv/bin/python benchmarks/tables.py --check              # exit 1 when a doc's table is not the data's
    .venv/bin/python benchmarks/tables.py --history bench_trl  # every run of a results file, one table each

A doc marks a table `<!-- table: NAME -->` ... `<!-- /table -->`; NAME is an entry of TABLES: the results file,
which rows (`where`), the latest run of each group (`group`: the newest date and time, then the later line), and
the columns. Each table says the command, date, machine and load of the runs it shows. A new measurement is a new
line in the results file; the doc's table follows when this script runs (tests/benchmarks/test_tables.py holds
the committed tables equal to its output).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "docs" / "performance.md", ROOT / "docs" / "performance_update.md", ROOT / "docs" / "real_model.md",
        ROOT / "docs" / "environments.md"]
MARK = re.compile(r"(<!-- table: (?P<name>[\w:.-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def _num(v: Any) -> str:
    return f"{v:,}" if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) >= 1000 else str(v)


def _fmt(v: Any, fmt: str | None) -> str:
    """A number as the column shows it: `fmt` (".2f": 1.10, as measured, not 1.1), else as recorded."""
    if v is None:
        return "-"
    return format(v, fmt) if fmt and isinstance(v, (int, float)) and not isinstance(v, bool) else _num(v)


def col(key: str, fmt: str | None = None) -> Callable[[dict], str]:
    return lambda r: "" if r.get(key) is None else _fmt(r[key], fmt)


def pair(a: str, b: str, fmt: str | None = None) -> Callable[[dict], str]:
    return lambda r: "" if r.get(a) is None and r.get(b) is None else f"{_fmt(r.get(a), fmt)} / {_fmt(r.get(b), fmt)}"


def times(key: str, rounds: str | None = None) -> Callable[[dict], str]:
    """A ratio as `2.77x`, with its rounds `(2.84, 2.70)` when recorded."""
    def cell(r: dict) -> str:
        if r.get(key) is None:
            return ""
        return f"{r[key]:.2f}x" + (f" ({r[rounds]})" if rounds and r.get(rounds) else "")
    return cell


def percent(key: str, rounds: str) -> Callable[[dict], str]:
    return lambda r: "" if r.get(key) is None else f"{r[key]}%" + (f" ({r[rounds]})" if r.get(rounds) else "")


def _rollout_cell(tok: str, ratio: str, rounds: str) -> Callable[[dict], str]:
    """A rollout row's tokens per CPU second, or a ratio row's ratio."""
    def cell(r: dict) -> str:
        return times(ratio, rounds)(r) if r["variant"].startswith("ratio") else col(tok)(r)
    return cell


def _trl_medians(rows: list[dict]) -> list[dict]:
    """A median row per task over the seeds shown: the ratios, and peak RSS as the median of rlvr / TRL."""
    out = []
    for task in dict.fromkeys(r["task"] for r in rows):
        seeds = [r for r in rows if r["task"] == task]
        med = {"task": task, "seed": "median"}
        for key in ("per_step", "rollout_ratio", "update_ratio", "to_target"):
            values = [r[key] for r in seeds if r.get(key) is not None]
            med[key] = round(statistics.median(values), 2) if values else None
        rss = [r["rss_rlvr_mib"] / r["rss_trl_mib"] for r in seeds if r.get("rss_rlvr_mib") and r.get("rss_trl_mib")]
        med["rss_ratio"] = f"{statistics.median(rss):.2f}" if rss else None
        out.append(med)
    return out


def _profile_setting(r: dict) -> str:
    return f"{r['setting']}, {r['dtype']}"


def _split(r: dict) -> str:
    return "" if r.get("rollout_ratio") is None else f"{r['rollout_ratio']:.2f}x / {r['update_ratio']:.2f}x"


def _rss(r: dict) -> str:
    return r["rss_ratio"] if "rss_ratio" in r else pair("rss_rlvr_mib", "rss_trl_mib")(r)


def _shared(plain: str, shared: str, ratio: str) -> Callable[[dict], str]:
    return lambda r: f"{r[plain]:.4f} -> {r[shared]:.4f} ({r[ratio]:.2f}x)"


SMOLLM2 = "SmolLM2-135M-Instruct"  # the real model's rows (`model`); the tiny models' rows have no `model`
TRL_COLUMNS = [
    ("task, seed", lambda r: f"{r['task']}, {r['seed']}"),
    ("CPU-s/step rlvr / TRL", pair("rlvr_cpu_s", "trl_cpu_s", ".3f")),
    ("per step", times("per_step")), ("rollout / update", _split),
    ("steps to target rlvr / TRL", pair("steps_rlvr", "steps_trl")),
    ("time to target rlvr / TRL (s)", pair("time_rlvr_s", "time_trl_s")), ("to target", times("to_target")),
    ("peak RSS MiB rlvr / TRL", _rss)]
ROLLOUT_COLUMNS = [
    ("shape", col("shape")), ("engine", col("variant")),
    ("tokens per CPU-s, full length", _rollout_cell("tok_per_cpu_s_full", "ratio_full", "rounds_full")),
    ("with EOS", _rollout_cell("tok_per_cpu_s_eos", "ratio_eos", "rounds_eos"))]

def mean_se(values: list[float], fmt: str = ".3f") -> str:
    """`mean ± standard error` (the sample standard deviation over sqrt(n)); one value alone is itself."""
    if len(values) < 2:
        return format(values[0], fmt)
    return f"{statistics.mean(values):{fmt}} ± {statistics.stdev(values) / len(values) ** 0.5:{fmt.lstrip('+')}}"


def _before_after(name: str) -> Callable[[dict], str]:
    """`before -> after (gain)` of a run's row, or the seeds' means (`_seed_means`) in a mean row."""
    def cell(r: dict) -> str:
        if f"{name}_cell" in r:
            return r[f"{name}_cell"]
        before, after = r.get(f"{name}_before"), r.get(f"{name}_after")
        return "" if before is None or after is None else f"{before:.3f} -> {after:.3f} ({after - before:+.3f})"
    return cell


def _seed_means(rows: list[dict]) -> list[dict]:
    """A `mean ± SE` row per recipe over its seeds: before, after and the gain (after - before per seed)."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        seeds = [r for r in rows if r["variant"] == variant]
        mean = {"variant": variant, "seed": f"mean ± SE ({len(seeds)})"}
        for name in ("accuracy", "family_accuracy"):
            before, after = [r[f"{name}_before"] for r in seeds], [r[f"{name}_after"] for r in seeds]
            gains = [a - b for a, b in zip(after, before)]
            mean[f"{name}_cell"] = f"{mean_se(before)} -> {mean_se(after)} (**{mean_se(gains, '+.3f')}**)"
        for key in ("format_after", "formatted_wrong_after", "family_format_after"):
            mean[key] = mean_se([r[key] for r in seeds])
        mean["wall_min"], mean["cpu_s"] = mean_se([r["wall_min"] for r in seeds], ".1f"), mean_se(
            [r["cpu_s"] for r in seeds], ".0f")
        gsm8k = [r["gsm8k_after"] for r in seeds if r.get("gsm8k_after") is not None]
        mean["gsm8k_before"], mean["gsm8k_after"] = seeds[0]["gsm8k_before"], mean_se(gsm8k) if gsm8k else None
        out.append(mean)
    return out


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's t-test of mean(b) - mean(a): (t, Welch-Satterthwaite degrees of freedom, two-sided p), the p from
    Student's t distribution (its CDF by the regularized incomplete beta function, mpmath's, which sympy brings)."""
    import mpmath

    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return (0.0 if statistics.mean(a) == statistics.mean(b) else float("inf")), float("nan"), \
            float(statistics.mean(a) == statistics.mean(b))
    t = (statistics.mean(b) - statistics.mean(a)) / (va + vb) ** 0.5
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, df, float(mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True))


TOOL_METRICS = {"accuracy": "accuracy", "episodes with a call": "call_share", "correct calls": "correct_calls",
                "call errors": "call_errors"}


def _three(key: str) -> Callable[[dict], str]:
    """`base / after SFT / after RL` of one metric of an env_tools row (– where no call was made to count)."""
    def cell(r: dict) -> str:
        if f"{key}_cell" in r:
            return r[f"{key}_cell"]
        return " / ".join("–" if r.get(f"{p}_{key}") is None else f"{r[f'{p}_{key}']:.3f}" for p in ("base", "sft", "rl"))
    return cell


def _tool_means(rows: list[dict]) -> list[dict]:
    """The mean ± SE over seeds of each after-SFT and after-RL figure, and Welch's t-test of after-RL accuracy
    against after-SFT accuracy over the seeds (both held-out sets)."""
    if len(rows) < 2:
        return []
    mean, test = {"seed": f"mean ± SE ({len(rows)})"}, {"seed": "Welch's t, RL vs SFT"}
    for group in ("", "family_"):
        for name in TOOL_METRICS.values():
            key = f"{group}{name}"
            got = {p: [r[f"{p}_{key}"] for r in rows if r.get(f"{p}_{key}") is not None] for p in ("sft", "rl")}
            base = rows[0].get(f"base_{key}")
            mean[f"{key}_cell"] = " / ".join(["–" if base is None else f"{base:.3f}",
                                              *(mean_se(v) if v else "–" for v in got.values())])
            test[f"{key}_cell"] = ""
        t, df, p = welch([r[f"sft_{group}accuracy"] for r in rows], [r[f"rl_{group}accuracy"] for r in rows])
        test[f"{group}accuracy_cell"] = f"t = {t:.2f}, df = {df:.1f}, p = {p:.2f}"
    return [mean, test]


def _tool_columns(group: str) -> list[tuple[str, Callable[[dict], str]]]:
    return [("seed", col("seed")), *((f"{title}: base / SFT / RL", _three(group + key))
                                      for title, key in TOOL_METRICS.items()), ("wall min", col("wall_min", ".1f")),
            ("CPU s", col("cpu_s"))]


def _before_rl(key: str) -> Callable[[dict], str]:
    """`before -> after RL` of an env_code row (before: the run's step 0, the model as shipped)."""
    def cell(r: dict) -> str:
        before, after = r.get(f"base_{key}"), r.get(f"rl_{key}")
        return "" if before is None or after is None else f"{before:.3f} -> {after:.3f} ({after - before:+.3f})"
    return cell


TABLES: dict[str, dict[str, Any]] = {
    "machines": {"file": "machines", "meta": False, "columns": [
        ("machine", col("machine")), ("CPU", col("cpu")),
        ("fp32 GEMM peak, 1 thread (GFLOP/s)", col("gemm_peak_fp32_1thread_gflops")), ("rounds", col("rounds")),
        ("dates", col("dates"))]},
    "bench_trl": {"file": "bench_trl", "where": {"model": None}, "group": ["task"], "label": lambda r: r["task"],
                  "extra": _trl_medians, "columns": TRL_COLUMNS},
    "bench_trl:smollm2": {"file": "bench_trl", "where": {"model": SMOLLM2}, "group": ["task"],
                          "label": lambda r: r["task"], "columns": TRL_COLUMNS},
    "bench_profile": {"file": "bench_profile", "group": ["setting", "dtype"], "label": _profile_setting, "columns": [
        ("setting", _profile_setting), ("step", col("step_ms")), ("backward", col("backward_ms")),
        ("training forward", col("forward_ms")), ("rollout", col("rollout_ms")),
        ("reference pass", col("reference_ms")),
        ("pi_old pass", col("old_logprob_ms")), ("log-probs, entropy", col("logprobs_ms")), ("rest", col("rest_ms"))]},
    "bench_update": {"file": "bench_update", "where": {"model": None}, "columns": [
        ("variant", col("variant")), ("CPU s/step", col("cpu_s_per_step", ".2f")), ("GFLOP/s", col("gflops", ",.1f")),
        ("GEMM peak", col("gemm_peak_gflops", ",.1f")), ("of peak (rounds)", percent("of_peak", "rounds_of_peak")),
        ("peak RSS GB", col("peak_rss_gb", ".2f"))]},
    "bench_update:smollm2": {"file": "bench_update", "where": {"model": SMOLLM2}, "columns": [
        ("variant", col("variant")), ("tokens", col("tokens")), ("CPU s/step", col("cpu_s_per_step", ".2f")),
        ("tokens per CPU-s", col("tok_per_cpu_s", ",.0f")), ("GFLOP/s", col("gflops", ",.1f")),
        ("GEMM peak", col("gemm_peak_gflops", ",.1f")), ("of peak", percent("of_peak", "rounds_of_peak")),
        ("peak RSS GB", col("peak_rss_gb", ".2f"))]},
    "bench_rollout": {"file": "bench_rollout", "where": {"model": None}, "group": ["shape"],
                      "label": lambda r: r["shape"], "columns": ROLLOUT_COLUMNS},
    "bench_rollout:smollm2": {"file": "bench_rollout", "where": {"model": SMOLLM2}, "group": ["shape"],
                              "label": lambda r: r["shape"], "columns": [
        *ROLLOUT_COLUMNS, ("tokens per wall s, full / with EOS", pair("tok_per_s_full", "tok_per_s_eos", ",.0f"))]},
    "bench_cascade": {"file": "bench_cascade", "columns": [
        ("model", col("model")), ("prompt", col("prompt")), ("n", col("n")), ("rows", col("rows")),
        ("cascade ms", col("cascade_ms", ",.1f")), ("copied ms", col("copied_ms", ",.1f")),
        ("copied / cascade", col("copied_over_cascade", ".3f")), ("saved", col("saved")),
        ("`auto` picks", col("auto_picks"))]},
    "bench_prefix": {"file": "bench_prefix", "columns": [
        ("micro-batch (demo model)", col("micro_batch")),
        ("token slots plain / shared", col("token_slots_plain_shared")),
        ("forward + backward (s)", _shared("fwd_bwd_plain_s", "fwd_bwd_shared_s", "fwd_bwd_ratio")),
        ("no-grad pass (s)", _shared("no_grad_plain_s", "no_grad_shared_s", "no_grad_ratio"))]},
    "bench_episodes": {"file": "bench_episodes", "group": ["preset"], "label": lambda r: r["preset"], "columns": [
        ("tiny model", col("preset")), ("episodes", col("episodes")), ("turns", col("turns")),
        ("tokens after the prompt", col("tokens")), ("whole history (CPU-s)", col("whole_s", ".3f")),
        ("kept keys/values (CPU-s)", col("kept_s", ".3f")), ("ratio (rounds)", times("ratio", "rounds")),
        ("same episodes", col("same_episodes"))]},
    "bench_sampling": {"file": "bench_sampling", "columns": [
        ("method", col("method")), ("CPU ms per step", col("cpu_ms_per_step"))]},
    "bench_logprobs": {"file": "bench_logprobs", "columns": [
        ("function, mode", col("function")), ("per-sequence chunks (s)", col("per_sequence_chunks_s", ".3f")),
        ("flattened chunks (s)", col("flattened_chunks_s", ".3f"))]},
    "bench_learner:update-path": {"file": "bench_learner", "where": {"experiment": "update-path"}, "columns": [
        ("CPU-s per update", col("variant")), ("demo", col("demo_s", ".3f")), ("20m", col("20m_s", ".3f"))]},
    "bench_learner:packing": {"file": "bench_learner", "where": {"experiment": "packing"}, "columns": [
        ("CPU-s per update", col("variant")), ("gsm8k", col("gsm8k_s", ".2f")), ("demo", col("demo_s", ".3f")),
        ("20m", col("20m_s", ".3f"))]},
    "bench_learner:compile": {"file": "bench_learner", "where": {"experiment": "compile"}, "columns": [
        ("CPU-s per update, one variant after the other", col("variant")), ("demo", col("demo_s", ".3f")),
        ("20m", col("20m_s", ".3f"))]},
    "bench_learner:entropy-stand-in": {"file": "bench_learner", "where": {"experiment": "entropy-stand-in"},
                                       "columns": [
        ("CPU-s per update (both orders)", col("variant")), ("sort, a quarter of the groups flat", col("sort_s")),
        ("demo (nothing left out)", col("demo_s"))]},
    "smollm2_recipe": {"file": "smollm2_recipe", "group": ["variant"], "label": lambda r: f"smollm2_{r['variant']}",
                       "extra": _seed_means, "columns": [
        ("recipe, seed", lambda r: f"smollm2_{r['variant']}, {r['seed']}"),
        ("held-out accuracy before -> after (gain)", _before_after("accuracy")),
        ("held-out family before -> after (gain)", _before_after("family_accuracy")),
        ("format / formatted but wrong, after", pair("format_after", "formatted_wrong_after", ".3f")),
        ("family's format, after", col("family_format_after", ".3f")),
        ("GSM8K (30) before / after", pair("gsm8k_before", "gsm8k_after", ".3f")),
        ("wall min", col("wall_min", ".1f")), ("CPU s", col("cpu_s"))]},
    "env_tools": {"file": "env_tools", "extra": _tool_means, "columns": _tool_columns("")},
    "env_tools:family": {"file": "env_tools", "extra": _tool_means, "columns": _tool_columns("family_")},
    "env_code": {"file": "env_code", "columns": [
        ("seed", col("seed")), ("RL steps", col("rl_steps")),
        ("final attempt passes every test: before -> after RL", _before_rl("accuracy")),
        ("final attempt's pass fraction", _before_rl("reward")), ("attempts per episode", _before_rl("turns")),
        ("wall min", col("wall_min", ".1f")), ("CPU s", col("cpu_s"))]},
    "bench_data_parallel": {"file": "bench_data_parallel", "columns": [
        ("two learner ranks", col("ranks")), ("rows of advantage 0 left out (s)", col("left_out_s", ".3f")),
        ("every row trained (s)", col("trained_s", ".3f")), ("ratio", times("ratio")),
        ("12-step run", times("ratio_12_step_run"))]},
}


def read(name: str) -> list[dict]:
    with open(RESULTS / f"{name}.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def machines() -> dict[str, dict]:
    return {m["machine"]: m for m in read("machines")}


def latest_runs(rows: list[dict], group: list[str]) -> list[str]:
    """The newest run of each group (by date, then time, then position in the file), in the file's order."""
    newest: dict[tuple, tuple] = {}
    for i, r in enumerate(rows):
        key = tuple(r.get(g) for g in group)
        rank = (r.get("date", ""), r.get("time_utc", ""), i)
        if key not in newest or rank > newest[key][0]:
            newest[key] = (rank, r["run"])
    chosen = {run for _, run in newest.values()}
    return [run for run in dict.fromkeys(r["run"] for r in rows) if run in chosen]


def markdown(columns: list[tuple[str, Callable[[dict], str]]], rows: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    return lines


def provenance(runs: list[list[dict]], label: Callable[[dict], str] | None) -> list[str]:
    """One line per run: (its `label`,) its command, date, machine (the machines table) and load, and the note of a
    table's only run."""
    known = machines()
    lines = []
    for rows in runs:
        r = rows[0]
        when = " ".join(x for x in (r.get("date"), r.get("time_utc") and f"{r['time_utc']} UTC") if x)
        if r["machine"] not in known:
            raise ValueError(f"run {r['run']}: machine {r['machine']!r} is not in machines.jsonl")
        load = f", load {r['load']}" if r.get("load") else ""
        note = f". {r['note'][0].upper()}{r['note'][1:]}" if r.get("note") and len(runs) == 1 else ""
        head = f"{label(r)}: " if label else ""
        lines.append(f"- {head}`{r['command']}` ({when}, machine {r['machine']}{load}){note}.")
    return lines


def render(name: str, runs_of: Callable[[list[dict], dict], list[str]] | None = None) -> str:
    spec = TABLES[name]
    rows = [r for r in read(spec["file"]) if all(r.get(k) == v for k, v in spec.get("where", {}).items())]
    if not spec.get("meta", True):
        return "\n".join(markdown(spec["columns"], rows)) + "\n"
    chosen = (runs_of or (lambda rs, s: latest_runs(rs, s.get("group", []))))(rows, spec)
    runs = [[r for r in rows if r["run"] == run] for run in chosen]
    shown = [r for run in runs for r in run]
    shown += spec["extra"](shown) if "extra" in spec else []
    return "\n".join([*provenance(runs, spec.get("label")), "", *markdown(spec["columns"], shown)]) + "\n"


def update(text: str) -> str:
    """`text` with every marked table replaced by the data's."""
    return MARK.sub(lambda m: m.group(1) + render(m.group("name")) + m.group(4), text)


def history(file: str) -> str:
    """Every run of a results file, newest last, each as its table would show it."""
    names = [n for n, s in TABLES.items() if s["file"] == file and s.get("meta", True)]
    out = []
    for name in names:
        spec = TABLES[name]
        rows = [r for r in read(file) if all(r.get(k) == v for k, v in spec.get("where", {}).items())]
        for run in dict.fromkeys(r["run"] for r in rows):
            out += [f"## {name}: {run}", render(name, lambda rs, s, run=run: [run])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a doc's table differs from the data's")
    p.add_argument("--history", metavar="FILE", help="print every run of benchmarks/results/FILE.jsonl")
    args = p.parse_args(argv)
    if args.history:
        print(history(args.history))
        return 0
    stale = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        new = update(text)
        if new != text:
            stale.append(doc.name)
            if not args.check:
                doc.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"tables out of date in {', '.join(stale)}: run benchmarks/tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
