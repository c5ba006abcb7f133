"""A scripted engine and a small environment for the episode runner's tests."""

from rlvr.models import build_char_tokenizer
from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.environment import StepResult
from rlvr.tasks import Example

TOK = build_char_tokenizer()
BOS, EOS = TOK.bos_token_id, TOK.eos_token_id


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False)["input_ids"]


class ScriptedEngine:
    """Replies from a script, in turn, to every prompt; records each call's prompts and n. A reply ending in '~'
    is sent without EOS (a turn cut by max_new_tokens)."""

    tokenizer = TOK

    def __init__(self, replies: list[str]):
        self.replies, self.calls = replies, []

    def generate(self, prompts, n, sampling):
        self.calls.append(([list(p) for p in prompts], n, sampling))
        reply = self.replies[min(len(self.calls) - 1, len(self.replies) - 1)]
        cut = reply.endswith("~")
        token_ids = ids(reply.rstrip("~"))[:sampling.max_new_tokens] + ([] if cut else [EOS])
        return [Completion("", list(p), token_ids, [-0.5] * len(token_ids), reply.rstrip("~"),
                           "length" if cut else "stop") for p in prompts for _ in range(n)]

    def load_weights(self, named_tensors):
        pass


class Echo:
    """Says back the model's message in capitals; done (reward 1) when the model says 'stop'."""

    def reset(self, item):
        return [{"role": "user", "content": item.prompt}]

    def step(self, message):
        if message["content"] == "stop":
            return StepResult([], 1.0, True, {"correct": True})
        return StepResult([{"role": "user", "content": message["content"].upper()}], 0.25, False)


ITEM = Example("q:", "")
SAMPLING = SamplingParams(max_new_tokens=8, seed=3)
