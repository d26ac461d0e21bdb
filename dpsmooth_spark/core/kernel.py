"""The data-pass kernel: the exact partial sums one executor task computes over its rows.

The kernel rounds the Chebyshev design matrix ``Z`` to the fixed-point grid
``2**-FRACTION_BITS`` and accumulates ``Z^T Z`` as integers. The sums are then exact, identical
for every partitioning and retry, and each record changes each sum by at most ``1`` in real
units (``|q(T_r)| <= 2**FRACTION_BITS``), which is the sensitivity that ``docs/privacy.md`` uses.
Executors import this module with numpy alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.bounds import scale_to_unit
from dpsmooth_spark.core.cell_marginals import CellMarginals
from dpsmooth_spark.core.chebyshev import (
    BasisSet,
    chebyshev_rows,
    chebyshev_table,
    design_column,
    histogram_cell,
)
from dpsmooth_spark.core.tables import ContingencyTables

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
GEMM_CHUNK_VALUES = 1 << 21
"""Values of the design matrix built at a time (16 MiB): one chunk of 300,000 rows x 30
columns at degree 6 took 9.4 s for its sums (a 430 MB matrix written and read once), chunks of
16 MiB 1.6 s, with the same sums."""


def design_columns(x: np.ndarray, degree: int) -> np.ndarray:
    """The fixed-point design matrix ``Z`` (float64 holding integers): ``(n, 1 + d * degree)``."""
    n, d = x.shape
    z = np.empty((n, 1 + d * degree), dtype=np.float64)
    z[:, 0] = SCALE
    blocks = z[:, 1:].reshape(n, d, degree, copy=False)  # each column's degrees side by side
    for r, values in enumerate(chebyshev_rows(x, degree)[1:]):
        values *= SCALE
        np.rint(values, out=blocks[:, :, r])
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
        tables: ``(cells,)`` int64 counts of the rows without a null in the cells of the pass's
            contingency tables (``PassSpec.tables``; ``None``: not computed).
        atoms: ``(d, 2)`` int64 counts of the values (after clamping) exactly at each column's
            lower and upper bound, over the same rows as ``histograms`` (``None``: not computed).
        clip_levels: the L1 norms ``kappa_0 < .. < kappa_{K-1}`` (scaled units) of
            ``PassSpec.clip_levels``, where ``clipped`` was computed.
        clipped: ``(2, K + 1, d (d - 1) / 2)`` int64, the second moments of the rows in each band
            of their L1 norm ``s = |x|_1`` (band ``b``: ``kappa_{b-1} < s <= kappa_b``), upper
            triangle: ``[0, b]`` sums ``q(x_i) q(x_j)``, ``[1, b]`` sums ``q(x_i / s) q(x_j / s)``,
            at scale ``SCALE**2`` (``None``: not computed). :meth:`clipped_second_moments` reads
            the norm-clipped second moments at any level from them.
        marginals: ``(cells,)`` int64 joint cell counts of every kept row (nulls in their
            columns' null cells) for the scopes of ``PassSpec.marginals`` (``None``: not
            computed).
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
    tables: np.ndarray | None = None
    atoms: np.ndarray | None = None
    clip_levels: tuple[float, ...] = ()
    clipped: np.ndarray | None = None
    marginals: np.ndarray | None = None

    @classmethod
    def zero(
        cls,
        d: int,
        degree: int,
        tensor_degree: int = 0,
        histogram_cells: int = 0,
        null_cells: bool = False,
        table_cells: int = 0,
        clip_levels: tuple[float, ...] = (),
        marginal_cells: int = 0,
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
            tables=np.zeros(table_cells, dtype=np.int64) if table_cells else None,
            atoms=np.zeros((d, 2), dtype=np.int64) if histogram_cells else None,
            clip_levels=tuple(clip_levels),
            clipped=(
                np.zeros((2, len(clip_levels) + 1, d * (d - 1) // 2), dtype=np.int64)
                if clip_levels
                else None
            ),
            marginals=np.zeros(marginal_cells, dtype=np.int64) if marginal_cells else None,
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
            None if self.tables is None or other.tables is None else self.tables + other.tables,
            None if self.atoms is None or other.atoms is None else self.atoms + other.atoms,
            self.clip_levels,
            None if self.clipped is None or other.clipped is None else self.clipped + other.clipped,
            None
            if self.marginals is None or other.marginals is None
            else self.marginals + other.marginals,
        )

    def clipped_second_moments(self, level: int) -> np.ndarray:
        """``sum_x min(1, kappa / |x|_1)^2 x_i x_j`` for every pair ``i < j`` (upper-triangle
        order, scaled units, float64): each row's vector clipped to L1 norm ``kappa`` (the
        ``level``-th of :attr:`clip_levels`), so that a record moves the ``d (d - 1) / 2`` sums
        by at most ``kappa^2 / 2`` in all (docs/privacy.md 3h)."""
        if self.clipped is None:
            raise ValueError("the data pass did not compute the norm-clipped second moments")
        kappa = self.clip_levels[level]
        bands = self.clipped.astype(np.float64) / SCALE**2
        return bands[0, : level + 1].sum(axis=0) + kappa**2 * bands[1, level + 1 :].sum(axis=0)

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
        tables: count the rows in these contingency tables' cells (``None`` skips it).
        clip_levels: increasing L1 norms (scaled units) at which the norm-clipped second moments
            of the columns can be read (``ExactSums.clipped``; empty skips them).
        marginals: count every kept row in these cell marginals (``None`` skips it).
    """

    degree: int = 1
    tensor_degree: int = 0
    grid_points: int | None = None
    histogram_cells: int = 0
    null_cells: bool = False
    tables: ContingencyTables | None = None
    clip_levels: tuple[float, ...] = ()
    marginals: CellMarginals | None = None


def clipped_bands(x: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """One chunk's contribution to ``ExactSums.clipped``: ``(2, K + 1, d (d - 1) / 2)`` int64.

    Each row falls in the band of its L1 norm ``s`` among the ``K`` ``levels``; its fixed-point
    values ``q(x)`` and ``q(x / s)`` enter that band's two Gram matrices (products below
    ``2**32``, exact in float64 for at most ``GEMM_CHUNK_ROWS`` rows)."""
    n, d = x.shape
    upper = np.triu_indices(d, 1)
    out = np.zeros((2, levels.size + 1, upper[0].size), dtype=np.int64)
    norms = np.abs(x).sum(axis=1)
    band = np.searchsorted(levels, norms, side="left")
    order = np.argsort(band, kind="stable")
    edges = np.searchsorted(band[order], np.arange(levels.size + 2), side="left")
    for b in range(levels.size + 1):
        rows = order[edges[b] : edges[b + 1]]
        if not rows.size:
            continue
        part = x[rows]
        unit = part / np.maximum(norms[rows], 1e-300)[:, None]
        for k, values in enumerate((part, unit)):
            q = np.rint(values * SCALE)
            out[k, b] = (q.T @ q)[upper].astype(np.int64)
    return out


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
    batches: Iterable[np.ndarray | tuple[np.ndarray, np.ndarray]],
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
    tables = None if spec.tables is None else np.zeros(spec.tables.size, dtype=np.int64)
    atoms = np.zeros((d, 2), dtype=np.int64) if cells else None
    levels = np.asarray(spec.clip_levels, dtype=np.float64)
    clipped = (
        np.zeros((2, levels.size + 1, d * (d - 1) // 2), dtype=np.int64) if levels.size else None
    )
    marginals = None if spec.marginals is None else np.zeros(spec.marginals.offsets[-1], np.int64)
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
            if marginals is not None and spec.marginals is not None:
                marginals += spec.marginals.counts(
                    scale_to_unit(np.clip(filled, lower, upper), lower, upper), part_mask
                )
            if atoms is not None:
                filled = np.clip(filled, lower, upper)
                atoms[:, 0] += ((filled == lower) & ~part_mask).sum(axis=0)
                atoms[:, 1] += ((filled == upper) & ~part_mask).sum(axis=0)
            batch = batch[~with_null]
        batch, bad, outside = valid_rows(batch, lower, upper)
        invalid += bad
        clamped += outside
        if atoms is not None:
            atoms[:, 0] += (batch == lower).sum(axis=0)
            atoms[:, 1] += (batch == upper).sum(axis=0)
        x = scale_to_unit(batch, lower, upper)
        if tables is not None and spec.tables is not None:
            tables += spec.tables.counts(x)
        if marginals is not None and spec.marginals is not None:
            marginals += spec.marginals.counts(x)
        if spec.grid_points is not None:
            x = snap_to_grid(x, spec.grid_points)
        chunk = min(GEMM_CHUNK_ROWS, max(1, GEMM_CHUNK_VALUES // (1 + d * spec.degree)))
        for start in range(0, x.shape[0], chunk):
            z = design_columns(x[start : start + chunk], spec.degree)
            total += (z.T @ z).astype(np.int64)
            if clipped is not None:
                clipped += clipped_bands(x[start : start + chunk], levels)
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
        tables,
        atoms,
        tuple(spec.clip_levels),
        clipped,
        marginals,
    )
