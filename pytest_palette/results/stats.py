"""Honest statistics for repeated runs: pass@k, pass^k, Wilson intervals and a paired exact test.

Every function is pure. Callers pass judged runs only: errors and skips are infrastructure, not
verdicts, so they are counted and shown elsewhere but never enter n.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

SIGNIFICANCE = 0.05


def _check(n: int, c: int, k: int) -> None:
    if n < 0 or not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n}, c={c}, k={k}")


@functools.lru_cache(maxsize=65536)  # the report asks for the same (n, c, k) per cell, per host and in JSON
def pass_at_k(n: int, c: int, k: int) -> float | None:
    """Unbiased pass@k (HumanEval): the chance that at least one of k runs drawn from n passes.

    1 − C(n−c, k)/C(n, k), as a product of at most k ratios each ≤ 1, so it never overflows however big n
    is. None when k > n: n runs cannot say what k would.
    """
    _check(n, c, k)
    if k > n:
        return None
    if n - c < k:  # fewer than k failures: every draw of k holds a pass
        return 1.0
    # C(n−c, k)/C(n, k) = Π_{i<k} (n−c−i)/(n−i)
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@functools.lru_cache(maxsize=65536)
def pass_hat_k(n: int, c: int, k: int) -> float | None:
    """pass^k (tau-bench): the chance that k runs drawn without replacement from n all pass.

    C(c, k)/C(n, k) = Π_{i<k} (c−i)/(n−i). None when k > n.
    """
    _check(n, c, k)
    if k > n:
        return None
    if c < k:
        return 0.0
    return math.prod((c - i) / (n - i) for i in range(k))


def wilson(c: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval for c passes in n runs (95% by default); None for n = 0.

    Unlike p ± z·se it stays inside [0, 1] and does not collapse to a point at 0/n or n/n.
    """
    if n == 0:
        return None
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    p = c / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test_p(b: int, c: int) -> float:
    """Two-sided exact binomial (McNemar exact / sign test): min(1, 2·P[X ≤ min(b, c)]), X ~ Bin(b+c, ½).

    Computed exactly in integers; b + c = 0 (no discordant case) gives 1.
    """
    if b < 0 or c < 0:
        raise ValueError(f"need b, c >= 0, got b={b}, c={c}")
    total = b + c
    tail = sum(math.comb(total, i) for i in range(min(b, c) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2**total)))


@dataclass(frozen=True)
class PairedTest:
    """A against B over the cases both ran: b cases where A's pass rate is higher, c where B's is."""

    b: int
    c: int
    ties: int
    p: float

    @property
    def significant(self) -> bool:
        return self.p < SIGNIFICANCE

    @property
    def verdict(self) -> str:
        if self.b + self.c == 0:
            return "not distinguishable from noise (no case separates them)"
        return "more than noise at p < 0.05" if self.significant else "not distinguishable from noise"


def paired_test(rates_a: Sequence[tuple[int, int]], rates_b: Sequence[tuple[int, int]]) -> PairedTest:
    """The paired exact test over cases, given (passes, n) per case for A and B in the same case order.

    Cases where either side has n = 0 (only errors or skips) say nothing and are left out.
    """
    if len(rates_a) != len(rates_b):
        raise ValueError("the two sides must list the same cases")
    b = c = ties = 0
    for (pa, na), (pb, nb) in zip(rates_a, rates_b, strict=False):
        if not na or not nb:
            continue
        # Cross-multiplied so 2/3 against 4/6 is an exact tie, not a float accident.
        difference = pa * nb - pb * na
        if difference > 0:
            b += 1
        elif difference < 0:
            c += 1
        else:
            ties += 1
    return PairedTest(b, c, ties, sign_test_p(b, c))


def median(values: Iterable[float]) -> float | None:
    """The median (mean of the middle two for an even count); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def weighted_median(counts: dict[int, int]) -> float | None:
    """The median of a histogram {value: how many times}; None when it is empty."""
    total = sum(counts.values())
    if not total:
        return None
    ordered = sorted(counts.items())

    def nth(position: int) -> int:  # 0-based position in the sorted multiset
        seen = 0
        for value, count in ordered:
            seen += count
            if position < seen:
                return value
        raise AssertionError("position past the end")

    if total % 2:
        return float(nth(total // 2))
    return (nth(total // 2 - 1) + nth(total // 2)) / 2


def ks_for(max_n: int) -> list[int]:
    """The k columns for runs of up to max_n repeats: every k up to 10, then a 1-2-5 ladder and max_n.

    Every k for small n (3 repeats → 1, 2, 3); a thousand repeats would otherwise mean a thousand columns.
    """
    if max_n < 1:
        return []
    if max_n <= 10:
        return list(range(1, max_n + 1))
    ladder = [1, 2, 3, 5] + [m * 10**e for e in range(1, len(str(max_n))) for m in (1, 2, 5)]
    return sorted({k for k in ladder if k < max_n} | {max_n})


# -- scores: a run's score in [0, 1] (results/checks.py) ----------------------------------------------------------

#: The t distribution's 97.5% quantile by degrees of freedom, for a 95% interval of a mean from few runs; beyond
#: the table, its Cornish-Fisher expansion in 1/df (within 1e-4 of the exact value there).
_T975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281, 2.2010, 2.1788, 2.1604,
         2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555,
         2.0518, 2.0484, 2.0452, 2.0423)
_Z975 = 1.959964


def t975(df: int) -> float:
    """The t distribution's 97.5% quantile for `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"need df >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class MeanScore:
    """The mean of n scores, their standard deviation, and a 95% t interval kept inside [0, 1] (None below 2)."""

    mean: float
    n: int
    sd: float
    interval: tuple[float, float] | None


def mean_score(values: Iterable[float]) -> MeanScore | None:
    """The mean of `values` (scores in [0, 1]) with its spread and 95% interval; None for no values."""
    found = [float(v) for v in values]
    n = len(found)
    if not n:
        return None
    mean = math.fsum(found) / n
    if n == 1:
        return MeanScore(mean, 1, 0.0, None)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in found) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return MeanScore(mean, n, sd, (max(0.0, mean - half), min(1.0, mean + half)))


def score_at_k(scores: Sequence[float], k: int) -> float | None:
    """score@k: the expected best score of k runs drawn without replacement from these n — the continuous
    pass@k (with scores of 0 and 1 it is pass@k). Σ s_(i)·C(i−1, k−1)/C(n, k) over the scores in ascending
    order, the weights exact. None when k > n."""
    n = len(scores)
    if k < 1:
        raise ValueError(f"need k >= 1, got {k}")
    if k > n:
        return None
    whole = math.comb(n, k)
    ordered = sorted(scores)
    return math.fsum(score * float(Fraction(math.comb(i, k - 1), whole)) for i, score in enumerate(ordered)
                     if i >= k - 1)


#: Up to this many non-zero differences, the signed-rank test's p is exact (its null distribution counted in
#: full); above, the normal approximation with the ties' correction.
EXACT_UP_TO = 60


@dataclass(frozen=True)
class SignedRankTest:
    """Wilcoxon's signed-rank test over paired scores (A − B per case): `better` cases where A scored higher,
    `worse` where lower, `ties` equal (left out, as Wilcoxon does), W+ the rank sum of A's side."""

    better: int
    worse: int
    ties: int
    w_plus: float
    p: float
    exact: bool

    @property
    def significant(self) -> bool:
        return self.p < SIGNIFICANCE

    @property
    def verdict(self) -> str:
        if self.better + self.worse == 0:
            return "not distinguishable from noise (no case scores differently)"
        return "more than noise at p < 0.05" if self.significant else "not distinguishable from noise"


def signed_rank_test(differences: Iterable[float]) -> SignedRankTest:
    """The two-sided Wilcoxon signed-rank test of paired differences: zero differences dropped, equal magnitudes
    given their mean rank; p exact (every sign assignment counted, over ranks doubled to integers) for up to
    EXACT_UP_TO differences, else the normal approximation with the tie and continuity corrections."""
    found = [round(float(d), 9) for d in differences]  # a float accident is not a difference
    nonzero = [d for d in found if d != 0]
    ties = len(found) - len(nonzero)
    n = len(nonzero)
    if not n:
        return SignedRankTest(0, 0, ties, 0.0, 1.0, True)
    ordered = sorted(range(n), key=lambda i: abs(nonzero[i]))
    doubled = [0] * n  # twice each rank: a mean rank of equal magnitudes is a half at most
    position = 0
    groups: list[int] = []
    while position < n:
        end = position
        while end + 1 < n and abs(nonzero[ordered[end + 1]]) == abs(nonzero[ordered[position]]):
            end += 1
        for j in range(position, end + 1):
            doubled[ordered[j]] = position + end + 2  # 2 × the mean of ranks position+1 … end+1
        groups.append(end - position + 1)
        position = end + 1
    w2 = sum(r for r, d in zip(doubled, nonzero, strict=True) if d > 0)
    total2 = sum(doubled)
    better = sum(1 for d in nonzero if d > 0)
    if n <= EXACT_UP_TO:
        counts = [0] * (total2 + 1)  # ways to reach each doubled rank sum of the positive side
        counts[0] = 1
        for r in doubled:
            for s in range(total2, r - 1, -1):
                counts[s] += counts[s - r]
        low = min(w2, total2 - w2)  # the distribution is symmetric about total2 / 2
        tail = sum(counts[: low + 1])
        p = float(min(Fraction(1), Fraction(2 * tail, 2**n)))
        return SignedRankTest(better, n - better, ties, w2 / 2, p, True)
    mean = total2 / 4
    variance = n * (n + 1) * (2 * n + 1) / 24 - sum(t**3 - t for t in groups) / 48
    z = (abs(w2 / 2 - mean) - 0.5) / math.sqrt(variance) if variance > 0 else 0.0
    p = min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2)))
    return SignedRankTest(better, n - better, ties, w2 / 2, p, False)
