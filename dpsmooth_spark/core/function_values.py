"""The measured functions' values at the candidates, as a linear operator that is never stored.

The fit needs two products per step with ``A`` (``R x C``: function ``r`` at candidate ``c``,
divided by the answer's noise): ``A u`` and ``A^T y``. Stored dense, ``A`` takes 714 MB at
R = 1785, C = 10^5 (float32) and each product streams all of it from memory. Every function the
smooth mechanism measures has structure that makes both products cheaper:

* a pair term ``T_r(x_i) T_s(x_j)`` is a product of two one-way factors, so ``A u`` for all of
  them is entries of ``L^T diag(u) Z`` and ``A^T y`` is ``diag(L M Z^T)`` with ``M`` holding
  ``y`` at those entries: two GEMMs over the tables ``L`` and ``Z`` of the factors that appear
  in pairs, on the left and on the right (30 and 59 of them for the degree-3 pair terms at
  d = 30), whatever the number of pairs;
  a one-way term ``T_r(x_i)`` is a column of such a table (a GEMV); a pair on spread factors
  ``p_i(x_i) p_j(x_j)`` (``core/factors.py``) is the same product over a table of the ``p_i``,
  and a quadrant pair (``core/quadrants.py``) over a table of the signs;
* a histogram cell or a level is an indicator: a sparse matrix with one entry per candidate and
  column;
* anything else (the few PSI directions) is kept dense.

Products are float32, as the dense matrix was.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dpsmooth_spark.core.chebyshev import (
    BasisSet,
    HistogramBasis,
    LevelHistogram,
    LevelParts,
    chebyshev_table,
)
from dpsmooth_spark.core.factors import FactorPairs
from dpsmooth_spark.core.quadrants import QuadrantPairs
from dpsmooth_spark.core.tables import ContingencyTables

SPARSE_PAIRS = 16
""":class:`_Products` computes each pair's product alone where the pairs number fewer than
1/16 of the left x right blocks of a weighted gram (each costs about a block's flops)."""


@dataclass(frozen=True)
class _Products:
    """Rows ``scale_r * T_a(x_i)`` (one factor) and ``scale_r * T_a(x_i) T_b(x_j)`` (two).

    Factor tables are stored one factor per row (``(k, C)``, C contiguous), which the BLAS runs
    faster than ``(C, k)`` for products over the long C axis. A pair's factors are split into a
    left one (the lower degree) and a right one, so that the weighted gram holds only the
    left x right blocks the pairs use: for the degree-3 pair terms, 30 ``T_1`` rows against
    59 ``T_1, T_2`` rows instead of all 60 x 60 (half the flops).
    """

    single: np.ndarray  # (s, C) float32: the one-factor functions' factors, in row order
    single_rows: np.ndarray
    left_factors: np.ndarray  # (l, C) float32: every factor on the left of a pair
    right_factors: np.ndarray  # (k, C) float32: every factor on the right of a pair
    pair_rows: np.ndarray
    left: np.ndarray  # rows of left_factors
    right: np.ndarray  # rows of right_factors
    scale: np.ndarray  # (R_b,) float64

    @property
    def sparse(self) -> bool:
        """Whether the pairs are few against the left x right blocks a weighted gram holds
        (a column's few quadrant partners): each pair's product is then cheaper alone."""
        blocks = self.left_factors.shape[0] * self.right_factors.shape[0]
        return SPARSE_PAIRS * self.pair_rows.size < blocks

    def times(self, u: np.ndarray) -> np.ndarray:
        out = np.empty(self.scale.size)
        out[self.single_rows] = self.single @ u
        if self.pair_rows.size and self.sparse:
            out[self.pair_rows] = [
                np.dot(self.left_factors[a] * u, self.right_factors[b])
                for a, b in zip(self.left, self.right, strict=True)
            ]
        elif self.pair_rows.size:
            gram = (self.left_factors * u) @ self.right_factors.T
            out[self.pair_rows] = gram[self.left, self.right]
        return out * self.scale

    def transposed_times(self, y: np.ndarray) -> np.ndarray:
        y = y * self.scale
        out = y[self.single_rows].astype(np.float32) @ self.single
        if self.pair_rows.size and self.sparse:
            weights = y[self.pair_rows].astype(np.float32)
            for a, b, w in zip(self.left, self.right, weights, strict=True):
                out += w * self.left_factors[a] * self.right_factors[b]
        elif self.pair_rows.size:
            n_left, k = self.left_factors.shape[0], self.right_factors.shape[0]
            middle = np.zeros(n_left * k)
            np.add.at(middle, self.left * k + self.right, y[self.pair_rows])
            product = middle.reshape(n_left, k).T.astype(np.float32) @ self.left_factors  # (k, C)
            out += np.einsum("kc,kc->c", product, self.right_factors)
        return out

    def dense(self) -> np.ndarray:
        out = np.empty((self.scale.size, self.single.shape[1]), dtype=np.float32)
        out[self.single_rows] = self.single
        out[self.pair_rows] = self.left_factors[self.left] * self.right_factors[self.right]
        return out * self.scale[:, None].astype(np.float32)


@dataclass(frozen=True)
class _Sparse:
    """Rows of a sparse matrix (histogram indicators), kept as its transpose in CSR form
    (``C x R``): ``A^T y`` is then a CSR product and ``A u`` a CSC one, both faster than the
    ``R x C`` CSR product (a gather over C per row) that ``A u`` would otherwise be."""

    transposed: sp.csr_matrix

    def times(self, u: np.ndarray) -> np.ndarray:
        return (self.transposed.T @ u).astype(np.float64)

    def transposed_times(self, y: np.ndarray) -> np.ndarray:
        return self.transposed @ y.astype(np.float32)

    def dense(self) -> np.ndarray:
        return self.transposed.T.toarray()


@dataclass(frozen=True)
class _Dense:
    values: np.ndarray  # (R_k, C) float32

    def times(self, u: np.ndarray) -> np.ndarray:
        return (self.values @ u).astype(np.float64)

    def transposed_times(self, y: np.ndarray) -> np.ndarray:
        return self.values.T @ y.astype(np.float32)

    def dense(self) -> np.ndarray:
        return self.values


def _products(basis: BasisSet, points: np.ndarray, scale: np.ndarray) -> _Products | None:
    nonzero = (basis.indices != 0).sum(axis=1)
    if basis.size == 0 or nonzero.max() > 2 or nonzero.min() < 1:
        return None
    table = chebyshev_table(points, basis.degree)  # (C, d, g + 1)
    # (column, degree) factors of each row; a pair's lower-degree factor first (its left one)
    factors = [
        sorted(((int(i), int(idx[i])) for i in np.nonzero(idx)[0]), key=lambda f: (f[1], f[0]))
        for idx in basis.indices
    ]
    single_rows = np.flatnonzero(nonzero == 1)
    pair_rows = np.flatnonzero(nonzero == 2)
    lefts = sorted({factors[row][0] for row in pair_rows})
    rights = sorted({factors[row][1] for row in pair_rows})

    def table_of(keys: list[tuple[int, int]]) -> np.ndarray:
        out = np.empty((len(keys), points.shape[0]), dtype=np.float32)
        for k, (i, r) in enumerate(keys):
            out[k] = table[:, i, r]
        return out

    left_row = {f: k for k, f in enumerate(lefts)}
    right_row = {f: k for k, f in enumerate(rights)}
    return _Products(
        single=table_of([factors[row][0] for row in single_rows]),
        single_rows=single_rows,
        left_factors=table_of(lefts),
        right_factors=table_of(rights),
        pair_rows=pair_rows,
        left=np.array([left_row[factors[row][0]] for row in pair_rows], dtype=np.int64),
        right=np.array([right_row[factors[row][1]] for row in pair_rows], dtype=np.int64),
        scale=scale,
    )


def _factor_products(
    factors: FactorPairs | QuadrantPairs, points: np.ndarray, scale: np.ndarray
) -> _Products:
    """Rows ``scale_r * p_i(x_i) p_j(x_j)`` (spread factors or quadrant signs): the left
    factors are the pairs' first columns, the right ones their second."""
    values = factors.factors(points).T.astype(np.float32)  # (d, C)
    lefts, left = np.unique(factors.pairs[:, 0], return_inverse=True)
    rights, right = np.unique(factors.pairs[:, 1], return_inverse=True)
    c = points.shape[0]
    return _Products(
        single=np.zeros((0, c), dtype=np.float32),
        single_rows=np.zeros(0, dtype=np.int64),
        left_factors=np.ascontiguousarray(values[lefts]),
        right_factors=np.ascontiguousarray(values[rights]),
        pair_rows=np.arange(factors.size),
        left=left.reshape(-1).astype(np.int64),
        right=right.reshape(-1).astype(np.int64),
        scale=scale,
    )


def _indicators(
    cells: HistogramBasis | LevelHistogram | LevelParts | ContingencyTables,
    points: np.ndarray,
    scale: np.ndarray,
) -> _Sparse:
    rows = cells.cells_of(points)  # (C, m)
    c = points.shape[0]
    cols = np.repeat(np.arange(c), rows.shape[1])
    data = np.asarray(scale, dtype=np.float64)[rows.ravel()].astype(np.float32)
    return _Sparse(sp.csr_matrix((data, (cols, rows.ravel())), shape=(c, cells.size)))


class FunctionValues:
    """``A = diag(scale) W`` (``R x C``) for measured functions ``W`` at candidate points,
    with ``A @ u`` and ``A.T @ y`` computed from its structure (see the module docstring).

    Build it with :meth:`from_functions`; ``dense()`` materialises it (for the LP and tests).
    """

    dtype = np.dtype(np.float32)

    def __init__(self, blocks: list, sizes: list[int], candidates: int) -> None:
        self._blocks = blocks
        self._offsets = np.cumsum([0, *sizes])
        self.shape = (int(self._offsets[-1]), candidates)

    @classmethod
    def from_functions(
        cls, functions: list, scales: list[np.ndarray], points: np.ndarray
    ) -> FunctionValues:
        """``functions[k]`` (a :class:`BasisSet`, :class:`HistogramBasis`, :class:`LevelHistogram`,
        :class:`FactorPairs` or
        anything with ``evaluate(points) -> (R_k, C)``) at ``points`` (``(C, d)``), row ``r`` of
        block ``k`` multiplied by ``scales[k][r]``."""
        blocks, sizes = [], []
        for queries, scale in zip(functions, scales, strict=False):
            scale = np.asarray(scale, dtype=np.float64)
            block: _Products | _Sparse | _Dense | None = None
            if isinstance(queries, BasisSet):
                block = _products(queries, points, scale)
            elif isinstance(
                queries, HistogramBasis | LevelHistogram | LevelParts | ContingencyTables
            ):
                block = _indicators(queries, points, scale)
            elif isinstance(queries, FactorPairs | QuadrantPairs):
                block = _factor_products(queries, points, scale)
            if block is None:
                block = _Dense((queries.evaluate(points) * scale[:, None]).astype(np.float32))
            blocks.append(block)
            sizes.append(scale.size)
        return cls(blocks, sizes, points.shape[0])

    def __matmul__(self, u: np.ndarray) -> np.ndarray:
        """``A u`` (float64, ``(R,)``) for ``u`` of shape ``(C,)``."""
        u = np.asarray(u, dtype=np.float32)
        return np.concatenate([block.times(u) for block in self._blocks])

    def transposed_times(self, y: np.ndarray) -> np.ndarray:
        """``A^T y`` (float32, ``(C,)``) for ``y`` of shape ``(R,)``."""
        y = np.asarray(y, dtype=np.float64)
        out = np.zeros(self.shape[1], dtype=np.float32)
        for block, start, stop in zip(
            self._blocks, self._offsets[:-1], self._offsets[1:], strict=False
        ):
            out += block.transposed_times(y[start:stop])
        return out

    @property
    def T(self) -> _Transposed:
        """``A.T``, for ``A.T @ y``."""
        return _Transposed(self)

    def dense(self) -> np.ndarray:
        """``A`` as a float32 array (``R x C``): for the LP and for tests."""
        return np.vstack([block.dense() for block in self._blocks])


@dataclass(frozen=True)
class _Transposed:
    values: FunctionValues

    def __matmul__(self, y: np.ndarray) -> np.ndarray:
        return self.values.transposed_times(y)
