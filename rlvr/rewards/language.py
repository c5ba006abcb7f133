"""Language-consistency reward (DeepSeek-R1, sec. 2.3.2): the share of the reasoning written in
the target language, measured by script.

Each letter (Unicode category L*) is assigned a script from its Unicode name (LATIN, CYRILLIC,
CJK, HIRAGANA, ...); the score is the fraction of letters whose script belongs to the target
language. Digits, punctuation, spaces and math symbols do not count either way, so equations do
not dilute the score; mixing scripts lowers it. A reasoning with no letter at all scores 0 (no
evidence of the target language). Only the standard library's `unicodedata` is used.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Mapping

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


def script_share(text: str, scripts: tuple[str, ...]) -> float:
    """Fraction of the letters of `text` written in one of `scripts`; 0.0 without letters."""
    letters = in_script = 0
    for ch in text:
        if unicodedata.category(ch).startswith("L"):
            letters += 1
            in_script += unicodedata.name(ch, "").startswith(scripts)
    return in_script / letters if letters else 0.0


def reasoning_part(prompt: str, completion: str) -> str:
    """The text inside `<think>` (opened by the prompt or the completion), else the whole completion."""
    text = "<think>" + completion if prompt.rstrip().endswith("<think>") else completion
    m = _THINK.search(text)
    return m.group(1) if m else completion


class LanguageConsistencyReward:
    """Share of the reasoning's letters in the script of `lang` (e.g. 'en' -> Latin, 'zh' -> Han)."""

    def __init__(self, lang: str = "en") -> None:
        if lang not in LANGUAGE_SCRIPTS:
            raise ValueError(f"unknown language {lang!r}; choose from {sorted(LANGUAGE_SCRIPTS)}")
        self.lang, self.scripts = lang, LANGUAGE_SCRIPTS[lang]
        self.__name__ = f"language_{lang}"

    def __call__(self, prompt: str, completion: str, example: Mapping[str, Any]) -> float:
        return script_share(reasoning_part(prompt, completion), self.scripts)
