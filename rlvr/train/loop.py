"""The RL loop: prompts -> rollout -> rewards -> advantages -> update -> weights back to the engine.

One function, top to bottom. What varies between algorithms (advantage estimator, policy loss,
aggregation, KL estimator) is chosen by name in the config and lives in `rlvr.core`, composed by
`rlvr.algorithms.grpo.GroupPolicyGradient`; the loop never branches on the algorithm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from rlvr.algorithms.grpo import accumulation_denominator
from rlvr.algorithms.ppo import VALUE_MODEL_FILE
from rlvr.config import Config
from rlvr.core import masked_mean
from rlvr.logging.plots import plot_metrics
from rlvr.logging.progress import TrainProgress
from rlvr.logging.sinks import METRICS, read_jsonl
from rlvr.models import save_model
from rlvr.train.batch import build_batch, cached_logprobs
from rlvr.train.checkpoint import save_checkpoint
from rlvr.train.evaluate import evaluate_heldout
from rlvr.train.family import compute_advantages, policy_forward, trainable_parameters
from rlvr.train.setup import EVAL_SAMPLING, SHUFFLE, Run, derive_seed, prepare_run


@dataclass
class RunResult:
    run_dir: Path
    first_eval: dict[str, float]  # held-out metrics before the first RL step (empty when resumed)
    final_eval: dict[str, float]  # held-out metrics after the last step
    steps: int


def _means(stats: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Average each metric over micro-batches; the single place tensors become Python floats."""
    keys = sorted({k for s in stats for k in s})
    return {k: torch.stack([s[k].float() for s in stats if k in s]).mean().item() for k in keys}


def _evaluate(run: Run, step: int) -> dict[str, float]:
    cfg = run.cfg
    metrics, rows = evaluate_heldout(run.engine, run.task, run.eval_examples, cfg.rollout.max_new_tokens,
                             cfg.eval.samples, cfg.eval.temperature, derive_seed(cfg.seed, step, EVAL_SAMPLING),
                             cfg.log.samples_per_eval)
    run.logger.log_samples(step, rows)
    return metrics


def _finish(run: Run) -> None:
    save_model(run.policy, run.tokenizer, run.run_dir / "final_model")
    if run.value_model is not None:  # PPO's critic (head, and trunk when separate) beside the policy
        save_file(run.value_model.state_dict(), run.run_dir / "final_model" / VALUE_MODEL_FILE)
    if run.cfg.log.plots:
        plot_metrics(read_jsonl(run.run_dir / METRICS), run.run_dir / "plots")


def train(cfg: Config, resume: bool = False, run: Run | None = None) -> RunResult:
    """Run (or resume) the RL loop described by `cfg`; returns the held-out metrics before and after."""
    run = run or prepare_run(cfg, resume)
    algo, policy = run.algo, run.policy
    T = cfg.rollout.temperature
    mini, micro = cfg.mini_batch_size, cfg.micro_batch_size
    # mu = 1 and one minibatch: a single optimizer step per rollout, taken at the sampling weights, so
    # the old log-probs are the current ones detached (ratio 1, gradient = policy gradient).
    single_step = cfg.algorithm.mu == 1 and mini == cfg.train.batch_size
    params = trainable_parameters(policy, run.value_model)
    first_eval: dict[str, float] = {}
    last_eval: dict[str, float] = {}
    with TrainProgress(cfg.train.steps, run.start_step, cfg.log.progress) as progress:
        if run.start_step == 0:
            first_eval = last_eval = _evaluate(run, 0)
            run.logger.log(0, first_eval, {})
            progress.update(0, first_eval)
        for step in range(run.start_step + 1, cfg.train.steps + 1):
            tic = time.perf_counter()
            # --- rollout + rewards: group_size scored samples per prompt, contiguous; DAPO refills flat groups ---
            rollout = run.sampler.sample(step)
            completions, scores = rollout.completions, rollout.scores
            run.stream.update(rollout.examples, scores.correct)  # failure-rate sampling learns what fails
            rewards = torch.tensor(scores.rewards, dtype=torch.float32)  # (N,)
            t_rollout = time.perf_counter() - tic

            # --- advantages: group-relative (N,), or per token (N, W) for PPO and REINFORCE++ ---
            batch = build_batch(completions, None, rewards, run.pad_id)
            if not single_step or cfg.algorithm.kl_reward_coef > 0:  # pi_old: inner steps, KL in the reward
                batch.old_logprobs = cached_logprobs(policy, batch, T, micro)
            if run.reference is not None:
                batch.ref_logprobs = cached_logprobs(run.reference, batch, T, micro)
            batch.advantages = compute_advantages(run, batch, completions, micro)

            # --- update: mu epochs x minibatches, each an optimizer step over accumulated micro-batches ---
            policy.train()
            stats, grad_norms = [], []
            shuffle = torch.Generator().manual_seed(derive_seed(cfg.seed, step, SHUFFLE))
            for _ in range(cfg.algorithm.mu):
                order = torch.randperm(len(batch), generator=shuffle) if not single_step else torch.arange(len(batch))
                for lo in range(0, len(batch), mini):
                    minibatch = batch.select(order[lo : lo + mini])
                    denominator = accumulation_denominator(algo.aggregation, minibatch.mask)
                    run.optimizer.zero_grad(set_to_none=True)
                    for mlo in range(0, mini, micro):
                        mb = minibatch.select(slice(mlo, mlo + micro))
                        logprobs, entropy, values = policy_forward(policy, run.value_model, mb, T)  # (b, W)
                        old = logprobs.detach() if single_step else mb.old_logprobs
                        loss, metrics = algo.loss(logprobs, old, mb.advantages, mb.mask, mb.ref_logprobs,
                                                  denominator)
                        if values is not None:  # PPO: + value.coef x clipped value loss, aggregated alike
                            value_loss, value_metrics = run.token_adv.value_loss(
                                values, mb, algo.aggregation, algo.loss_constant, denominator)
                            loss, metrics = loss + value_loss, {**metrics, **value_metrics}
                        loss.backward()
                        stats.append({"loss": loss.detach() * (mini / micro), "entropy": masked_mean(entropy, mb.mask),
                                      **metrics})
                    if cfg.optim.max_grad_norm > 0:
                        grad_norms.append(torch.nn.utils.clip_grad_norm_(params, cfg.optim.max_grad_norm))
                    run.optimizer.step()
                    run.scheduler.step()
            policy.eval()
            t_update = time.perf_counter() - tic - t_rollout

            # --- sync: the engine samples the next batch from the new weights ---
            run.engine.load_weights(policy.named_parameters())

            # --- eval/log/checkpoint ---
            lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
            record = {
                "reward": rewards.mean().item(), "reward_std": rewards.std().item(),
                "accuracy": sum(scores.correct) / len(scores.correct),
                **scores.components, **rollout.stats,
                "completion_length": lengths.mean().item(),
                "truncated": sum(c.finish_reason == "length" for c in completions) / len(completions),
                **_means(stats), "lr": run.scheduler.get_last_lr()[0],
            }
            wrong = ~torch.tensor([bool(c) for c in scores.correct], dtype=torch.bool)  # (N,)
            if wrong.any():  # per-sequence normalisation's length bias shows on wrong answers (Liu et al. 2025)
                record["completion_length/wrong"] = lengths[wrong].mean().item()
            if grad_norms:
                record["grad_norm"] = torch.stack(grad_norms).mean().item()
            timings = {"s_per_step": time.perf_counter() - tic, "rollout_s": t_rollout, "update_s": t_update}
            if step % max(cfg.eval.every, 1) == 0 and cfg.eval.every or step == cfg.train.steps:
                tic = time.perf_counter()
                last_eval = _evaluate(run, step)
                record.update(last_eval)
                timings["eval_s"] = time.perf_counter() - tic
            run.logger.log(step, record, timings)
            progress.update(step, {**record, **timings})
            if (cfg.checkpoint.every and step % cfg.checkpoint.every == 0) or step == cfg.train.steps:
                state = {"optimizer": run.optimizer.state_dict(), "scheduler": run.scheduler.state_dict(),
                         "data": run.stream.state_dict()}
                if run.value_model is not None:
                    state["value_model"] = run.value_model.state_dict()
                save_checkpoint(run.run_dir, step, policy, run.tokenizer, state, cfg.checkpoint.keep)
    _finish(run)
    run.logger.close()
    return RunResult(run.run_dir, first_eval, last_eval, cfg.train.steps)
