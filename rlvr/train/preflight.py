"""Checks of everything a run reads or writes, before the run folder is created: the output folder,
model folders (config, weights header, tokenizer), training data and the checkpoint to resume from.
A mistake found here is one line naming the file; nothing has been written yet."""

from __future__ import annotations

import json
import logging
import pickle
import struct
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlvr.algorithms.common import max_positions
from rlvr.algorithms.sft import encode_pairs, located_pairs_from_jsonl
from rlvr.config import Config, ConfigError, check_out_dir, load_config, with_absolute_paths
from rlvr.models import PRESETS, build_char_tokenizer, load_tokenizer, resolve_model, tiny_config
from rlvr.rollout.engines import EngineSpec, check_engine
from rlvr.tasks import Task, get_task
from rlvr.tasks.base import takes_tokenizer
from rlvr.train.checkpoint import (CHECKPOINTS, LATEST, WARM_START, BadPointer, latest_checkpoint, load_state,
                                   step_folders, step_number)

logger = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def check_output_folder(folder: str | Path, outputs: list[str], overwrite: bool, key: str = "--out") -> None:
    """Before any work: `folder` can be written, and holds none of `outputs` (what the command writes there)
    from an earlier run unless `overwrite`, so a finished model is never replaced or lost at the end."""
    check_out_dir(folder, key)
    held = [name for name in outputs if (Path(folder) / name).exists()]
    if held and not overwrite:
        raise ConfigError(f"{key}: {str(folder)!r} already holds {', '.join(held)} from an earlier run; choose "
                          f"another {key} or pass --overwrite")


def check_safetensors(path: Path) -> None:
    """The header of a .safetensors file parses and the file is as long as the header says."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or 8 + n > size:
            raise ValueError(f"{path}: not a safetensors file or truncated ({size} bytes)")
        try:
            header = json.loads(handle.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{path}: corrupt safetensors header") from None
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and "data_offsets" in t]
    if 8 + n + max(ends, default=0) > size:
        raise ValueError(f"{path}: truncated ({size} bytes, the header needs {8 + n + max(ends)})")


def _run_folder_hint(folder: Path) -> str:
    """Where a run folder given for a model keeps its models (final, else the latest checkpoint's)."""
    if (folder / "final_model").is_dir():
        return f"; it is a run folder: its trained model is {folder / 'final_model'}"
    try:
        latest = latest_checkpoint(folder)
    except BadPointer:
        return ""
    if latest is not None and (latest / "model").is_dir():
        return f"; it is a run folder without a final model: its latest checkpoint's is {latest / 'model'}"
    return ""


def check_model_folder(path: str | Path, key: str, tokenizer: bool = True, adapter: bool = False,
                       causal_lm: bool = False) -> None:
    """A Hugging Face folder with a readable config.json (or, `adapter`: a LoRA checkpoint's PEFT
    adapter_config.json), intact weights and (optionally) tokenizer files; `causal_lm`: not a reward model
    (`rlvr reward-model` writes ...ForSequenceClassification), which loaded as a causal LM without its head,
    a 7-line transformers load report on stderr and nonsense after it."""
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"{key}: no model folder at {str(folder)!r}")
    is_adapter = (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file()
    if is_adapter and not adapter:
        merged = folder.parent / "final_model"
        hint = f"; the merged model beside it is {merged}" if (merged / "config.json").is_file() else ""
        raise ConfigError(f"{key}: {str(folder)!r} holds LoRA adapters (adapter_config.json), not a whole "
                          f"model{hint}")
    config = "adapter_config.json" if is_adapter else "config.json"
    try:
        fields = json.loads((folder / config).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{key}: {str(folder)!r} is not a Hugging Face model folder (no config.json)"
                          + _run_folder_hint(folder)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"{key}: {folder / config} is not valid JSON ({err})") from None
    architectures = (fields.get("architectures") if isinstance(fields, dict) else None) or []
    heads = [a for a in architectures if str(a).endswith("ForSequenceClassification")]
    if causal_lm and heads:
        raise ConfigError(f"{key}: {str(folder)!r} holds a reward model ({heads[0]}: a sequence-classification "
                          "head), not a causal LM")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not list(folder.glob("*.bin")):
        raise ConfigError(f"{key}: {str(folder)!r} has no weights (*.safetensors or *.bin)")
    for file in weights:
        try:
            check_safetensors(file)
        except ValueError as err:
            raise ConfigError(f"{key}: {err}") from None
    if tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{key}: {str(folder)!r} has no tokenizer files (one of {', '.join(TOKENIZER_FILES)})")


def check_data(cfg: Config) -> None:
    """sft.data reads, and each of its rows fits the model's context (else the warm start trained on it, past
    the model's positions, with only a warning from transformers)."""
    if cfg.sft.steps and cfg.sft.data:
        try:
            places, pairs = located_pairs_from_jsonl(cfg.sft.data)
            encode_pairs(run_tokenizer(cfg), pairs, max_positions(model_config(cfg)), places)
        except (ValueError, FileNotFoundError) as err:
            raise ConfigError(f"sft.data: {err}") from None


def model_path(cfg: Config) -> Path | None:
    """The folder of the model the run starts from: model.path's (`rlvr.models.resolve_model`: a GGUF file's or an
    embedded model's is converted once, into the cache); None for the tiny model built in the run folder."""
    return resolve_model(cfg.model.path) if cfg.model.path else None


def model_config(cfg: Config) -> Any:
    """The Hugging Face config of the model the run starts from: model.path's, or the tiny model's to be built."""
    from transformers import AutoConfig

    m, path = cfg.model, model_path(cfg)
    return (AutoConfig.from_pretrained(path) if path else
            tiny_config(build_char_tokenizer(), m.tiny_arch, **{**PRESETS[m.tiny_preset], **m.tiny_sizes}))


def run_tokenizer(cfg: Config) -> Any:
    """The tokenizer of the model the run starts from: model.path's, or the tiny model's to be built."""
    path = model_path(cfg)
    return load_tokenizer(path) if path else build_char_tokenizer()


def run_task(cfg: Config) -> Task:
    """The run's task, `get_task(task.name, **task.options)`, handed the start model's tokenizer when the task takes
    a `tokenizer` option the options leave out: its `template: chat` and default `auto` template read the model's
    own chat template, and a config never names the model a second time."""
    options = dict(cfg.task.options)
    if "tokenizer" not in options and takes_tokenizer(cfg.task.name):
        try:
            options["tokenizer"] = run_tokenizer(cfg)
        except (OSError, ValueError) as err:
            raise ConfigError(f"model.path: {err}") from None
    return get_task(cfg.task.name, **options)


def completion_budget(cfg: Config) -> tuple[str, int]:
    """(key, tokens) bounding a row after its first prompt: an episode's env.max_tokens, a completion's
    rollout.max_new_tokens."""
    return ("env.max_tokens", cfg.env.max_tokens) if cfg.env.name else \
        ("rollout.max_new_tokens", cfg.rollout.max_new_tokens)


def check_context(cfg: Config, prompts: list[str]) -> int:
    """rollout.max_new_tokens fits the model's context after the longest of `prompts` (the held-out set):
    checked before any work; it failed at the first evaluation, after the warm start and the first record
    of metrics.jsonl, which then blocked a plain re-run. Returns the longest prompt's tokens (0 for none)."""
    tokens = run_tokenizer(cfg)(prompts, add_special_tokens=not cfg.env.name)["input_ids"] if prompts else []
    longest = max(map(len, tokens), default=0)  # rendered
    positions = max_positions(model_config(cfg))
    if positions is None or not prompts:
        return longest
    key, new = completion_budget(cfg)
    if longest + new > positions:
        fits = f"at most {positions - longest} fit" if positions > longest else "no room is left"
        raise ConfigError(f"{key}={new}: the longest held-out prompt ({longest} tokens) + {new} "
                          f"exceeds the model's max_position_embeddings ({positions}); {fits}")
    return longest


def check_lora_targets(cfg: Config) -> None:
    """model.lora.target_modules each name modules of the model (as PEFT matches them: the name or its last
    part), checked on the config alone (a model on the meta device: no weights) before any work; PEFT's own
    error came after the SFT warm start, or, in an actor, as a dead actor."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(model_config(cfg))
    names = [name for name, _ in model.named_modules() if name]
    linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                     if isinstance(module, torch.nn.Linear)})
    missing = [t for t in cfg.model.lora.target_modules if not any(n == t or n.endswith(f".{t}") for n in names)]
    if missing:
        raise ConfigError(f"model.lora.target_modules: {missing} name no module of the model; its linear layers are "
                          f"{linear}")


def check_engine_model(cfg: Config, spec: EngineSpec) -> None:
    """The model is one the engine can run here (`EngineSpec.check_model`: vLLM's CPU kernels and head sizes),
    checked before the warm start rather than by the engine's internal error at the first rollout."""
    try:
        spec.check_model(model_config(cfg))
    except ValueError as err:
        hint = "; e.g. model.tiny_sizes={num_heads: 2} gives the tiny model 32" if not cfg.model.path else ""
        raise ConfigError(f"rollout.engine={spec.name}: {err}{hint}") from None


def check_checkpoint(checkpoint: Path) -> None:
    """The model and state.pt of a checkpoint are intact; if not, name the file and the newest good one."""
    try:
        _check_intact(checkpoint)
    except ConfigError as err:
        raise ConfigError(f"corrupt checkpoint: {err}; {_advice(checkpoint.parent, checkpoint.name)}") from None


def _check_intact(checkpoint: Path) -> None:
    check_model_folder(checkpoint / "model", "checkpoint", adapter=True)
    try:
        load_state(checkpoint)  # read once here to prove it loads; the run reads it again
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, pickle.UnpicklingError) as err:
        raise ConfigError(f"{checkpoint / 'state.pt'} cannot be read ({str(err).split('.')[0]})") from None


def newest_intact(folder: Path, bad: str | None = None) -> Path | None:
    """The checkpoint to resume from when `bad` (a step folder of `folder`, None: none is named) cannot be: the
    newest intact one below it (or newest of all), by step number; None when none is intact."""
    limit = step_number(bad) if bad else None
    steps = [p for p in step_folders(folder) if p.name != bad]
    if limit is not None:  # those before the broken one first: the run reached them in order
        steps = [p for p in steps if step_number(p.name) < limit] + [p for p in steps if step_number(p.name) > limit]
    for candidate in steps:
        try:
            _check_intact(candidate)
        except ConfigError:
            continue
        return candidate
    return None


def _advice(folder: Path, bad: str | None) -> str:
    """What to resume from when `bad` cannot be (`newest_intact`). Only with none intact left is the
    checkpoints folder to be deleted, never the run folder."""
    candidate = newest_intact(folder, bad)
    if candidate is None:
        return f"no complete checkpoint is left: delete {folder} and start the run again with --resume-or-start"
    limit = step_number(bad) if bad else None
    which = "previous" if limit is not None and step_number(candidate.name) < limit else "newest"
    return (f"the {which} complete checkpoint is {candidate.name}: resume from it with "
            f"`echo {candidate.name} > {folder / LATEST}`")


def find_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `latest` names (checked intact), or None when the folder has none. Without `latest` (a
    crash between the first checkpoint's rename and the pointer's write, a deleted pointer) but with step
    folders: the newest intact one, with a warning, since starting over would silently lose the run's progress
    (the next checkpoint writes `latest` again)."""
    folder = Path(run_dir) / CHECKPOINTS
    try:
        checkpoint = latest_checkpoint(run_dir)
    except BadPointer as err:
        raise ConfigError(f"{err}; {_advice(folder, err.named)}") from None
    if checkpoint is not None:
        check_checkpoint(checkpoint)
        return checkpoint
    if not step_folders(folder):
        return None
    checkpoint = newest_intact(folder)
    if checkpoint is None:
        raise ConfigError(f"{folder / LATEST} is missing and {_advice(folder, None)}")
    logger.warning("warning: %s is missing; resuming from the newest complete checkpoint, %s (step %d)",
                   folder / LATEST, checkpoint.name, step_number(checkpoint.name))
    return checkpoint


def preflight(cfg: Config, resume: bool, or_start: bool = False) -> Path | None:
    """Every file check of a run; returns the checkpoint to resume from (None: start from scratch).
    `or_start`: a resume that finds no checkpoint starts the run instead of failing."""
    check_out_dir(cfg.out_dir)
    if cfg.model.path:
        check_model_folder(model_path(cfg), "model.path", causal_lm=True)
    if cfg.value.path:
        check_model_folder(resolve_model(cfg.value.path, "value.path"), "value.path", tokenizer=False)
    check_data(cfg)
    if cfg.model.lora.r > 0:
        check_lora_targets(cfg)
    engine = check_engine(cfg)  # a known, installed engine that runs on model.device
    if engine.check_model is not None:
        check_engine_model(cfg, engine)
    checkpoint = find_checkpoint(Path(cfg.out_dir)) if resume else None
    # stopped in its SFT warm start: the warm start goes on from its own checkpoint (rlvr.train.warm_start)
    in_warm_start = resume and checkpoint is None and bool(step_folders(Path(cfg.out_dir, WARM_START, CHECKPOINTS)))
    if resume and checkpoint is None and not or_start and not in_warm_start:
        raise ConfigError(f"--resume: {cfg.out_dir!r} has no checkpoint yet; use --resume-or-start to start it "
                          f"from scratch")
    if checkpoint is not None or in_warm_start:
        check_resumed_config(cfg, Path(cfg.out_dir), step_number(checkpoint.name) if checkpoint else 0)
    return checkpoint


# what a resume may change: where and how the run computes, logs, evaluates and checkpoints, and how long it
# goes on; every other key is part of the run (a resumed run continues the same run)
RESUMABLE = ("out_dir", "threads", "model.device", "model.dtype", "model.gradient_checkpointing",
             "model.attn_implementation", "task.eval_size", "task.eval_seed", "reward.", "rollout.engine",
             "rollout.gpu_memory_utilization", "rollout.enable_prefix_caching", "rollout.enable_sleep_mode",
             "rollout.vllm_lora", "train.steps", "train.micro_batch_size", "train.micro_batch_tokens", "train.packing",
             "train.logprob_chunk", "rollout.tensor_parallel_size",
             "train.max_nonfinite_steps", "guard.", "eval.", "checkpoint.", "log.", "distributed.")


def differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old, new) for every leaf where two nested dicts differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new), key=str)
                for d in differences(old.get(key), new.get(key), f"{prefix}{key}.")]
    return [] if old == new else [(prefix[:-1], old, new)]


def describe(diffs: list[tuple[str, Any, Any]], most: int = 3) -> str:
    text = "; ".join(f"{key} {old!r} -> {new!r}" for key, old, new in diffs[:most])
    return text + ("; ..." if len(diffs) > most else "")


class SettingsChanged(ConfigError):
    """A resume whose settings differ from the run's in keys a resume may not change; `run_dir`, `changed`
    ((key, old, new) as `differences` gives them) let a caller that resumes on its own (a recipe stage) say so
    in its own words."""

    def __init__(self, run_dir: Path, changed: list[tuple[str, Any, Any]]) -> None:
        self.run_dir, self.changed = run_dir, changed
        super().__init__(f"--resume: {str(run_dir)!r} was trained with other settings ({describe(changed)}); a "
                         f"resumed run continues that run: drop the change of {self.keys}, or start a new run in "
                         f"another out_dir")

    @property
    def keys(self) -> str:
        return ", ".join(key for key, _, _ in self.changed[:3])


def check_resumed_config(cfg: Config, run_dir: Path, step: int) -> None:
    """A resume continues the run its folder holds: the settings it was trained with may change only in
    RESUMABLE keys, and train.steps not below the checkpoint's step. A config file or --set that changes
    the model, task, algorithm, batch or optimizer would otherwise be written into config.yaml as if the
    whole run had used it."""
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        return
    saved, now = with_absolute_paths(load_config(saved_path)), with_absolute_paths(cfg)  # as config.yaml holds them
    changed = [d for d in differences(plain(asdict(saved)), plain(asdict(now))) if not d[0].startswith(RESUMABLE)]
    if changed:
        raise SettingsChanged(run_dir, changed)
    if cfg.train.steps < step:
        raise ConfigError(f"--resume: train.steps={cfg.train.steps} is below the checkpoint's step {step} in "
                          f"{str(run_dir)!r}")


def plain(value: Any) -> Any:
    """`value` as JSON reads it back (tuples as lists, paths as text): what a file records, to compare with."""
    return json.loads(json.dumps(value, default=str))
