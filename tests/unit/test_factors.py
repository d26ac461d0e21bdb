"""Spread factors (core/factors.py): bounded like T_1, steeper where the data are, and summed
exactly from the data pass's Gram matrix."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.polynomial import chebyshev

from dpsmooth_spark.core.factors import (
    RESOLVED,
    WIDE,
    FactorPairs,
    bounded,
    copula_correlations,
    copula_noise,
    polynomial_sup,
    spread_factors,
)
from dpsmooth_spark.core.function_values import FunctionValues
from dpsmooth_spark.core.kernel import SCALE, PassSpec, partial_sums


def cell_probabilities(values: np.ndarray, cells: int = 64) -> np.ndarray:
    return np.histogram(np.clip(values, -1, 1), bins=cells, range=(-1, 1))[0] / values.size


def marginals(rng: np.random.Generator) -> np.ndarray:
    """Concentrated, skewed, off-centre, uniform and two-level columns."""
    n = 20_000
    return np.array(
        [
            cell_probabilities(rng.standard_t(3, n) * 0.05),
            cell_probabilities(-0.95 + rng.lognormal(-2.5, 1.0, n)),
            cell_probabilities(rng.normal(-0.5, 0.1, n)),
            cell_probabilities(rng.uniform(-1, 1, n)),
            cell_probabilities(rng.choice([-1.0, 1.0], n)),
        ]
    )


@pytest.mark.parametrize("degree", [2, 3, 5, 16])
def test_factors_stay_within_one_as_the_data_pass_rounds_them(rng, degree):
    """Checked on a dense grid, independently of the exact maximum the code computes: every
    factor evaluated on the data pass's rounded ``T_r`` (``rint(T_r * 2^16) / 2^16``, what the
    Gram matrix sums) is within [-1, 1], and so is every factor other than ``T_1`` with each
    ``T_r`` moved by the rounding's full half-step in the worst direction (the sensitivity of a
    pair term relies on it)."""
    coefficients = spread_factors(marginals(rng), degree)
    x = np.linspace(-1.0, 1.0, 200_001)
    table = np.stack(
        [chebyshev.chebval(x, np.eye(degree + 1)[r]) for r in range(degree + 1)], axis=1
    )
    rounded = np.rint(table * SCALE) / SCALE
    rounded[:, 0] = 1.0
    for c in coefficients:
        assert np.abs(rounded @ c).max() <= 1.0
        if not np.array_equal(c, np.eye(degree + 1)[1]):
            worst = np.abs(table @ c) + 0.5 / SCALE * np.abs(c[1:]).sum()
            assert worst.max() <= 1.0 + 1e-12


@pytest.mark.parametrize(("degree", "narrow", "uniform"), [(3, 1.3, 1.3), (16, 2.5, 1.6)])
def test_factors_spread_narrow_columns_and_keep_t1_on_spread_ones(rng, degree, narrow, uniform):
    """The factor's covariance with x under the marginal is var(x) for T_1. On the narrow
    columns it is at least ``narrow`` times that (measured 1.43-1.91 at degree 3, 2.99-4.97 at
    16, seeds 0-2), on a uniform column less than ``uniform`` (measured 1.20 and 1.46: a factor
    steeper in the middle, flat at the ends); a 0/1 column on its two ends keeps T_1 exactly,
    where no bounded polynomial does better."""
    probs = marginals(rng)
    coefficients = spread_factors(probs, degree)
    centres = -1.0 + (2.0 * np.arange(64) + 1.0) / 64
    gains = []
    for p, c in zip(probs, coefficients, strict=False):
        deviation = centres - p @ centres
        gains.append(p @ (deviation * chebyshev.chebval(centres, c)) / (p @ deviation**2))
    assert min(gains[:3]) >= narrow, gains
    assert 1.0 <= gains[3] < uniform, gains
    np.testing.assert_array_equal(coefficients[4], np.eye(degree + 1)[1])


@pytest.mark.parametrize("degree", [3, 8, 16])
def test_factors_never_decrease(rng, degree):
    """Checked on a grid 400 times finer than the linear program's: every factor is
    non-decreasing up to 1e-6 (the program holds the slope at 513 points; measured dips of at
    most 2e-8 between them), so it keeps the order of a column's values."""
    x = np.linspace(-1.0, 1.0, 200_001)
    for c in spread_factors(marginals(rng), degree):
        assert np.diff(chebyshev.chebval(x, c)).min() >= -1e-6


def test_a_wide_column_whose_linear_term_is_resolved_keeps_t1(rng):
    """Where the noise of one pair answer is at most ``RESOLVED`` times a column's variance
    under its marginal, a column that fills its range (the uniform one, variance 1/3 >= ``WIDE``)
    keeps T_1 and the narrow ones (variances 0.004-0.03, computed here from the cell
    probabilities) keep their factors; with more noise (or no noise given) the uniform column is
    spread too."""
    probs = marginals(rng)
    centres = -1.0 + (2.0 * np.arange(64) + 1.0) / 64
    variance = np.array([p @ (centres - p @ centres) ** 2 for p in probs])
    assert variance[:3].max() < WIDE <= variance[3]
    t1 = np.eye(4)[1]

    def spread(c):
        return ~np.all(c == t1, axis=1)

    assert spread(spread_factors(probs, 3))[:4].all()
    clear = spread_factors(probs, 3, noise=0.99 * RESOLVED * variance[3])
    np.testing.assert_array_equal(spread(clear), [True, True, True, False, False])
    noisy = spread_factors(probs, 3, noise=1.01 * RESOLVED * variance.max())
    np.testing.assert_array_equal(noisy, spread_factors(probs, 3))


def test_a_column_of_few_levels_gets_any_function_of_its_levels():
    """A categorical of 4 levels (shares 0.4 / 0.3 / 0.2 / 0.1 on its lattice -1, -1/3, 1/3, 1)
    gets a factor of degree 3 (any function of its levels) whatever the data pass's degree,
    and keeps it however small the noise; a 0/1 column keeps T_1; a continuous column with the
    same shares, which fills its range, keeps T_1 at that noise (the ``RESOLVED`` rule)."""
    probs = np.zeros((3, 64))
    for row in probs:
        row[[0, 21, 42, 63]] = [0.4, 0.3, 0.2, 0.1]
    found = spread_factors(probs, 16, noise=1e-9, levels=np.array([4, 2, 0]))
    assert np.all(found[0, 4:] == 0.0) and not np.array_equal(found[0], np.eye(17)[1])
    np.testing.assert_array_equal(found[1:], np.eye(17)[[1, 1]])


def test_bounded_scales_to_the_exact_maximum():
    """``-T_3`` peaks at 1; a shifted cubic whose maximum lies between grid points is scaled by
    its exact maximum (found at its critical point), checked on a fine grid."""
    assert polynomial_sup([0, 0, 0, -1]) == pytest.approx(1.0)
    c = np.array([0.3, 0.9, -0.4, 0.7])
    x = np.linspace(-1, 1, 1_000_001)
    assert polynomial_sup(c) == pytest.approx(np.abs(chebyshev.chebval(x, c)).max(), rel=1e-9)
    assert np.abs(chebyshev.chebval(x, bounded(c))).max() < 1.0


@pytest.mark.parametrize("degree", [3, 16])
def test_factor_pair_sums_from_the_gram_match_a_direct_sum(rng, degree):
    """``FactorPairs.sums`` reads the data pass's Gram matrix; summing ``p_i(x_i) p_j(x_j)`` over
    the records directly (numpy's Chebyshev series) gives the same, up to the fixed-point
    rounding (2^-17 per ``T_r`` value, times the coefficients' absolute sums of both factors)."""
    x = np.column_stack(
        [rng.standard_t(3, 5000) * 0.1, rng.normal(0.2, 0.3, 5000), rng.uniform(-1, 1, 5000)]
    )
    x = np.clip(x, -1, 1)
    sums = partial_sums([x], -np.ones(3), np.ones(3), PassSpec(degree))
    probs = np.array([cell_probabilities(x[:, i]) for i in range(3)])
    factors = FactorPairs(spread_factors(probs, degree), np.array([[0, 1], [0, 2], [1, 2]]))
    direct = [
        np.sum(
            chebyshev.chebval(x[:, i], factors.coefficients[i])
            * chebyshev.chebval(x[:, j], factors.coefficients[j])
        )
        for i, j in factors.pairs
    ]
    mass = np.abs(factors.coefficients).sum(axis=1)
    rounding = np.array([mass[i] + mass[j] for i, j in factors.pairs]) * 5000 * 2.0**-16
    assert np.all(np.abs(factors.sums(sums) - direct) <= rounding)


def test_structured_products_match_the_dense_values(rng):
    """The fit's operator for factor pairs gives the dense matrix's products."""
    points = rng.uniform(-1, 1, size=(300, 4))
    coefficients = np.array(
        [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0], [0.1, 0.8, -0.1, 0.2], [0.0, 0.5, 0.0, -0.5]]
    )
    factors = FactorPairs(coefficients, np.array([[0, 1], [1, 2], [0, 3], [2, 3]]))
    scale = rng.uniform(0.5, 2.0, 4)
    values = FunctionValues.from_functions([factors], [scale], points)
    dense = factors.evaluate(points) * scale[:, None]
    np.testing.assert_allclose(values.dense(), dense, rtol=1e-5, atol=1e-6)
    u = rng.dirichlet(np.ones(300))
    y = rng.normal(size=4)
    np.testing.assert_allclose(values @ u, dense @ u, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(values.T @ y, dense.T @ y, rtol=1e-4, atol=1e-5)


def test_copula_correlation_inverts_the_factor_pair_answer(rng):
    """Records from a Gaussian copula with known correlations and skewed / heavy-tailed
    marginals: from the exact answers ``E[p_i p_j]`` (no noise) and the table's own marginals,
    the copula correlation comes back within 0.03 of the one the records were drawn with
    (measured within 0.012). Seeded; over seeds, the sample correlation of 200,000 records
    varies by about 0.002: the measured 0.012 plus 5 sample standard deviations stays within
    0.03 (false failures below 1e-6)."""
    from scipy.special import ndtr

    n = 200_000
    truth = {(0, 1): 0.7, (0, 2): -0.4, (1, 2): 0.0}
    cov = np.eye(3)
    for (i, j), rho in truth.items():
        cov[i, j] = cov[j, i] = rho
    z = rng.multivariate_normal(np.zeros(3), cov, size=n)
    u = ndtr(z)
    x = np.column_stack(
        [
            np.clip(0.05 * np.tan(np.pi * (u[:, 0] - 0.5)), -1, 1),  # Cauchy-like
            -0.95 + 0.2 * np.exp(1.0 * z[:, 1]).clip(max=9.75),  # log-normal
            2.0 * u[:, 2] - 1.0,
        ]
    )  # uniform
    probs = np.array([cell_probabilities(x[:, i]) for i in range(3)])
    pairs = np.array(list(truth))
    factors = FactorPairs(spread_factors(probs, 3), pairs)
    answers = factors.evaluate(x).mean(axis=1)
    found = copula_correlations(factors, probs, answers)
    np.testing.assert_allclose(found, list(truth.values()), atol=0.03)


def test_copula_correlation_of_a_two_level_column_skips_its_empty_cells(rng):
    """A 0/1 column (rate 0.4, its mass in the first and last of 16 cells, none between) against
    a uniform one, from a Gaussian copula of correlation 0.6: from the exact answer the copula
    correlation comes back within 0.03 (measured 0.591-0.596 over seeds 0-5; its sample
    standard deviation at 200,000 records is about 0.003). The inverse CDF jumps over the empty
    cells; running linearly across them, the 1s spread from -0.875 to 1, the same answer read as
    a correlation of 0.92."""
    from scipy.special import ndtr

    n = 200_000
    z = rng.multivariate_normal(np.zeros(2), [[1.0, 0.6], [0.6, 1.0]], size=n)
    x = np.column_stack([np.where(ndtr(z[:, 0]) < 0.6, -1.0, 1.0), 2.0 * ndtr(z[:, 1]) - 1.0])
    probs = np.array([cell_probabilities(x[:, i], 16) for i in range(2)])
    assert probs[0, 1:-1].sum() == 0.0
    coefficients = np.zeros((2, 2))
    coefficients[:, 1] = 1.0  # T_1 on both
    factors = FactorPairs(coefficients, np.array([[0, 1]]))
    answers = factors.evaluate(x).mean(axis=1)
    np.testing.assert_allclose(copula_correlations(factors, probs, answers), [0.6], atol=0.03)


def test_copula_noise_is_what_answer_noise_does_to_the_correlation_near_independence():
    """Two uniform columns on ``T_1``: under the Gaussian copula of correlation ``rho`` their
    answer is ``E[x_i x_j] = (1/3) (6/pi) arcsin(rho / 2)``, of slope ``1/pi`` at independence,
    so an answer noise of 0.01 is a correlation noise of ``0.01 pi = 0.0314`` (within 3%: the
    quadrature and the grid; measured 0.031417). A column at -1 in 99% of its rows (uniform in
    the rest) varies in 1% of them: the same answer noise is a correlation noise at least 5x
    larger (measured 0.79, 25x), beyond what the pair selection measures (``RESOLVABLE_STD``)."""
    from dpsmooth_spark.mechanisms.synthesizer.measure import RESOLVABLE_STD

    cells = 256
    uniform = np.full(cells, 1.0 / cells)
    rare = 0.01 * uniform
    rare[0] += 0.99
    coefficients = np.zeros((3, 2))
    coefficients[:, 1] = 1.0  # T_1 on every column
    factors = FactorPairs(coefficients, np.array([[0, 1], [1, 2]]))
    spread, narrow = copula_noise(factors, np.array([uniform, uniform, rare]), 0.01)
    assert spread == pytest.approx(0.01 * np.pi, rel=0.03)
    assert narrow >= 5 * spread and narrow > RESOLVABLE_STD
