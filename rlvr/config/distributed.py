"""The distributed section: how the roles of a run are placed on Ray actors, checked on its own (the settings
that depend on other sections: `rlvr.config.checks`)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from rlvr.config.fields import ConfigError, f

BACKENDS = ("none", "ray")
WEIGHT_SYNCS = ("object_store", "collective")


@dataclass
class DistributedConfig:
    backend: str = f("none", "none: one process (default). ray: the Rollout and Learner roles run as Ray actors "
                             "(extra `ray`); the loop is the same (docs/distributed.md).", choices=BACKENDS)
    address: str = f("local", "Ray cluster: local (start one in this process), auto (join `ray start --head` on "
                              "this node) or HOST:PORT.")
    rollout_workers: int = f(1, "Rollout actors; steps go to them in turn, each batch seeded by its step.", ge=1)
    learners: int = f(1, "Data-parallel learner actors (torch.distributed: gloo when model.device puts the "
                         "policy on CPU, NCCL on CUDA, `auto` resolved in each actor); each "
                         "takes an equal share of every minibatch's micro-batches, gradients are summed.", ge=1)
    colocate: bool = f(False, "Every learner rank holds a rollout engine of its own on its own device and samples its "
                              "share of each step's groups (rollout.data_parallel parts, a multiple of learners), its "
                              "weights taken from its own rank's policy in process: no weight transfer, no rollout "
                              "actors; rollout and update share the device (verl's hybrid engine, TRL GRPOTrainer "
                              "vllm_mode='colocate'; docs/distributed.md).")
    rollout_cpus: float | None = f(None, "CPUs reserved per rollout actor; empty: the cluster's CPUs that the set "
                                         "shares leave, shared out evenly over the actors left (at most 1 each): "
                                         "1 learner and 2 rollout workers on 2 cores get 2/3 each.", ge=0)
    rollout_gpus: float = f(0.0, "GPUs reserved per rollout actor.", ge=0)
    learner_cpus: float | None = f(None, "CPUs reserved per learner actor; empty: shared out as rollout_cpus.",
                                   ge=0)
    learner_gpus: float = f(0.0, "GPUs reserved per learner actor.", ge=0)
    max_restarts: int = f(3, "Times Ray restarts a dead rollout actor (its requests are sent again); a worker "
                             "Ray reports dead for good stops the run. Restarts are counted from new worker "
                             "processes, not from requests that failed while Ray could not reach a slow one.", ge=0)
    shard: bool = f(False, "With learners > 1: FSDP2 (torch fully_shard) shards the policy, its gradients and "
                           "AdamW moments over the learners, 1/M each, instead of a whole copy per learner; the "
                           "update is the same. Full-parameter policy, fixed-size micro-batches; the KL "
                           "reference is sharded alike (docs/distributed.md).")
    mixed_precision: bool = f(False, "With shard: FSDP2 mixed precision (MixedPrecisionPolicy): parameters "
                                     "gathered in model.dtype (bfloat16: half the bytes of every gather), "
                                     "gradients reduced in float32, the shards and AdamW stay float32. Needs "
                                     "model.dtype bfloat16 or float16.")
    cpu_offload: bool = f(False, "With shard: FSDP2 CPU offload (CPUOffloadPolicy): the float32 shards, their "
                                 "gradients and AdamW's moments live in host memory and the optimizer steps on the "
                                 "CPU; the device holds only the block being gathered (docs/sizing.md).")
    sync_bucket_mb: float = f(512.0, "Weight sync in buckets of whole layers of at most this many MB (a larger "
                                      "layer alone), streamed: the learner makes one bucket at a time and a rollout "
                                      "worker loads each as it comes, over either weight_sync path; the tensors "
                                      "are sent in model.dtype (bfloat16: half the bytes; float32 exact). 0 = one "
                                      "bucket (docs/distributed.md).", ge=0)
    weight_sync: str = f("object_store", "How new weights reach the rollout workers after each update. "
                                         "object_store: learner rank 0 puts them in Ray's object store once, every "
                                         "worker reads that object. collective: rank 0 broadcasts them to a "
                                         "torch.distributed group of its own with the workers (gloo on CPU, NCCL on "
                                         "CUDA), in buckets (sync_bucket_mb; docs/distributed.md).",
                         choices=WEIGHT_SYNCS)

    def check(self, prefix: str) -> None:
        if self.backend != "ray":
            for item in fields(self):  # a Ray setting in one process would be ignored
                value = getattr(self, item.name)
                if item.name != "backend" and value not in (item.default, _FORMER_DEFAULTS.get(item.name)):
                    shown = str(value).lower() if isinstance(value, bool) else value
                    why = _RAY_ONLY.get(item.name, "one process reserves no Ray resources")
                    raise ConfigError(f"{prefix}{item.name}={shown} needs {prefix}backend=ray ({why}: it would be "
                                      "ignored)")
        if self.address not in ("local", "auto") and head_address(self.address) is None:
            raise ConfigError(f"{prefix}address must be local, auto, HOST:PORT or ray://HOST:PORT, got "
                              f"{self.address!r}")
        for key in ("mixed_precision", "cpu_offload"):
            if getattr(self, key) and not self.shard:
                raise ConfigError(f"{prefix}{key}: true is an FSDP2 setting; it needs {prefix}shard: true")
        if self.colocate:
            for unmet, why in ((self.rollout_workers != 1, "rollout_workers (separate rollout actors)"),
                               (self.weight_sync != "object_store", "weight_sync (no weights travel)"),
                               (self.rollout_cpus is not None or self.rollout_gpus > 0, "rollout_cpus / rollout_gpus "
                                "(the engines use the learners' reservations: learner_cpus / learner_gpus)")):
                if unmet:
                    raise ConfigError(f"{prefix}colocate: true puts a rollout engine on every learner rank; leave "
                                      f"{prefix}{why} at its default")
        if self.learners > 1 and self.learner_cpus is not None and self.learner_cpus + self.learner_gpus <= 0:
            raise ConfigError(f"{prefix}learner_cpus or learner_gpus must be > 0 with learners > 1 (they are placed "
                              "as a group)")


# why a distributed.* key does nothing in one process (backend=none): a value other than its default is refused,
# it was silently ignored (an address never joined, GPUs never reserved)
_RAY_ONLY = {"address": "one process joins no Ray cluster", "learners": "one process runs one learner",
             "rollout_workers": "one process runs one rollout", "weight_sync": "one process has no weights to send",
             "shard": "one process holds the whole policy", "max_restarts": "one process restarts no actor",
             "mixed_precision": "one process shards nothing", "colocate": "one process already shares its policy with "
             "its engine", "cpu_offload": "one process shards nothing",
             "sync_bucket_mb": "one process has no weights to send"}
# the CPU shares' defaults before empty ones were taken from the cluster: the config.yaml of an older run holds them
_FORMER_DEFAULTS = {"rollout_cpus": 1.0, "learner_cpus": 1.0}


def head_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a Ray head given as HOST:PORT or ray://HOST:PORT (IPv6 in brackets); None otherwise
    (`local`, `auto`, anything malformed). One parse for the config check and the reachability check."""
    scheme, _, rest = address.rpartition("://")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or scheme not in ("", "ray"):
        return None
    return host.strip("[]"), int(port)
