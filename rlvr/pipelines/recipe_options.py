"""The options of a recipe's stages checked, all stages before the first one starts (a typo in the last stage
must not cost the earlier stages' work): each kind's section (`rlvr.config.stages`) checks its own values; here
what needs more than the config layer: the data files read as the stage reads them, the filter's threshold.

Errors name the option as the user writes it on the command line, `STAGE.KEY`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.algorithms.common import max_positions
from rlvr.algorithms.sft import encode_pairs, located_pairs_from_jsonl
from rlvr.config import Config, ConfigError
from rlvr.config.fields import check_section
from rlvr.config.stages import FilterStage
from rlvr.data.difficulty import filter_threshold
from rlvr.tasks.data import read_records, record_places
from rlvr.thinking.fusion import build_fusion_data
from rlvr.train.preflight import check_data, check_model_folder, model_config, model_path, run_tokenizer


def fusion_rows(path: str | Path, unflagged_think: float, seed: int) -> tuple[list[str], list[dict[str, Any]]]:
    """(each row's record place, `file:LINE`; the /think and /no_think SFT rows) of a fusion_sft stage's `data`
    (records {prompt, thinking, answer} in a .jsonl, .json or .parquet file); a bad record is named by its place."""
    records = read_records(path)
    if not records:
        raise ValueError(f"{path}: no rows")
    places = record_places(path, len(records))
    rows = build_fusion_data(records, unflagged_think=unflagged_think, seed=seed, where=places)
    return [places[row["source_index"]] for row in rows], rows


def _fusion_pairs(opts: Any, seed: int) -> tuple[list[str], list[tuple[str, str]]]:
    places, rows = fusion_rows(opts.data, opts.unflagged_think, seed)
    return places, [(row["prompt"], row["completion"]) for row in rows]


# kind -> (each row's `file:LINE`, the (prompt, completion) pairs) of its `data` file, read as the stage reads it
# (rows checked, the same errors) with the recipe's seed
DATA_READERS: dict[str, Callable[[Any, int], tuple[list[str], list[tuple[str, str]]]]] = {
    "sft": lambda opts, seed: located_pairs_from_jsonl(opts.data),
    "rejection_sft": lambda opts, seed: located_pairs_from_jsonl(opts.data),
    "fusion_sft": _fusion_pairs,
}


def check_stage_data(name: str, kind: str, options: Any) -> None:
    """The stage's `data` file read and every row checked now, as the stage will read it, so that a bad row
    stops the recipe before its first stage (not after the stages before this one); ConfigError naming
    `STAGE.data` and the file's line."""
    if getattr(options, "data", None) is None or kind not in DATA_READERS:
        return
    try:
        DATA_READERS[kind](options, 0)
    except (ValueError, OSError, ImportError) as err:
        raise ConfigError(f"{name}.data: {err}") from None


def check_sft_lengths(base: Config, stages: Sequence[tuple[str, str, Any]]) -> None:
    """Every row of the recipe's SFT data, the warm start's `sft.data` and each (name, kind, options) stage's
    `data`, fits the model's context, as `rlvr sft` checks its `sft.data` (`rlvr.train.preflight.check_data`);
    a row too long stopped the recipe at its stage, after the stages before it, as "SFT pair i". The stages keep
    the starting model's tokenizer and context, so all are checked on it, before the first stage; ConfigError
    naming `STAGE.data` and the row's `file:LINE`."""
    data = [(name, kind, opts) for name, kind, opts in stages
            if getattr(opts, "data", None) is not None and kind in DATA_READERS]
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


def check_stage_options(name: str, kind: str, options: Any) -> None:
    """Every option of one stage: its section's values and rules (`check_section`, naming `STAGE.KEY`), its `data`
    file read as the stage reads it, the filter's threshold against its samples; ConfigError otherwise."""
    check_section(options, f"{name}.")
    check_stage_data(name, kind, options)
    if isinstance(options, FilterStage):
        try:
            filter_threshold(options.samples, options.k, options.mode, options.drop_unsolved)
        except ValueError as err:
            raise ConfigError(f"stage {name!r} (filter): {err} ({name}.samples, {name}.k, {name}.mode)") from None
