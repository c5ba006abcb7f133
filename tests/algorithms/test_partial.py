"""Partial rollouts (`rlvr.algorithms.partial`): segments, groups carried to the next step under newer weights,
each token tagged with its version, the pool in the state so a resume continues the same samples."""

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.algorithms.partial import PartialSampler
from rlvr.rewards.base import RewardBatch
from rlvr.rollout.base import Completion, SamplingParams

EOS, TOKEN = 1, 7


@dataclass
class Ex:
    prompt: str  # "L<k>|": every completion has k tokens, the last an end of sequence


class Tokenizer:
    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join("x" for i in ids if i == TOKEN)


class ScriptedEngine:
    """Samples of the length the prompt names; log-probs -(version + 1), so each token shows the weights it came
    from. Records each call's (prompt count, n, budget)."""

    def __init__(self):
        self.tokenizer, self.version, self.calls = Tokenizer(), 0, []

    def generate(self, prompts, n, sampling):
        self.calls.append((len(prompts), n, sampling.max_new_tokens))
        out = []
        for prompt in prompts:
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            head = ids.index(ord("|")) + 1
            total = int("".join(chr(i) for i in ids[1 : head - 1]))
            left = total - (len(ids) - head)
            k = min(left, sampling.max_new_tokens)
            tokens = [TOKEN] * (k - 1) + [EOS if k == left else TOKEN]
            for _ in range(n):
                out.append(Completion(str(prompt), ids, tokens, [-(self.version + 1.0)] * k,
                                      self.tokenizer.decode(tokens), "stop" if k == left else "length"))
        return out


class Stream:
    def __init__(self, lengths):
        self.pool, self.position = [Ex(f"L{k}|") for k in lengths], 0

    def next(self, n):
        self.position += n
        return self.pool[self.position - n : self.position]


class Reward:
    def score_batch(self, prompts, texts, examples, ctx):
        return RewardBatch([float(len(t)) for t in texts])


class Task:
    def is_correct(self, text, example):
        return True


def _sampler(lengths, segment=2, cap=6, groups=2):
    engine = ScriptedEngine()
    return PartialSampler(engine, Stream(lengths), Task(), Reward(), SamplingParams(max_new_tokens=cap), 2, groups,
                          0, 0, segment), engine


def test_by_hand_a_long_group_carries_over_and_ends_under_the_next_weights():
    sampler, engine = _sampler([3, 5, 1, 2, 4])
    # step 1 (version 0): round 0 starts A (3 tokens) and B (5): 2 tokens each, unfinished; round 1 ends A (its end
    # of sequence), takes B to 4 tokens and starts C (1 token: done at once) for the group A leaves missing
    one = sampler.sample(1)
    assert [c.prompt for c in one.completions] == ["L3|", "L3|", "L1|", "L1|"]
    assert [len(c.token_ids) for c in one.completions] == [3, 3, 1, 1]
    assert engine.calls == [(2, 2, 2), (4, 1, 2), (1, 2, 2)]  # fresh A, B; the four samples of A and B; fresh C
    assert one.stats["partial/rounds"] == 2 and one.stats["partial/pool_groups"] == 1  # B carried over
    # step 2 (version 1): B ends (its last token sampled by the new weights), D (2 tokens) starts and ends
    engine.version = sampler.version = 1
    two = sampler.sample(2)
    b = two.completions[0]
    assert b.prompt == "L5|" and b.token_ids == [TOKEN] * 4 + [EOS] and b.finish_reason == "stop"
    assert b.extra["versions"] == [0, 0, 0, 0, 1] and b.logprobs == [-1.0] * 4 + [-2.0]
    assert b.prompt_ids == [ord(c) for c in "L5|"] and b.text == "xxxx"
    assert [c.prompt for c in two.completions] == ["L5|", "L5|", "L2|", "L2|"]
    assert two.stats["partial/carried_share"] == 0.5 and two.stats["partial/stale_token_share"] == 8 / 14


def test_the_cap_ends_a_sample_over_all_its_segments():
    sampler, _ = _sampler([9, 9], segment=4, cap=6, groups=1)
    out = sampler.sample(1)  # 4 tokens, then 2 (the cap's rest): finished by length
    assert [len(c.token_ids) for c in out.completions] == [6, 6] and out.completions[0].finish_reason == "length"


def test_a_resumed_sampler_continues_the_same_samples():
    sampler, engine = _sampler([3, 5, 1, 2, 4, 6, 1, 1])
    sampler.sample(1)
    state = sampler.state_dict()
    position = sampler.stream.position
    engine.version = sampler.version = 1
    expected = sampler.sample(2)
    resumed, engine2 = _sampler([3, 5, 1, 2, 4, 6, 1, 1])
    resumed.load_state_dict(state)
    resumed.stream.position = position
    engine2.version = resumed.version = 1
    again = resumed.sample(2)
    assert [(c.prompt, c.token_ids, c.logprobs, c.extra["versions"]) for c in again.completions] == \
        [(c.prompt, c.token_ids, c.logprobs, c.extra["versions"]) for c in expected.completions]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), min_size=40, max_size=40), segment=st.integers(1, 5),
       groups=st.integers(1, 3), steps=st.integers(1, 4))
def test_every_batch_is_whole_finished_groups_and_every_token_has_its_version(lengths, segment, groups, steps):
    cap = 10
    sampler, engine = _sampler(lengths, segment, cap, groups)
    for step in range(1, steps + 1):
        engine.version = sampler.version = step - 1
        out = sampler.sample(step)
        assert len(out.completions) == 2 * groups
        for c in out.completions:
            k = int(c.prompt[1:-1])
            assert len(c.token_ids) == min(k, cap) and c.finish_reason == ("stop" if k <= cap else "length")
            assert len(c.extra["versions"]) == len(c.token_ids) == len(c.logprobs)
            assert c.extra["versions"] == sorted(c.extra["versions"]) and max(c.extra["versions"]) <= step - 1
            assert c.logprobs == [-(v + 1.0) for v in c.extra["versions"]]
        assert out.stats["partial/rounds"] <= -(-cap // segment)  # a step's rounds: at most cap / segment

