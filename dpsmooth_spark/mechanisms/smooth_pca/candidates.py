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
from dpsmooth_spark.core.maxent import fit_within_noise
from dpsmooth_spark.mechanisms.smooth_pca.measure import VARIANCE_FLOOR, NoisySummary
from dpsmooth_spark.mechanisms.smooth_pca.params import SmoothPCAParams

CORRELATION_FLOOR = 1e-3
"""Smallest eigenvalue of the proposal correlation (keeps the copula density finite)."""


@dataclass(frozen=True)
class Candidates:
    """The support of the fit.

    Attributes:
        points: ``(C, d)`` candidates in [-1, 1]^d.
        log_prior: ``(C,)`` log weights of the independent-columns prior over them.
        marginals: the private one-way marginals they were drawn from.
        correlation: the private correlation of the copula share, if any.
    """

    points: np.ndarray
    log_prior: np.ndarray
    marginals: GridMarginals
    correlation: np.ndarray | None


def marginal_priors(summary: NoisySummary, params: SmoothPCAParams) -> GridMarginals:
    """Per column, the maximum-entropy density on a grid of cells that fits the column's noisy
    histogram (and ``T_r(x_i)`` answers, if measured) as ``marginal_tolerance`` asks: by default
    as closely as the grid allows, so the marginals are unbiased."""
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
        if rows.size == 0 and params.marginal_tolerance == 0 and summary.histograms is not None:
            probs[i] = _histogram_density(summary.histograms[i], cells)
            continue
        fit, _ = fit_within_noise(np.vstack(w), np.concatenate(b), np.concatenate(std),
                                  slack=params.fit_slack, solver=params.lp_solver,
                                  tolerance=params.marginal_tolerance)
        probs[i] = fit.weights
    return GridMarginals(probs)


def _histogram_density(counts: np.ndarray, cells: int) -> np.ndarray:
    """The closest distribution to a noisy histogram (negative counts as 0), spread evenly over
    the grid cells of each bin: the maximum-entropy density that matches it."""
    mass = np.maximum(counts, 0.0)
    mass = mass / mass.sum() if mass.sum() > 0 else np.full(counts.size, 1.0 / counts.size)
    return np.repeat(mass / (cells // counts.size), cells // counts.size)


def private_correlation(summary: NoisySummary) -> np.ndarray | None:
    """The correlation the candidates should cover: from the pair terms when the basis has all
    of them, else from PSI's directions and eigenvalues; ``None`` when neither was measured."""
    if summary.basis.d < 2:
        return None
    _, cov = summary.moments()
    if not summary.has_all_pairs:
        if summary.pca is None:
            return None
        n = max(summary.noisy_count, 1.0)
        values = np.clip(summary.pca.values / n, 0.0, None)
        low_rank = (summary.pca.vectors * values) @ summary.pca.vectors.T
        residual = np.maximum(np.diag(cov) - np.diag(low_rank), VARIANCE_FLOOR)
        cov = low_rank + np.diag(residual)
    corr = nearest_psd(correlation_from_covariance(cov), CORRELATION_FLOOR)
    return correlation_from_covariance(corr)


def make_candidates(summary: NoisySummary, params: SmoothPCAParams,
                    rng: np.random.Generator) -> Candidates:
    """``params.candidates`` points from the private marginals (and copula), with their prior."""
    marginals = marginal_priors(summary, params)
    correlation = private_correlation(summary)
    points, log_prior = marginal_candidates(marginals, params.candidates, rng, correlation,
                                            params.copula_share)
    return Candidates(points, log_prior, marginals, correlation)
