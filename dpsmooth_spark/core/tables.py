"""Two-way contingency tables: the joint counts of a pair of columns on their cells.

A categorical column's cells are its levels (nominal: no order, so no Chebyshev term of the
index expresses a relation of its values); any other column's are :data:`TABLE_BINS` equal cells
of [-1, 1], or its levels where it has at most that many. Which pairs the data pass counts is a
function of the config alone (:func:`table_pairs`); which of them a release measures is picked
privately (``mechanisms/synthesizer/measure.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.chebyshev import indicator_mass, indicator_values, lattice_level
from dpsmooth_spark.core.pooling import inverse_variance_mean

TABLE_BINS = 8
"""Cells of a column that is not nominal in a contingency table (equal cells of [-1, 1])."""

MAX_TABLE_CELLS = 1024
"""Largest table the data pass counts (``cells_i * cells_j``)."""

MAX_TABLE_PAIRS = 512
"""Most pairs the data pass counts tables for; a config with more candidate pairs gets none
(the pass's cost grows with the pairs: one ``bincount`` per pair and batch)."""


@dataclass(frozen=True)
class ContingencyTables:
    """Indicators of the joint cells of column pairs: ``sum_k cells[i_k] * cells[j_k]`` functions.

    Attributes:
        d: number of columns of the points.
        pairs: ``((i, j), ...)`` the column pairs, each table row-major (``i``'s cell first).
        cells: per column, its cells in a table (0: in none).
        levels: per column, ``L > 0`` where its cells are its ``L`` lattice levels, 0 where they
            are ``cells`` equal cells of [-1, 1].
    """

    d: int
    pairs: tuple[tuple[int, int], ...]
    cells: tuple[int, ...]
    levels: tuple[int, ...]

    @property
    def sizes(self) -> np.ndarray:
        """``(m,)`` cells of each table."""
        cells = np.asarray(self.cells, dtype=np.int64)
        return np.array([cells[i] * cells[j] for i, j in self.pairs], dtype=np.int64)

    @property
    def size(self) -> int:
        """Number of functions (every table's cells)."""
        return int(self.sizes.sum())

    @property
    def offsets(self) -> np.ndarray:
        """Row of each table's first cell (``(m + 1,)``, the last is ``size``)."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def with_pairs(self, chosen: np.ndarray) -> ContingencyTables:
        """The tables of ``pairs[chosen]`` only."""
        return ContingencyTables(
            self.d, tuple(self.pairs[int(k)] for k in chosen), self.cells, self.levels
        )

    def column_cells(self, points: np.ndarray) -> np.ndarray:
        """``(C, d)`` each point's cell in each column (0 where the column is in no table)."""
        x = np.atleast_2d(points)
        cells = np.asarray(self.cells, dtype=np.int64)
        levels = np.asarray(self.levels, dtype=np.int64)
        on_levels = lattice_level(x, levels)
        binned = np.clip(
            np.floor((x + 1.0) * (np.maximum(cells, 1) / 2.0)), 0, np.maximum(cells - 1, 0)
        )
        return np.where(levels > 0, on_levels, binned).astype(np.int64)

    def cells_of(self, points: np.ndarray) -> np.ndarray:
        """``(C, m)`` the function (row) index of each point's cell in each table."""
        if not self.pairs:
            return np.zeros((np.atleast_2d(points).shape[0], 0), dtype=np.int64)
        where = self.column_cells(points)
        pairs = np.array(self.pairs, dtype=np.int64)
        cells = np.asarray(self.cells, dtype=np.int64)
        return (
            where[:, pairs[:, 0]] * cells[pairs[:, 1]] + where[:, pairs[:, 1]] + self.offsets[:-1]
        )

    def counts(self, points: np.ndarray) -> np.ndarray:
        """``(size,)`` exact counts of the rows ``points`` (``(n, d)``) in every table's cells."""
        return np.bincount(self.cells_of(points).ravel(), minlength=self.size).astype(np.int64)

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Indicator values at ``points`` (``(C, d)``): array ``(size, C)``."""
        return indicator_values(self.cells_of(points), self.size)

    def mass(self, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The weight that ``points`` put in each cell, ``(size,)``."""
        return indicator_mass(self.cells_of(points), weights, self.size)

    def table(self, values: np.ndarray, k: int) -> np.ndarray:
        """Table ``k`` of ``values`` (``(size,)``) as a ``(cells_i, cells_j)`` array."""
        i, j = self.pairs[k]
        return values[self.offsets[k] : self.offsets[k + 1]].reshape(self.cells[i], self.cells[j])

    def margins(self, values: np.ndarray, column: int) -> list[tuple[np.ndarray, int]]:
        """Per table that holds ``column``, its ``values`` summed over the other column: the
        column's counts on its cells, each the sum of that many of the table's cells (the
        second item), so of as many independent noise draws where ``values`` are noisy."""
        out = []
        for k, (i, j) in enumerate(self.pairs):
            if column == i:
                out.append((self.table(values, k).sum(axis=1), self.cells[j]))
            elif column == j:
                out.append((self.table(values, k).sum(axis=0), self.cells[i]))
        return out


def pooled_with_margins(
    counts: np.ndarray, std: float, margins: list[tuple[np.ndarray, int]], table_std: float
) -> tuple[np.ndarray, float]:
    """A column's noisy counts on its cells (``counts``, noise std ``std`` each) and the noisy
    tables' ``margins`` on the same cells (:meth:`ContingencyTables.margins`; each cell sums
    ``m`` table cells of noise std ``table_std``, variance ``m table_std**2``) pooled: their
    inverse-variance mean per cell and its noise std. Every record is counted once in each
    (a table that holds no null), so all estimate the same counts with independent noise."""
    pooled, pooled_std = inverse_variance_mean(
        [counts] + [margin for margin, _ in margins],
        [std] + [np.sqrt(summed) * table_std for _, summed in margins],
    )
    return pooled, float(pooled_std)


def table_pairs(levels: np.ndarray | None, nominal: np.ndarray | None) -> ContingencyTables | None:
    """The pairs the data pass counts tables for, from the config alone: every pair with a
    nominal (categorical) column whose table has at most :data:`MAX_TABLE_CELLS` cells; ``None``
    where there is none, or more than :data:`MAX_TABLE_PAIRS`. ``levels``: lattice points per
    column (0 continuous)."""
    if levels is None or nominal is None or not np.any(nominal):
        return None
    levels = np.asarray(levels, dtype=np.int64)
    nominal = np.asarray(nominal, dtype=bool)
    on_levels = nominal | ((levels >= 2) & (levels <= TABLE_BINS))
    cells = np.where(on_levels, levels, TABLE_BINS)
    d = levels.size
    pairs = tuple(
        (i, j)
        for i in range(d)
        for j in range(i + 1, d)
        if (nominal[i] or nominal[j]) and cells[i] * cells[j] <= MAX_TABLE_CELLS
    )
    if not pairs or len(pairs) > MAX_TABLE_PAIRS:
        return None
    return ContingencyTables(
        d,
        pairs,
        tuple(int(c) for c in cells),
        tuple(int(v) for v in np.where(on_levels, levels, 0)),
    )


def independent_tables(tables: ContingencyTables, marginals: list[np.ndarray]) -> np.ndarray:
    """``(size,)`` every table's cells under independent columns with the per-column cell
    distributions ``marginals[c]`` (``(cells[c],)``, summing to 1)."""
    return np.concatenate([np.outer(marginals[i], marginals[j]).ravel() for i, j in tables.pairs])
