"""`rlvr demo`: a tiny model learns to sort digits, SFT warm start then GRPO, offline on a CPU.

Prints held-out greedy exact-match accuracy before and after RL and whether the demo's bar was met
(>= 0.9 after, a gain of >= 0.2), and leaves a complete run folder behind.
"""

from __future__ import annotations

import time

from rich.console import Console

from rlvr.config import SHIPPED_CONFIGS, load_config
from rlvr.logging.progress import TrainProgress
from rlvr.train.loop import RunResult, train
from rlvr.train.setup import prepare_run
from rlvr.train.summary import summary_table, where_lines

DEMO_CONFIG = SHIPPED_CONFIGS / "demo.yaml"
TARGET_ACCURACY, TARGET_GAIN = 0.9, 0.2
ACC = "eval/greedy_accuracy"


def _intro(cfg) -> str:
    opts = cfg.task.options
    return (f"[bold]rlvr demo[/bold]: sort {opts.get('length', 4)} digits (`sort 3 9 1 4=` -> `1 3 4 9`), "
            f"{cfg.task.options.get('reward', 'sparse')} reward\n"
            f"  1. build a tiny {cfg.model.tiny_arch} model with a character tokenizer (nothing downloaded)\n"
            f"  2. SFT warm start: {cfg.sft.steps} steps on demonstrations, to partial competence\n"
            f"  3. GRPO: {cfg.train.steps} steps x {cfg.train.batch_size // cfg.train.group_size} prompts x "
            f"{cfg.train.group_size} samples, advantage={cfg.algorithm.advantage}, "
            f"loss={cfg.algorithm.policy_loss}, mu={cfg.algorithm.mu}")


def _report(console: Console, result: RunResult, seconds: float) -> bool:
    before, after = result.first_eval[ACC], result.final_eval[ACC]
    console.print(summary_table(result.first_eval, result.final_eval, "after SFT (before RL)", "after GRPO"))
    passed = after >= TARGET_ACCURACY and after - before >= TARGET_GAIN
    verdict = "[green]reached" if passed else "[red]did NOT reach"
    console.print(f"{verdict}[/] the demo's bar: accuracy >= {TARGET_ACCURACY} and a gain >= {TARGET_GAIN} "
                  f"over the warm start")
    for line in where_lines(result.run_dir, seconds):
        console.print(line, soft_wrap=True)
    return passed


def run_demo(out: str | None = None, seed: int = 0, overrides: list[str] = ()) -> int:
    """Run the demo; exit code 0 when the bar is met, 1 otherwise."""
    start = time.perf_counter()
    out = out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg = load_config(DEMO_CONFIG, [f"out_dir={out}", f"seed={seed}", *overrides])
    console = Console()
    console.print(_intro(cfg))
    with TrainProgress(cfg.sft.steps, description="SFT ", enabled=cfg.log.progress) as bar:
        run = prepare_run(cfg, on_sft=lambda step, loss: bar.update(step, {"sft_loss": loss}))
    result = train(cfg, run=run)
    passed = _report(console, result, time.perf_counter() - start)
    return 0 if passed else 1
