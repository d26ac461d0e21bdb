"""Candidate support points for the reduced LP (Section 5.2 of Wang et al. 2016).

Every generator is a function of DP quantities only (a private centre, private axes and
spreads) plus public randomness, so the candidates are post-processing.
"""

from __future__ import annotations

import numpy as np


def ellipsoid_candidates(
    centre: np.ndarray,
    axes: np.ndarray,
    variances: np.ndarray,
    residual_variance: float,
    count: int,
    spread: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Points uniform in the private PCA ellipsoid, plus Gaussian spread off its span.

    A point uniform in the unit k-ball has per-axis variance ``1/(k+2)``; the radii are
    ``spread * sqrt((k+2) * lambda_s)`` so that the candidates' per-axis variance is
    ``spread**2 * lambda_s`` and the LP, which can only mix candidates, can reach the data's spread.

    Args:
        centre: ``(d,)`` private centre in [-1, 1]^d.
        axes: ``(d, k)`` orthonormal private eigenvectors.
        variances: ``(k,)`` private eigenvalues (clipped at 0 by the caller).
        residual_variance: private per-axis variance of the ``d - k`` remaining directions.
        count: number of candidates C.
        spread: multiplier of the standard deviations.
        rng: public randomness.

    Returns:
        ``(count, d)`` points clipped to [-1, 1]^d.
    """
    d, k = axes.shape
    direction = rng.standard_normal((count, k))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    radius = rng.random((count, 1)) ** (1.0 / k)
    radii = spread * np.sqrt((k + 2) * np.maximum(variances, 0.0))
    in_span = (direction * radius * radii) @ axes.T
    off = rng.standard_normal((count, d))
    off -= (off @ axes) @ axes.T
    off *= spread * np.sqrt(max(residual_variance, 0.0))
    return np.clip(centre + in_span + off, -1.0, 1.0)


def gaussian_candidates(
    centre: np.ndarray,
    covariance: np.ndarray,
    count: int,
    spread: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Points from ``N(centre, spread**2 * covariance)`` clipped to [-1, 1]^d.

    ``covariance`` must be symmetric positive semi-definite (see :func:`nearest_psd`).
    """
    d = centre.shape[0]
    vals, vecs = np.linalg.eigh(covariance)
    root = vecs * np.sqrt(np.maximum(vals, 0.0))
    z = rng.standard_normal((count, d)) @ root.T
    return np.clip(centre + spread * z, -1.0, 1.0)


def nearest_psd(matrix: np.ndarray, floor: float) -> np.ndarray:
    """Symmetrise and raise every eigenvalue to at least ``floor``."""
    sym = 0.5 * (matrix + matrix.T)
    vals, vecs = np.linalg.eigh(sym)
    return (vecs * np.maximum(vals, floor)) @ vecs.T
