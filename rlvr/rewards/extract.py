"""Pull the final answer out of a completion. Pure string functions, no sympy.

Preference order of `extract_answer` (the most explicit marker wins): the last `\\boxed{...}`
(nested braces allowed), the last `<answer>...</answer>`, GSM8K's `#### N`, the last
"the answer is ...".
"""

from __future__ import annotations

import re

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_HASHES = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS = re.compile(
    r"(?i:the\s+(?:final\s+)?answer\s+is)\s*:?\s*(.+?)(?:\.(?!\d)|\n|$)")
_NUMBER = re.compile(
    r"-?\d+/\d+"  # a fraction such as 3/4
    r"|-?\d{1,3}(?:,\d{3})+(?:\.\d+)?"  # thousands separators: 1,234.5
    r"|-?\d*\.\d+|-?\d+")
_LETTER = r"(?:[(\[]([A-Z])[)\]]|([A-Z])\)|([A-Z])(?=\s*(?:[.,;:!]|$)))"  # (B) [B] B) or B at the end
_CHOICE_STATED = re.compile(
    r"(?i:(?:answer|option|choice)(?:\s+is)?)\s*:?\s*(?i:option\s*)?" + _LETTER, re.MULTILINE)
_CHOICE_ALONE = re.compile(r"^\s*(?:\\text\{\s*)?" + _LETTER.replace("$", "$|\\s*\\}"))


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` or `\\fbox{...}`, braces balanced; `\\boxed 5` too."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (6 if text.startswith("\\boxed", start) else 5)
    while i < len(text) and text[i] == " " and text[i + 1:i + 2] in (" ", "{"):
        i += 1  # `\boxed {5}` is a braced box after all
    if i < len(text) and text[i] == " ":  # `\boxed 5`: a single token up to the next space or $
        m = re.match(r" +([^\s$]+)", text[i:])
        return m.group(1) if m else None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j].strip()
    return None  # unbalanced: the model was cut off inside the box


def _clean(ans: str) -> str | None:
    ans = ans.strip().strip("$").strip()
    ans = re.sub(r"[.,;:!]+$", "", ans).strip()
    return ans or None


def extract_answer(text: str) -> str | None:
    """The final answer stated in `text`, or None when it states none."""
    if text is None:
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return _clean(boxed)
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return _clean(tags[-1])
    hashes = _HASHES.findall(text)
    if hashes:
        return _clean(hashes[-1])
    said = _ANSWER_IS.findall(text)
    if said:
        return _clean(said[-1])
    return None


def extract_last_number(text: str) -> str | None:
    """The last number in `text` (thousands separators removed), e.g. '1,234.5' -> '1234.5'."""
    found = _NUMBER.findall(text or "")
    return found[-1].replace(",", "") if found else None


def _letter(groups: tuple) -> str:
    return "".join(g for g in groups if g)


def extract_choice(text: str, n_options: int = 4) -> str | None:
    """A multiple-choice letter stated as the answer ('A'..), or None when none is stated.

    Only an explicit statement counts: a boxed/tagged/'answer is' letter, or 'Answer: (B)'. A
    letter merely mentioned in the reasoning does not.
    """
    if not 1 <= n_options <= 26:
        raise ValueError(f"n_options must be in 1..26, got {n_options}")
    valid = {chr(ord("A") + i) for i in range(n_options)}
    stated = extract_answer(text or "")
    if stated is not None:
        m = _CHOICE_ALONE.match(stated)
        if m and _letter(m.groups()) in valid:
            return _letter(m.groups())
    for groups in reversed(_CHOICE_STATED.findall(text or "")):
        if _letter(groups) in valid:
            return _letter(groups)
    return None
