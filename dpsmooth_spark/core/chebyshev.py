"""Chebyshev basis functions and multi-index sets.

A basis function is ``prod_i T_{r_i}(x_i)`` for a multi-index ``r`` (the paper's
``cos(r_i arccos x_i)``). The practical mechanism uses multi-indices with at most two non-zero
entries, so every basis sum is an entry of ``Z^T Z`` for the per-row Chebyshev table
``Z = [1, T_1(x_1) .. T_g(x_1), ..., T_1(x_d) .. T_g(x_d)]`` (:mod:`.kernel`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


def chebyshev_table(x: np.ndarray, degree: int) -> np.ndarray:
    """``T_0 .. T_degree`` at every entry of ``x`` by the three-term recurrence.

    Args:
        x: values in [-1, 1], any shape.
        degree: highest degree (>= 0).

    Returns:
        Array of shape ``x.shape + (degree + 1,)``.
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape + (degree + 1,), dtype=np.float64)
    for r, values in enumerate(chebyshev_rows(x, degree)):
        out[..., r] = values
    return out


def chebyshev_rows(x: np.ndarray, degree: int) -> np.ndarray:
    """:func:`chebyshev_table` degree first: shape ``(degree + 1,) + x.shape``. The recurrence
    runs on contiguous arrays (on a degree-last table each step reads and writes with a stride:
    twice the time at 10^6 x 5, degree 8), and a design matrix takes a degree's block whole."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty((degree + 1,) + x.shape, dtype=np.float64)
    out[0] = 1.0
    if degree >= 1:
        out[1] = x
    for r in range(2, degree + 1):
        np.multiply(x, out[r - 1], out=out[r])
        out[r] *= 2.0  # exact: (2 x) T = 2 (x T)
        out[r] -= out[r - 2]
    return out


def chebyshev_direct(x: np.ndarray, r: int) -> np.ndarray:
    """The paper's definition ``cos(r arccos x)``; a test oracle for :func:`chebyshev_table`."""
    return np.cos(r * np.arccos(np.clip(x, -1.0, 1.0)))


@dataclass(frozen=True)
class BasisSet:
    """A set of multi-indices with at most two non-zero entries and per-coordinate degree <= g.

    Attributes:
        d: number of columns.
        degree: highest per-coordinate Chebyshev degree ``g``.
        indices: integer array ``(R, d)``; row ``j`` is the multi-index of basis function ``j``.
            The constant function (the count) is not part of the set.
    """

    d: int
    degree: int
    indices: np.ndarray = field(repr=False)

    @property
    def size(self) -> int:
        """R, the number of basis functions."""
        return int(self.indices.shape[0])

    @classmethod
    def marginal(cls, d: int, degree: int) -> BasisSet:
        """``T_r(x_i)`` for every column ``i`` and ``1 <= r <= degree``: R = d * degree."""
        rows = []
        for i in range(d):
            for r in range(1, degree + 1):
                idx = np.zeros(d, dtype=np.int64)
                idx[i] = r
                rows.append(idx)
        return cls(d, degree, np.array(rows, dtype=np.int64).reshape(-1, d))

    @classmethod
    def pairwise(cls, d: int, degree: int, pair_degree: int | None = None) -> BasisSet:
        """The marginal set plus ``T_r(x_i) T_s(x_j)`` for ``i < j``, ``r, s >= 1``, ``r + s <= D``.

        ``D`` (``pair_degree``) defaults to ``degree``; with ``degree = 2`` the set has
        ``2d + d(d-1)/2`` functions (495 at d = 30): every first and second moment.
        """
        pair_degree = degree if pair_degree is None else pair_degree
        rows = [cls.marginal(d, degree).indices]
        pairs = []
        for i in range(d):
            for j in range(i + 1, d):
                for r in range(1, degree + 1):
                    for s in range(1, degree + 1):
                        if r + s <= pair_degree:
                            idx = np.zeros(d, dtype=np.int64)
                            idx[i], idx[j] = r, s
                            pairs.append(idx)
        if pairs:
            rows.append(np.array(pairs, dtype=np.int64))
        return cls(d, degree, np.concatenate(rows, axis=0))

    @classmethod
    def pairs(cls, d: int, degree: int) -> BasisSet:
        """The pair terms of :meth:`pairwise` alone (one-way marginals measured otherwise)."""
        full = cls.pairwise(d, degree)
        return cls(d, degree, full.indices[(full.indices != 0).sum(axis=1) == 2])

    def with_anchor_pairs(self, anchors: Iterable[int]) -> BasisSet:
        """This set plus ``T_1(x_a) T_1(x_j)`` for every anchor column ``a`` and every other ``j``.

        Anchors are columns whose relation to all others matters (a label): d - 1 functions per
        anchor instead of the d(d-1)/2 of the full pairwise set.
        """
        present = {tuple(idx) for idx in self.indices}
        extra = []
        for a in anchors:
            for j in range(self.d):
                if j == a:
                    continue
                idx = np.zeros(self.d, dtype=np.int64)
                idx[a] = idx[j] = 1
                if tuple(idx) not in present:
                    present.add(tuple(idx))
                    extra.append(idx)
        if not extra:
            return self
        return BasisSet(
            self.d, self.degree, np.concatenate([self.indices, np.array(extra)], axis=0)
        )

    def on_lattice(self, levels: np.ndarray | None) -> BasisSet:
        """This set without the functions that are redundant where column ``i`` takes only
        ``levels[i] = L > 0`` values (a boolean: 2, a category of 4: 4; 0: continuous).

        On ``L`` points a polynomial of degree ``>= L`` equals one of degree ``< L``
        (``T_2 = 1`` on ``{-1, 1}``), so ``T_r(x_i) T_s(x_j)`` with ``r >= L_i`` repeats lower
        terms, and measuring it spends budget (sensitivity grows with R) on nothing new.
        """
        if levels is None:
            return self
        levels = np.asarray(levels, dtype=np.int64)
        redundant = ((levels > 0) & (self.indices >= np.maximum(levels, 1))).any(axis=1)
        return (
            self if not redundant.any() else BasisSet(self.d, self.degree, self.indices[~redundant])
        )

    def gram_positions(self) -> tuple[np.ndarray, np.ndarray]:
        """Row and column of each basis sum inside the Gram matrix ``Z^T Z`` of
        :func:`design_columns`."""
        nz_count = (self.indices != 0).sum(axis=1)
        if nz_count.max(initial=1) > 2 or nz_count.min(initial=1) < 1:
            raise ValueError("BasisSet entries must have one or two non-zero degrees")
        rows = np.zeros(self.size, dtype=np.int64)
        cols = np.zeros(self.size, dtype=np.int64)
        for j, idx in enumerate(self.indices):
            (nz,) = np.nonzero(idx)
            col_a = design_column(int(nz[0]), int(idx[nz[0]]), self.degree)
            if len(nz) == 1:
                rows[j], cols[j] = 0, col_a
            else:
                rows[j], cols[j] = col_a, design_column(int(nz[1]), int(idx[nz[1]]), self.degree)
        return rows, cols

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Basis values at ``points`` (``(C, d)`` in [-1, 1]): array ``(R, C)``."""
        points = np.atleast_2d(points)
        table = chebyshev_table(points, self.degree)  # (C, d, g+1)
        out = np.ones((self.size, points.shape[0]))
        for j, idx in enumerate(self.indices):
            for i in np.nonzero(idx)[0]:
                out[j] *= table[:, i, idx[i]]
        return out


@dataclass(frozen=True)
class ProjectionBasis:
    """``T_2(v_s . x / ||v_s||_1)`` for k directions ``v_s``: the spread of the table along them.

    Each function lies in [-1, 1] on the cube (``|v . x| <= ||v||_1``), so k of them have L1
    sensitivity k and L2 sensitivity sqrt(k), like k basis functions; their sums follow exactly
    from the count and ``sum x x^T`` (``T_2(p) = 2 p^2 - 1``).

    Attributes:
        directions: ``(k, d)`` rows, each with ``||v_s||_1 = 1``.
    """

    directions: np.ndarray = field(repr=False)

    @classmethod
    def from_vectors(cls, vectors: np.ndarray) -> ProjectionBasis:
        """From ``(d, k)`` columns (e.g. PSI's eigenvectors), normalised to unit L1 norm."""
        rows = np.asarray(vectors, dtype=np.float64).T
        return cls(rows / np.abs(rows).sum(axis=1, keepdims=True))

    @property
    def size(self) -> int:
        """Number of functions k."""
        return int(self.directions.shape[0])

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Function values at ``points`` (``(C, d)``): array ``(k, C)``."""
        p = self.directions @ np.atleast_2d(points).T
        return 2.0 * p * p - 1.0

    def sums(self, count: float, second_moments: np.ndarray) -> np.ndarray:
        """Exact ``sum_x T_2(v_s . x)`` from the count and ``sum x x^T`` (``(k,)``)."""
        quad = np.einsum("sd,de,se->s", self.directions, second_moments, self.directions)
        return 2.0 * quad - count


@dataclass(frozen=True)
class HistogramBasis:
    """Indicators of ``bins`` equal cells of [-1, 1] for each of the ``columns`` of d columns
    (all of them where ``columns`` is ``None``): ``len(columns) * bins`` functions.

    Attributes:
        d: number of columns of the points.
        bins: cells per column.
        columns: the columns measured, in order (``None``: every column).
    """

    d: int
    bins: int
    columns: tuple[int, ...] | None = None

    @property
    def measured(self) -> np.ndarray:
        """The columns measured, in order."""
        return np.array(range(self.d) if self.columns is None else self.columns, dtype=np.int64)

    @property
    def size(self) -> int:
        """Number of functions ``len(measured) * bins``."""
        return self.measured.size * self.bins

    def cells_of(self, points: np.ndarray) -> np.ndarray:
        """``(C, len(measured))`` the function (row) index of each point's cell per column."""
        measured = self.measured
        points = np.atleast_2d(points)[:, measured]
        return histogram_cell(points, self.bins) + self.bins * np.arange(measured.size)

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Indicator values at ``points`` (``(C, d)``): array ``(size, C)``, column-major."""
        return indicator_values(self.cells_of(points), self.size)

    def mass(self, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """``evaluate(points) @ weights`` without the dense ``(size, C)`` array: the weight that
        ``points`` put in each cell, ``(size,)``."""
        return indicator_mass(self.cells_of(points), weights, self.size)


@dataclass(frozen=True)
class LevelHistogram:
    """Indicators of each level of lattice columns (``levels[k]`` points ``-1 + 2 l /
    (levels[k] - 1)`` of column ``columns[k]``): a nominal column's per-level histogram,
    ``sum(levels)`` functions.

    Attributes:
        d: number of columns of the points.
        columns: the lattice columns measured.
        levels: their numbers of levels.
        ordered: per column, whether its levels are ordered values (an integer, a date) rather
            than nominal ones (a category): public, it tells post-processing which levels are
            neighbours.
    """

    d: int
    columns: tuple[int, ...]
    levels: tuple[int, ...]
    ordered: tuple[bool, ...] = ()

    @property
    def size(self) -> int:
        """Number of functions ``sum(levels)``."""
        return int(sum(self.levels))

    @property
    def offsets(self) -> np.ndarray:
        """Row of each column's first level (``(len(columns) + 1,)``, the last is ``size``)."""
        return np.concatenate([[0], np.cumsum(self.levels)]).astype(np.int64)

    def cells_of(self, points: np.ndarray) -> np.ndarray:
        """``(C, len(columns))`` the function (row) index of each point's level per column:
        the nearest level."""
        points = np.atleast_2d(points)[:, list(self.columns)]
        return lattice_level(points, np.array(self.levels)) + self.offsets[:-1]

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Indicator values at ``points`` (``(C, d)``): array ``(size, C)``."""
        return indicator_values(self.cells_of(points), self.size)

    def mass(self, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The weight that ``points`` put on each level, ``(size,)``."""
        return indicator_mass(self.cells_of(points), weights, self.size)


@dataclass(frozen=True)
class LevelParts:
    """Indicators of the parts of ordered lattice columns' levels (column ``columns[k]`` with
    ``len(parts[k])`` levels, level ``l`` in part ``parts[k][l]``): the coarse histogram measured
    after a column's per-level counts, a coarse cell or a level alone
    (:func:`core.marginals.level_parts`), ``sum(max(parts[k]) + 1)`` functions.

    Attributes:
        d: number of columns of the points.
        columns: the lattice columns measured.
        parts: per column, each level's part.
    """

    d: int
    columns: tuple[int, ...]
    parts: tuple[tuple[int, ...], ...]

    @property
    def counts(self) -> tuple[int, ...]:
        """Parts per column."""
        return tuple(max(p) + 1 for p in self.parts)

    @property
    def size(self) -> int:
        """Number of functions, the parts of all columns."""
        return int(sum(self.counts))

    @property
    def offsets(self) -> np.ndarray:
        """Row of each column's first part (``(len(columns) + 1,)``, the last is ``size``)."""
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)

    def cells_of(self, points: np.ndarray) -> np.ndarray:
        """``(C, len(columns))`` the function (row) index of each point's part per column: the
        part of its nearest level."""
        points = np.atleast_2d(points)[:, list(self.columns)]
        out = np.empty(points.shape, dtype=np.int64)
        for k, (part, start) in enumerate(zip(self.parts, self.offsets[:-1], strict=True)):
            out[:, k] = np.asarray(part, dtype=np.int64)[lattice_level(points[:, k], len(part))]
            out[:, k] += start
        return out

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Indicator values at ``points`` (``(C, d)``): array ``(size, C)``."""
        return indicator_values(self.cells_of(points), self.size)

    def mass(self, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """The weight that ``points`` put in each part, ``(size,)``."""
        return indicator_mass(self.cells_of(points), weights, self.size)


def lattice_level(x: np.ndarray, levels: np.ndarray | int) -> np.ndarray:
    """The nearest of a lattice column's ``levels`` points ``-1 + 2 l / (levels - 1)`` to each
    scaled value, as the level's index ``l`` (int64)."""
    top = np.asarray(levels, dtype=np.float64) - 1.0
    return np.clip(np.rint((np.asarray(x) + 1.0) / 2.0 * top), 0, np.maximum(top, 0)).astype(
        np.int64
    )


def indicator_values(cells: np.ndarray, size: int) -> np.ndarray:
    """``(size, C)`` 0/1 values from each point's function index per column (``(C, m)``)."""
    out = np.zeros((size, cells.shape[0]))
    out[cells.T.ravel(), np.tile(np.arange(cells.shape[0]), cells.shape[1])] = 1.0
    return out


def indicator_mass(cells: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    """``(size,)`` the weight each indicator function holds, from each point's function index
    per column (``(C, m)``) and the points' ``weights``."""
    return np.bincount(
        cells.ravel(),
        weights=np.repeat(np.asarray(weights, dtype=np.float64), cells.shape[1]),
        minlength=size,
    )


def coarsen_histograms(counts: np.ndarray, bins: int) -> np.ndarray:
    """Merge ``(d, cells)`` counts into ``bins`` equal cells (``bins`` divides ``cells``)."""
    d, cells = counts.shape
    if cells % bins:
        raise ValueError(f"{bins} bins do not divide {cells} cells")
    return counts.reshape(d, bins, cells // bins).sum(axis=2)


def design_column(coordinate: int, degree: int, max_degree: int) -> int:
    """Column of ``T_degree(x_coordinate)`` in the design matrix; column 0 is the constant 1."""
    return 1 + coordinate * max_degree + (degree - 1)


def histogram_cell(x: np.ndarray, cells: int) -> np.ndarray:
    """Index of the equal cell of [-1, 1] holding each value (``1`` goes to the last cell)."""
    return np.clip(np.floor((x + 1.0) * (cells / 2.0)), 0, cells - 1).astype(np.int64)
