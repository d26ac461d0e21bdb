"""Pair terms on spread factors: ``p_i(x_i) p_j(x_j)`` with ``p_i`` a bounded Chebyshev polynomial.

A pair term ``T_1(x_i) T_1(x_j)`` carries a correlation ``rho`` as a signal of about
``rho sd_i sd_j`` (scaled units) against noise that depends only on the budget. On a column whose
data fill a small part of its public range (heavy tails: scaled standard deviation near 0.1)
that signal is a hundredth of ``rho``, below the noise of most releases. A factor
``p_i = sum_r c_ir T_r`` with ``|p_i| <= 1`` on [-1, 1] has the same sensitivity as ``T_1``
(every record's product stays in [-1, 1]) but may be steeper where the data are. Among the
non-decreasing such polynomials of degree ``g``, :func:`spread_factors` picks the one whose
covariance with ``x`` under the private marginal is largest (a small linear program): the
first-order (linear) part of the signal a correlation leaves in ``E[p_i(x_i) p_j(x_j)]``. A
monotone factor keeps the order of the values, so its pair answer moves with the correlation
(the copula map below is monotone) instead of with wiggles placed where the data are sparse;
the degree sets how sharp a step it may take (on a narrow column, from -0.9 to 0.9 over about
three quarters of the range at ``g = 3``, a third at ``g = 16``). ``T_1`` is kept where that
does not gain :data:`MIN_GAIN`, and on a column that fills its range where the noise already
resolves ``T_1``'s signal (:data:`RESOLVED`): a factor measures a rank-like relation, not the
linear one, and buys nothing where the linear one is clear.

The exact sums come from the data pass's Gram matrix (``sum T_r(x_i) T_s(x_j)`` for every
``r, s`` up to its degree, which ``SynthesizerParams.factor_degree`` raises to the factors'), so
the factors need no second pass. The data pass rounds each ``T_r`` to the fixed-point grid
(``2^-16``); the factors are scaled so that the rounded polynomial stays within [-1, 1] too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev
from scipy.optimize import linprog

from dpsmooth_spark.core.chebyshev import chebyshev_table, design_column
from dpsmooth_spark.core.kernel import SCALE, ExactSums

MIN_GAIN = 1.05
"""A column keeps ``T_1`` unless the spread factor's covariance with ``x`` under the private
marginal is at least this many times ``var(x)`` (``T_1``'s)."""

RESOLVED = 0.1
"""A column that fills its range (:data:`WIDE`) keeps ``T_1`` where one pair answer's noise is
at most this times its variance: its linear correlations are resolved already
(docs/decisions/0002)."""

WIDE = 1.0 / 9.0
"""Variance (scaled units) from which a column counts as filling its range for
:data:`RESOLVED`; a narrower column keeps its factor however small the noise."""

LP_GRID = 513
"""Points of [-1, 1] at which the linear program bounds the polynomial; the exact maximum is
then taken at its critical points and the result scaled to it (2001 points found the same
factors' gains to 3 digits on 30 columns, in 0.35 s instead of 0.11 s)."""


def polynomial_sup(coefficients: np.ndarray) -> float:
    """``max |sum_r c_r T_r(x)|`` over ``x`` in [-1, 1], exactly: at the ends and the real
    critical points inside."""
    c = np.asarray(coefficients, dtype=np.float64)
    points = [-1.0, 1.0]
    if c.size > 2:
        roots = chebyshev.Chebyshev(c).deriv().roots()
        real = roots[np.abs(np.imag(roots)) < 1e-9].real
        points.extend(real[np.abs(real) <= 1.0])
    return float(np.max(np.abs(chebyshev.chebval(np.array(points), c))))


def bounded(coefficients: np.ndarray) -> np.ndarray:
    """``coefficients`` scaled so that the polynomial, with every ``T_r`` (r >= 1) moved by up
    to the data pass's rounding ``0.5 / SCALE``, stays within [-1, 1]."""
    c = np.asarray(coefficients, dtype=np.float64)
    rounding = 0.5 / SCALE * float(np.abs(c[1:]).sum())
    return c / (polynomial_sup(c) + rounding)


def linear_factors(d: int, degree: int = 1) -> np.ndarray:
    """Coefficients ``(d, degree + 1)`` of the factor ``p_i = T_1`` for every column: the pairs
    ``T_1(x_i) T_1(x_j)`` as :class:`FactorPairs`."""
    out = np.zeros((d, degree + 1))
    out[:, 1] = 1.0
    return out


def spread_factors(
    probabilities: np.ndarray,
    degree: int,
    min_gain: float = MIN_GAIN,
    noise: float | None = None,
    levels: np.ndarray | None = None,
) -> np.ndarray:
    """Per column, the coefficients ``c_i0 .. c_ig`` of ``p_i = sum_r c_ir T_r`` (``(d, g + 1)``).

    ``probabilities`` ``(d, B)``: each column's private marginal on ``B`` equal cells of
    [-1, 1]. ``p_i`` maximises ``cov(x, p_i(x))`` under that marginal subject to
    ``|p_i| <= 1`` and ``p_i' >= 0`` on [-1, 1]; ``T_1`` where that gains less than
    ``min_gain`` over ``var(x)``, or where ``var(x) >= WIDE`` and ``noise`` (the normalised
    standard deviation of one pair answer; ``None``: no such test) is at most
    ``RESOLVED * var(x)``. On a column whose lattice (``levels``: points per column, 0
    continuous; public, from the config) has ``L <= g + 1`` points, ``p_i`` is of degree
    ``L - 1``, which is any function of the column, need not increase (the order of a
    categorical's levels is arbitrary, and a monotone step would merge them) and is kept
    whatever the noise; a boolean keeps ``T_1``. Post-processing of the marginal only.
    """
    probabilities = np.asarray(probabilities, dtype=np.float64)
    d, cells = probabilities.shape
    centres = -1.0 + (2.0 * np.arange(cells) + 1.0) / cells
    at_centres = chebyshev_table(centres, degree)  # (B, g + 1)
    points = np.linspace(-1.0, 1.0, LP_GRID)
    grid = chebyshev_table(points, degree)
    slopes = chebyshev.chebval(points, chebyshev.chebder(np.eye(degree + 1))).T  # T_r' on the grid
    out = linear_factors(d, degree)
    if degree < 2:
        return out
    lattice = np.zeros(d, dtype=np.int64) if levels is None else np.asarray(levels, dtype=np.int64)
    for i, p in enumerate(probabilities):
        deviation = centres - p @ centres
        variance = float(p @ deviation**2)
        few = 0 < lattice[i] <= degree + 1  # a lattice column of few levels: any function of it
        if variance <= 0.0 or (
            not few and noise is not None and variance >= WIDE and noise <= RESOLVED * variance
        ):
            continue
        g = int(lattice[i]) - 1 if few else degree
        if g < 2:
            continue
        gain = (p * deviation) @ at_centres[:, : g + 1]  # cov(x, T_r(x)) for each r
        limits = [grid[:, : g + 1], -grid[:, : g + 1]] + (
            [] if few else [-slopes]
        )  # |p| <= 1, p' >= 0
        rhs = np.concatenate([np.ones(2 * LP_GRID), np.zeros(LP_GRID * (len(limits) - 2))])
        found = linprog(
            -gain, A_ub=np.vstack(limits), b_ub=rhs, bounds=[(None, None)] * (g + 1), method="highs"
        )
        if found.status != 0:
            continue
        c = bounded(found.x)
        if float(gain @ c) >= min_gain * variance:
            out[i] = 0.0
            out[i, : g + 1] = c
    return out


@dataclass(frozen=True)
class FactorPairs:
    """The functions ``p_i(x_i) p_j(x_j)`` for ``(i, j)`` in ``pairs``.

    Attributes:
        coefficients: ``(d, g + 1)`` Chebyshev coefficients of each column's factor
            (``|p_i| <= 1`` on [-1, 1]).
        pairs: ``(R, 2)`` column pairs.
    """

    coefficients: np.ndarray
    pairs: np.ndarray

    @property
    def d(self) -> int:
        return int(self.coefficients.shape[0])

    @property
    def degree(self) -> int:
        return int(self.coefficients.shape[1]) - 1

    @property
    def size(self) -> int:
        return int(self.pairs.shape[0])

    @property
    def spread(self) -> np.ndarray:
        """``(d,)``: which columns' factor is not ``T_1``."""
        t1 = np.zeros(self.degree + 1)
        t1[1] = 1.0
        return ~np.all(self.coefficients == t1, axis=1)

    def factors(self, points: np.ndarray) -> np.ndarray:
        """``p_i`` at every point: ``(C, d)``."""
        table = chebyshev_table(np.asarray(points, dtype=np.float64), self.degree)  # (C, d, g + 1)
        return np.einsum("cdr,dr->cd", table, self.coefficients)

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """``(R, C)`` function values at ``points`` (``(C, d)``)."""
        values = self.factors(points)
        return (values[:, self.pairs[:, 0]] * values[:, self.pairs[:, 1]]).T

    def sums(self, exact: ExactSums) -> np.ndarray:
        """Exact ``sum_x p_i(x_i) p_j(x_j)`` from the data pass's Gram matrix (real units)."""
        if exact.d != self.d or exact.degree < self.degree:
            raise ValueError("factor pairs do not fit the computed design columns")
        gram = exact.real_gram()
        out = np.empty(self.size)
        for k, (i, j) in enumerate(self.pairs):
            rows = [0] + [design_column(int(i), r, exact.degree) for r in range(1, self.degree + 1)]
            cols = [0] + [design_column(int(j), r, exact.degree) for r in range(1, self.degree + 1)]
            out[k] = self.coefficients[i] @ gram[np.ix_(rows, cols)] @ self.coefficients[j]
        return out


COPULA_NODES = 24
"""Gauss-Hermite nodes per axis of :func:`copula_correlations`' bivariate normal expectation."""
SCORE_LIMIT, SCORE_POINTS = 8.0, 1601
"""The grid of normal scores on which each factor is tabulated (linear in between)."""
BISECTION_STEPS = 18
"""Halvings of [-0.99, 0.99]: ``rho`` to within 8e-6."""


def copula_correlations(
    factors: FactorPairs, probabilities: np.ndarray, answers: np.ndarray
) -> np.ndarray:
    """Per pair, the correlation ``rho`` of a Gaussian copula with the private marginals under
    which ``E[p_i(x_i) p_j(x_j)]`` equals the pair's (normalised, noisy) answer (``rho`` in
    [-0.99, 0.99]; the nearest end where the answer lies beyond what any ``rho`` gives).

    ``probabilities`` ``(d, B)``: the marginals on equal cells of [-1, 1], inverted piecewise
    linearly. The expectation is a Gauss-Hermite sum over the two normal scores, with each
    factor tabulated on a grid of scores; it is monotone in ``rho`` when both factors are
    monotone where the data are, and ``rho`` is found by bisection, all pairs at once.
    Post-processing only: the copula the candidates are drawn from."""
    return _invert(
        _copula_expectation(factors, probabilities), np.asarray(answers, dtype=np.float64)
    )


def cell_quantile(probabilities: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse CDF at ``u`` (in [0, 1]) of the density piecewise constant on
    ``len(probabilities)`` equal cells of [-1, 1]: linear within each cell that holds mass,
    jumping over the empty ones (a 0/1 column's middle cells, a histogram's cells beyond the
    data's spread)."""
    p = np.asarray(probabilities, dtype=np.float64)
    p = p / p.sum()
    k = p.size
    ends = np.cumsum(p)
    cell = np.minimum(np.searchsorted(ends, u, side="left"), k - 1)
    mass = p[cell]
    within = np.divide(u - (ends[cell] - mass), mass, out=np.full(np.shape(u), 0.5), where=mass > 0)
    return -1.0 + 2.0 * (cell + np.clip(within, 0.0, 1.0)) / k


def copula_answers(factors: FactorPairs, probabilities: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Per pair, ``E[p_i(x_i) p_j(x_j)]`` under the Gaussian copula of correlation ``rho`` (one
    per pair, in [-0.99, 0.99]) with the private marginals: the answer that a model with that
    correlation expects (the inverse of :func:`copula_correlations`)."""
    rho = np.clip(np.asarray(rho, dtype=np.float64), -0.99, 0.99)
    return _copula_expectation(factors, probabilities)(rho)


def copula_correlations_and_noise(
    factors: FactorPairs, probabilities: np.ndarray, answers: np.ndarray, std: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`copula_correlations`, and per pair the standard deviation that answer noise ``std``
    gives it near independence: half the change of ``rho`` between the answers the independent
    copula expects plus and minus ``std`` (0.99 where that noise spans every correlation).
    Measured at independence, not at the noisy answer, where a draw beyond every copula's answer
    sits on the flat end of the map and would look precise. One expectation table serves both."""
    expectation = _copula_expectation(factors, probabilities)
    rho = _invert(expectation, np.asarray(answers, dtype=np.float64))
    return rho, copula_noise(factors, probabilities, std, expectation)


def copula_noise(
    factors: FactorPairs,
    probabilities: np.ndarray,
    std: float,
    expectation: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Per pair, the standard deviation that answer noise ``std`` gives the correlation of the
    Gaussian copula read off its answer, near independence (as
    :func:`copula_correlations_and_noise` takes it; 0.99 where that noise spans every
    correlation). Needs no answer: from the private marginals and a public noise scale, it says
    before a pair is measured whether its measurement could tell a relation from none."""
    expectation = (
        _copula_expectation(factors, probabilities) if expectation is None else expectation
    )
    centre = expectation(np.zeros(factors.size))
    return 0.5 * (_invert(expectation, centre + std) - _invert(expectation, centre - std))


def _copula_expectation(
    factors: FactorPairs, probabilities: np.ndarray
) -> Callable[[np.ndarray], np.ndarray]:
    """``rho -> E[p_i(x_i) p_j(x_j)]`` per pair under the Gaussian copula with these marginals."""
    from scipy.special import ndtr, roots_hermitenorm

    nodes, weights = roots_hermitenorm(COPULA_NODES)
    weights = weights / weights.sum()
    grid = np.linspace(-SCORE_LIMIT, SCORE_LIMIT, SCORE_POINTS)
    step = grid[1] - grid[0]
    table = np.empty((factors.d, grid.size))
    for i, p in enumerate(probabilities):
        table[i] = chebyshev.chebval(cell_quantile(p, ndtr(grid)), factors.coefficients[i])
    left = np.array([np.interp(nodes, grid, table[i]) for i in range(factors.d)])[
        factors.pairs[:, 0]
    ]
    right = table[factors.pairs[:, 1]]  # (P, grid)
    rows = np.arange(factors.size)[:, None, None]

    def expectation(rho: np.ndarray) -> np.ndarray:
        scores = (
            rho[:, None, None] * nodes[None, :, None]
            + np.sqrt(1.0 - rho * rho)[:, None, None] * nodes
        )
        position = np.clip((scores - grid[0]) / step, 0.0, grid.size - 1.000001)
        index = position.astype(np.int64)
        frac = position - index
        values = right[rows, index] * (1.0 - frac) + right[rows, index + 1] * frac
        return np.einsum("pa,pab,a,b->p", left, values, weights, weights)

    return expectation


def _invert(expectation: Callable[[np.ndarray], np.ndarray], target: np.ndarray) -> np.ndarray:
    """Per pair, the ``rho`` in [-0.99, 0.99] whose expectation is ``target`` (bisection; the
    nearest end where none is)."""
    size = target.size
    low, high = np.full(size, -0.99), np.full(size, 0.99)
    e_low, e_high = expectation(low), expectation(high)
    sign = np.where(e_high >= e_low, 1.0, -1.0)
    below, above = sign * (target - e_low) <= 0, sign * (target - e_high) >= 0
    for _ in range(BISECTION_STEPS):
        middle = 0.5 * (low + high)
        short = sign * (expectation(middle) - target) < 0
        low, high = np.where(short, middle, low), np.where(short, high, middle)
    return np.where(below, -0.99, np.where(above, 0.99, 0.5 * (low + high)))
