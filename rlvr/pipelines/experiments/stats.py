"""The tests that decide the lecture-17 claims: Student t tests and the verdicts read from them.

Pure functions of plain floats (no numpy, no scipy: the report must not need either). A claim's
verdict is never a comparison of means: each is one of three readings of a stated test,

    holds         the test rejects its null at level alpha in the claimed direction
    contradicted  it rejects in the opposite direction (the data say the claim is wrong)
    undecided     it does not reject: the data cannot tell at this number of seeds

The tests:
  welch_test(a, b)      two independent samples, unequal variances (Welch 1947): mean(a) - mean(b),
                        se = sqrt(s_a^2/n_a + s_b^2/n_b), Welch-Satterthwaite degrees of freedom
  one_sample_test(x)    mean(x) - mu, se = s/sqrt(n), n - 1 degrees of freedom
  paired_test(a, b)     the one-sample test of the differences a_i - b_i (the same seed in both)

and the readings of a test's estimate d (always "a - b" or "x - mu"):
  direction(test, +1)   d != 0 at two-sided level alpha; holds if d has the claimed sign
  above(test, bound)    d > bound, one-sided at alpha: the (1 - 2 alpha) interval lies above bound
                        (holds), below it (contradicted), or straddles it (undecided)
  within(test, margin)  equivalence |d| < margin by two one-sided tests at alpha (TOST, Schuirmann 1987)

The Student t distribution function is the regularized incomplete beta function
P(|T| > t) = I_{df / (df + t^2)}(df / 2, 1 / 2) = 1 - I_{t^2 / (df + t^2)}(1 / 2, df / 2) (Abramowitz &
Stegun 26.7.1), evaluated with its continued fraction (Numerical Recipes, sec. 6.4).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

HOLDS, CONTRADICTED, UNDECIDED = "holds", "contradicted", "undecided"
ALPHA = 0.05  # every verdict's level unless a claim states another


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz), Numerical Recipes 6.4."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"incomplete_beta needs 0 <= x <= 1, got {x}")
    if x in (0.0, 1.0):
        return x
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):  # the fraction converges fast here; else use the symmetry
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df > 0 degrees of freedom."""
    if df <= 0:
        raise ValueError(f"t_cdf needs df > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    y = t * t / (df + t * t)
    if y < 0.5:  # near 0, the central mass P(|T| <= |t|) = I_y(1/2, df/2) keeps its digits
        return 0.5 + math.copysign(0.5 * incomplete_beta(0.5, df / 2.0, y), t)
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_quantile(q: float, df: float) -> float:
    """The t with P(T <= t) = q (0 < q < 1), by bisection on `t_cdf` to 1e-12."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"t_quantile needs 0 < q < 1, got {q}")
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > q:
        lo *= 2.0
    while t_cdf(hi, df) < q:
        hi *= 2.0
    while hi - lo > 1e-12 * max(1.0, abs(lo)):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < q else (lo, mid)
    return 0.5 * (lo + hi)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1; 0 for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_sd needs at least one value")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return mean, sd


@dataclass(frozen=True)
class TTest:
    name: str  # "Welch t", "paired t", "one-sample t"
    estimate: float  # mean(a) - mean(b), or mean(x) - mu
    se: float  # its standard error
    df: float  # degrees of freedom
    n: str  # sample sizes: "16 + 16" (Welch) or "16"

    @property
    def t(self) -> float:
        if self.se == 0:  # every value equal: no spread to test against
            return 0.0 if self.estimate == 0 else math.copysign(math.inf, self.estimate)
        return self.estimate / self.se

    @property
    def p(self) -> float:
        """Two-sided p-value."""
        return 2.0 * (1.0 - t_cdf(abs(self.t), self.df))

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Two-sided `level` confidence interval of the estimate."""
        half = t_quantile(0.5 + level / 2.0, self.df) * self.se
        return self.estimate - half, self.estimate + half

    def describe(self, digits: int = 3) -> str:
        p = "p < 0.001" if self.p < 0.001 else f"p = {self.p:.3f}"
        return (f"{self.name}: {self.estimate:+.{digits}f} ± {self.se:.{digits}f} (s.e.), t = {self.t:.2f}, "
                f"df = {self.df:.1f}, {p}, n = {self.n}")


def _sample(values: Sequence[float], who: str) -> tuple[float, float, int]:
    if len(values) < 2 or any(math.isnan(v) for v in values):
        raise ValueError(f"{who} needs at least 2 values and no NaN, got {list(values)}")
    mean, sd = mean_sd(values)
    return mean, sd, len(values)


def welch_test(a: Sequence[float], b: Sequence[float]) -> TTest:
    """Welch's two-sample t test of mean(a) - mean(b)."""
    (ma, sa, na), (mb, sb, nb) = _sample(a, "welch_test"), _sample(b, "welch_test")
    va, vb = sa * sa / na, sb * sb / nb
    df = float(na + nb - 2)  # no spread in either sample: the t is 0 or infinite whatever df is
    if va + vb > 0:  # Welch-Satterthwaite, written in shares of va + vb so tiny variances do not underflow
        wa, wb = va / (va + vb), vb / (va + vb)
        df = 1.0 / (wa * wa / (na - 1) + wb * wb / (nb - 1))
    return TTest("Welch t", ma - mb, math.sqrt(va + vb), df, f"{na} + {nb}")


def one_sample_test(x: Sequence[float], mu: float = 0.0, name: str = "one-sample t") -> TTest:
    """Student's one-sample t test of mean(x) - mu."""
    m, s, n = _sample(x, name)
    return TTest(name, m - mu, s / math.sqrt(n), float(n - 1), str(n))


def paired_test(a: Sequence[float], b: Sequence[float]) -> TTest:
    """The one-sample t test of a_i - b_i: the same seed (or model) measured twice."""
    if len(a) != len(b):
        raise ValueError(f"paired_test needs samples of one length, got {len(a)} and {len(b)}")
    return one_sample_test([x - y for x, y in zip(a, b)], name="paired t")


def direction(test: TTest, sign: int = 1, alpha: float = ALPHA) -> str:
    """holds: the estimate differs from 0 at two-sided level alpha with the claimed sign (+1 or -1)."""
    if test.p >= alpha:
        return UNDECIDED
    return HOLDS if test.estimate * sign > 0 else CONTRADICTED


def above(test: TTest, bound: float, alpha: float = ALPHA) -> str:
    """holds: estimate > bound at one-sided level alpha; contradicted: estimate < bound at that level."""
    lo, hi = test.interval(1.0 - 2.0 * alpha)
    return HOLDS if lo > bound else CONTRADICTED if hi < bound else UNDECIDED


def within(test: TTest, margin: float, alpha: float = ALPHA) -> str:
    """Equivalence (TOST): holds when the (1 - 2 alpha) interval lies inside (-margin, margin),
    contradicted when it lies wholly outside (|estimate| > margin at one-sided level alpha)."""
    lo, hi = test.interval(1.0 - 2.0 * alpha)
    if -margin < lo and hi < margin:
        return HOLDS
    return CONTRADICTED if lo > margin or hi < -margin else UNDECIDED


def all_of(*verdicts: str) -> str:
    """A claim made of parts: contradicted if any part is, holds if every part does, else undecided."""
    if CONTRADICTED in verdicts:
        return CONTRADICTED
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else UNDECIDED


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of two equally long series; NaN when either is constant."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"pearson needs two series of one length >= 2, got {len(x)} and {len(y)}")
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def fisher_z(r: float) -> float:
    """atanh(r): correlations averaged and tested on this scale are close to normal (Fisher 1915)."""
    return math.atanh(max(-1.0 + 1e-12, min(1.0 - 1e-12, r)))
