"""Baselines for the evaluation harness (scaled units, [-1, 1]^d)."""

from __future__ import annotations

import numpy as np

from dpsmooth_spark.privacy.noise import NoiseSource


def uniform_rows(d: int, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform rows in the cube: what a release with no information scores."""
    return rng.uniform(-1.0, 1.0, size=(rows, d))


def independent_laplace(
    real: np.ndarray,
    epsilon: float,
    rows: int,
    rng: np.random.Generator,
    noise: NoiseSource,
    bins: int = 32,
) -> np.ndarray:
    """Per-column Laplace histograms (epsilon / d each; a record adds 1 to one bin per column, so
    each histogram has L1 sensitivity 1), columns sampled independently, uniform within bins."""
    d = real.shape[1]
    edges = np.linspace(-1.0, 1.0, bins + 1)
    out = np.empty((rows, d))
    for i in range(d):
        counts, _ = np.histogram(real[:, i], bins=edges)
        noisy = np.maximum(noise.laplace(counts.astype(float), d / epsilon), 0.0)
        probs = noisy / noisy.sum() if noisy.sum() > 0 else np.full(bins, 1.0 / bins)
        which = rng.choice(bins, size=rows, p=probs)
        out[:, i] = rng.uniform(edges[which], edges[which + 1])
    return out


def real_half(real: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random half of the real rows: the non-private floor (sampling error only)."""
    keep = rng.permutation(real.shape[0])[: max(1, real.shape[0] // 2)]
    return real[keep]
