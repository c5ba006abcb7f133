"""Partial rollouts (`rollout.partial`): a step samples in segments of at most `rollout.partial_tokens` tokens, and
the samples a step does not need carry over, unfinished, to the next step, where they go on under the new weights.

Why: with whole rollouts a step waits for its longest completion, and the engines idle while it runs. Kimi k1.5
(Kimi Team 2025, sec. 2.6.2, "partial rollouts") caps the tokens a step generates and continues unfinished
trajectories in later iterations; verl, OpenRLHF and prime-rl resume them under the next weights alike.

A step goes in rounds. Each round, every unfinished sample of the pool (groups carried from earlier rounds and
steps) is generated for one more segment at the current weights, and new groups are started (their first
segment) for the groups the batch still lacks beyond the pool's finished ones; groups whose `group_size` samples
have all finished (end of sequence, or the `max_new_tokens` cap over all their segments) join the batch, in the
pool's order, until it holds `num_groups`. So a step ends once enough groups have finished, and the long ones go
on in the next step: the batch is always whole groups of whole completions (group advantages and rewards see
finished answers only), and a step's rounds are at most max_new_tokens / partial_tokens.

Every token keeps the policy version that sampled it (`Completion.extra["versions"]`, `ScoredBatch.token_versions`)
and its log-prob under that version (the sampler's), so the learner's behaviour correction
(`rlvr.core.behaviour_is_weights`, `algorithm.is_cap`) weights each token by pi_old / pi_behaviour of its own
version: the correction of asynchronous RL, per token. The pool is part of the rollout's state (checkpoints, Ray
requests), so a resumed run continues the very samples an uninterrupted one would.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.algorithms.dynamic_sampling import Rollout
from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rewards.scoring import score_completions
from rlvr.seeds import derive_seed


@dataclass
class Sample:
    """One completion in progress: its tokens so far, each with its sampler log-prob and policy version."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    entropies: list[float] | None = field(default_factory=list)  # None once a segment came without
    text: str = ""
    reason: str | None = None  # None: unfinished; "stop" or "length"
    stop: str | None = None  # the stop string that ended it, if one did


@dataclass
class Group:
    """A prompt's `group_size` samples, carried until all have finished; plain data (its example by its index in
    the stream's pool: the failure-rate stream knows its examples by identity, and a carried group crosses
    processes and checkpoints)."""

    example: int
    prompt: str
    prompt_ids: list[int]
    samples: list[Sample]

    @property
    def finished(self) -> bool:
        return all(s.reason is not None for s in self.samples)


@dataclass
class PartialSampler:
    """The training batch of a step, `num_groups` groups of finished samples, generated in segments of at most
    `segment` tokens with the pool of unfinished groups carried between steps. `version`: the policy version of
    the engine's weights now (set by the Rollout before each step)."""

    engine: RolloutEngine
    stream: Any  # rlvr.data.stream.PromptStream
    task: Any
    reward: Any  # rlvr.rewards.CombinedReward
    sampling: SamplingParams  # max_new_tokens: the cap over all of a sample's segments
    group_size: int
    num_groups: int
    seed: int
    purpose: int
    segment: int
    pool: list[Group] = field(default_factory=list)
    version: int = 0

    def __post_init__(self) -> None:
        self._index = {id(ex): i for i, ex in enumerate(self.stream.pool)}  # example -> its index in the pool

    def sample(self, step: int) -> Rollout:
        batch: list[Group] = []
        rounds = 0
        while len(batch) < self.num_groups:
            self._continue(step, rounds)  # the samples begun before this round, one segment further
            need = self.num_groups - len(batch)
            fresh = need - sum(g.finished for g in self.pool)  # new groups for those the finished ones leave
            if fresh > 0:
                self._start(self.stream.next(fresh), step, rounds)
            done = [g for g in self.pool if g.finished][:need]
            batch += done
            self.pool = [g for g in self.pool if all(g is not d for d in done)]
            rounds += 1
        return self._rollout(batch, step, rounds)

    def _params(self, step: int, rounds: int, call: int, tokens: int) -> SamplingParams:
        return replace(self.sampling, max_new_tokens=tokens, seed=derive_seed(self.seed, step, self.purpose, rounds,
                                                                              call))

    def _start(self, examples: list[Any], step: int, rounds: int) -> None:
        """New groups, sampled for their first segment."""
        budget = min(self.segment, self.sampling.max_new_tokens)
        completions = self.engine.generate([ex.prompt for ex in examples], self.group_size,
                                           self._params(step, rounds, 0, budget))
        G = self.group_size
        for i, ex in enumerate(examples):
            first = completions[i * G]
            group = Group(self._index[id(ex)], first.prompt, list(first.prompt_ids), [Sample() for _ in range(G)])
            for sample, completion in zip(group.samples, completions[i * G : (i + 1) * G]):
                self._extend(sample, completion)
            self.pool.append(group)

    def _continue(self, step: int, rounds: int) -> None:
        """Every unfinished sample of the pool one segment further, its prompt and tokens so far fed as ids; one call
        per budget (the cap leaves the samples begun earliest fewer tokens)."""
        cap = self.sampling.max_new_tokens
        open_ = [(g, s) for g in self.pool for s in g.samples if s.reason is None]
        budgets = sorted({min(self.segment, cap - len(s.tokens)) for _, s in open_})
        for call, budget in enumerate(budgets, start=1):
            part = [(g, s) for g, s in open_ if min(self.segment, cap - len(s.tokens)) == budget]
            completions = self.engine.generate([g.prompt_ids + s.tokens for g, s in part], 1,
                                               self._params(step, rounds, call, budget))
            for (_, sample), completion in zip(part, completions):
                self._extend(sample, completion)

    def _extend(self, sample: Sample, completion: Completion) -> None:
        """Append a segment; the sample finishes at an end of sequence (or stop string) or at the cap."""
        first = not sample.tokens
        sample.tokens += completion.token_ids
        sample.logprobs += completion.logprobs
        sample.versions += [self.version] * len(completion.token_ids)
        sample.entropies = None if sample.entropies is None or completion.entropies is None else \
            sample.entropies + completion.entropies
        # one segment: the engine's own text; several: the whole sequence decoded (a token may merge across the cut)
        sample.text = completion.text if first else self.engine.tokenizer.decode(sample.tokens,
                                                                                 skip_special_tokens=True)
        if completion.finish_reason == "stop":
            sample.reason, sample.stop = "stop", completion.extra.get("stop_reason")
        elif len(sample.tokens) >= self.sampling.max_new_tokens:
            sample.reason = "length"

    def _rollout(self, batch: list[Group], step: int, rounds: int) -> Rollout:
        completions = [Completion(g.prompt, g.prompt_ids, s.tokens, s.logprobs, s.text, s.reason,
                                  {"stop_reason": s.stop, "versions": s.versions}, s.entropies)
                       for g in batch for s in g.samples]
        examples = [self.stream.pool[g.example] for g in batch for _ in g.samples]
        scores = score_completions(self.reward, self.task, completions, examples, self.group_size, step,
                                   self.sampling.max_new_tokens)
        stale = [v < self.version for c in completions for v in c.extra["versions"]]
        carried = [any(v < self.version for v in c.extra["versions"]) for c in completions]
        stats = {"partial/rounds": float(rounds), "partial/carried_share": sum(carried) / len(carried),
                 "partial/stale_token_share": sum(stale) / max(len(stale), 1),
                 "partial/pool_groups": float(len(self.pool))}
        return Rollout(completions, examples, scores, stats)

    def state_dict(self) -> dict[str, Any]:
        return {"partial_pool": copy.deepcopy(self.pool)}  # a copy: the pool goes on changing after it is saved

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool = copy.deepcopy(state.get("partial_pool", []))
