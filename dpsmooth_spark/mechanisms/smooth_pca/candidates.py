"""Stage 2, candidates: support points drawn from the private one-way marginals, shaped by the
private correlation, with the prior weights that make them a table of independent columns.

Post-processing of the noisy summary only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.basis import HistogramBasis, chebyshev_table
from dpsmooth_spark.core.candidates import (
    GridMarginals,
    correlation_from_covariance,
    marginal_candidates,
    nearest_psd,
)
from dpsmooth_spark.core.maxent import fit_within_noise, project_to_simplex
from dpsmooth_spark.core.sampling import snap_to_lattice
from dpsmooth_spark.mechanisms.smooth_pca.measure import VARIANCE_FLOOR, NoisySummary, all_pairs_of
from dpsmooth_spark.mechanisms.smooth_pca.params import SmoothPCAParams

CORRELATION_FLOOR = 1e-3
"""Smallest eigenvalue of the proposal correlation (keeps the copula density finite)."""


@dataclass(frozen=True)
class Candidates:
    """The support of the fit.

    Attributes:
        points: ``(C, d)`` candidates in [-1, 1]^d.
        log_prior: ``(C,)`` log weights of the independent-columns prior over them, as
            :func:`core.candidates.marginal_candidates` returns them (``-log q``, unnormalised;
            :meth:`start_weights` reads the copula's share from them).
        marginals: the private one-way marginals they were drawn from.
        copula_share: share of them drawn from the private-correlation copula (0: none).
    """

    points: np.ndarray
    log_prior: np.ndarray
    marginals: GridMarginals
    copula_share: float = 0.0

    def prior_weights(self) -> np.ndarray:
        """The prior as a distribution over the candidates (``(C,)``, summing to 1)."""
        prior = np.exp(self.log_prior - self.log_prior.max())
        return prior / prior.sum()

    def start_weights(self) -> np.ndarray:
        """Where the closest fit starts: the copula part of the proposal when there is one
        (weights ``c_R / q = (1 - (1 - s) p_ind / q) / s``: the private correlation the
        candidates were shaped by, which the pair answers ask for), else the prior. At 10^7 rows
        x 30 its chi-square on the pair terms after 1000 steps is 60x below the prior's."""
        if self.copula_share <= 0:
            return self.prior_weights()
        share = self.copula_share
        weights = np.maximum(1.0 - (1.0 - share) * np.exp(self.log_prior), 0.0) / share
        return weights / weights.sum()


def marginal_priors(summary: NoisySummary, params: SmoothPCAParams) -> GridMarginals:
    """Per column, a density on a grid of cells from the column's noisy histogram (and
    ``T_r(x_i)`` answers, if measured). With ``marginal_tolerance: null`` (the default) a
    histogram alone is denoised by :func:`_histogram_density`: a clear histogram is kept as
    measured (less the noise in its empty cells), one the noise cannot tell from uniform stays
    uniform. Otherwise, the maximum-entropy density within ``marginal_tolerance`` per answer
    (0: as close as the grid allows)."""
    cells = params.marginal_cells
    centres = GridMarginals.centres(cells)
    n = max(summary.noisy_count, 1.0)
    table = chebyshev_table(centres, summary.basis.degree)  # (cells, g + 1)
    nonzero = summary.basis.indices != 0
    single = nonzero.sum(axis=1) == 1
    probs = np.full((summary.basis.d, cells), 1.0 / cells)
    for i in range(summary.basis.d):
        rows = np.flatnonzero(single & nonzero[:, i])
        w = [table[:, summary.basis.indices[rows, i]].T]  # (K, cells)
        b = [summary.normalised[rows]]
        std = [summary.basis_noise_std[rows] / n]
        if summary.histograms is not None:
            bins = summary.histograms.shape[1]
            w.append(HistogramBasis(1, bins).evaluate(centres[:, None]))
            b.append(summary.histograms[i] / n)
            std.append(np.full(bins, summary.histogram_noise_std / n))
        if sum(len(v) for v in b) == 0:
            continue
        if rows.size == 0 and params.marginal_tolerance is None and summary.histograms is not None:
            probs[i] = _histogram_density(summary.histograms[i] / n, std[-1], cells)
            continue
        fit, _ = fit_within_noise(np.vstack(w), np.concatenate(b), np.concatenate(std),
                                  slack=params.fit_slack, tolerance=params.marginal_tolerance or 0.0)
        probs[i] = fit.weights
    return GridMarginals(probs)


NOISE_FLOOR_STDS = 1.0
"""A noisy histogram cell below this many noise standard deviations is taken as empty before the
projection onto the simplex: the cells beyond the data's spread hold noise only, and the
projection alone keeps their positive draws as mass far from the data."""

UNIFORM_MIX_SLOPE = 1.25
"""The thresholded histogram keeps a share ``min(1, 1.25 f)`` of its own shape (``f`` the
positive-part James-Stein factor), the rest uniform: a histogram the noise cannot tell from
uniform stays uniform, a clear one is kept whole."""


def _histogram_density(shares: np.ndarray, std: np.ndarray, cells: int) -> np.ndarray:
    """A noisy histogram (cell shares with noise ``std``) made a distribution, spread evenly over
    the grid cells of each bin.

    The cells below :data:`NOISE_FLOOR_STDS` noise standard deviations are set to 0, the rest
    projected onto the probability simplex (a common offset subtracted, negatives 0); the result
    is mixed with uniform by the positive-part James-Stein factor ``f = 1 - (k - 2) / chi2``
    (``chi2`` of uniform against the noisy cells), keeping ``min(1, 1.25 f)`` of it. Measured on
    the fidelity tables' columns (Wasserstein-1 of this marginal, 5 seeded noise draws per
    column, docs/mechanisms.md) against the James-Stein shrink followed by the projection:
    lower on 18 of the 21 table/epsilon pairs, 10-20% from epsilon 1 on (WDBC at 1: 0.160 ->
    0.127; the 5000-row correlated table at 1: 0.0150 -> 0.0125; iris at 0.1, where the noise
    swamps a 4-cell histogram, 0.242 -> 0.222), equal on wine at 0.1, higher on WDBC at 0.1
    (0.422 -> 0.435) and iris at 10 (0.0337 -> 0.0343)."""
    k = shares.size
    uniform = np.full(k, 1.0 / k)
    chi2 = float((((shares - uniform) / std) ** 2).sum())
    factor = max(0.0, 1.0 - (k - 2) / chi2) if chi2 > 0 and k > 2 else 1.0
    kept = np.where(shares > NOISE_FLOOR_STDS * std, shares, 0.0)
    shape = project_to_simplex(kept) if kept.sum() > 0 else uniform
    mass = uniform + min(1.0, UNIFORM_MIX_SLOPE * factor) * (shape - uniform)
    return np.repeat(mass / (cells // k), cells // k)


def private_correlation(summary: NoisySummary) -> np.ndarray | None:
    """The correlation the candidates should cover: from the pair terms when the basis has all
    of them, else from PSI's directions and eigenvalues; ``None`` when neither was measured."""
    if summary.basis.d < 2:
        return None
    _, cov = summary.moments()
    if not all_pairs_of(summary.basis):
        if summary.pca is None:
            return None
        n = max(summary.noisy_count, 1.0)
        values = np.clip(summary.pca.values / n, 0.0, None)
        low_rank = (summary.pca.vectors * values) @ summary.pca.vectors.T
        residual = np.maximum(np.diag(cov) - np.diag(low_rank), VARIANCE_FLOOR)
        cov = low_rank + np.diag(residual)
    corr = nearest_psd(correlation_from_covariance(cov), CORRELATION_FLOOR)
    return correlation_from_covariance(corr)


def make_candidates(summary: NoisySummary, params: SmoothPCAParams, rng: np.random.Generator,
                    lattice: np.ndarray | None = None) -> Candidates:
    """``params.candidates`` points from the private marginals (and copula), with their prior;
    columns with a ``lattice`` size ``L > 0`` are snapped to the nearest of their ``L`` points."""
    marginals = marginal_priors(summary, params)
    correlation = private_correlation(summary)
    points, log_prior = marginal_candidates(marginals, params.candidates, rng, correlation,
                                            params.copula_share)
    if lattice is not None:
        points = snap_to_lattice(points, np.asarray(lattice))
    share = params.copula_share if correlation is not None and summary.basis.d >= 2 else 0.0
    return Candidates(points, log_prior, marginals, share)
