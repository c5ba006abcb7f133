"""The sections of what a run watches, logs and keeps: held-out evaluation, checkpoints, trackers and plots, and
the guard that stops a run whose update broke the policy."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass

from rlvr.config.fields import ConfigError, f


@dataclass
class EvalConfig:
    every: int = f(10, "Evaluate the held-out set every this many steps (and at step 0 and the end; "
                       "0 = only at the start and the end).", ge=0)
    samples: int = f(4, "Sampled completions per held-out prompt, for sampled reward/accuracy and "
                        "pass@k (unbiased estimator of Chen et al. 2021), k = 1 .. samples (0 = greedy only).", ge=0)
    temperature: float = f(1.0, "Temperature of the sampled evaluation (greedy is always run too).", ge=0)


@dataclass
class CheckpointConfig:
    every: int = f(50, "Write a resumable checkpoint every this many steps (0 = only at the end).", ge=0)
    keep: int = f(2, "Keep the newest this many checkpoints.", gt=0)


# log.report_to names -> (module that must import, pip package): the trackers a run's metrics also go to.
# `jsonl` is the run folder's own metrics.jsonl / timings.jsonl, always written (the doctor, report and resume read
# them); naming it is allowed, as TRL users list their sinks.
TRACKERS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
            "mlflow": ("mlflow", "mlflow-skinny"), "trackio": ("trackio", "trackio"), "jsonl": (None, None)}


@dataclass
class LogConfig:
    progress: bool = f(True, "Live progress bar (rich).")
    report_to: list = f(["tensorboard"], "Trackers every step's metrics and timings also go to (TRL's report_to): "
                                         "tensorboard (event files in RUN/tensorboard), wandb (its own settings: "
                                         "WANDB_MODE=offline writes RUN/wandb only), mlflow (MLFLOW_TRACKING_URI, "
                                         "else a file store in RUN/mlruns), trackio (its local database; "
                                         "TRACKIO_DIR), jsonl (metrics.jsonl, always written). [] = the jsonl "
                                         "files only. Each but jsonl is an extra: pip install 'rlvr[wandb]'.")
    project: str = f("rlvr", "Project (wandb, trackio) or experiment (mlflow) name of the tracker runs; each run "
                             "is named after its run folder.")
    peak_tflops: float = f(0.0, "The peak TFLOP/s that perf/mfu in timings.jsonl is measured against. 0: the "
                                "vendor's dense peak in model.dtype of the GPU the policy trains on (under "
                                "distributed.backend=ray the learners', times the GPUs the learners and rollout "
                                "workers reserve), from rlvr.logging.throughput.GPU_PEAKS (no MFU on a CPU or an "
                                "unlisted GPU); set it for those, in total over the devices of the run.", ge=0)
    tensorboard: bool | None = f(None, "Deprecated, kept so that older run folders resume: log.report_to lists the "
                                       "trackers. true puts tensorboard in report_to, false takes it out.")
    plots: bool = f(True, "PNG plots of the main curves in plots/, drawn when the run ends or is stopped by "
                          "Ctrl-C/SIGTERM (`rlvr report` draws them for a run still going).")
    samples_per_eval: int = f(8, "Held-out completions written to samples.jsonl at every evaluation.", ge=0)

    def check(self, prefix: str) -> None:
        """report_to: known names, each tracker's library installed (find_spec: importing wandb or mlflow takes
        seconds); the deprecated tensorboard folded in, so the saved config says it one way."""
        if self.tensorboard is not None:
            logging.getLogger("rlvr").warning(f"{prefix}tensorboard is deprecated: {prefix}report_to lists the "
                                              f"trackers (read as tensorboard {'in' if self.tensorboard else 'out of'} "
                                              "it)")
            wanted = [t for t in self.report_to if t != "tensorboard"]
            self.report_to, self.tensorboard = (["tensorboard", *wanted] if self.tensorboard else wanted), None
        for name in self.report_to:
            if name not in TRACKERS:
                raise ConfigError(f"{prefix}report_to: unknown tracker {name!r}; choose from {list(TRACKERS)}")
            module, package = TRACKERS[name]
            if module is not None and importlib.util.find_spec(module) is None:
                raise ConfigError(f"{prefix}report_to: {name} is not installed; pip install 'rlvr[{name}]' "
                                  f"(or pip install {package})")
        if len(set(self.report_to)) != len(self.report_to):
            raise ConfigError(f"{prefix}report_to names a tracker twice: {self.report_to}")


@dataclass
class GuardConfig:
    collapse: bool = f(True, "Stop the run at the step where an update broke the policy (NaN/inf in the weights after "
                             "the update, or one of the thresholds below crossed): one line naming the step, the "
                             "signal and the likely cause, exit code 1, the checkpoints of the broken weights removed "
                             "and `latest` on the last good one (docs/troubleshooting.md). false: the run goes on; "
                             "`rlvr doctor` still names the collapse.")
    max_entropy: float = f(0.99, "Token entropy at this share of its maximum, log V (a uniform policy over the "
                                 "model's V logits), is a collapse: the policy samples noise (optim.lr=1e6 on "
                                 "configs/sort.yaml reaches 1.000 after one update). Only in a run whose first step "
                                 "was below it: a random-init model starts near it (0.995 for the tiny test model). "
                                 "0 = off.", ge=0, le=1)
    max_kl: float = f(10.0, "KL to the reference (`kl`, nats per token; algorithm.beta > 0 or kl_reward_coef > 0) over "
                            "this is a collapse: the policy's tokens are ~e^10 times less likely under the model it "
                            "started from (the demo peaks at 1.6). 0 = off.", ge=0)
    max_policy_kl: float = f(0.5, "KL between the sampling policy and the policy being updated (`approx_kl`, the k3 "
                                  "estimate from the importance ratios of the later minibatches and epochs; 0 with "
                                  "mu = 1 and one minibatch) over this is a collapse: the ratio exploded within one "
                                  "update (the demo peaks at 0.015; PPO's target_kl is 0.01-0.05). 0 = off.", ge=0)
