"""Data-parallel generation (`rlvr.rollout.parallel`): a call's groups split into parts, each with a seed of its own,
merged in order; the same completions whichever engine runs which part."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.rollout.base import Completion, SamplingParams
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.parallel import DataParallelEngine, part_seed, split_groups
from rlvr.seeds import ENGINE_PART, derive_seed


def test_split_by_hand():
    assert split_groups(5, 2) == [range(0, 3), range(3, 5)]
    assert split_groups(6, 3) == [range(0, 2), range(2, 4), range(4, 6)]
    assert split_groups(2, 4) == [range(0, 1), range(1, 2)]  # more parts than prompts: the empty ones left out
    assert split_groups(4, 1) == [range(0, 4)]
    with pytest.raises(ValueError, match="parts must be >= 1"):
        split_groups(3, 0)


@settings(max_examples=100, deadline=None)
@given(prompts=st.integers(0, 50), parts=st.integers(1, 12))
def test_split_covers_the_prompts_in_order_evenly(prompts, parts):
    runs = split_groups(prompts, parts)
    assert [i for run in runs for i in run] == list(range(prompts))
    sizes = [len(run) for run in runs]
    assert len(runs) == min(prompts, parts) and (not sizes or max(sizes) - min(sizes) <= 1)
    assert sizes == sorted(sizes, reverse=True)


def test_part_seeds():
    assert part_seed(7, 0, 1) == 7 and part_seed(None, 1, 2) is None  # one part: the call's own seed
    assert part_seed(7, 1, 2) == derive_seed(7, 1, ENGINE_PART) != part_seed(7, 0, 2)


class _Recorder:
    """An engine that returns one completion per sample naming its prompt, the seed and itself, and logs calls."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def generate(self, prompts, n, sampling):
        self.log.append((self.name, list(prompts), sampling.seed))
        return [Completion(p, [], [], [], f"{self.name}:{sampling.seed}", "stop") for p in prompts for _ in range(n)]

    def load_weights(self, named):
        self.log.append((self.name, "weights"))

    def sleep(self):
        return self.name


class _Peer:
    def __init__(self, engine, log):
        self.engine, self.log = engine, log

    def start(self, prompts, n, sampling):
        self.log.append(("start", self.engine.name))
        out = self.engine.generate(prompts, n, sampling)
        return lambda: out


def test_parts_go_to_their_members_in_order_and_merge_back():
    log = []
    engine = DataParallelEngine(_Recorder("local", log), 4, [_Peer(_Recorder("peer", log), log)])
    out = engine.generate(["a", "b", "c", "d", "e"], 2, SamplingParams(seed=3))
    seeds = [part_seed(3, i, 4) for i in range(4)]
    # parts [a, b], [c], [d], [e]: 0 and 2 here, 1 and 3 at the peer, which start before this process samples
    assert [c.prompt for c in out] == ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e"]
    assert [c.text for c in out[::2]] == [f"local:{seeds[0]}", f"local:{seeds[0]}", f"peer:{seeds[1]}",
                                          f"local:{seeds[2]}", f"peer:{seeds[3]}"]
    assert log[:4] == [("start", "peer"), ("peer", ["c"], seeds[1]), ("start", "peer"), ("peer", ["e"], seeds[3])]
    engine.load_weights([])
    assert log[-1] == ("local", "weights") and engine.sleep() == "local"  # the rest is the local engine's


def test_one_engine_in_parts_equals_the_parts_called_one_by_one(flat):
    """HFEngine: D parts on one engine are the calls of each part with its own seed; one part is the plain call."""
    model, tokenizer = flat
    engine = HFEngine(model, tokenizer)
    prompts, sampling = ["12", "345", "6", "78", "9"], SamplingParams(max_new_tokens=6, seed=11)
    parts = DataParallelEngine(engine, 2).generate(prompts, 3, sampling)
    by_hand = [*engine.generate(prompts[:3], 3, SamplingParams(max_new_tokens=6, seed=part_seed(11, 0, 2))),
               *engine.generate(prompts[3:], 3, SamplingParams(max_new_tokens=6, seed=part_seed(11, 1, 2)))]
    assert [(c.prompt, c.token_ids, c.logprobs) for c in parts] == [(c.prompt, c.token_ids, c.logprobs)
                                                                     for c in by_hand]
    plain = engine.generate(prompts, 3, sampling)
    assert [c.token_ids for c in DataParallelEngine(engine, 1).generate(prompts, 3, sampling)] == \
        [c.token_ids for c in plain]
