"""The cells an auto bound is found on: the data pass counts a column on them, and the bound is
one of their edges.

A column with ``lower: auto`` or ``upper: auto`` has a public coarse range ``[a, b]`` that may be
far wider than its data (100 times, or an integer type's whole range). Two grids of
:data:`GRID_CELLS` cells cover it: one linear in the value, for ranges a few times wider than the
data, and one linear in ``sign(x) log2(1 + |x|)``, whose relative resolution holds across many
orders of magnitude (an int64 column's range). A row falls in one cell of each, so each grid's
histogram has sensitivity 1. The data pass counts the cells with these same functions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID_CELLS = 256
"""Cells of each grid: finer cells place a bound more closely but hold fewer rows each, which
the noise must not swamp (docs/decisions/0006)."""


def signed_log(x: np.ndarray | float) -> np.ndarray:
    """``sign(x) log2(1 + |x|)``: monotone, linear near 0, logarithmic far from it."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.log2(1.0 + np.abs(x))


def signed_exp(u: np.ndarray) -> np.ndarray:
    """The inverse of :func:`signed_log`."""
    u = np.asarray(u, dtype=np.float64)
    return np.sign(u) * (np.exp2(np.abs(u)) - 1.0)


@dataclass(frozen=True)
class QuantileGrid:
    """The two grids over a column's public range (encoded units: days for a date, seconds for a
    timestamp).

    Attributes:
        low, high: the public range.
        cells: cells of each grid.
    """

    low: float
    high: float
    cells: int = GRID_CELLS

    def __post_init__(self) -> None:
        if not (np.isfinite(self.low) and np.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"a quantile grid needs a finite range low < high, got {self}")

    def linear_cell(self, x: np.ndarray) -> np.ndarray:
        """Cell index of each value on the linear grid (values outside the range are clamped)."""
        x = np.clip(np.asarray(x, dtype=np.float64), self.low, self.high)
        cell = np.floor((x - self.low) / (self.high - self.low) * self.cells)
        return np.minimum(cell, self.cells - 1).astype(np.int64)

    def log_cell(self, x: np.ndarray) -> np.ndarray:
        """Cell index of each value on the signed-log grid."""
        lo, hi = float(signed_log(self.low)), float(signed_log(self.high))
        u = signed_log(np.clip(np.asarray(x, dtype=np.float64), self.low, self.high))
        return np.minimum(np.floor((u - lo) / (hi - lo) * self.cells), self.cells - 1).astype(
            np.int64
        )

    def linear_edges(self) -> np.ndarray:
        """The ``cells + 1`` edges of the linear grid."""
        return np.linspace(self.low, self.high, self.cells + 1)

    def log_edges(self) -> np.ndarray:
        """The ``cells + 1`` edges of the signed-log grid, in value units."""
        u = np.linspace(float(signed_log(self.low)), float(signed_log(self.high)), self.cells + 1)
        edges = signed_exp(u)
        edges[0], edges[-1] = self.low, self.high
        return edges

    def counts(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Both histograms of ``x`` (finite values only), as the data pass computes them."""
        x = np.asarray(x, dtype=np.float64)
        x = x[np.isfinite(x)]
        return (
            np.bincount(self.linear_cell(x), minlength=self.cells),
            np.bincount(self.log_cell(x), minlength=self.cells),
        )
