"""Run several algorithm variants on the same task, model and seed, and draw them on one figure.

    rlvr compare configs/compare/length_bias.yaml --variants grpo dr_grpo --out runs/compare

A variant is a preset name (`rlvr presets`), a YAML file of config overrides, or `LABEL:KEY=VALUE,...`
(e.g. `seqmean:algorithm.aggregation=seq_mean_token_mean`). Precedence: base config < variant <
`--set`, so `--set train.steps=20` applies to every variant; a `--set` of a key some variant names is
refused (it would erase what tells the variants apart), as are a key given twice in one variant and a
variant's `out_dir` (`--out` names the run folders). A preset variant names only its preset: `--set
algorithm.beta=0` changes that key of every preset, as it does over a preset in `rlvr train`. Each variant trains in `OUT/<label>`
with its own metrics.jsonl; `OUT/comparison.png` shows training reward, held-out greedy accuracy
and completion length against step, one line per variant, and `OUT/summary.md` the table printed.
`--resume` continues an interrupted comparison: finished variants are kept, an interrupted one
resumes from its latest checkpoint, the others train.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass, is_dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.presets import PRESETS, preset_overrides
from rlvr.config import Config, ConfigError, load_config, read_yaml
from rlvr.jsonl import read_jsonl
from rlvr.train.loop import train_to_end
from rlvr.train.preflight import preflight
from rlvr.train.rollout import check_one_engine
from rlvr.train.validate import check_registries

PANELS = (  # (metric key, title, y label)
    ("reward", "Training reward", "mean over the batch"),
    ("eval/greedy_accuracy", "Held-out accuracy", "greedy exact match"),
    ("completion_length", "Completion length", "tokens (training batch mean)"),
)
_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
OUT_DIR = "out_dir"


@dataclass
class Variant:
    label: str
    overrides: list[str]  # `--set` strings
    preset: bool = False  # a preset name: its keys are the preset's, which a `--set` may change as in `rlvr train`

    def own_keys(self) -> list[str]:
        """The keys this variant names itself: a preset variant only `algorithm.preset`."""
        return ["algorithm.preset"] if self.preset else [_key(item) for item in self.overrides]


def _flatten(tree: dict[str, Any], section: type | None = Config, prefix: str = "") -> list[str]:
    """{"algorithm": {"beta": 0}, "seed": 1} -> ["algorithm.beta=0", "seed=1"]: config files are
    sections of keys, and sections inside them (model.lora); other mappings and lists (task.options, ...) are
    written as JSON, which `--set` reads as YAML. An unknown key is left for `--set` to name."""
    out, kinds = [], typing.get_type_hints(section) if section else {}
    for key, value in tree.items():
        kind = kinds.get(key)
        if isinstance(value, dict) and (is_dataclass(kind) or not prefix):  # a section (or an unknown one's keys)
            out += _flatten(value, kind if is_dataclass(kind) else None, f"{prefix}{key}.")
            continue
        text = "null" if value is None else json.dumps(value) if isinstance(value, (dict, list, bool)) else value
        out.append(f"{prefix}{key}={text}")
    return out


def _key(item: str) -> str:
    return item.partition("=")[0].strip()


def _overlap(a: str, b: str) -> bool:
    """Whether setting keys `a` and `b` touches the same value (task.options and task.options.length do)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _checked(spec: str, variant: Variant) -> Variant:
    keys = [_key(item) for item in variant.overrides]
    if OUT_DIR in keys:
        raise ConfigError(f"variant {spec!r}: out_dir is set by compare (--out/<label>); remove it from the variant")
    for i, key in enumerate(keys):
        if twice := next((k for k in keys[:i] if _overlap(k, key)), None):
            raise ConfigError(f"variant {spec!r} sets {key} twice" if twice == key else
                              f"variant {spec!r} sets both {twice} and {key}; give one of them")
    return variant


def parse_variant(spec: str) -> Variant:
    """A preset name, a YAML file of overrides, or LABEL:KEY=VALUE,KEY=VALUE; a key set twice, or out_dir,
    is refused."""
    if spec in PRESETS:
        return Variant(spec, [f"algorithm.preset={spec}", *preset_overrides(spec)], preset=True)
    path = Path(spec)
    if spec.endswith((".yaml", ".yml")):
        if not path.is_file():
            raise ConfigError(f"variant file {spec!r} does not exist")
        tree = read_yaml(path) or {}
        if not isinstance(tree, dict):
            raise ConfigError(f"variant file {spec!r}: expected a mapping of config sections")
        return _checked(spec, Variant(path.stem, _flatten(tree)))
    label, sep, body = spec.partition(":")
    if not sep or not _LABEL.match(label) or not body:
        raise ConfigError(f"variant {spec!r}: expected a preset ({', '.join(sorted(PRESETS))}), a .yaml file, "
                         "or LABEL:KEY=VALUE,KEY=VALUE")
    sets = [item.strip() for item in body.split(",")]
    if not all("=" in item for item in sets):
        raise ConfigError(f"variant {spec!r}: every item after ':' must be KEY=VALUE")
    return _checked(spec, Variant(label, sets))


def check_variants(variants: Sequence[Variant], overrides: Sequence[str] = ()) -> None:
    """At least two variants with unique labels; no `--set` of a key a variant sets, nor of out_dir."""
    labels = [v.label for v in variants]
    if len(variants) < 2:
        raise ConfigError("compare needs at least two variants")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"variant labels must be unique, got {labels}")
    for key in map(_key, overrides):
        if key == OUT_DIR:
            raise ConfigError("--set out_dir: compare's --out names the run folders (--out/<label>); use --out")
        for v in variants:
            if hit := next((k for k in v.own_keys() if _overlap(k, key)), None):
                raise ConfigError(f"--set {key}: variant {v.label} sets {hit}, and a --set would replace it in every "
                                  f"variant; set it in each variant (LABEL:KEY=VALUE,...) instead")


def run_comparison(base: str | Path | None, variants: Sequence[Variant], out_dir: str | Path,
                   overrides: Sequence[str] = (), train: Callable | None = None, resume: bool = False
                   ) -> dict[str, list[dict[str, Any]]]:
    """Train every variant (configs validated first, all of them, before any run) and return
    {label: metrics records}. `train(cfg)` defaults to `rlvr.train.loop.train_to_end`, which also
    finishes a variant's interrupted run; without `resume` a folder already holding a run is refused."""
    check_variants(variants, overrides)
    out_dir = Path(out_dir)
    configs = {v.label: check_registries(load_config(base, [*v.overrides, *overrides, f"out_dir={out_dir / v.label}"]))
               for v in variants}
    seeds = {cfg.seed for cfg in configs.values()}
    if len(seeds) != 1:
        raise ConfigError(f"variants must share one seed for a fair comparison, got {sorted(seeds)}")
    check_one_engine(configs, "variant")  # they train one after the other in this process
    # checked for all before any trains: a later variant's folder holding a run stopped the comparison after
    # the earlier variants had trained
    held = [label for label, cfg in configs.items() if (Path(cfg.out_dir) / "metrics.jsonl").exists()]
    if held and not resume:
        raise ConfigError(f"--out: {str(out_dir)!r} already holds the run(s) of {', '.join(held)}; choose another "
                          f"--out, or add --resume to continue that comparison")
    for cfg in configs.values():  # every file, model and checkpoint check of each run, before any trains
        preflight(cfg, resume=resume, or_start=True)
    histories = {}
    for label, cfg in configs.items():
        (train or train_to_end)(cfg)
        histories[label] = read_jsonl(Path(cfg.out_dir) / "metrics.jsonl")
    return histories


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], float(r[key])) for r in records if isinstance(r.get(key), (int, float))]
    return [p[0] for p in points], [p[1] for p in points]


def plot_comparison(histories: dict[str, list[dict[str, Any]]], path: str | Path, title: str = "") -> Path:
    """One row of panels (PANELS), one line per variant, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(5.0 * len(PANELS), 3.8), dpi=100)
    for ax, (key, panel_title, ylabel) in zip(axes, PANELS):
        for label, records in histories.items():
            steps, values = _series(records, key)
            if steps:
                ax.plot(steps, values, label=label, marker="o" if len(steps) <= 30 else None, markersize=3)
        ax.set_title(panel_title)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _window_mean(records: list[dict[str, Any]], key: str, first: bool, k: int = 5) -> float:
    _, values = _series([r for r in records if r["step"] > 0], key)
    part = values[:k] if first else values[-k:]
    return sum(part) / len(part) if part else float("nan")


def summarize(histories: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown table: held-out greedy accuracy before/after, training reward and completion length
    averaged over the first and the last 5 steps (single steps are noisy)."""
    rows = ["| variant | held-out acc. start -> end | reward first5 -> last5 | length first5 -> last5 |",
            "|---|---|---|---|"]
    for label, records in histories.items():
        _, acc = _series(records, "eval/greedy_accuracy")
        acc_text = f"{acc[0]:.3f} -> {acc[-1]:.3f}" if acc else "n/a"
        reward = f"{_window_mean(records, 'reward', True):.3f} -> {_window_mean(records, 'reward', False):.3f}"
        length = (f"{_window_mean(records, 'completion_length', True):.1f} -> "
                  f"{_window_mean(records, 'completion_length', False):.1f}")
        rows.append(f"| {label} | {acc_text} | {reward} | {length} |")
    return "\n".join(rows)
