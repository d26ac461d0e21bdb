"""Chebyshev basis functions, multi-index sets and the exact partial sums of the data pass.

A basis function is ``prod_i T_{r_i}(x_i)`` for a multi-index ``r`` (the paper's
``cos(r_i arccos x_i)``). The practical mechanism uses multi-indices with at most two non-zero
entries, so every basis sum is an entry of ``Z^T Z`` for the per-row Chebyshev table
``Z = [1, T_1(x_1) .. T_g(x_1), ..., T_1(x_d) .. T_g(x_d)]``: one GEMM per batch.

The data pass rounds ``Z`` to the fixed-point grid ``2**-FRACTION_BITS`` and accumulates ``Z^T Z``
as integers. The sums are then exact, identical for every partitioning and retry, and each
record changes each sum by at most ``1`` in real units (``|q(T_r)| <= 2**FRACTION_BITS``), which
is the sensitivity that ``docs/privacy.md`` uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

FRACTION_BITS = 16
"""Fixed-point resolution of a Chebyshev value: products are integers below 2**32."""
SCALE = float(1 << FRACTION_BITS)
TENSOR_BITS = 30
"""Fixed-point resolution of one row's tensor-basis product (|value| <= 1, so <= 2**30)."""
TENSOR_SCALE = float(1 << TENSOR_BITS)
TENSOR_CHUNK_VALUES = 1 << 22
"""Rows x functions per tensor chunk: bounds the kernel's memory (32 MiB of float64)."""
GEMM_CHUNK_ROWS = 1 << 20
"""float64 represents integers exactly up to 2**53; 2**20 rows of products <= 2**32 stay below."""


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
    out[..., 0] = 1.0
    if degree >= 1:
        out[..., 1] = x
    for r in range(2, degree + 1):
        out[..., r] = 2.0 * x * out[..., r - 1] - out[..., r - 2]
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
    """Indicators of ``bins`` equal cells of [-1, 1] for each of d columns: ``d * bins`` functions.

    Attributes:
        d: number of columns.
        bins: cells per column.
    """

    d: int
    bins: int

    @property
    def size(self) -> int:
        """Number of functions ``d * bins``."""
        return self.d * self.bins

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """Indicator values at ``points`` (``(C, d)``): array ``(d * bins, C)``, column-major."""
        points = np.atleast_2d(points)
        out = np.zeros((self.size, points.shape[0]))
        cells = histogram_cell(points, self.bins) + self.bins * np.arange(self.d)
        out[cells.T.ravel(), np.tile(np.arange(points.shape[0]), self.d)] = 1.0
        return out

    def mass(self, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """``evaluate(points) @ weights`` without the dense ``(d * bins, C)`` array: the weight
        that ``points`` put in each cell, ``(d * bins,)``."""
        points = np.atleast_2d(points)
        cells = histogram_cell(points, self.bins) + self.bins * np.arange(self.d)  # (C, d)
        return np.bincount(
            cells.ravel(),
            weights=np.repeat(np.asarray(weights, dtype=np.float64), self.d),
            minlength=self.size,
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


def design_columns(x: np.ndarray, degree: int) -> np.ndarray:
    """The fixed-point design matrix ``Z`` (float64 holding integers): ``(n, 1 + d * degree)``."""
    n, d = x.shape
    table = chebyshev_table(x, degree)[:, :, 1:].reshape(n, d * degree)
    z = np.empty((n, 1 + d * degree), dtype=np.float64)
    z[:, 0] = SCALE
    np.rint(table * SCALE, out=z[:, 1:])
    return z


@dataclass
class ExactSums:
    """Exact (integer) sufficient statistics of one pass over the data.

    ``gram`` is ``sum_rows q(z) q(z)^T`` in units of ``2**-(2 * FRACTION_BITS)``, kept as Python
    integers (object array) so the driver-side reduction cannot overflow. ``gram[0, 0]`` is the
    number of kept rows times ``SCALE**2``. Raw counts of dropped and clamped rows are
    operator-facing diagnostics: they are never written to a release.

    Attributes:
        degree: Chebyshev degree ``g`` of the design columns.
        d: number of columns.
        gram: ``(1 + d g, 1 + d g)`` object array of ints.
        rows_seen: rows read, including invalid ones.
        rows_invalid: rows with a null, NaN or infinite value.
        rows_clamped: kept rows with at least one value outside the public bounds.
        tensor_degree: ``t`` of the full tensor basis ``{0..t-1}^d`` (0: not computed).
        tensor: ``(t**d,)`` object array, ``sum_x round(2**TENSOR_BITS prod_i T_{r_i}(x_i))`` in
            C order of the multi-index ``r``.
        histograms: ``(d, cells)`` int64 counts of each column's scaled values in ``cells``
            equal cells of [-1, 1] (``None``: not computed).
        nulls: ``(d,)`` int64 null counts per column, over the rows with a null in a column
            declared nullable (``None``: not computed).
        rows_null: rows with such a null (in ``histograms`` and ``nulls``, not in ``gram``).
    """

    degree: int
    d: int
    gram: np.ndarray
    rows_seen: int = 0
    rows_invalid: int = 0
    rows_clamped: int = 0
    tensor_degree: int = 0
    tensor: np.ndarray | None = None
    histograms: np.ndarray | None = None
    nulls: np.ndarray | None = None
    rows_null: int = 0

    @classmethod
    def zero(
        cls,
        d: int,
        degree: int,
        tensor_degree: int = 0,
        histogram_cells: int = 0,
        null_cells: bool = False,
    ) -> ExactSums:
        """The neutral element of :meth:`merge`."""
        size = 1 + d * degree
        tensor = np.zeros(tensor_degree**d, dtype=object) if tensor_degree else None
        histograms = np.zeros((d, histogram_cells), dtype=np.int64) if histogram_cells else None
        return cls(
            degree,
            d,
            np.zeros((size, size), dtype=object),
            tensor_degree=tensor_degree,
            tensor=tensor,
            histograms=histograms,
            nulls=np.zeros(d, dtype=np.int64) if null_cells else None,
        )

    @property
    def count(self) -> int:
        """Exact number of kept rows (never released as is)."""
        return int(self.gram[0, 0]) >> (2 * FRACTION_BITS)

    def merge(self, other: ExactSums) -> ExactSums:
        """Sum of two partial results (associative and exact)."""
        if (self.d, self.degree, self.tensor_degree) != (
            other.d,
            other.degree,
            other.tensor_degree,
        ):
            raise ValueError("cannot merge sums of different shapes")
        return ExactSums(
            self.degree,
            self.d,
            self.gram + other.gram,
            self.rows_seen + other.rows_seen,
            self.rows_invalid + other.rows_invalid,
            self.rows_clamped + other.rows_clamped,
            self.tensor_degree,
            None if self.tensor is None or other.tensor is None else self.tensor + other.tensor,
            None
            if self.histograms is None or other.histograms is None
            else self.histograms + other.histograms,
            None if self.nulls is None or other.nulls is None else self.nulls + other.nulls,
            self.rows_null + other.rows_null,
        )

    def tensor_sums(self) -> np.ndarray:
        """Exact ``sum_x prod_i T_{r_i}(x_i)`` for every ``r`` in ``{0..t-1}^d``: shape
        ``(t,)*d``."""
        if self.tensor is None:
            raise ValueError("the data pass did not compute the tensor basis")
        real = np.array(self.tensor, dtype=np.float64) / TENSOR_SCALE
        return real.reshape((self.tensor_degree,) * self.d)

    def real_gram(self) -> np.ndarray:
        """The Gram matrix in real units (float64): entry (a, b) is ``sum z_a z_b``."""
        return np.array(self.gram, dtype=np.float64) / SCALE**2

    def basis_sums(self, basis: BasisSet) -> np.ndarray:
        """Exact sums ``sum_x B_r(x)`` of every function of ``basis`` (float64, real units)."""
        if basis.d != self.d or basis.degree > self.degree:
            raise ValueError("basis does not fit the computed design columns")
        rows, cols = basis.gram_positions()
        if basis.degree != self.degree:
            remap = _remap_columns(self.d, basis.degree, self.degree)
            rows, cols = remap[rows], remap[cols]
        return self.real_gram()[rows, cols]

    def first_moments(self) -> np.ndarray:
        """Exact ``sum x`` (scaled units)."""
        cols = [design_column(i, 1, self.degree) for i in range(self.d)]
        return self.real_gram()[0, cols]

    def second_moments(self) -> np.ndarray:
        """Exact ``sum x x^T`` (scaled units), ``(d, d)``."""
        cols = [design_column(i, 1, self.degree) for i in range(self.d)]
        return self.real_gram()[np.ix_(cols, cols)]


def _remap_columns(d: int, small: int, large: int) -> np.ndarray:
    out = np.zeros(1 + d * small, dtype=np.int64)
    for i in range(d):
        for r in range(1, small + 1):
            out[design_column(i, r, small)] = design_column(i, r, large)
    return out


@dataclass(frozen=True)
class PublicBounds:
    """Column names with their public bounds (from the config, never from the data).

    Attributes:
        columns: names in table order.
        lower, upper: ``(d,)`` float arrays with ``lower < upper``.
    """

    columns: tuple[str, ...]
    lower: np.ndarray = field(repr=False)
    upper: np.ndarray = field(repr=False)

    @classmethod
    def from_mapping(cls, bounds: dict[str, tuple[float, float]]) -> PublicBounds:
        """From ``{column: (lower, upper)}`` in column order."""
        lower = np.array([float(lo) for lo, _ in bounds.values()])
        upper = np.array([float(hi) for _, hi in bounds.values()])
        if not np.all(lower < upper):
            raise ValueError("every lower bound must be below its upper bound")
        return cls(tuple(bounds), lower, upper)

    @property
    def d(self) -> int:
        """Number of columns."""
        return len(self.columns)

    def scale(self, values: np.ndarray) -> np.ndarray:
        """Original units to [-1, 1] (clamped)."""
        return np.clip(scale_to_unit(values, self.lower, self.upper), -1.0, 1.0)

    def unscale(self, values: np.ndarray) -> np.ndarray:
        """[-1, 1] to original units, clipped so rounding never leaves the bounds."""
        return np.clip(unscale_from_unit(values, self.lower, self.upper), self.lower, self.upper)


def scale_to_unit(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Affine map of ``[lower, upper]`` onto ``[-1, 1]`` per column (no clamping)."""
    return 2.0 * (values - lower) / (upper - lower) - 1.0


def unscale_from_unit(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Inverse of :func:`scale_to_unit`."""
    return lower + (np.asarray(values) + 1.0) * 0.5 * (upper - lower)


@dataclass(frozen=True)
class PassSpec:
    """What one data pass computes.

    Attributes:
        degree: Chebyshev degree ``g`` of the Gram design columns (count, moments, pair terms).
        tensor_degree: ``t`` of the full tensor basis ``{0..t-1}^d``; 0 skips it.
        grid_points: snap every scaled value to the nearest of ``N`` grid points
            ``(2k + 1 - N) / N`` first (Algorithm 3 steps 3-6); ``None`` keeps values as they are.
        histogram_cells: count each column's values in this many equal cells of [-1, 1]
            (0 skips it).
        null_cells: count each column's nulls (a batch then comes with its null mask; a row with
            a null in a column declared nullable enters the histograms and the null counts, not
            the other sums).
    """

    degree: int = 1
    tensor_degree: int = 0
    grid_points: int | None = None
    histogram_cells: int = 0
    null_cells: bool = False


def snap_to_grid(x: np.ndarray, points: int) -> np.ndarray:
    """Nearest point of ``{(2k + 1 - N) / N : k = 0..N-1}`` (the paper's set A) to each value."""
    k = np.clip(np.floor((x + 1.0) * points / 2.0), 0, points - 1)
    return (2.0 * k + 1.0 - points) / points


def tensor_products(x: np.ndarray, t: int) -> np.ndarray:
    """``prod_i T_{r_i}(x_i)`` for every ``r`` in ``{0..t-1}^d`` (C order): shape ``(n, t**d)``."""
    n, d = x.shape
    table = chebyshev_table(x, t - 1)
    out = table[:, 0, :]
    for i in range(1, d):
        out = (out[:, :, None] * table[:, i, None, :]).reshape(n, -1)
    return out


def valid_rows(
    batch: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, int, int]:
    """The per-record treatment of every data pass (docs/privacy.md section 2): rows with a NaN or
    infinite value (nulls arrive as NaN) are left out, the others are clamped to the public bounds.

    Returns:
        ``(kept rows clamped, rows left out, kept rows that had a value outside the bounds)``.
    """
    finite = np.isfinite(batch).all(axis=1)
    if not finite.all():
        batch = batch[finite]
    outside = int(((batch < lower) | (batch > upper)).any(axis=1).sum())
    return np.clip(batch, lower, upper), int(finite.size - batch.shape[0]), outside


def partial_sums(
    batches: Iterable[np.ndarray],
    lower: np.ndarray,
    upper: np.ndarray,
    degree: int | PassSpec,
) -> ExactSums:
    """The data-pass kernel: validate, clamp, scale and sum one partition's rows exactly.

    Rows with a NaN or infinite value (nulls arrive as NaN) are counted in ``rows_invalid`` and
    left out of every sum; what the job does about them is decided on the driver. With
    ``null_cells`` each batch comes as ``(values, null_mask)``: a row whose only non-finite
    values are nulls in columns declared nullable is counted in ``rows_null``, ``nulls`` and the
    histograms of its other columns, and left out of the other sums (docs/privacy.md 3c).

    Args:
        batches: float64 arrays ``(rows, d)`` in original units (or pairs with a null mask).
        lower, upper: public bounds per column.
        degree: the Gram degree ``g``, or a :class:`PassSpec` for the tensor basis and the grid.
    """
    spec = degree if isinstance(degree, PassSpec) else PassSpec(degree)
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    d = lower.shape[0]
    size = 1 + d * spec.degree
    total = np.zeros((size, size), dtype=np.int64)
    t = spec.tensor_degree
    tensor = np.zeros(t**d, dtype=np.int64) if t else None
    cells = spec.histogram_cells
    histograms = np.zeros(d * cells, dtype=np.int64) if cells else None
    nulls = np.zeros(d, dtype=np.int64) if spec.null_cells else None
    seen = invalid = clamped = rows_null = 0
    for item in batches:
        batch, mask = item if isinstance(item, tuple) else (item, None)
        batch = np.asarray(batch, dtype=np.float64).reshape(-1, d)
        seen += batch.shape[0]
        if nulls is not None and mask is not None and mask.any():
            with_null = mask.any(axis=1)
            part, part_mask = batch[with_null], mask[with_null]
            ok = (np.isfinite(part) | part_mask).all(axis=1)
            invalid += int((~ok).sum())
            part, part_mask = part[ok], part_mask[ok]
            rows_null += part.shape[0]
            nulls += part_mask.sum(axis=0)
            filled = np.where(part_mask, lower, part)
            clamped += int((((filled < lower) | (filled > upper)) & ~part_mask).any(axis=1).sum())
            if histograms is not None:
                cell = histogram_cell(
                    scale_to_unit(np.clip(filled, lower, upper), lower, upper), cells
                )
                index = (cell + cells * np.arange(d))[~part_mask]
                histograms += np.bincount(index, minlength=d * cells)
            batch = batch[~with_null]
        batch, bad, outside = valid_rows(batch, lower, upper)
        invalid += bad
        clamped += outside
        x = scale_to_unit(batch, lower, upper)
        if spec.grid_points is not None:
            x = snap_to_grid(x, spec.grid_points)
        for start in range(0, x.shape[0], GEMM_CHUNK_ROWS):
            z = design_columns(x[start : start + GEMM_CHUNK_ROWS], spec.degree)
            total += (z.T @ z).astype(np.int64)
        if histograms is not None:
            histograms += np.bincount(
                (histogram_cell(x, cells) + cells * np.arange(d)).ravel(), minlength=d * cells
            )
        if tensor is not None:
            rows = max(1, TENSOR_CHUNK_VALUES // t**d)
            for start in range(0, x.shape[0], rows):
                products = tensor_products(x[start : start + rows], t)
                tensor += np.rint(products * TENSOR_SCALE).astype(np.int64).sum(axis=0)
    return ExactSums(
        spec.degree,
        d,
        total.astype(object),
        seen,
        invalid,
        clamped,
        t,
        None if tensor is None else tensor.astype(object),
        None if histograms is None else histograms.reshape(d, cells),
        nulls,
        rows_null,
    )


def histogram_cell(x: np.ndarray, cells: int) -> np.ndarray:
    """Index of the equal cell of [-1, 1] holding each value (``1`` goes to the last cell)."""
    return np.clip(np.floor((x + 1.0) * (cells / 2.0)), 0, cells - 1).astype(np.int64)
