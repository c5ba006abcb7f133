"""Thinking-mode fusion data: the same prompts in a `/think` and a `/no_think` variant (Qwen3).

Qwen3 (Yang et al. 2025, "Qwen3 Technical Report", Sec. 4.3 "Thinking Mode Fusion") trains one model
to both think and answer directly. The user turn carries a flag, `/think` or `/no_think`; the thinking
response is `<think>\\n{reasoning}\\n</think>\\n\\n{answer}` and the non-thinking response keeps an
*empty* thinking block, `<think>\\n\\n</think>\\n\\n{answer}`, so both modes share one format. Thinking
is the default mode, so a share of thinking samples carries no flag at all (`unflagged_think`).

Rows come out as `{"prompt", "completion", "mode", "messages", "source_index"}`: `prompt`/`completion`
is what `rlvr sft` reads; `messages` is the same turn in chat form for tokenizer chat templates.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlvr.jsonl import write_jsonl

THINK_FLAG, NO_THINK_FLAG = "/think", "/no_think"
THINK_START, THINK_END = "<think>", "</think>"


def thinking_completion(thinking: str, answer: str) -> str:
    return f"{THINK_START}\n{thinking.strip()}\n{THINK_END}\n\n{answer.strip()}"


def no_thinking_completion(answer: str) -> str:
    return f"{THINK_START}\n\n{THINK_END}\n\n{answer.strip()}"


def split_thinking(text: str) -> tuple[str, str]:
    """(thinking, answer) of a completion: `<think>T</think>A` -> (T, A) stripped; without `</think>`,
    an opened block is unfinished thinking with no answer, and a text with no block is all answer."""
    if THINK_END in text:
        head, answer = text.split(THINK_END, 1)
        head = head.strip()
        thinking = head[len(THINK_START):] if head.startswith(THINK_START) else head
        return thinking.strip(), answer.strip()
    if text.lstrip().startswith(THINK_START):
        return text.lstrip()[len(THINK_START):].strip(), ""
    return "", text.strip()


def _parse_completion(text: str, key: str, at: str) -> tuple[str, str]:
    """(thinking, answer) of a completion that is exactly one `<think>T</think>A` block at its start
    (leading whitespace allowed; `T</think>A` too, the block opened by a chat template) and a non-empty
    answer; anything else would leave a stray or nested thinking block, or drop text, in the rows built
    from it, so it is refused with what is wrong."""
    body = text.lstrip()
    if not body.startswith(THINK_START):
        if THINK_START in text:
            raise ValueError(f"{at}: field {key!r} has text before {THINK_START!r}; the thinking block must "
                             f"open the completion")
        if text.count(THINK_END) == 1:  # the chat template opened the block (Qwen3 samples often look so)
            body = THINK_START + body
        elif THINK_END in text:
            raise ValueError(f"{at}: field {key!r} has {text.count(THINK_END)} {THINK_END!r} tags and no "
                             f"{THINK_START!r}; expected one {THINK_START}...{THINK_END} block")
        else:
            raise ValueError(f"{at}: field {key!r} has no {THINK_START}...{THINK_END} block; a thinking sample "
                             "needs one")
    if THINK_END not in body:
        raise ValueError(f"{at}: field {key!r} opens {THINK_START!r} but never closes it with {THINK_END!r}")
    opens, closes = body.count(THINK_START), body.count(THINK_END)
    if opens > 1 or closes > 1:
        raise ValueError(f"{at}: field {key!r} has {opens} {THINK_START!r} and {closes} {THINK_END!r} tags; "
                         f"expected exactly one {THINK_START}...{THINK_END} block")
    thinking, answer = split_thinking(body)
    if not answer:
        raise ValueError(f"{at}: field {key!r} has no answer after {THINK_END!r}")
    return thinking, answer


def _untagged(text: str, key: str, at: str) -> None:
    """Separate fields get wrapped in a block here; a tag inside them would nest or duplicate it."""
    for tag in (THINK_START, THINK_END):
        if tag in text:
            raise ValueError(f"{at}: field {key!r} contains {tag!r}; give the text without thinking tags "
                             f"(or a whole {THINK_START}...{THINK_END} completion with --completion-key)")


def _unflagged(prompt: str, key: str, at: str) -> None:
    """The mode flags are added here; one already in the prompt would give a row two flags, or contradictory ones
    (`... /no_think /think`), and Qwen3 obeys the last one."""
    flag = next((f for f in (THINK_FLAG, NO_THINK_FLAG) if f in prompt.split()), None)
    if flag is not None:
        raise ValueError(f"{at}: field {key!r} already carries the mode flag {flag!r}; give the prompt without "
                         f"{THINK_FLAG} or {NO_THINK_FLAG} (each row gets its own)")


def _field(record: Mapping[str, Any], key: str, where: str, hint: str = "") -> str:
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {_kind(record)}")
    if key not in record:
        raise ValueError(f"{where}: missing string field {key!r}{hint}")
    value = record[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}: field {key!r} is {_kind(value)}, not a string")
    return value


def _kind(value: Any) -> str:
    """`5` -> "an int", `None` -> "null": what a user who wrote the JSON row would call it."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _row(prompt: str, completion: str, mode: str, index: int) -> dict[str, Any]:
    return {"prompt": prompt, "completion": completion, "mode": mode, "source_index": index,
            "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]}


def _flagged(prompt: str, flag: str) -> str:
    return f"{prompt.rstrip()} {flag}"


def build_fusion_data(
    records: Sequence[Mapping[str, Any]],
    *,
    prompt_key: str = "prompt",
    thinking_key: str = "thinking",
    answer_key: str = "answer",
    completion_key: str | None = None,
    no_think_answer_key: str | None = None,
    unflagged_think: float = 0.0,
    seed: int = 0,
    where: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Two rows per record: a thinking one and a non-thinking one, in record order.

    Reasoning and answer come from `thinking_key`/`answer_key`, or, with `completion_key`, are parsed
    from a completion `<think>...</think>answer` (e.g. rejection-sampled traces). The non-thinking
    answer is `no_think_answer_key` when given (a direct answer written without reasoning), else the
    same answer. `unflagged_think` is the fraction of thinking rows whose prompt has no `/think` flag
    (thinking is the default mode, Qwen3 Sec. 4.3), drawn with `seed`. `where` names each record in
    errors (e.g. `traces.jsonl:3`, lines counted from 1); by default `record i`, its index in `records`.
    """
    if not 0 <= unflagged_think <= 1:
        raise ValueError(f"unflagged_think must be in [0, 1], got {unflagged_think}")
    if where is not None and len(where) != len(records):
        raise ValueError(f"where names {len(where)} records, but there are {len(records)}")
    # a reasoning trace kept inside the completion is the common mistake behind a missing thinking field
    hint = f"; if the reasoning is inside a {THINK_START}...{THINK_END} completion, name it with --completion-key"
    rng = random.Random(seed)
    rows = []
    for i, record in enumerate(records):
        at = where[i] if where is not None else f"record {i}"
        prompt = _field(record, prompt_key, at)
        if not prompt.strip():
            raise ValueError(f"{at}: field {prompt_key!r} is empty; a sample needs a prompt")
        _unflagged(prompt, prompt_key, at)
        if completion_key is not None:
            thinking, answer = _parse_completion(_field(record, completion_key, at), completion_key, at)
        else:
            thinking, answer = _field(record, thinking_key, at, hint), _field(record, answer_key, at)
            _untagged(thinking, thinking_key, at)
            _untagged(answer, answer_key, at)
        if not thinking.strip():
            raise ValueError(f"{at}: empty reasoning; a thinking sample needs some")
        if not answer.strip():  # a completion's empty answer is refused by _parse_completion
            raise ValueError(f"{at}: field {answer_key!r} is empty; a sample needs an answer")
        direct = _field(record, no_think_answer_key, at) if no_think_answer_key else answer
        if no_think_answer_key:
            _untagged(direct, no_think_answer_key, at)
            if not direct.strip():
                raise ValueError(f"{at}: field {no_think_answer_key!r} is empty; a sample needs an answer")
        think_prompt = prompt if rng.random() < unflagged_think else _flagged(prompt, THINK_FLAG)
        rows.append(_row(think_prompt, thinking_completion(thinking, answer), "think", i))
        rows.append(_row(_flagged(prompt, NO_THINK_FLAG), no_thinking_completion(direct), "no_think", i))
    return rows


def write_fusion_jsonl(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write fusion rows as jsonl (the `rlvr sft` input format: prompt/completion pairs)."""
    return write_jsonl(path, list(rows))
