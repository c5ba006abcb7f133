"""rlvr: post-training language models with reinforcement learning from verifiable rewards.

`from rlvr import GRPOTrainer, RLConfig` is the Python API in TRL's shape (rlvr.pipelines.trainer); it is imported
on first use, so that `import rlvr.core` (or `rlvr --help`) does not load torch and transformers with it.
"""

from typing import Any

__version__ = "0.1.0"
_API = ("GRPOTrainer", "Trainer", "TrainResult", "RLConfig")


def __getattr__(name: str) -> Any:
    if name in _API:
        from rlvr.pipelines import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")


__all__ = ["__version__", *_API]
