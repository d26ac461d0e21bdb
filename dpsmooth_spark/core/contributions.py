"""Contribution bounding: at most ``k`` rows of each privacy unit, chosen uniformly at random.

The Spark job does this with a window over the unit column (``spark.io.bound_contributions``);
this is the same rule for an in-memory table. With it, adding or removing one unit changes at
most ``k`` rows, so every per-record sensitivity is multiplied by ``k`` (docs/privacy.md 1b).
"""

from __future__ import annotations

import numpy as np


def bounded_rows(units: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Indices (ascending) of at most ``rows`` rows of each unit: the rows in a uniform random
    order, the first ``rows`` of each unit in that order kept."""
    if rows < 1:
        raise ValueError("max_rows_per_unit must be at least 1")
    order = rng.permutation(len(units))
    _, group = np.unique(np.asarray(units)[order], return_inverse=True)
    by_group = np.argsort(group, kind="stable")  # positions in the random order, unit by unit
    starts = np.searchsorted(group[by_group], group[by_group])
    rank = np.empty(len(units), dtype=np.int64)
    rank[by_group] = np.arange(len(units)) - starts
    return np.sort(order[rank < rows])
