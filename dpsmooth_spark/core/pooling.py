"""Pooling independent noisy estimates of one quantity: their inverse-variance mean."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def inverse_variance_mean(
    estimates: Sequence[np.ndarray | float], stds: Sequence[np.ndarray | float]
) -> tuple[np.ndarray, np.ndarray]:
    """The inverse-variance mean of independent unbiased ``estimates`` (noise std ``stds``,
    each one number or one per value) and its noise std: the unbiased linear pool with the least
    variance. Post-processing of noisy values."""
    total: np.ndarray | float = 0.0
    precision: np.ndarray | float = 0.0
    for estimate, std in zip(estimates, stds, strict=True):
        weight = 1.0 / np.square(std)
        total = total + np.asarray(estimate, dtype=np.float64) * weight
        precision = precision + weight
    return np.asarray(total / precision), np.asarray(1.0 / np.sqrt(precision))
