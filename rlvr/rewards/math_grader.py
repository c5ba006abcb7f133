"""`math_equal(predicted, truth)`: is a predicted final answer mathematically the ground truth?

Two stages. A fast path in the calling process settles plain numbers exactly (GSM8K answers,
most MATH answers) with `fractions.Fraction`, after stripping `$`, `\\$`, units in words, thousands
separators and a trailing period. Everything else goes to math-verify (Hugging Face's LaTeX ->
sympy grader: fractions vs decimals, percentages, `\\text{}` units, intervals, sets, algebraic
equivalence) in a persistent worker pool, each pair under a per-sample timeout, so a pathological
expression can neither hang nor crash a run.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
from fractions import Fraction
from functools import lru_cache
from typing import Sequence

from rlvr.rewards.pool import OK, WorkerPool

DEFAULT_TIMEOUT = 5.0  # seconds per pair, math-verify's own default
_MAX_NUMBER_CHARS = 64  # longer "numbers" go to the guarded path, never Fraction() in-process

_THOUSANDS = re.compile(r"^-?\d{1,3}(, ?\d{3})+(\.\d+)?$")  # 1,234 and MATH's `1,\! 234` (3-digit groups)
_PLAIN = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?$", re.IGNORECASE)
_FRAC = re.compile(r"^(-?)\\[dt]?frac\{(-?\d{1,20})\}\{(\d{1,20})\}$|^(-?)(\d{1,20})/(\d{1,20})$")
_WORD_UNITS = re.compile(r"^(.*?\d)\s*(?:[a-zA-Z]{2,}\.?\s*)+$")  # "18 dollars", "5 cm" (not "5 x")
# Trailing words that change the value or make it a bound, never a unit: "2 pi", "5 thousand", "4 or more".
_VALUE_WORDS = frozenset("""pi thousand thousands million millions billion billions trillion trillions hundred
    hundreds dozen dozens half halves quarter quarters or and more less than least most at over under plus
    minus times squared cubed sqrt root roots inf infinity negative""".split())
# Words that make a stated number a bound or an estimate, never the value itself: "5 or more" is not 5.
_BOUND_WORDS = frozenset("""or more less least most than over under fewer greater smaller larger above below
    about approximately around nearly almost roughly between up not no never""".split())
# Function names written in plain text ("cos(0)") are math-verify's to judge, not a sentence's.
_FUNCTION_WORDS = frozenset("sin cos tan cot sec csc log ln exp abs mod gcd lcm max min arcsin arccos arctan".split())
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")  # a word, not a LaTeX command (`\frac`) or a variable (`x`)
# Not extract._NUMBER: a stated answer's `1, 234` is one number (MATH's `1,\! 234`, as in `_THOUSANDS`), not a list.
_NUMBER_IN_TEXT = re.compile(r"-?\d{1,3}(?:, ?\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?|-?\.\d+")


def _strip_decorations(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = s.replace("\\$", "").replace("\\!", "").replace("\\,", "").replace("\\ ", " ")
    s = re.sub(r"\\(?:mathrm|text|textbf|mbox)\{\s*\}", "", s).strip()
    return re.sub(r"[.]$", "", s).strip()


def plain_number(s: str) -> Fraction | None:
    """Exact value of a plain number ('1,000', '-2.50', '18 dollars', '1e3', '\\frac{3}{4}',
    '-7/2'), else None."""
    return _stripped_number(_strip_decorations(s))


def _stripped_number(s: str) -> Fraction | None:
    """`plain_number` of text already through `_strip_decorations`."""
    frac = _FRAC.match(s.replace(" ", ""))
    if frac:
        sign, num, den = (frac.group(1), frac.group(2), frac.group(3)) if frac.group(2) else frac.groups()[3:]
        return None if int(den) == 0 else Fraction(int(num), int(den)) * (-1 if sign else 1)
    m = _WORD_UNITS.match(s)
    if m:
        if {w.strip(".").lower() for w in s[m.end(1):].split()} & _VALUE_WORDS:
            return None  # not a unit: let math-verify judge the whole expression
        s = m.group(1)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    s = s.replace(" ", "")
    if len(s) > _MAX_NUMBER_CHARS or not _PLAIN.match(s):
        return None
    mantissa, _, exponent = s.lower().partition("e")
    if exponent and abs(int(exponent)) > 30:
        return None
    return Fraction(mantissa) * Fraction(10) ** int(exponent or 0)


def _sentence_equal(stripped: str, truth: Fraction) -> bool | None:
    """A short sentence stating a number ("She has 16 apples.", "Janet makes \\$18 every day") against a number:
    False when a bound word makes it no value ("5 or more", "at least 5"); else, when it states exactly one
    number, whether that is `truth` (as GSM8K graders read the answer's number); None when it is no sentence
    or states several numbers (math-verify judges those). `stripped` has been through `_strip_decorations`."""
    text = stripped.replace("$", "")
    words = {w.lower() for w in _WORD.findall(text)}
    if not words or words & _FUNCTION_WORDS:
        return None
    if words & _BOUND_WORDS:
        return False
    if words & _VALUE_WORDS:
        return None
    values = {_stripped_number(n) for n in _NUMBER_IN_TEXT.findall(text)}
    if len(values) != 1 or None in values:
        return None
    return values.pop() == truth


def _fast_equal(predicted: str, truth: str) -> bool | None:
    """True/False when decidable without sympy, None to defer to math-verify."""
    predicted, truth = _strip_decorations(predicted), _strip_decorations(truth)
    if predicted == truth:
        return True
    p, t = _stripped_number(predicted), _stripped_number(truth)
    if p is not None and t is not None:
        return p == t
    if t is not None:
        return _sentence_equal(predicted, t)
    return None


# --- the guarded path: runs inside worker processes -----------------------------------------------


@lru_cache(maxsize=8192)
def _parse(expr: str):
    from math_verify import parse

    # Timeouts are ours (SIGALRM in the worker), so math-verify's own are off.
    return parse("$" + _strip_decorations(expr) + "$", parsing_timeout=None)


def verify_pair(pair: tuple[str, str]) -> bool:
    """math-verify on one (predicted, truth) pair. Call through a pool: it has no timeout."""
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that its timeout is off
    predicted, truth = pair
    gold, pred = _parse(truth), _parse(predicted)
    if not gold or not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def warm_up() -> None:
    """Worker initializer: pay sympy's and ANTLR's import before the first timed item."""
    verify_pair(("1/2", "0.5"))


class MathGrader:
    """Batched `math_equal` over a warm worker pool (started lazily, shared via `get_grader`)."""

    def __init__(self, n_workers: int | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.n_workers = n_workers or max(1, min(4, os.cpu_count() or 1))
        self.timeout = timeout
        self._pool: WorkerPool | None = None
        self._lock = threading.Lock()
        self.timeouts = 0  # pairs that hit the timeout (graded False)
        self.errors = 0  # pairs whose grading raised or crashed a worker (graded False)

    @property
    def pool(self) -> WorkerPool:
        with self._lock:
            if self._pool is None:
                self._pool = WorkerPool(verify_pair, n_workers=self.n_workers, timeout=self.timeout,
                                        initializer=warm_up)
            return self._pool

    def start(self) -> "MathGrader":
        """Start the workers now so that their imports overlap with the caller's setup."""
        _ = self.pool
        return self

    def equal_batch(self, pairs: Sequence[tuple[str | None, str]]) -> list[bool]:
        """`[math_equal(p, t) for p, t in pairs]`, fast path in-process, the rest in parallel."""
        out: list[bool | None] = []
        for predicted, truth in pairs:
            if truth is None:
                raise ValueError("ground truth is None: every example needs an answer")
            out.append(False if predicted is None or not str(predicted).strip()
                       else _fast_equal(str(predicted), str(truth)))
        todo = [i for i, v in enumerate(out) if v is None]
        if todo:
            results = self.pool.map([(str(pairs[i][0]), str(pairs[i][1])) for i in todo])
            for i, (status, value) in zip(todo, results):
                out[i] = status == OK and bool(value)
                self.timeouts += status == "timeout"
                self.errors += status == "error"
        return out  # type: ignore[return-value]

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None


_GRADER: MathGrader | None = None
_GRADER_LOCK = threading.Lock()


def get_grader() -> MathGrader:
    """The process-wide grader; its pool stays warm between calls and closes at exit."""
    global _GRADER
    with _GRADER_LOCK:
        if _GRADER is None:
            _GRADER = MathGrader()
            atexit.register(_GRADER.close)
        return _GRADER


def math_equal(predicted: str | None, truth: str) -> bool:
    """Whether `predicted` equals `truth` mathematically; False for None/empty predictions."""
    return get_grader().equal_batch([(predicted, truth)])[0]


def math_equal_batch(pairs: Sequence[tuple[str | None, str]]) -> list[bool]:
    return get_grader().equal_batch(pairs)
