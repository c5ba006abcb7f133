import os
from pathlib import Path

from rlvr.rollout.base import Completion, SamplingParams


def data_dir() -> Path:
    """The shared benchmark data: $RLVR_DATA_DIR, else ../shared/data next to the repository."""
    env = os.environ.get("RLVR_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


class ScriptedEngine:
    """A fake RolloutEngine: the i-th sample of a prompt is `answers[prompt][i % len]`; records calls."""

    def __init__(self, answers: dict[str, list[str]]):
        self.answers = answers
        self.calls: list[tuple[list[str], int, SamplingParams]] = []

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), n, sampling))
        out = []
        for p in prompts:
            for i in range(n):
                text = self.answers[p][i % len(self.answers[p])]
                out.append(Completion(prompt=p, prompt_ids=[1], token_ids=[2], logprobs=[-0.1], text=text,
                                      finish_reason="stop"))
        return out

    def load_weights(self, named_tensors):
        pass

