"""What each kind of recipe stage does (see `rlvr.pipelines.recipes` for the file format).

Every stage function returns a record {model: the folder it produced (absent: unchanged), pool: a
training-prompt file (filter only), metrics: {...}}; every model-changing stage reports the held-out
greedy exact-match accuracy of the model it produced, so a recipe's progress is one column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr.algorithms.preference import train_preference
from rlvr.algorithms.rft import RFTConfig, greedy_accuracy, rejection_sample
from rlvr.algorithms.sft import located_pairs_from_jsonl, pairs_from_task, train_sft
from rlvr.config import Config
from rlvr.data.difficulty import best_of_n_filter
from rlvr.models import load_policy, load_tokenizer, resolve_placement, save_model
from rlvr.pipelines.recipe_options import fusion_rows
from rlvr.rollout.base import SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.tasks import Example
from rlvr.tasks.subset import write_examples
from rlvr.thinking.fusion import THINK_FLAG, build_fusion_data, split_thinking, write_fusion_jsonl
from rlvr.thinking.sweep import budget_sweep, save_budget_sweep
from rlvr.train.loop import train_to_end
from rlvr.train.preflight import run_task
from rlvr.train.setup import start_model


def initial_model(base: Config, out_dir: Path) -> Path:
    """`base.model.path`, or a tiny model built in `out_dir` (warm-started if `base.sft.steps`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return start_model(base, out_dir, run_task(base))


def _load(base: Config, model_path: Path):
    """The stage's model, placed as the RL policy (model.device, model.dtype), fully fine-tuned."""
    return load_policy(base.model, model_path, lora=False), load_tokenizer(model_path)


def _engine(base: Config, model, tokenizer):
    """rlvr's engine on the stage's own model (trained in this process, so no folder-built engine),
    placed as the policy."""
    placement = resolve_placement(base.model)
    return HFEngine(model, tokenizer, device=placement.device, autocast=placement.dtype)


def _sample(base: Config, model, tokenizer, examples: list[Example], n: int, temperature: float):
    sampling = SamplingParams(temperature=temperature, max_new_tokens=base.rollout.max_new_tokens, seed=base.seed)
    return _engine(base, model, tokenizer).generate([ex.prompt for ex in examples], n, sampling)


def _heldout(base: Config, model, tokenizer) -> dict[str, float]:
    """Greedy accuracy of the answer after any `</think>` (as the budget sweep grades): a model that learned the
    thinking format (fusion_sft) scored 0 on its correct answers, the sort verifier reading the block too."""
    task = run_task(base)
    examples = task.eval_examples(base.task.eval_size, base.task.eval_seed)
    answer_correct = lambda text, ex: task.is_correct(split_thinking(text)[1], ex)  # noqa: E731
    acc = greedy_accuracy(_engine(base, model, tokenizer), examples, answer_correct, base.rollout.max_new_tokens)
    return {"heldout_greedy_accuracy": acc}


def _sft_and_save(base: Config, opts: Any, model, tokenizer, located, stage_dir: Path,
                  metrics: dict[str, Any]) -> dict[str, Any]:
    """SFT on `located` = (each pair's place for errors: `file:LINE` of a data row, ...; the pairs), then save."""
    places, pairs = located
    if not pairs:
        raise ValueError("this SFT stage has no training pairs (set data, demonstrations, or sample more)")
    loss = train_sft(model, tokenizer, pairs, opts.steps, opts.batch_size, opts.lr, base.seed,
                     places=places)
    path = save_model(model, tokenizer, stage_dir / "model")
    return {"model": str(path), "metrics": {**metrics, "pairs": len(pairs), "final_loss": loss,
                                            **_heldout(base, model, tokenizer)}}


def _demonstrations(base: Config, opts: Any, salt: int) -> tuple[list[str], list[tuple[str, str]]]:
    """(places, pairs) of the `data` file's rows (`file:LINE`) and of the task's demonstrations."""
    places, pairs = located_pairs_from_jsonl(opts.data) if opts.data else ([], [])
    if opts.demonstrations:
        demos = pairs_from_task(run_task(base), opts.demonstrations, base.seed + salt)
        places, pairs = places + [f"task demonstration {i + 1}" for i in range(len(demos))], pairs + demos
    return places, pairs


def run_rl(cfg: Config, stage_dir: Path) -> dict[str, Any]:
    """Train (or, after an interruption, finish) the stage's run in `cfg.out_dir`."""
    result = train_to_end(cfg)
    key = "eval/greedy_accuracy"
    return {"model": str(result.run_dir / "final_model"),
            "metrics": {"heldout_greedy_accuracy_before": result.first_eval.get(key),
                        "heldout_greedy_accuracy": result.final_eval.get(key), "steps": result.steps}}


def run_sft(base: Config, opts: Any, model_path: Path, stage_dir: Path) -> dict[str, Any]:
    """Supervised fine-tuning on a jsonl of {prompt, completion} and/or task demonstrations."""
    model, tokenizer = _load(base, model_path)
    return _sft_and_save(base, opts, model, tokenizer, _demonstrations(base, opts, 1), stage_dir, {})


def run_rejection_sft(base: Config, opts: Any, model_path: Path, stage_dir: Path) -> dict[str, Any]:
    """DeepSeek-R1 sec. 2.3.3: sample from the current model, keep verified-correct completions
    (deduplicated), mix in other SFT data (`data`, `demonstrations`), fine-tune on the mixture."""
    model, tokenizer = _load(base, model_path)
    task = run_task(base)
    examples = task.train_examples(opts.prompts, base.seed + 2)
    sampling = RFTConfig(num_samples=opts.samples, temperature=opts.temperature, seed=base.seed,
                         max_new_tokens=base.rollout.max_new_tokens, dedup=True, max_per_prompt=None)
    kept, _ = rejection_sample(_engine(base, model, tokenizer), examples, task.is_correct, sampling)
    places, pairs = _demonstrations(base, opts, 2)
    located = ([f"correct sample {i + 1}" for i in range(len(kept))] + places, kept + pairs)
    metrics = {"sampled": len(examples) * opts.samples, "kept_correct": len(kept)}
    return _sft_and_save(base, opts, model, tokenizer, located, stage_dir, metrics)


def preference_pairs(task, examples: list[Example], completions, n: int) -> list[dict[str, str]]:
    """Per prompt with a wrong sample: chosen = a correct sample (else the reference answer),
    rejected = a wrong sample. The verifier decides, so no human labels are needed."""
    pairs = []
    for i, ex in enumerate(examples):
        group = [c.text for c in completions[i * n : (i + 1) * n]]
        right = [t for t in group if task.is_correct(t, ex)]
        wrong = [t for t in group if not task.is_correct(t, ex)]
        if wrong:
            pairs.append({"prompt": ex.prompt, "chosen": right[0] if right else ex.answer, "rejected": wrong[0]})
    return pairs


def run_dpo(base: Config, opts: Any, model_path: Path, stage_dir: Path) -> dict[str, Any]:
    """Preference optimisation on verifier-labelled pairs of the current model's own samples."""
    model, tokenizer = _load(base, model_path)
    task = run_task(base)
    examples = task.train_examples(opts.prompts, base.seed + 3)
    completions = _sample(base, model, tokenizer, examples, opts.samples, opts.temperature)
    pairs = preference_pairs(task, examples, completions, opts.samples)
    if len(pairs) < 2:
        raise ValueError(f"the dpo stage found {len(pairs)} prompts with a wrong sample; it needs at least 2")
    result = train_preference(model, tokenizer, pairs, opts.preference_config(base.seed))
    path = save_model(model, tokenizer, stage_dir / "model")
    metrics = {"pairs": len(pairs), "preference_accuracy_before": result["eval_before"].get("accuracy"),
               "preference_accuracy": result["eval_after"].get("accuracy"), **_heldout(base, model, tokenizer)}
    return {"model": str(path), "metrics": metrics}


def run_filter(base: Config, opts: Any, model_path: Path, stage_dir: Path) -> dict[str, Any]:
    """Best-of-N difficulty filter of the training prompts with the current model; the kept prompts
    become the training set of later RL stages (Kimi k1.5 sec. 2.1, Qwen3 sec. 4.2)."""
    model, tokenizer = _load(base, model_path)
    task = run_task(base)
    examples = task.train_examples(opts.prompts or base.task.train_size, base.seed)
    sampling = SamplingParams(temperature=opts.temperature, max_new_tokens=base.rollout.max_new_tokens,
                              seed=base.seed)
    engine = _engine(base, model, tokenizer)
    result = best_of_n_filter(examples, engine, task.is_correct, n=opts.samples, k=opts.k,
                              mode=opts.mode, drop_unsolved=opts.drop_unsolved, sampling=sampling,
                              report_dir=stage_dir)
    if not result.kept:
        raise ValueError(f"the difficulty filter kept no prompt ({result.summary()})")
    pool = write_examples(result.kept, stage_dir / "kept.jsonl")
    return {"pool": str(pool), "metrics": {"kept": len(result.kept), "input": result.n_input,
                                           **{f"removed_{k}": v for k, v in result.removed_by_reason().items()}}}


def run_fusion_sft(base: Config, opts: Any, model_path: Path, stage_dir: Path) -> dict[str, Any]:
    """Qwen3 sec. 4.3 thinking-mode fusion: SFT on `/think` and `/no_think` variants of the same prompts.
    Records come from `data` (jsonl of prompt, thinking, answer) or, for a toy task, from its
    demonstrations with the reasoning written by the `thinking` template ({prompt}, {answer})."""
    if opts.data:
        places, rows = fusion_rows(opts.data, opts.unflagged_think, base.seed)
    else:
        examples = run_task(base).train_examples(opts.demonstrations, base.seed + 4)
        records = [{"prompt": ex.prompt, "answer": ex.answer,
                    "thinking": opts.thinking.format(prompt=ex.prompt, answer=ex.answer)} for ex in examples]
        rows = build_fusion_data(records, unflagged_think=opts.unflagged_think, seed=base.seed)
        places = [f"task demonstration {row['source_index'] + 1}" for row in rows]
    write_fusion_jsonl(rows, stage_dir / "fusion.jsonl")
    model, tokenizer = _load(base, model_path)
    located = (places, [(r["prompt"], r["completion"]) for r in rows])
    return _sft_and_save(base, opts, model, tokenizer, located, stage_dir, {"fusion_rows": len(rows)})


def run_budget_eval(base: Config, opts: Any, model_path: Path, stage_dir: Path) -> dict[str, Any]:
    """Held-out accuracy against a thinking-token budget (Qwen3 sec. 4.3), `/think` prompts."""
    model, tokenizer = _load(base, model_path)
    task = run_task(base)
    heldout = task.eval_examples(opts.examples or base.task.eval_size, base.task.eval_seed)
    examples = [Example(f"{ex.prompt.rstrip()} {THINK_FLAG}", ex.answer, ex.fields) for ex in heldout]
    answer_tokens = opts.answer_tokens or base.rollout.max_new_tokens
    points = budget_sweep(_engine(base, model, tokenizer), task, examples, [int(b) for b in opts.budgets],
                          sampling=SamplingParams(temperature=0.0, max_new_tokens=answer_tokens),
                          answer_tokens=answer_tokens)
    save_budget_sweep(points, stage_dir, "accuracy against thinking budget")
    return {"metrics": {f"accuracy@{p.budget}": p.accuracy for p in points}}


STAGE_FUNCTIONS = {"rl": run_rl, "sft": run_sft, "rejection_sft": run_rejection_sft, "dpo": run_dpo,
                   "filter": run_filter, "fusion_sft": run_fusion_sft, "budget_eval": run_budget_eval}
