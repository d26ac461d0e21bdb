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
    histogram_density,
    marginal_candidates,
    nearest_psd,
)
from dpsmooth_spark.core.maxent import fit_within_noise
from dpsmooth_spark.core.sampling import snap_to_lattice
from dpsmooth_spark.mechanisms.smooth_pca.params import SmoothPCAParams
from dpsmooth_spark.mechanisms.smooth_pca.summary import VARIANCE_FLOOR, NoisySummary

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
    histogram alone is denoised by :func:`core.candidates.histogram_density`: a clear histogram
    is kept as measured (less the noise in its empty cells), one the noise cannot tell from
    uniform stays uniform. Otherwise, the maximum-entropy density within ``marginal_tolerance`` per answer
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
            probs[i] = histogram_density(summary.histograms[i] / n, std[-1], cells)
            continue
        fit, _ = fit_within_noise(np.vstack(w), np.concatenate(b), np.concatenate(std),
                                  slack=params.fit_slack, tolerance=params.marginal_tolerance or 0.0)
        probs[i] = fit.weights
    return GridMarginals(probs)


def private_correlation(summary: NoisySummary) -> np.ndarray | None:
    """The correlation the candidates should cover: from the pair terms when the basis has all
    of them; where it has some (anchor and selected pairs), the correlation of most entropy that
    holds them, each shrunk by its noise (:meth:`NoisySummary.completed_correlation`); else from
    PSI's directions and eigenvalues; ``None`` when none of these was measured. Without it,
    candidates drawn as independent columns could not hold the anchor pairs' relations (WDBC at
    epsilon 10: the label's correlations came back 2-3 noise deviations short, and pairs
    measured at 12 deviations kept 0.4 of a correlation of 1.0)."""
    if summary.basis.d < 2:
        return None
    if summary.has_all_pairs():
        _, cov = summary.moments()
    else:
        completed = summary.completed_correlation()
        if completed is not None:
            return completed
        if summary.pca is None:
            return None
        _, cov = summary.moments()
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
