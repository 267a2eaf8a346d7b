"""pass@k, pass^k, Wilson and the paired exact test against hand-computed values."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from pytest_palette.results import stats


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (5, 2, 1, 0.4),          # 2 of 5
    (5, 2, 2, 0.7),          # 1 − C(3,2)/C(5,2) = 1 − 3/10
    (5, 2, 3, 0.9),          # 1 − C(3,3)/C(5,3) = 1 − 1/10
    (5, 2, 4, 1.0),          # only 3 failures: any 4 runs hold a pass
    (3, 3, 3, 1.0),          # all pass
    (3, 0, 1, 0.0),          # all fail
    (3, 0, 3, 0.0),
    (10, 1, 5, 0.5),         # 1 − C(9,5)/C(10,5) = 1 − 126/252
])
def test_pass_at_k_matches_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert stats.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_none_when_k_exceeds_n() -> None:
    assert stats.pass_at_k(2, 1, 3) is None
    assert stats.pass_hat_k(2, 2, 3) is None


def test_pass_at_k_agrees_with_exact_binomials_and_never_overflows() -> None:
    for n in range(1, 25):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert stats.pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12)
    # C(2000, 500) is ~1e486: a float binomial would be inf/inf = NaN (gemba's bug).
    big = stats.pass_at_k(2000, 3, 500)
    assert big is not None and math.isfinite(big)
    assert big == pytest.approx(float(exact_pass_at_k(2000, 3, 500)), rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k", "expected"), [
    (3, 2, 2, 1 / 3),        # C(2,2)/C(3,2)
    (5, 3, 2, 0.3),          # C(3,2)/C(5,2) = 3/10
    (5, 3, 3, 0.1),          # C(3,3)/C(5,3)
    (5, 2, 3, 0.0),          # fewer passes than k
    (4, 4, 4, 1.0),          # all pass
    (4, 0, 1, 0.0),          # all fail
    (7, 3, 1, 3 / 7),        # pass^1 is the pass rate
])
def test_pass_hat_k_matches_hand_computed_values(n: int, c: int, k: int, expected: float) -> None:
    assert stats.pass_hat_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_hat_k_is_never_above_pass_at_k() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert stats.pass_hat_k(n, c, k) <= stats.pass_at_k(n, c, k) + 1e-15  # type: ignore[operator]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        stats.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        stats.pass_hat_k(3, 1, 0)


def test_wilson_interval_matches_hand_computed_values() -> None:
    assert stats.wilson(0, 0) is None
    # p = .5: half-width 1.96·√(.025 + 1.96²/400)/(1 + 1.96²/10) = .263410
    low, high = stats.wilson(5, 10)  # type: ignore[misc]
    assert (low, high) == (pytest.approx(0.236590, abs=1e-6), pytest.approx(0.763410, abs=1e-6))
    low, high = stats.wilson(0, 10)  # type: ignore[misc]
    assert low == 0.0 and high == pytest.approx(1.96**2 / (10 + 1.96**2))  # z²/(n+z²) at c = 0
    low, high = stats.wilson(10, 10)  # type: ignore[misc]
    assert high == 1.0 and low == pytest.approx(10 / (10 + 1.96**2))


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 6, 0.03125),         # 2 · 1/64
    (1, 5, 0.21875),         # 2 · 7/64
    (0, 5, 0.0625),          # 2 · 1/32
    (2, 10, 2 * 79 / 4096),  # 2 · (1 + 12 + 66)/4096
    (3, 3, 1.0),             # capped at 1
    (0, 0, 1.0),             # nothing discordant
])
def test_sign_test_p_values_of_small_tables(b: int, c: int, p: float) -> None:
    assert stats.sign_test_p(b, c) == pytest.approx(p, abs=1e-15)
    assert stats.sign_test_p(c, b) == stats.sign_test_p(b, c)


def test_paired_test_compares_rates_per_case_drops_ties_and_unjudged_cases() -> None:
    a = [(3, 3), (3, 3), (2, 3), (4, 6), (0, 0), (1, 1), (1, 1), (1, 1), (1, 1)]
    b = [(1, 3), (0, 3), (2, 3), (2, 3), (3, 3), (0, 1), (0, 1), (0, 1), (0, 1)]
    test = stats.paired_test(a, b)
    # 4/6 against 2/3 is a tie, the (0, 0) case only errored: neither counts.
    assert (test.b, test.c, test.ties) == (6, 0, 2)
    assert test.p == pytest.approx(0.03125)
    assert test.significant and test.verdict == "more than noise at p < 0.05"


def test_paired_test_verdict_when_not_significant() -> None:
    test = stats.paired_test([(1, 1)] * 5 + [(0, 1)], [(0, 1)] * 5 + [(1, 1)])
    assert (test.b, test.c) == (5, 1)
    assert test.p == pytest.approx(0.21875)
    assert test.verdict == "not distinguishable from noise"
    assert stats.paired_test([(1, 1)], [(1, 1)]).verdict.startswith("not distinguishable from noise (no case")


def test_medians() -> None:
    assert stats.median([]) is None
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 2, 3]) == 2.5
    assert stats.weighted_median({}) is None
    assert stats.weighted_median({5: 3, 1: 1}) == 5      # 1 5 5 5
    assert stats.weighted_median({1: 2, 9: 2}) == 5      # 1 1 9 9


def test_k_columns_cover_every_k_for_few_repeats_and_a_ladder_for_many() -> None:
    assert stats.ks_for(0) == []
    assert stats.ks_for(1) == [1]
    assert stats.ks_for(3) == [1, 2, 3]
    assert stats.ks_for(1000) == [1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert stats.ks_for(12)[-1] == 12


# -- scores ----------------------------------------------------------------------------------------------------


def _brute_signed_rank_p(differences: list[float]) -> float:
    """The exact two-sided p by listing every sign assignment (mean ranks for equal magnitudes)."""
    import itertools

    nonzero = [d for d in differences if d != 0]
    magnitudes = sorted(abs(d) for d in nonzero)
    rank = {m: (magnitudes.index(m) + 1 + len(magnitudes) - magnitudes[::-1].index(m)) / 2 for m in magnitudes}
    ranks = [rank[abs(d)] for d in nonzero]
    observed = sum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0)
    total = sum(ranks)
    low = min(observed, total - observed)
    sums = [sum(r for r, s in zip(ranks, signs, strict=True) if s)
            for signs in itertools.product((0, 1), repeat=len(ranks))]
    return min(1.0, 2 * sum(1 for s in sums if s <= low + 1e-9) / len(sums))


@pytest.mark.parametrize("differences", [
    [1, 2, 3, 4, 5], [0.5, -0.2, 0.3, 0.3, 0.1, 0.0], [-0.25, -0.25, 0.5, -0.75, 0.25, -0.5, 1.0, -0.1],
    [0.1] * 6, [0.2, -0.2], [0.0, 0.0], [0.3, -0.1, -0.1, 0.2, 0.2, 0.2, -0.4, 0.5, 0.6, -0.05, 0.7],
])
def test_the_signed_rank_test_is_exact_for_small_n_ties_and_zeros_included(differences: list[float]) -> None:
    test = stats.signed_rank_test(differences)
    assert test.exact and test.p == pytest.approx(_brute_signed_rank_p(differences))
    assert (test.better, test.worse, test.ties) == (sum(d > 0 for d in differences), sum(d < 0 for d in differences),
                                                    sum(d == 0 for d in differences))


def test_the_signed_rank_test_hand_values_and_its_normal_approximation_for_large_n() -> None:
    five = stats.signed_rank_test([1, 2, 3, 4, 5])
    assert (five.w_plus, five.p, five.significant) == (15.0, 2 / 32, False)  # the smallest p five cases can give
    six = stats.signed_rank_test([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert six.p == 2 / 64 and six.significant and "more than noise" in six.verdict
    assert stats.signed_rank_test([0.0, 1e-12]).verdict.endswith("(no case scores differently)")
    # Above the exact bound the normal approximation takes over, and agrees with the exact p near the bound.
    shifted = [((i * 37) % 100) / 100 - 0.35 for i in range(stats.EXACT_UP_TO + 20)]
    large = stats.signed_rank_test(shifted)
    near = stats.signed_rank_test(shifted[: stats.EXACT_UP_TO])
    assert not large.exact and near.exact and 0 < large.p < 1
    assert abs(math.log10(near.p) - math.log10(stats.signed_rank_test(shifted[: stats.EXACT_UP_TO + 1]).p)) < 0.5


@pytest.mark.parametrize(("scores", "k", "expected"), [
    ([0.2, 0.5, 0.9], 1, (0.2 + 0.5 + 0.9) / 3), ([0.2, 0.5, 0.9], 2, (0.5 + 0.9 + 0.9) / 3),
    ([0.2, 0.5, 0.9], 3, 0.9), ([0.2, 0.5, 0.9], 4, None), ([0.7], 1, 0.7),
])
def test_score_at_k_is_the_expected_best_of_k_runs(scores: list[float], k: int, expected: float | None) -> None:
    found = stats.score_at_k(scores, k)
    assert found == (None if expected is None else pytest.approx(expected))


def test_score_at_k_of_pass_and_fail_is_pass_at_k_and_never_overflows() -> None:
    for n, c in ((5, 2), (10, 7), (40, 1)):
        for k in range(1, n + 1):
            assert stats.score_at_k([1.0] * c + [0.0] * (n - c), k) == pytest.approx(stats.pass_at_k(n, c, k))
    assert stats.score_at_k([i / 2000 for i in range(2000)], 1000) == pytest.approx(1999 / 2000, abs=1e-3)


def test_a_mean_score_has_its_spread_and_a_t_interval_kept_inside_0_and_1() -> None:
    assert stats.mean_score([]) is None
    one = stats.mean_score([0.4])
    assert one is not None and (one.mean, one.n, one.interval) == (0.4, 1, None)
    three = stats.mean_score([0.5, 0.7, 0.9])
    assert three is not None and three.sd == pytest.approx(0.2)
    assert three.interval == (pytest.approx(0.7 - 4.3027 * 0.2 / math.sqrt(3)), 1.0)  # t(2) = 4.3027, clipped at 1
    many = stats.mean_score([0.6, 0.8] * 50)
    assert many is not None and many.interval is not None
    half = (many.interval[1] - many.interval[0]) / 2
    assert half == pytest.approx(stats.t975(99) * many.sd / 10) and stats.t975(99) == pytest.approx(1.9842, abs=1e-4)
