from rlvr.rollout.base import Completion
from rlvr.thinking.fusion import THINK_END

EOS = 0


def encode(text: str) -> list[int]:
    return [ord(c) for c in text]


class CharScriptEngine:
    """A deterministic fake model over characters (token id = ord(char), EOS = 0, log-prob -0.5 each).

    `responses[q]` is what the model writes after prompt `q`, e.g. "<think>\\nR\\n</think>\\n\\nA". Asked
    to continue `q + partial`, it continues that response where `partial` left off; if `partial` closed
    the thinking some other way (a budget cut), it writes `after_cut[q]` (default: the response's answer).
    Stop strings and max_new_tokens behave as in `HFEngine`; `extra["stop_reason"]` names the stop hit.
    """

    def __init__(self, responses: dict[str, str], after_cut: dict[str, str] | None = None, report_stop=True):
        self.responses, self.after_cut = responses, after_cut or {}
        self.report_stop = report_stop
        self.calls = []
        self.loaded = None

    def _continuation(self, prompt: str) -> str:
        q = max((q for q in self.responses if prompt.startswith(q)), key=len)
        partial, full = prompt[len(q):], self.responses[q]
        if full.startswith(partial):
            return full[len(partial):]
        answer = full.split(THINK_END, 1)[1].lstrip() if THINK_END in full else full
        return self.after_cut.get(q, answer)

    def _one(self, prompt, sampling):
        text, ids, stop_reason, finish = "", [], None, "length"
        for ch in self._continuation(prompt) + "\0":
            if len(ids) == sampling.max_new_tokens:
                break
            ids.append(ord(ch))
            if ch == "\0":
                finish = "stop"
                break
            text += ch
            hit = [s for s in sampling.stop if s in text]
            if hit:
                stop_reason, finish = hit[0], "stop"
                text = text[: text.find(hit[0])]
                break
        extra = {"stop_reason": stop_reason} if self.report_stop else {}
        return Completion(prompt=prompt, prompt_ids=encode(prompt), token_ids=ids, logprobs=[-0.5] * len(ids),
                          text=text, finish_reason=finish, extra=extra)

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), n, sampling))
        return [self._one(p, sampling) for p in prompts for _ in range(n)]

    def load_weights(self, named_tensors):
        self.loaded = list(named_tensors)
