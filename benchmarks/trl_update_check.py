"""Does TRL's GRPOTrainer take the GRPO step as the formulas read? Run in TRL's virtualenv:

    .venv-trl/bin/python benchmarks/trl_update_check.py --work .bench/trl [--beta 0.01] [--bias-correction]
        [--replay-k3 same|plain|ratio]

Trains TRL on the demo's GRPO phase (the warm start of `bench_trl.py --work ...`, its mapped arguments) for
a few RL steps, records every input its loss saw, and replays them through the step written out (plain
forward, log_softmax + gather, clipped ratio, beta x k3 per token, per-sequence token mean, clipping,
AdamW at TRL's learning rates), starting each RL step from TRL's weights. Prints |TRL - written out| over
the size of TRL's update per RL step. rlvr's side of the same check is a test
(tests/train/test_roles.py::test_update_equals_the_grpo_formulas_written_out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _written_out_loss(model, inputs: dict, beta: float, clip: float, ratio_weighted_kl: bool):
    import torch

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    K = inputs["completion_ids"].shape[1]
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -K - 1 : -1].float()
    logp = logits.log_softmax(-1).gather(-1, inputs["completion_ids"][..., None]).squeeze(-1)
    mask = inputs["completion_mask"].float()
    A = inputs["advantages"][:, None]
    ratio = (logp - inputs["old_per_token_logps"]).exp()
    per_token = -torch.min(ratio * A, ratio.clamp(1 - clip, 1 + clip) * A)
    if beta:
        d = inputs["ref_per_token_logps"] - logp
        kl = d.exp() - d - 1
        per_token = per_token + beta * (ratio * kl if ratio_weighted_kl else kl)
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=REPO / ".bench" / "trl", help="bench_trl.py's work folder")
    p.add_argument("--beta", type=float, default=0.01)
    p.add_argument("--bias-correction", action="store_true",
                   help="TRL's use_bias_correction_kl (its default); the written-out step then weights k3 by the ratio")
    p.add_argument("--replay-k3", choices=("same", "plain", "ratio"), default="same",
                   help="the written-out KL term: as TRL's (same), plain k3 (rlvr's default) or ratio x k3")
    p.add_argument("--steps", type=int, default=3, help="RL steps")
    args = p.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_trl
    from rlvr.rewards.scoring import build_reward
    from rlvr.tasks import get_task

    torch.set_num_threads(1)
    cfg = bench_trl.demo_config([f"algorithm.beta={args.beta}", f"out_dir={args.work / 'warm'}"])
    warm = str(bench_trl.warm_start(cfg))  # bench_trl.py's, reused while the demo's SFT settings match
    trl_args = {**bench_trl.trl_arguments(cfg, cfg.train.steps), "use_bias_correction_kl": args.bias_correction}
    per_rollout = cfg.algorithm.mu * (cfg.train.batch_size // cfg.mini_batch_size)
    task = get_task(cfg.task.name, **cfg.task.options)
    examples, reward = task.train_examples(cfg.task.train_size, cfg.seed), build_reward(task)

    def task_reward(prompts, completions, idx, **_):
        return reward.score_batch(prompts, completions, [examples[i] for i in idx]).scores

    weights, seen = [], []

    class Record(TrainerCallback):
        def on_train_begin(self, a, state, control, model=None, **kw):
            weights.append({n: t.detach().clone() for n, t in model.named_parameters()})

        def on_step_end(self, a, state, control, model=None, **kw):
            if state.global_step % per_rollout == 0:
                weights.append({n: t.detach().clone() for n, t in model.named_parameters()})
            control.should_training_stop = state.global_step >= per_rollout * args.steps

    dataset = Dataset.from_dict({"prompt": [ex.prompt for ex in examples], "idx": list(range(len(examples)))})
    trainer = GRPOTrainer(model=warm, reward_funcs=task_reward, train_dataset=dataset, callbacks=[Record()],
                          args=GRPOConfig(output_dir=str(args.work / "trl-check"), **trl_args),
                          processing_class=AutoTokenizer.from_pretrained(warm, local_files_only=True))
    compute_loss = trainer.compute_loss

    def recorded(model, inputs, *a, **k):
        seen.append(({k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()},
                     trainer.lr_scheduler.get_last_lr()[0]))
        return compute_loss(model, inputs, *a, **k)

    trainer.compute_loss = recorded
    trainer.train()

    o = cfg.optim
    model = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=0.0)
    ratio_kl = args.bias_correction if args.replay_k3 == "same" else args.replay_k3 == "ratio"
    print(f"beta {args.beta}, TRL use_bias_correction_kl={args.bias_correction}, replayed with "
          f"{'ratio x k3' if ratio_kl else 'plain k3'}")
    for step in range(args.steps):
        model.load_state_dict(weights[step], strict=False)  # each RL step starts from TRL's weights
        for inputs, lr in seen[step * per_rollout : (step + 1) * per_rollout]:
            loss = _written_out_loss(model, inputs, args.beta, cfg.algorithm.clip_low, ratio_kl)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.max_grad_norm)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.step()
        mine, before, after = dict(model.named_parameters()), weights[step], weights[step + 1]
        diff = sum(((mine[n] - after[n]) ** 2).sum() for n in after).sqrt().item()
        size = sum(((after[n] - before[n]) ** 2).sum() for n in after).sqrt().item()
        print(f"RL step {step + 1}: |TRL - written out| / |TRL's update| = {diff / size:.2e} ({diff:.3e} / {size:.3e})")


if __name__ == "__main__":
    main()
