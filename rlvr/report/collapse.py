"""When an update broke the policy: the rule the live guard stops a run by (`rlvr.train.guard`) and the
doctor names on a run folder (`rlvr.report.doctor.check_collapse`), one rule, one wording.

Each signal is read from one step's metrics record and says which update it blames: the weights after
this step's update (NaN/inf in them; `approx_kl`, whose importance ratios compare the sampling policy with
the policy moved by this update's earlier minibatches), or the previous step's (the token entropy and the
KL to the reference are measured on the policy that sampled this step's batch, the previous update's).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rlvr.config import GuardConfig

NONFINITE_WEIGHTS = "train/nonfinite_weights_max"  # weight tensors holding NaN/inf after the update (max over ranks)


@dataclass(frozen=True)
class Collapse:
    step: int  # the step whose record shows it
    culprit: int  # the step whose update broke the policy: its weights and every later step's are bad
    signal: str  # what shows it, in words, with the threshold's key


def guard_settings(config: dict[str, Any]) -> GuardConfig:
    """The `guard` section of a run's config.yaml (a run of an older rlvr has none: the defaults)."""
    section = config.get("guard") or {}
    return GuardConfig(**{f.name: section[f.name] for f in fields(GuardConfig) if f.name in section})


def vocab_size(run_dir: str | Path, model_path: str | Path | None) -> int | None:
    """V, the number of logits of the run's policy (its entropy is at most log V), from the config.json of the
    first model folder that has one: the start model's (`model_path`; a GGUF file or an embedded model's name has
    none), the tiny model or warm start the run built, its final model, its checkpoints'; None when none does."""
    run_dir = Path(run_dir)
    folders = [Path(model_path)] if model_path else []
    folders += [run_dir / name for name in ("init_model", "sft_model", "final_model")]
    folders += sorted(run_dir.glob("checkpoints/step_*/model"))
    for folder in folders:
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        size = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
        if isinstance(size, int) and size > 1:
            return size
    return None


def number(value: Any) -> float:
    try:
        return float(value)  # the sinks write NaN and inf as the strings "nan", "inf"
    except (TypeError, ValueError):
        return math.nan


def collapse_signal(record: dict[str, Any], first_entropy: float, vocab: int | None,
                    limits: GuardConfig) -> Collapse | None:
    """The collapse one step's `record` shows, or None. `first_entropy`: the entropy at the run's first step
    (NaN when unknown), below `limits.max_entropy` x log V for the entropy rule to apply (a random-init model
    starts at the maximum: it has nothing to collapse from); `vocab`: V, None leaves the entropy rule out."""
    step = int(record.get("step", 0))
    bad = number(record.get(NONFINITE_WEIGHTS, 0))
    if bad > 0:
        return Collapse(step, step, f"{bad:g} weight tensor(s) hold NaN or inf after the update")
    policy_kl = number(record.get("approx_kl"))
    if limits.max_policy_kl and policy_kl > limits.max_policy_kl:
        return Collapse(step, step, f"the importance ratio exploded within the update: KL to the sampling policy "
                                    f"(approx_kl) {policy_kl:.3g} nats/token > guard.max_policy_kl="
                                    f"{limits.max_policy_kl:g}")
    kl = number(record.get("kl"))
    if limits.max_kl and kl > limits.max_kl:
        return Collapse(step, step - 1, f"the KL to the reference (kl) reached {kl:.3g} nats/token > guard.max_kl="
                                        f"{limits.max_kl:g}")
    entropy = number(record.get("entropy"))
    if vocab and limits.max_entropy:
        top = limits.max_entropy * math.log(vocab)
        if first_entropy < top <= entropy:
            return Collapse(step, step - 1, f"the policy is uniform noise: token entropy {entropy:.4g} is "
                                            f"{entropy / math.log(vocab):.3f} of its maximum log {vocab} = "
                                            f"{math.log(vocab):.4g}, from {first_entropy:.4g} at the first step "
                                            f"(guard.max_entropy={limits.max_entropy:g})")
    return None


def likely_cause(lr: float, max_grad_norm: float) -> str:
    """What most often makes an update break the policy, from the run's optimizer settings."""
    if not max_grad_norm:
        return (f"updates too large: optim.max_grad_norm=0 leaves the gradient unclipped, at optim.lr={lr:g}; set "
                f"optim.max_grad_norm (1.0) and lower optim.lr")
    return (f"too high a learning rate, optim.lr={lr:g}: AdamW moves each weight by about lr per step whatever the "
            f"gradient's size, so clipping it (optim.max_grad_norm={max_grad_norm:g}) cannot hold the step; lower "
            f"optim.lr")


def first_entropy(records: list[dict[str, Any]]) -> float:
    """The entropy at the first logged step that has one (NaN: none has)."""
    return next((number(r["entropy"]) for r in records if r.get("step", 0) > 0 and "entropy" in r), math.nan)
