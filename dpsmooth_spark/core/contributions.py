"""Contribution bounding: at most ``k`` rows of each privacy unit, chosen by a seeded hash.

The Spark job does this with a window over the unit column (``spark.io.bound_contributions``);
this is the same rule for an in-memory table. A unit's rows are ordered by a seeded hash of each
row (its unit and values) and the first ``k`` kept, so which rows a unit keeps depends on the
seed and that unit's rows alone: adding or removing one unit changes at most ``k`` rows of the
bounded table, and every per-record sensitivity is multiplied by ``k`` (docs/privacy.md 1b).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

_MASK = (1 << 64) - 1


def row_keys(table: pa.Table, seed: int) -> np.ndarray:
    """``(rows,)`` uint64: each row's hash (its values, in ``table``'s columns) mixed with
    ``seed`` by SplitMix64's finaliser, so each seed orders the rows of a unit afresh. Equal rows
    get equal keys, and no row's key depends on another row."""
    hashed = pd.util.hash_pandas_object(table.to_pandas(), index=False).to_numpy(np.uint64)
    with np.errstate(over="ignore"):
        z = hashed + np.uint64((seed * 0x9E3779B97F4A7C15) & _MASK)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def bounded_rows(units: np.ndarray, keys: np.ndarray, rows: int) -> np.ndarray:
    """Indices (ascending) of at most ``rows`` rows of each unit: a unit's rows in the order of
    their ``keys`` (:func:`row_keys`), the first ``rows`` kept. Rows with equal keys are equal
    rows (up to a 64-bit hash collision), so which of them is kept does not matter."""
    if rows < 1:
        raise ValueError("max_rows_per_unit must be at least 1")
    _, group = np.unique(np.asarray(units), return_inverse=True)
    order = np.lexsort((np.asarray(keys), group))  # unit by unit, each in key order
    starts = np.searchsorted(group[order], group[order])
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - starts
    return np.flatnonzero(rank < rows)
