"""Drawing synthetic records from the fitted distribution (post-processing, no privacy cost)."""

from __future__ import annotations

import numpy as np


def reflect_into_cube(x: np.ndarray) -> np.ndarray:
    """Fold values back into [-1, 1] by reflection at the bounds (``1.2 -> 0.8``).

    Unlike clipping, reflection puts no point mass on a bound: a continuous value lands exactly
    on ``-1`` or ``1`` with probability zero.
    """
    y = np.mod(np.asarray(x, dtype=np.float64) + 1.0, 4.0)
    return np.where(y > 2.0, 4.0 - y, y) - 1.0


def sample_records(
    candidates: np.ndarray,
    weights: np.ndarray,
    rows: int,
    jitter: np.ndarray | float,
    rng: np.random.Generator,
) -> np.ndarray:
    """``rows`` records from the mixture ``sum_j u_j N(c_j, diag(jitter**2))`` folded into the cube.

    Each record is drawn in its candidate's neighbourhood (a Gaussian of per-column standard
    deviation ``jitter``, reflected at the bounds), so repeated candidates become distinct rows,
    while a smooth query ``f`` moves by only ``O(jitter**2 * ||f''||)``.

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
        picked = reflect_into_cube(picked + rng.standard_normal(picked.shape) * jitter)
    return picked


def snap_to_lattice(points: np.ndarray, lattice: np.ndarray) -> np.ndarray:
    """Each column ``j`` with ``lattice[j] = L >= 2`` moved to the nearest of its ``L`` points
    ``-1 + 2 k / (L - 1)`` (where an integer or categorical column's values lie); others kept."""
    out = np.array(points, dtype=np.float64, copy=True)
    for j in np.flatnonzero(lattice >= 2):
        steps = int(lattice[j]) - 1
        out[:, j] = -1.0 + 2.0 * np.clip(np.rint((out[:, j] + 1.0) * steps / 2.0), 0, steps) / steps
    return out
