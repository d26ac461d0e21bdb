"""Joint denoising of measured pair covariances: a low-rank model plus thresholding.

Each measured pair's covariance carries its own noise (``sigma``); read one by one, a table of
``d`` columns with ten factors has about as much noise in its ``d^2 / 2`` pairs as signal. The
signal of such a table is low rank: ``C = L L^T + diag``, with ``L`` a few columns wide. The
noise of a symmetric matrix of independent entries has no eigenvalue above about
``2 sigma_e sqrt(d)``, so keeping the eigencomponents above that edge keeps the factors and drops
most of the noise; a pair whose denoised covariance is within :data:`ENTRY_DEVIATIONS` of its
remaining noise from zero is set to zero (what the budget cannot tell from independence stays
independent). Where only some pairs are measured, the unmeasured ones are filled from the model
as it converges (principal-axis factoring with imputation at a fixed rank), so the same routine
completes the matrix; a measured pair the model misses by far more than its own noise
(:data:`MISS_DEVIATIONS`) keeps its measured value. Post-processing of DP answers only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.marginals import correlation_from_covariance, nearest_psd

ENTRY_DEVIATIONS = 3.0
"""A denoised pair within this many of its noise std of zero is set to zero."""

MISS_DEVIATIONS = {"gaussian": 4.0, "laplace": 6.84}
"""A measured pair that the model misses by more than this many of its own noise std keeps its
measured value (a relation outside the factors; a pair without one does so at a rate of 6e-5
under either noise: Laplace noise's tails are heavier, ``P(|L| > t std) = exp(-t sqrt 2)``)."""

EDGE_FACTOR = 2.0
"""The noise's spectral edge is ``EDGE_FACTOR sigma_e sqrt(d)`` (Wigner's semicircle for a
symmetric ``d x d`` matrix of independent entries of std ``sigma_e``)."""

CLEAR_LEVEL = 0.8
"""Eigencomponents above this share of the noise's edge may be kept: with a few strong
components present the noise's own largest eigenvalue lies near 0.75 of the edge (measured on
the 100-column factor table's clipped pairs)."""

CLEAR_GAP = 0.12
"""The model keeps the components down to the last eigenvalue that stands at least this share of
the edge above the next one (:func:`clear_rank`)."""


def clear_rank(relative: np.ndarray) -> int:
    """The rank of the model from the eigenvalues, largest first, over the noise's edge: the last
    ``k`` with ``lambda_k >= CLEAR_LEVEL`` and ``lambda_k - lambda_{k+1} >= CLEAR_GAP`` (0 where
    none is). Where several components are about equally strong (ten blocks of one size),
    cutting inside their cluster keeps a mixture of them, which puts relations between blocks
    that have none (at epsilon 0.6 on the 100-column factor table: 2 of 10 blocks kept, a
    correlation error 1.27 times the independent columns'); a cut at a clear gap keeps all or
    none of them."""
    relative = np.asarray(relative, dtype=np.float64)
    gaps = relative[:-1] - relative[1:]
    clear = np.flatnonzero((relative[:-1] >= CLEAR_LEVEL) & (gaps >= CLEAR_GAP))
    return int(clear[-1] + 1) if clear.size else 0


ITERATIONS = 100
"""Most principal-axis rounds (each re-estimates the diagonal and the unmeasured pairs)."""

TOLERANCE = 1e-9
"""The rounds stop when no entry of the model moves by more than this times the largest
variance."""


@dataclass(frozen=True)
class LowRankCovariance:
    """A covariance matrix denoised as a low-rank model of its measured pairs.

    Attributes:
        matrix: ``(d, d)`` covariance with the given variances on its diagonal, positive
            definite.
        rank: eigencomponents kept above the noise edge (0: no pair clears the noise).
        noise_ratio: ``(d, d)`` the noise std left in each pair over a measured pair's: 1 where
            a measured value is kept, else ``sqrt(2 rank / m)`` (at least ``1 / sqrt(m)``, at
            most 1), ``m`` the mean number of measured pairs per column.
        kept: ``(d, d)`` the measured pairs that keep their measured value (the model misses
            them by more than ``MISS_DEVIATIONS`` of their noise).
        misfit: what the model misses of the measured pairs: their residuals' mean square
            beyond the noise the model leaves in them, in units of a pair's noise variance
            (about 0 where the pairs are low rank plus noise).
    """

    matrix: np.ndarray
    rank: int
    noise_ratio: np.ndarray
    kept: np.ndarray
    misfit: float = 0.0

    def describe(self) -> dict[str, float | int]:
        """What the manifest and the benchmarks state of the model."""
        return {
            "rank": self.rank,
            "misfit": self.misfit,
            "pairs_kept_as_measured": int(np.triu(self.kept, 1).sum()),
        }


def low_rank_covariance(
    variances: np.ndarray,
    pairs: np.ndarray,
    values: np.ndarray,
    std: np.ndarray,
    floor: float = 1e-3,
    noise_kind: str = "gaussian",
) -> LowRankCovariance:
    """The covariance of ``d`` columns (``variances``, ``(d,)``, the diagonal) that a low-rank
    model of the measured ``pairs`` (``(P, 2)``, their noisy covariances ``values`` and noise
    ``std``, ``(P,)`` each) implies.

    ``sigma`` is the median noise of a measured pair, ``p`` the share of pairs measured and
    ``m = p (d - 1)`` the measured pairs per column. The rank is the number of eigenvalues of
    the measured pairs over ``p`` (zero elsewhere: unbiased for every pair) above the edge of
    their noise, whose entries vary by ``sigma_e^2 = (sigma^2 + (1 - p) s^2) / p`` (``s^2``:
    the measured pairs' mean square less ``sigma^2``, what leaving a pair out adds). Rounds of
    principal-axis factoring at that rank then fill the unmeasured pairs and the diagonal
    (communalities, at most the variances) from the model. A projection on ``k`` directions
    keeps about ``2 k / m`` of an entry's noise variance; entries within ``ENTRY_DEVIATIONS``
    of that noise from zero are set to zero, then the diagonal to ``variances`` and every
    eigenvalue of the implied correlation to at least ``floor``. ``noise_kind``: the pairs'
    noise distribution, ``gaussian`` or ``laplace`` (:data:`MISS_DEVIATIONS`)."""
    variances = np.maximum(np.asarray(variances, dtype=np.float64), 1e-12)
    d = variances.size
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if not pairs.size:
        none = np.zeros((d, d), dtype=bool)
        return LowRankCovariance(np.diag(variances), 0, np.ones((d, d)), none)
    sd = np.sqrt(variances)
    i, j = pairs[:, 0], pairs[:, 1]
    values = np.clip(np.asarray(values, dtype=np.float64), -sd[i] * sd[j], sd[i] * sd[j])
    noise = np.abs(np.asarray(std, dtype=np.float64))
    measured = np.zeros((d, d), dtype=bool)
    measured[i, j] = measured[j, i] = True
    observed = np.zeros((d, d))
    observed[i, j] = observed[j, i] = values
    sigma = float(np.median(noise))
    per_column = max(float(measured.sum(axis=1).mean()), 1.0)
    share = per_column / max(d - 1, 1)
    signal = max(float(np.mean(values**2)) - sigma**2, 0.0)
    spread = np.sqrt((sigma**2 + (1.0 - share) * signal) / share)
    eigenvalues = np.sort(np.linalg.eigvalsh(observed / share))[::-1]
    rank = clear_rank(eigenvalues / (EDGE_FACTOR * spread * np.sqrt(d)))
    model = np.zeros((d, d))
    for _ in range(ITERATIONS if rank else 0):
        current = np.where(measured, observed, model)
        np.fill_diagonal(current, np.clip(np.diag(model), 0.0, variances))
        eigenvalues, vectors = np.linalg.eigh(current)
        top = np.argsort(eigenvalues)[::-1][:rank]
        top = top[eigenvalues[top] > 0]
        updated = (vectors[:, top] * eigenvalues[top]) @ vectors[:, top].T
        moved = float(np.abs(updated - model).max())
        model = updated
        if moved <= TOLERANCE * variances.max():
            break
    ratio = float(np.clip(np.sqrt(max(2 * rank, 1) / per_column), 0.0, 1.0))
    residual = values - model[i, j]
    missed = np.zeros((d, d), dtype=bool)
    missed[i, j] = np.abs(residual) > MISS_DEVIATIONS[noise_kind] * noise
    missed |= missed.T
    # the residual's mean square beyond the noise the model leaves in it, in noise variances
    expected = sigma**2 * (1.0 - ratio**2)
    misfit = max(float(np.mean(residual[~missed[i, j]] ** 2)) - expected, 0.0) / max(
        sigma**2, 1e-300
    )
    matrix = np.where(np.abs(model) < ENTRY_DEVIATIONS * sigma * ratio, 0.0, model)
    matrix = np.where(missed, observed, matrix)
    np.fill_diagonal(matrix, variances)
    correlation = correlation_from_covariance(nearest_psd(matrix / np.outer(sd, sd), floor))
    return LowRankCovariance(
        correlation * np.outer(sd, sd), rank, np.where(missed, 1.0, ratio), missed, misfit
    )
