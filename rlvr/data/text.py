"""Text access and normalisation shared by the curation steps.

Curation compares prompts by their words, not their bytes: two copies of a question that differ in
case, punctuation or spacing are the same question to a model (and to a benchmark leak). So every
comparison runs on `normalize_text`: Unicode NFKC, lower case, punctuation replaced by spaces,
whitespace collapsed. Digits survive, so "12 apples" and "13 apples" stay different.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable, Iterator, Sequence

TextKey = str | Callable[[Any], str]

_NON_WORD = re.compile(r"[^\w\s]|_", flags=re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """`"  What's 2+2?\\n"` -> `"what s 2 2"`."""
    if not isinstance(text, str):
        raise ValueError(f"expected a string to normalise, got {type(text).__name__}")
    text = unicodedata.normalize("NFKC", text).lower()
    return _SPACE.sub(" ", _NON_WORD.sub(" ", text)).strip()


def words(text: str) -> tuple[str, ...]:
    """The normalised word sequence of `text`."""
    return tuple(normalize_text(text).split())


def ngrams(seq: Sequence[str], n: int) -> Iterator[tuple[str, ...]]:
    """All contiguous n-grams of `seq` (none when it is shorter than n)."""
    if n < 1:
        raise ValueError(f"n-gram size must be >= 1, got {n}")
    return (tuple(seq[i : i + n]) for i in range(len(seq) - n + 1))


def get_text(item: Any, key: TextKey) -> str:
    """The text of `item`: `key(item)` for a callable, else `item[key]` (mappings) or `item.key`.

    `key` lets every step work on jsonl rows (`"question"`), `Example`s (`"prompt"`) or anything else.
    """
    if callable(key):
        text = key(item)
    elif isinstance(item, str):
        text = item
    elif isinstance(item, dict):
        if key not in item:
            raise ValueError(f"item has no field {key!r}; its fields are {sorted(item)}")
        text = item[key]
    elif hasattr(item, key):
        text = getattr(item, key)
    else:
        raise ValueError(f"item of type {type(item).__name__} has no attribute or field {key!r}")
    if not isinstance(text, str):
        raise ValueError(f"field {key!r} must be a string, got {type(text).__name__}")
    return text


def comparable_texts(items: Sequence[Any], key: TextKey, where: Sequence[str] | None = None
                     ) -> list[tuple[str, tuple[str, ...]]]:
    """(text, its normalised `words`) of every item, for a step that compares items by their words.

    An item with no words (an empty or blank text, or punctuation only) cannot be compared: de-duplication
    would call all such items copies of one another, decontamination could find no overlap in one. Such items
    are refused, before any work, in one error naming the first by `where[i]` (e.g. `train.jsonl:7`; default
    `item i`) and counting the others, so a user fixes the file in one pass.
    """
    if where is not None and len(where) != len(items):
        raise ValueError(f"where names {len(where)} items, but there are {len(items)}")
    pairs = [(t, words(t)) for t in (get_text(item, key) for item in items)]
    empty = [where[i] if where is not None else f"item {i}" for i, (_, ws) in enumerate(pairs) if not ws]
    if empty:
        field = f"field {key!r}" if isinstance(key, str) else "the text"
        more = len(empty) - 1
        listed = ", ".join(empty[1:6]) + (", ..." if more > 5 else "")
        others = f"; {more} more {'row has' if more == 1 else 'rows have'} none ({listed})" if more else ""
        raise ValueError(f"{empty[0]}: {field} has no words (empty, blank or punctuation only): nothing to "
                         f"compare{others}; remove such rows first")
    return pairs
