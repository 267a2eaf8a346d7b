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
