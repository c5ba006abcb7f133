"""The options of a recipe's stages: their defaults per kind and the check of every value, run on all
stages before the first one starts (a typo in the last stage must not cost the earlier stages' work).

Errors name the option as the user writes it on the command line, `STAGE.KEY`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.algorithms.common import max_positions
from rlvr.algorithms.preference import PreferenceConfig
from rlvr.algorithms.sft import encode_pairs, located_pairs_from_jsonl
from rlvr.config import Config, ConfigError
from rlvr.core import PREFERENCE_LOSSES
from rlvr.data.difficulty import MODES, filter_threshold
from rlvr.tasks.data import read_records, record_places
from rlvr.thinking.fusion import build_fusion_data
from rlvr.train.preflight import check_data, check_model_folder, model_config, model_path, run_tokenizer

# kind -> option defaults (None: optional, no default). Unknown options are an error.
_SFT = {"steps": 100, "batch_size": 32, "lr": 1e-3}
_SAMPLE = {"prompts": 64, "samples": 4, "temperature": 1.0}
KINDS: dict[str, dict[str, Any]] = {
    "rl": {"config": {}},
    "sft": {**_SFT, "data": None, "demonstrations": 256},
    "rejection_sft": {**_SFT, **_SAMPLE, "data": None, "demonstrations": 0},
    "dpo": {**_SAMPLE, "loss": "dpo", "beta": None, "lr": 1e-4, "epochs": 1, "batch_size": 8},
    "filter": {"prompts": None, "samples": 8, "k": None, "mode": "drop_solved", "drop_unsolved": False,
               "temperature": 1.0},
    "fusion_sft": {**_SFT, "data": None, "demonstrations": 256, "thinking": "The answer is {answer}.",
                   "unflagged_think": 0.0},
    "budget_eval": {"budgets": [8, 16, 32], "examples": None, "answer_tokens": None},
}


def _integer(lo: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= lo
        return None if ok else f"expected an integer >= {lo}"
    return check


def _number(lo: float, hi: float | None = None, low_open: bool = False) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v > lo if low_open else v >= lo) \
            and (hi is None or v <= hi)
        span = f"{'>' if low_open else '>='} {lo}" + (f" and <= {hi}" if hi is not None else "")
        return None if ok else f"expected a number {span}"
    return check


def _one_of(values) -> Callable[[Any], str | None]:
    return lambda v: None if v in values else f"expected one of {sorted(values)}"


def _file(v: Any) -> str | None:
    if not isinstance(v, str):
        return "expected the path of a JSONL file"
    return None if Path(v).is_file() else f"no such file {v!r}"


def _budgets(v: Any) -> str | None:
    ok = isinstance(v, list) and v and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in v)
    return None if ok else "expected a non-empty list of integers >= 1, e.g. [8, 16, 32]"


CHECKS: dict[str, Callable[[Any], str | None]] = {
    "config": lambda v: None if isinstance(v, dict) else "expected a mapping of config sections",
    "steps": _integer(1), "batch_size": _integer(1), "epochs": _integer(1), "lr": _number(0, low_open=True),
    "prompts": _integer(1), "samples": _integer(1), "temperature": _number(0), "demonstrations": _integer(0),
    "data": _file, "loss": _one_of(PREFERENCE_LOSSES), "beta": _number(0, low_open=True), "k": _integer(1),
    "mode": _one_of(MODES), "drop_unsolved": lambda v: None if isinstance(v, bool) else "expected true or false",
    "thinking": lambda v: None if isinstance(v, str) else "expected a text template ({prompt}, {answer})",
    "unflagged_think": _number(0, 1), "budgets": _budgets, "examples": _integer(1), "answer_tokens": _integer(1),
}


def fusion_rows(path: str | Path, unflagged_think: float, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    """(each row's record place, `file:LINE`; the /think and /no_think SFT rows) of a fusion_sft stage's `data`
    (records {prompt, thinking, answer} in a .jsonl, .json or .parquet file); a bad record is named by its place."""
    records = read_records(path)
    if not records:
        raise ValueError(f"{path}: no rows")
    places = record_places(path, len(records))
    rows = build_fusion_data(records, unflagged_think=unflagged_think, seed=seed, where=places)
    return [places[row["source_index"]] for row in rows], rows


def _fusion_pairs(opts: dict[str, Any], seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    places, rows = fusion_rows(opts["data"], opts["unflagged_think"], seed)
    return places, [(row["prompt"], row["completion"]) for row in rows]


# kind -> (each row's `file:LINE`, the (prompt, completion) pairs) of its `data` file, read as the stage reads it
# (rows checked, the same errors) with the recipe's seed
DATA_READERS: dict[str, Callable[[dict[str, Any], int], tuple[list[str], list[tuple[str, str]]]]] = {
    "sft": lambda opts, seed: located_pairs_from_jsonl(opts["data"]),
    "rejection_sft": lambda opts, seed: located_pairs_from_jsonl(opts["data"]),
    "fusion_sft": _fusion_pairs,
}


def check_stage_data(name: str, kind: str, options: dict[str, Any]) -> None:
    """The stage's `data` file read and every row checked now, as the stage will read it, so that a bad row
    stops the recipe before its first stage (not after the stages before this one); ConfigError naming
    `STAGE.data` and the file's line."""
    if options.get("data") is None or kind not in DATA_READERS:
        return
    try:
        DATA_READERS[kind](options, 0)
    except (ValueError, OSError, ImportError) as err:
        raise ConfigError(f"{name}.data: {err}") from None


def check_sft_lengths(base: Config, stages: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
    """Every row of the recipe's SFT data, the warm start's `sft.data` and each (name, kind, options) stage's
    `data`, fits the model's context, as `rlvr sft` checks its `sft.data` (`rlvr.train.preflight.check_data`);
    a row too long stopped the recipe at its stage, after the stages before it, as "SFT pair i". The stages keep
    the starting model's tokenizer and context, so all are checked on it, before the first stage; ConfigError
    naming `STAGE.data` and the row's `file:LINE`."""
    data = [(name, kind, opts) for name, kind, opts in stages if opts.get("data") is not None and kind in DATA_READERS]
    if not data and not (base.sft.steps and base.sft.data):
        return
    if base.model.path:  # read for its tokenizer and context: a bad folder is named as such first
        check_model_folder(model_path(base), "model.path", causal_lm=True)
    check_data(base)
    tokenizer, positions = run_tokenizer(base), max_positions(model_config(base))
    for name, kind, opts in data:
        places, pairs = DATA_READERS[kind](opts, base.seed)
        try:
            encode_pairs(tokenizer, pairs, positions, places)
        except ValueError as err:
            raise ConfigError(f"{name}.data: {err}") from None


def check_stage_options(name: str, kind: str, options: dict[str, Any]) -> None:
    """Every option of one stage has a value of its type and range (None where the kind's default is None),
    the options that must agree do, and its `data` file reads; ConfigError naming `STAGE.KEY` otherwise."""
    for key, value in options.items():
        if value is None and KINDS[kind][key] is None:
            continue
        problem = CHECKS[key](value)
        if problem:  # a problem that names the value already ("no such file 'x'") is not followed by it again
            raise ConfigError(f"{name}.{key}: {problem}" + ("" if repr(value) in problem else f", got {value!r}"))
    check_stage_data(name, kind, options)
    if kind == "filter":
        try:
            filter_threshold(options["samples"], options["k"], options["mode"], options["drop_unsolved"])
        except ValueError as err:
            raise ConfigError(f"stage {name!r} (filter): {err} ({name}.samples, {name}.k, {name}.mode)") from None
    if kind == "dpo":
        try:
            PreferenceConfig(loss=options["loss"], beta=options["beta"], lr=options["lr"], epochs=options["epochs"],
                             batch_size=options["batch_size"]).validate()
        except ValueError as err:
            raise ConfigError(f"stage {name!r} (dpo): {err}") from None
