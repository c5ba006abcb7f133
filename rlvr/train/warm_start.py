"""The SFT warm start of a run (`sft.steps`), checkpointed and resumed like the RL stage.

Its checkpoints have the RL stage's layout in a folder of their own, `RUN/sft/checkpoints/step_NNNNNN/{model,
state.pt}` and `latest` (`rlvr.train.checkpoint`), written every `checkpoint.every` steps and when SIGINT/SIGTERM
stops it (at the end of the step under way, as in RL). A run started again or resumed (`--resume`,
`--resume-or-start`) from the same settings goes on from the newest one exactly: the weights, AdamW's moments, the
schedule, the position in the shuffled demonstrations and the RNG states come back, so the warm start ends with the
same weights, bit for bit, as one never stopped. Once it is saved as `RUN/sft_model`, its checkpoints are removed.
"""

from __future__ import annotations

import json
import logging
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from rlvr.algorithms.sft import located_pairs_from_jsonl, pairs_from_task, train_sft, train_sft_encoded
from rlvr.config import Config
from rlvr.models import load_policy, load_tokenizer, save_model
from rlvr.tasks import Task
from rlvr.train.checkpoint import CHECKPOINTS, WARM_START, load_state, save_checkpoint, set_rng_state
from rlvr.train.episodes import demonstrations
from rlvr.train.guard import RunGuard
from rlvr.train.preflight import find_checkpoint

logger = logging.getLogger(__name__)
BUILT_WITH = "built_with.json"  # in a folder the run built: the settings it was built from


def sft_checkpoint(run_dir: Path, settings: dict[str, Any]) -> Path | None:
    """The newest checkpoint of a warm start built from `settings` (None: none); one of another warm start
    (the settings changed since) is removed, as `rlvr.train.setup` rebuilds such a model."""
    root = Path(run_dir) / WARM_START
    record = root / BUILT_WITH
    if root.is_dir() and (not record.is_file() or json.loads(record.read_text()) != settings):
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(settings))
    return find_checkpoint(root)


def _train(cfg: Config, task: Task, model: Any, tokenizer: Any, on_sft: Callable[[int, float], None] | None,
           start: dict[str, Any] | None, after_step: Callable | None) -> None:
    """SFT on sft.data's pairs, an environment's demonstration episodes (the environment's tokens masked out), or
    the task's reference answers."""
    s = cfg.sft
    if s.data:
        places, pairs = located_pairs_from_jsonl(s.data)
        train_sft(model, tokenizer, pairs, s.steps, s.batch_size, s.lr, cfg.seed, on_sft,
                  [f"sft.data: {place}" for place in places], start, after_step)
    elif cfg.env.name:
        rows = demonstrations(cfg, task, tokenizer)
        train_sft_encoded(model, tokenizer, [(p, c) for p, c, _ in rows], [k for _, _, k in rows], s.steps,
                          s.batch_size, s.lr, cfg.seed, on_sft, start, after_step)
    else:
        pairs = pairs_from_task(task, cfg.task.train_size, cfg.seed + 1)
        train_sft(model, tokenizer, pairs, s.steps, s.batch_size, s.lr, cfg.seed, on_sft, None, start, after_step)


def warm_start(cfg: Config, run_dir: Path, start: Path, task: Task, out: Path, settings: dict[str, Any],
               on_sft: Callable[[int, float], None] | None = None, checkpointed: bool = False) -> None:
    """SFT of the model folder `start` into `out` (on model.device, in model.dtype, saved as float32), with its
    `settings` recorded there. `checkpointed` (rlvr train): checkpoints and signals as the module says."""
    checkpoint = sft_checkpoint(run_dir, settings) if checkpointed else None
    if checkpoint is not None:
        logger.warning("the SFT warm start goes on from its checkpoint %s", checkpoint)
    model = load_policy(cfg.model, checkpoint / "model" if checkpoint else start, lora=False)  # full fine-tuning
    tokenizer = load_tokenizer(start)
    state = load_state(checkpoint) if checkpoint else None
    guard = RunGuard(run_dir, cfg.train.max_nonfinite_steps)
    with guard.signals() if checkpointed else nullcontext():
        if state is not None:
            set_rng_state(state["rng"])
        after = _checkpoints(cfg, run_dir, model, tokenizer, guard) if checkpointed else None
        _train(cfg, task, model, tokenizer, on_sft, state and state["trainer"], after)
        with guard.writing(out):
            save_model(model, tokenizer, out)
            (out / BUILT_WITH).write_text(json.dumps(settings))
        shutil.rmtree(run_dir / WARM_START, ignore_errors=True)  # the warm start is its model now
        guard.stop_if_signalled(cfg.sft.steps, "SFT step")  # a signal after the last step: the model is saved


def _checkpoints(cfg: Config, run_dir: Path, model: Any, tokenizer: Any, guard: RunGuard) -> Callable:
    """After each SFT step: a checkpoint every checkpoint.every steps (not at the last: the model is saved then)
    and when a signal came, then the stop it asks for."""
    every, root = cfg.checkpoint.every, Path(run_dir) / WARM_START

    def after_step(step: int, state: Callable[[], dict[str, Any]]) -> None:
        if (every and step % every == 0 and step < cfg.sft.steps) or guard.signal is not None:
            with guard.writing(root / CHECKPOINTS):
                save_checkpoint(root, step, model, tokenizer, {"trainer": state()}, cfg.checkpoint.keep)
        guard.stop_if_signalled(step, "SFT step")

    return after_step

