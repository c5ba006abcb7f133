"""`GRPOTrainer`: rlvr from Python in the shape of TRL's trainer.

    trainer = GRPOTrainer(model="tiny", reward_funcs=[exact], train_dataset=rows, args=RLConfig(max_steps=50))
    result = trainer.train()          # result.run_dir, result.model, result.final_eval

It builds a run's Config and runs the same loop as `rlvr train` (`rlvr.train.loop.train`, or on Ray
`rlvr.distributed.run.train_distributed`). The data become the `dataset` task (`rlvr.tasks.dataset`): a file is read
where it is, rows in memory (a list of dicts, a `datasets.Dataset`) are written to RUN/data/*.jsonl first, so the
run folder's config.yaml says what trained. Reward functions are TRL's `f(prompts, completions, **columns) ->
list[float | None]`, registered in `rlvr.rewards.REWARDS` under their `__name__` and listed in task.rewards; they add
to the task's verifier, or with `verifier="replace"` the verifier is logged (reward/task) but pays nothing. Which
algorithm runs is the config's (algorithm.preset: grpo, dapo, ppo, ...): `Trainer` is the same class.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr.config import Config, ConfigError, check_finite_number, validate
from rlvr.distributed.run import train_distributed
from rlvr.models import PRESETS, load_model, load_tokenizer, resolve_model, save_model
from rlvr.rewards import REWARDS, TRLReward
from rlvr.tasks import get_task
from rlvr.train.loop import train
from rlvr.pipelines.trl_config import RLConfig

VERIFIER = ("add", "replace")


@dataclass
class TrainResult:
    run_dir: Path  # the run folder: config.yaml, metrics.jsonl, final_model/, ...
    model: Any  # the trained policy, loaded from RUN/final_model (float32, on the CPU)
    tokenizer: Any
    first_eval: dict[str, float]  # held-out metrics before the first step
    final_eval: dict[str, float]  # and after the last
    global_step: int


def _rows(data: Any) -> list[dict] | None:
    """Rows held in memory (a list of dicts, a `datasets.Dataset`), else None (a file path)."""
    if isinstance(data, (str, Path)):
        return None
    if hasattr(data, "to_list") and type(data).__module__.startswith("datasets"):
        return data.to_list()
    if isinstance(data, Sequence) and all(isinstance(row, dict) for row in data):
        return list(data)
    raise ConfigError(f"a data set must be a list of dicts, a datasets.Dataset or a .jsonl/.json/.parquet path, "
                      f"got {type(data).__name__}")


def _data_file(data: Any, run_dir: Path, name: str) -> str:
    """The file the `dataset` task reads: a path as given, or rows written to RUN/data/NAME.jsonl. That file of an
    earlier run in the folder is written over only by the same rows (a resume), never by others."""
    rows = _rows(data)
    if rows is None:
        return str(Path(data).resolve())
    try:
        text = "".join(json.dumps(row) + "\n" for row in rows)
    except TypeError as err:  # a value JSON cannot hold (a tensor, an image)
        raise ConfigError(f"{name}_dataset: a row holds a value that is not JSON ({err})") from None
    path = run_dir / "data" / f"{name}.jsonl"
    if path.is_file() and path.read_text(encoding="utf-8") != text:
        raise ConfigError(f"{path} holds other rows (an earlier run's data); choose another output_dir")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path.resolve())


def register_reward(fn: Callable[..., Sequence[float | None]]) -> str:
    """Put a TRL reward function in rlvr.rewards.REWARDS under its `__name__` (the name TRL logs it by), in place of
    an earlier trainer's function of that name (a notebook cell run again); a shipped reward's name is refused."""
    if not callable(fn):
        raise ConfigError(f"reward_funcs: {fn!r} is not callable (TRL's f(prompts, completions, **columns))")
    name = getattr(fn, "__name__", type(fn).__name__)
    held = REWARDS.get(name)
    if held is not None and not hasattr(held, "trl_function"):
        raise ConfigError(f"reward_funcs: {name!r} is the name of a reward in rlvr.rewards.REWARDS; rename the "
                          "function")

    def factory() -> TRLReward:
        return TRLReward(fn, name)

    factory.trl_function = fn  # type: ignore[attr-defined]
    REWARDS[name] = factory
    return name


class GRPOTrainer:
    """TRL's `GRPOTrainer(model, reward_funcs, args, train_dataset, eval_dataset, processing_class)`.

    model: what model.path takes (a Hugging Face folder, a .gguf file, an embedded model's name such as
        smollm2-135m-instruct); `tiny` or `tiny:<preset>` (the character-level tiny model, built in the run folder);
        a loaded transformers model, with its tokenizer as `processing_class` (saved to RUN/start_model first);
        None: the config's model section.
    reward_funcs: a TRL reward function or a list of them; `reward_weights` their weights (default 1 each).
    args: the run's Config (`RLConfig(...)`, `rlvr.config.load_config(...)`); default `RLConfig()`.
    train_dataset / eval_dataset: rows with a `prompt` (text or messages) and any other columns; without
        eval_dataset a tenth of the rows is held out. None: the config's task (task.name) with its own data.
    verifier: `add` (the task's verifier plus the reward functions) or `replace` (the functions alone pay).
    """

    def __init__(self, model: Any = None, reward_funcs: Any = None, args: Config | None = None,
                 train_dataset: Any = None, eval_dataset: Any = None, processing_class: Any = None,
                 reward_weights: Sequence[float] | None = None, verifier: str = "add") -> None:
        cfg = copy.deepcopy(args) if args is not None else RLConfig()  # the caller's args stay as they were
        if not isinstance(cfg, Config):
            raise ConfigError(f"args must be an rlvr Config (RLConfig(...)), got {type(cfg).__name__}")
        if verifier not in VERIFIER:
            raise ConfigError(f"verifier must be one of {VERIFIER}, got {verifier!r}")
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else \
            [reward_funcs] if reward_funcs is not None else []
        try:
            weights = [check_finite_number("reward_weights", w) for w in reward_weights] \
                if reward_weights is not None else [1.0] * len(funcs)
        except (TypeError, ValueError) as err:
            raise ConfigError(str(err)) from None
        if len(weights) != len(funcs):
            raise ConfigError(f"reward_weights has {len(weights)} weights for {len(funcs)} reward functions")
        if train_dataset is None and eval_dataset is not None:
            raise ConfigError("eval_dataset needs a train_dataset (without one, the config's task brings its data)")
        names = [getattr(fn, "__name__", type(fn).__name__) for fn in funcs]
        if len(set(names)) < len(names):
            raise ConfigError(f"reward_funcs: two functions share a name ({names}); the name is the reward's key in "
                              "the logs (reward/<name>): rename one")
        terms = [{"name": register_reward(fn), "weight": w} for fn, w in zip(funcs, weights)]
        loaded = model is not None and not isinstance(model, (str, Path))
        cfg = self._named_model(cfg, None if loaded else model)
        validate(cfg)  # before anything is written in the run folder
        self.run_dir, self.args = Path(cfg.out_dir), cfg
        if loaded:
            self._save_loaded(cfg, model, processing_class)
        if verifier == "replace":
            terms.insert(0, {"name": "task", "weight": 0.0})
        listed = {term.get("name") for term in cfg.task.rewards}  # a run's saved config (a resume) lists them
        cfg.task.rewards = [*cfg.task.rewards, *(t for t in terms if t["name"] not in listed)]
        if train_dataset is not None:
            self._with_dataset(cfg, train_dataset, eval_dataset)
        self.model, self.processing_class = None, None

    def _named_model(self, cfg: Config, model: str | Path | None) -> Config:
        """model.path from `model`: a folder or a .gguf file (made absolute: the saved config resumes from any
        folder), an embedded model's name (rlvr.models), or `tiny[:preset]`, the tiny model built in the run."""
        if model is None:
            return cfg
        name = str(model)
        if name == "tiny" or name.startswith("tiny:"):
            preset = name.partition(":")[2] or cfg.model.tiny_preset
            if preset not in PRESETS:
                raise ConfigError(f"model {name!r}: no tiny preset {preset!r}; choose from {sorted(PRESETS)}")
            cfg.model = replace(cfg.model, path=None, tiny_preset=preset)
        else:
            cfg.model = replace(cfg.model, path=str(Path(name).resolve()) if Path(name).exists() else name)
        return cfg

    def _save_loaded(self, cfg: Config, model: Any, tokenizer: Any) -> None:
        """A loaded transformers model (and its tokenizer) saved to RUN/start_model, the run's model.path."""
        if not hasattr(model, "save_pretrained"):
            raise ConfigError(f"model must be a folder, a model's name, 'tiny' or a transformers model, got "
                              f"{type(model).__name__}")
        if tokenizer is None:
            raise ConfigError("a loaded model needs its tokenizer: processing_class=tokenizer")
        folder = self.run_dir / "start_model"
        if not (folder / "config.json").is_file():  # an earlier run's (a resume) is the one it started from
            save_model(model, tokenizer, folder)
        cfg.model = replace(cfg.model, path=str(folder.resolve()))

    def _with_dataset(self, cfg: Config, train_dataset: Any, eval_dataset: Any) -> None:
        kept = cfg.task.options if cfg.task.name == "dataset" else {}  # e.g. task.options.match=exact
        before = set(self.run_dir.rglob("*")) if self.run_dir.exists() else set()
        tokenizer = str(resolve_model(cfg.model.path)) if cfg.model.path else "char"  # a GGUF's converted folder
        options = {**kept, "path": _data_file(train_dataset, self.run_dir, "train"), "tokenizer": tokenizer}
        if eval_dataset is not None:
            options["eval_path"] = _data_file(eval_dataset, self.run_dir, "eval")
        try:
            held_out = get_task("dataset", **options).held_out_size()
        except (TypeError, ValueError) as err:
            message, sources = str(err), {options["path"]: "train_dataset", options.get("eval_path"): "eval_dataset"}
            label = next((name for path, name in sources.items() if path and path in message), "train_dataset")
            for path in sorted(set(self.run_dir.rglob("*")) - before, reverse=True):  # what this call wrote
                message = message.replace(f"{path}:", "row ")  # rows given in memory: named by their number
                path.rmdir() if path.is_dir() else path.unlink()
            if not before:
                self.run_dir.rmdir()
            raise ConfigError(f"{label}: {message}") from None
        cfg.task = replace(cfg.task, name="dataset", options=options)
        cfg.task.eval_size = min(cfg.task.eval_size, held_out)  # a small data set holds out fewer than 100 rows

    def train(self, resume_from_checkpoint: bool = False) -> TrainResult:
        """Run (or, `resume_from_checkpoint=True`, resume the run folder of) the configured run; returns the run
        folder and the trained model."""
        cfg = self.args
        run = train_distributed if cfg.distributed.backend == "ray" else train
        result = run(cfg, resume=resume_from_checkpoint)
        final = result.run_dir / "final_model"
        self.model, self.processing_class = load_model(final), load_tokenizer(final)
        return TrainResult(result.run_dir, self.model, self.processing_class, result.first_eval,
                           result.final_eval, result.steps)


Trainer = GRPOTrainer  # the algorithm is the config's: GRPO, Dr. GRPO, DAPO, PPO, ... (algorithm.preset)

__all__ = ["GRPOTrainer", "RLConfig", "Trainer", "TrainResult", "register_reward"]
