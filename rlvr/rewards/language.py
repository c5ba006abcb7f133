"""Language-consistency reward (DeepSeek-R1, sec. 2.3.2): "the proportion of target language words in
the CoT".

The reasoning is split into words: a maximal run of letters (Unicode L*, with their combining marks M*)
is one word, and every CJK ideograph, hiragana or katakana character is a word of its own (those
scripts write no spaces between words). Each letter gets a script from its Unicode name (LATIN,
CYRILLIC, CJK, HANGUL, ...); a word is in the target language when all its letters are in one of the
language's scripts. The score is target words / all words. Digits, punctuation and math symbols make
no word, so equations do not dilute it; a reasoning with no word at all scores 0 (no evidence of the
target language). The reasoning is the `<think>` block (opened by the prompt or the completion); a
completion without one has no chain of thought to score and gets 0: scoring the whole completion instead
paid any letters ("9eJ": 1.0) over a correct digits-only answer ("3 7 8 9": 0.0), and RL learned the letters.
Scripts stand in for languages: English and French are both Latin. Only the standard library's
`unicodedata` is used.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Mapping

from rlvr.rewards.base import bounded

# Script families per language; a letter counts if its Unicode name starts with one of them.
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{lang: ("LATIN",) for lang in ("en", "fr", "de", "es", "it", "pt", "nl", "pl", "tr", "vi",
                                     "id", "sv", "cs", "ro")},
    "zh": ("CJK",),
    "ja": ("CJK", "HIRAGANA", "KATAKANA"),
    "ko": ("HANGUL",),
    "ru": ("CYRILLIC",), "uk": ("CYRILLIC",), "bg": ("CYRILLIC",),
    "el": ("GREEK",),
    "ar": ("ARABIC",), "fa": ("ARABIC",),
    "he": ("HEBREW",),
    "hi": ("DEVANAGARI",),
    "th": ("THAI",),
}
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)


# Scripts written without spaces between words: each character is one word (R1: count each CJK
# character as a word).
CHARACTER_WORDS = ("CJK", "HIRAGANA", "KATAKANA")


def _script(ch: str) -> str:
    return unicodedata.name(ch, "")


def words(text: str) -> list[str]:
    """The words of `text`: runs of letters (and their combining marks); each CJK/kana character alone."""
    out, current = [], []
    for ch in text:
        category = unicodedata.category(ch)
        if category.startswith("L") and _script(ch).startswith(CHARACTER_WORDS):
            out += ["".join(current)] if current else []
            out.append(ch)
            current = []
        elif category.startswith("L") or (category.startswith("M") and current):
            current.append(ch)
        elif current:
            out.append("".join(current))
            current = []
    return out + (["".join(current)] if current else [])


def script_share(text: str, scripts: tuple[str, ...]) -> float:
    """Fraction of the words of `text` whose letters are all in one of `scripts`; 0.0 without words."""
    found = words(text)
    in_script = sum(all(_script(ch).startswith(scripts) for ch in w if unicodedata.category(ch).startswith("L"))
                    for w in found)
    return in_script / len(found) if found else 0.0


def reasoning_part(prompt: str, completion: str) -> str:
    """The text inside `<think>` (opened by the prompt or the completion; unclosed: to the end), else ""."""
    text = "<think>" + completion if prompt.rstrip().endswith("<think>") else completion
    m = _THINK.search(text)
    return m.group(1) if m else ""


@bounded
class LanguageConsistencyReward:
    """Share of the reasoning's (`<think>` block's) words in the script of `lang` (e.g. 'en' -> Latin, 'zh' ->
    Han); 0 without a reasoning block."""

    def __init__(self, lang: str = "en") -> None:
        if lang not in LANGUAGE_SCRIPTS:
            raise ValueError(f"unknown language {lang!r}; choose from {sorted(LANGUAGE_SCRIPTS)}")
        self.lang, self.scripts = lang, LANGUAGE_SCRIPTS[lang]
        self.__name__ = f"language_{lang}"

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> float:
        return script_share(reasoning_part(prompt, completion), self.scripts)
