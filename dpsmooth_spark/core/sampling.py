"""Drawing synthetic records from the fitted distribution (post-processing, no privacy cost)."""

from __future__ import annotations

import numpy as np


def sample_records(
    candidates: np.ndarray,
    weights: np.ndarray,
    rows: int,
    jitter: np.ndarray | float,
    rng: np.random.Generator,
) -> np.ndarray:
    """``rows`` records from the mixture ``sum_j u_j N(c_j, diag(jitter**2))`` clipped to the cube.

    The L1 fit puts mass on at most R + 1 candidates; drawing each record in its candidate's
    neighbourhood (a Gaussian of per-column standard deviation ``jitter``) turns a few dozen
    repeated rows into a table of distinct rows, while a smooth query ``f`` moves by only
    ``O(jitter**2 * ||f''||)``.

    Args:
        candidates: ``(C, d)`` support points in [-1, 1]^d.
        weights: ``(C,)`` probabilities.
        rows: number of records m.
        jitter: per-column standard deviation (scalar or ``(d,)``); 0 samples the support only.
        rng: randomness for sampling (public; seeded only in test mode).
    """
    if rows < 0:
        raise ValueError("rows must be >= 0")
    counts = rng.multinomial(rows, weights / weights.sum())
    picked = np.repeat(candidates, counts, axis=0)
    rng.shuffle(picked, axis=0)
    jitter = np.broadcast_to(np.asarray(jitter, dtype=np.float64), (candidates.shape[1],))
    if np.any(jitter > 0):
        picked = picked + rng.standard_normal(picked.shape) * jitter
    return np.clip(picked, -1.0, 1.0)
