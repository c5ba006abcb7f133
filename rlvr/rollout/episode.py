"""The episode runner: engine turns and environment steps, alternated, one episode per sample of a group.

    episodes = run_episodes(engine, tokenizer, make_env, examples, n=8, sampling=..., limits=EpisodeLimits())

Each example's `n` episodes start from the environment's reset messages, rendered with the model's chat
template (`rlvr.rollout.chat`); the engine samples every live episode's next turn in one batched call (the
first turn of a group as one prompt with n samples, so the prompt is prefilled once: HFEngine's cascade
attention, vLLM's prefix cache; later turns feed each episode's whole history back as token ids, whose keys/values
vLLM's prefix caching finds again, as HFEngine's `reuse_histories` does: a turn prefills only what it added);
then each environment is stepped with its episode's assistant message (calls contained, `rlvr.rollout.env_guard`),
and its observations are appended as the template renders them. The model's tokens are kept exactly as sampled,
with their sampler log-probs; the environment's tokens get loss-mask 0 (they never train) and log-prob 0.

An episode stops when the environment says done, after `max_turns` model turns, when its tokens after the
prompt (model and environment together) would pass `max_tokens`, or when an environment call fails. It is
returned as one `Completion` (the n episodes of an example contiguous, as `engine.generate` returns samples),
so group advantages (GRPO, Dr. GRPO, RLOO, ...) apply unchanged: `token_ids` hold the turns and observations
in order, `loss_mask` marks the model's, `finish_reason` is "length" when the token budget cut it, and
`extra["episode"]` keeps the reward (the sum of the step rewards), whether it was solved, why it ended, and
every turn (assistant text, its tokens, observations, reward, info) for samples.jsonl and the HTML report.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from rlvr.rollout.base import Completion, RolloutEngine, SamplingParams
from rlvr.rollout.chat import ChatRenderer
from rlvr.rollout.env_guard import (PROBLEMS, EnvProblem, call_env, check_messages, check_step, cut_observations,
                                    plain_info)
from rlvr.rollout.environment import Environment, Message
from rlvr.seeds import EPISODE_TURN, derive_seed

DONE, MAX_TURNS, MAX_TOKENS = "done", "max_turns", "max_tokens"  # why an episode ended, besides an EnvProblem


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int = 4  # model turns per episode
    max_tokens: int = 256  # tokens after the first prompt, the model's and the environment's together
    max_observation_tokens: int = 128  # per observation message; longer ones are cut (and counted)
    step_timeout: float = 10.0  # seconds per reset() or step() call; 0 = none
    workers: int = 1  # episodes stepped at once, in threads (environments that wait on a process: the sandbox)
    kv_cache_mb: float = 1024.0  # keys/values an engine keeps across turns (`reuse_histories`); past it, re-prefill

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens", "max_observation_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        for name in ("step_timeout", "kv_cache_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class _Episode:
    """One episode in progress."""

    env: Any
    messages: list[Message]  # the conversation so far, as the template renders it
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)  # after the prompt: turns and observations
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    entropies: list[float] | None = field(default_factory=list)  # None once a turn came without them
    turns: list[dict[str, Any]] = field(default_factory=list)
    reward: float = 0.0
    correct: bool = False
    end: str | None = None  # why it ended; None while it runs
    failed_reset: str | None = None  # the EnvProblem kind of a reset that failed
    cut_observations: int = 0

    def add(self, ids: Sequence[int], logprobs: Sequence[float] | None = None,
            entropies: Sequence[float] | None = None) -> None:
        """Append tokens: the model's (with their log-probs and entropies) or, without log-probs, the
        environment's."""
        model = logprobs is not None
        self.ids += ids
        self.mask += [int(model)] * len(ids)
        self.logprobs += list(logprobs) if model else [0.0] * len(ids)
        if self.entropies is not None and model and entropies is None:
            self.entropies = None
        elif self.entropies is not None:
            self.entropies += list(entropies) if model else [0.0] * len(ids)


def run_episodes(engine: RolloutEngine, tokenizer: Any, make_env: Callable[[], Environment], items: Sequence[Any],
                 n: int, sampling: SamplingParams, limits: EpisodeLimits) -> list[Completion]:
    """n episodes of each item (those of item i are [i*n, (i+1)*n)), turn by turn; see the module docstring.
    The first turn samples with `sampling.seed`, turn t with a seed derived from it and t."""
    episodes = [_start(make_env(), item, tokenizer, limits) for item in items for _ in range(n)]
    renderer = ChatRenderer(tokenizer, getattr(episodes[0].env, "tools", None))
    for e in episodes:
        if e.failed_reset is None:
            e.prompt_ids = renderer.prompt_ids(e.messages)
    # an engine that can keep each turn's keys/values prefills only the observations of the next (HFEngine)
    reuse = getattr(engine, "reuse_histories", None)
    with reuse(limits.kv_cache_mb * 2**20) if reuse is not None else nullcontext():
        _play(engine, episodes, n, sampling, renderer, tokenizer, limits)
    return [_completion(e, tokenizer) for e in episodes]


def _play(engine: RolloutEngine, episodes: list[_Episode], n: int, sampling: SamplingParams, renderer: ChatRenderer,
          tokenizer: Any, limits: EpisodeLimits) -> None:
    """The turns: every live episode's model turn in one engine call, then every environment's step."""
    for turn in range(limits.max_turns):
        live = [e for e in episodes if e.end is None]
        if not live:
            break
        room = max(limits.max_tokens - len(e.ids) for e in live)
        seed = sampling.seed if sampling.seed is None or turn == 0 else derive_seed(sampling.seed, turn, EPISODE_TURN)
        params = replace(sampling, max_new_tokens=min(sampling.max_new_tokens, room), seed=seed)
        for e, c in zip(live, _sample(engine, live, n if turn == 0 else 1, params)):
            _model_turn(e, c, tokenizer, limits)
        stepped = [e for e in live if e.end is None]
        last = turn == limits.max_turns - 1
        if limits.workers > 1 and len(stepped) > 1:  # each episode's step touches its own environment alone
            with ThreadPoolExecutor(min(limits.workers, len(stepped))) as pool:
                list(pool.map(lambda e: _env_turn(e, renderer, tokenizer, limits, last), stepped))
        else:
            for e in stepped:
                _env_turn(e, renderer, tokenizer, limits, last)


def _start(env: Any, item: Any, tokenizer: Any, limits: EpisodeLimits) -> _Episode:
    """The episode on `item`: its reset messages; a reset that fails leaves a one-token prompt, on which the
    model takes its first turn (the row keeps the group's shape and a token to train on) and the episode ends."""
    episode = _Episode(env, [], [])
    try:
        episode.messages = check_messages(env, call_env(env, "reset", item, limits.step_timeout), "reset()")
        if not episode.messages:
            raise EnvProblem("bad_output", "reset() returned no messages")
    except EnvProblem as problem:
        token = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        episode.failed_reset, episode.prompt_ids = problem.kind, [int(token)]
    return episode


def _sample(engine: RolloutEngine, live: list[_Episode], n: int, params: SamplingParams) -> list[Completion]:
    """One turn of every live episode in one engine call. On the first turn the n episodes of an item share
    their prompt (one prompt, n samples) when their reset messages rendered alike."""
    groups = [live[i:i + n] for i in range(0, len(live), n)]  # on the first turn every episode is live
    if n > 1 and all(all(e.prompt_ids == g[0].prompt_ids for e in g) for g in groups):
        return engine.generate([g[0].prompt_ids for g in groups], n, params)
    return engine.generate([e.prompt_ids + e.ids for e in live], 1, params)


def _model_turn(e: _Episode, c: Completion, tokenizer: Any, limits: EpisodeLimits) -> None:
    """Append the model's turn, cut to the episode's token budget."""
    room = limits.max_tokens - len(e.ids)
    ids, cut = c.token_ids[:room], len(c.token_ids) > room
    text = tokenizer.decode(ids, skip_special_tokens=True) if cut else c.text
    e.add(ids, c.logprobs[:room], None if c.entropies is None else c.entropies[:room])
    special = set(getattr(tokenizer, "all_special_ids", ()))
    end_token = tokenizer.convert_ids_to_tokens(ids[-1]) if ids and ids[-1] in special else None
    e.turns.append({"assistant": text, "tokens": len(ids), "finish": "length" if cut else c.finish_reason,
                    "end_token": end_token})
    e.messages.append({"role": "assistant", "content": text})
    if len(e.ids) >= limits.max_tokens:
        e.end = MAX_TOKENS


def _env_turn(e: _Episode, renderer: ChatRenderer, tokenizer: Any, limits: EpisodeLimits, last_turn: bool) -> None:
    """Step the environment with the model's turn; append its observations unless the episode is over."""
    turn = e.turns[-1]
    if e.failed_reset is not None:
        e.end = e.failed_reset
        return
    try:
        result = check_step(e.env, call_env(e.env, "step", dict(e.messages[-1]), limits.step_timeout))
    except EnvProblem as problem:
        e.end = problem.kind
        return
    e.reward += result.reward
    e.correct = bool(result.info.get("correct", e.correct))
    observations, cut = cut_observations(result.observations, renderer.encode,
                                         lambda ids: tokenizer.decode(ids, skip_special_tokens=False),
                                         limits.max_observation_tokens)
    e.cut_observations += cut
    turn.update(reward=result.reward, info=plain_info(result.info), observations=observations)
    if result.done:
        e.end = DONE
    elif last_turn:
        e.end = MAX_TURNS
    if e.end is not None:  # nothing follows: what the environment says last is kept, not fed back
        return
    seen, reply = e.messages[:-1], e.messages[-1]["content"]
    ids = renderer.suffix_ids(seen, reply, turn["end_token"], observations)
    if len(e.ids) + len(ids) >= limits.max_tokens:  # no room left for a model token after it
        e.end = MAX_TOKENS
        return
    e.add(ids)
    e.messages += observations
    turn["observation_tokens"] = len(ids)


def _completion(e: _Episode, tokenizer: Any) -> Completion:
    episode = {"turns": [{k: v for k, v in t.items() if k != "end_token"} for t in e.turns], "reward": e.reward,
               "correct": e.correct, "end": e.end, "cut_observations": e.cut_observations}
    model = [t for t, m in zip(e.ids, e.mask) if m]
    return Completion(
        prompt=tokenizer.decode(e.prompt_ids, skip_special_tokens=False), prompt_ids=list(e.prompt_ids),
        token_ids=list(e.ids), logprobs=list(e.logprobs), text=tokenizer.decode(model, skip_special_tokens=True),
        finish_reason="length" if e.end == MAX_TOKENS else "stop", extra={"episode": episode},
        entropies=e.entropies if e.ids else None, loss_mask=list(e.mask))


def episode_metrics(completions: Sequence[Completion]) -> dict[str, float]:
    """The batch's episode/* metrics: turns, turns of solved episodes, tokens after the prompt, the share of
    them the environment wrote (masked out of the loss), tool calls, tool-call errors and correct tool calls
    (`info["tool_calls_correct"]`) per episode, and the counts of environment problems (`env_guard.PROBLEMS`)
    and of cut observations."""
    episodes = [c.extra["episode"] for c in completions]
    turns = [len(ep["turns"]) for ep in episodes]
    solved = [t for t, ep in zip(turns, episodes) if ep["correct"]]
    tokens = sum(len(c.token_ids) for c in completions)
    masked = sum(len(c.loss_mask) - sum(c.loss_mask) for c in completions if c.loss_mask is not None)
    info = [t.get("info", {}) for ep in episodes for t in ep["turns"]]
    out = {"episode/turns": sum(turns) / len(turns), "episode/length": tokens / len(completions),
           "episode/masked_share": masked / tokens if tokens else 0.0,
           "episode/tool_calls": sum(float(i.get("tool_calls", 0)) for i in info) / len(episodes),
           "episode/tool_errors": sum(float(i.get("tool_errors", 0)) for i in info) / len(episodes),
           "episode/tool_calls_correct": sum(float(i.get("tool_calls_correct", 0)) for i in info) / len(episodes),
           "episode/truncated_observations": float(sum(ep["cut_observations"] for ep in episodes)),
           **{f"episode/env_{kind}": float(sum(ep["end"] == kind for ep in episodes)) for kind in PROBLEMS}}
    if solved:
        out["episode/turns_solved"] = sum(solved) / len(solved)
    return out


def model_tokens(values: Sequence[float], loss_mask: Sequence[int] | None) -> list[float]:
    """Per-token values (log-probs, entropies) of the model's own tokens: those `loss_mask` keeps (all when None)."""
    return list(values) if loss_mask is None else [v for v, keep in zip(values, loss_mask) if keep]


def demonstration_episodes(tokenizer: Any, make_env: Callable[[], Environment], items: Sequence[Any],
                           limits: EpisodeLimits, seed: int) -> list[tuple[list[int], list[int], list[int]]]:
    """Episodes for an SFT warm start, rendered exactly as sampled episodes are: the environment's
    `demonstration(item, rng)` gives the assistant messages to play in turn (each closed by EOS); an environment
    without one gets the item's reference answer as a one-turn episode (not stepped: a demonstration shows the
    format the episodes open with, e.g. <bos> and the template's turn markers, not the environment's verdict).
    Returns (prompt ids, ids after the prompt, loss mask) per item whose reset worked."""
    rng, out = random.Random(seed), []
    for item in items:
        env = make_env()
        e = _start(env, item, tokenizer, limits)
        if e.failed_reset is not None:
            continue
        renderer = ChatRenderer(tokenizer, getattr(env, "tools", None))
        e.prompt_ids = renderer.prompt_ids(e.messages)
        plays = hasattr(env, "demonstration")
        replies = list(env.demonstration(item, rng))[:limits.max_turns] if plays else [item.answer]
        for turn, reply in enumerate(replies):
            ids = renderer.encode(reply) + [tokenizer.eos_token_id]
            _model_turn(e, Completion("", [], ids, [0.0] * len(ids), reply, "stop"), tokenizer, limits)
            if e.end is None and plays:
                _env_turn(e, renderer, tokenizer, limits, last_turn=turn == len(replies) - 1)
            if e.end is not None:
                break
        out.append((e.prompt_ids, e.ids, e.mask))
    return out
