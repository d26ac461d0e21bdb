"""Every column coded into a few cells, and the marginals (joint cell counts) of column sets.

A categorical column, and a lattice column with at most :data:`MAX_CELLS` levels, keeps one cell
per level; a wider lattice (an integer or date column) is cut into :data:`MAX_CELLS` cells of
equally many levels, and a continuous column into :data:`MAX_CELLS` equal cells of [-1, 1] (the
cells the marginal yardstick ``shared/tools/marginals.py`` scores). A nullable column has one
more cell, its nulls. The coding is a function of the config alone. Decoding draws a value within
the cell: a uniform level among the cell's levels, a uniform point of a continuous cell, the
rows of one cell as one stratified sample (so they spread over it evenly).

A continuous or wide lattice column's values may sit exactly on a bound (a rain gauge's zeros, a
sensor clipped at its top, an amount that is mostly 0): the pass also counts the rows on each
bound, so its one-way can be split with the bounds as cells of their own
(:meth:`CellMarginals.split_points`), and decoding puts a share of its edge cells' rows on the
bound, the rest on the cell's other values. A continuous column's rows strictly between its
bounds are also counted in :data:`SHAPE_CELLS` equal sub-cells of each cell, and a wide
lattice's per level (at most :data:`MAX_SHAPE_LEVELS`, else in sub-cells of equally many
levels): its shape (:meth:`CellMarginals.split_shapes`), so decoding can place a cell's rows
where its shape says (a log-normal's mass in the first sixteenth of its bounds, the 40 of a
week's hours among the cell's 6 levels) instead of evenly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.chebyshev import lattice_level
from dpsmooth_spark.core.sampling import stratified_uniforms

MAX_CELLS = 16
"""Cells of a wide integer or a continuous column."""
SHAPE_CELLS = 16
"""Equal sub-cells of each cell of a continuous column that its shape counts."""
MAX_SHAPE_LEVELS = 4096
"""Most levels of a wide lattice whose shape is counted per level; a wider one's is counted as a
continuous column's, its sub-cells of equally many levels."""

Scope = tuple[int, ...]


@dataclass(frozen=True)
class CellCoding:
    """How each column's scaled values map to cells.

    Attributes:
        levels: per column, its lattice levels (0: continuous).
        nullable: per column, whether it has a null cell (the last).
        nominal: per column, whether its levels are categories (one cell each, however many).
    """

    levels: tuple[int, ...]
    nullable: tuple[bool, ...]
    nominal: tuple[bool, ...]

    @property
    def value_cells(self) -> tuple[int, ...]:
        """Cells of each column's values (without the null cell)."""
        return tuple(
            (int(v) if nominal else min(int(v), MAX_CELLS)) if v >= 2 else MAX_CELLS
            for v, nominal in zip(self.levels, self.nominal, strict=True)
        )

    @property
    def sizes(self) -> tuple[int, ...]:
        """Cells of each column, its null cell included."""
        return tuple(c + int(n) for c, n in zip(self.value_cells, self.nullable, strict=True))

    @property
    def points(self) -> tuple[int, ...]:
        """The columns whose edge cells hold more than their bound: continuous ones, and wide
        lattices (integers or dates cut into cells of several levels). Their values may sit
        exactly on a bound (:meth:`CellMarginals.split_points`), and their rows off the bounds
        are counted in sub-cells too, their shape (:meth:`shape_cells`)."""
        return tuple(
            j
            for j, (levels, nominal) in enumerate(zip(self.levels, self.nominal, strict=True))
            if levels < 2 or (not nominal and levels > MAX_CELLS)
        )

    def per_level(self, j: int) -> bool:
        """Whether column ``j``'s shape has a sub-cell per level (a wide lattice of at most
        :data:`MAX_SHAPE_LEVELS` levels), rather than :data:`SHAPE_CELLS` equal ones per cell."""
        return MAX_CELLS < self.levels[j] <= MAX_SHAPE_LEVELS

    def shape_cells(self, j: int) -> np.ndarray:
        """The cell of each sub-cell of column ``j``'s shape, in order."""
        levels, cells = self.levels[j], self.value_cells[j]
        if self.per_level(j):
            return (np.arange(levels) * cells) // levels
        return np.arange(cells * SHAPE_CELLS) // SHAPE_CELLS

    def codes(self, x: np.ndarray, nulls: np.ndarray | None = None) -> np.ndarray:
        """``(n, d)`` int64 cells of scaled rows ``x`` (in [-1, 1]); ``nulls``: where a value is
        null (its column's null cell)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        levels = np.asarray(self.levels, dtype=np.int64)
        cells = np.asarray(self.value_cells, dtype=np.int64)
        level = lattice_level(np.nan_to_num(x), np.maximum(levels, 2))
        on_lattice = (level * cells) // np.maximum(levels, 1)
        binned = np.clip(np.floor((np.nan_to_num(x) + 1.0) * cells / 2.0), 0, cells - 1)
        out = np.where(levels >= 2, on_lattice, binned).astype(np.int64)
        if nulls is not None:
            out = np.where(nulls, cells, out)
        return out

    def decode(
        self,
        codes: np.ndarray,
        rng: np.random.Generator,
        on_bounds: dict[int, tuple[float, float]] | None = None,
        shapes: dict[int, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scaled values, null mask)`` of ``(n, d)`` cells: a uniform level among a lattice
        cell's levels, a uniform point of a continuous cell (the rows of one cell as one
        stratified sample: ``core.sampling.stratified_uniforms``); null cells give NaN.
        ``on_bounds``: per column of :attr:`points`, the shares of its first and last cells'
        rows that sit exactly on its lower and upper bound (where a share is above 0, the rest
        take the cell's other values). ``shapes``: per column of :attr:`points`, each sub-cell's
        share of its cell's rows (:meth:`shape_cells`; a bound level's is that of the rows on
        the bound where no share puts them there): a row's stratified uniform is read through
        its cell's distribution over its sub-cells (uniform within a continuous sub-cell)."""
        codes = np.asarray(codes, dtype=np.int64)
        out = np.empty(codes.shape, dtype=np.float64)
        nulls = np.zeros(codes.shape, dtype=bool)
        for j, (levels, cells) in enumerate(zip(self.levels, self.value_cells, strict=True)):
            code = codes[:, j]
            nulls[:, j] = code >= cells
            cell = np.minimum(code, cells - 1)
            # the rows of a cell draw one stratified sample: they spread over it evenly
            u = stratified_uniforms(code, cells + 1, rng)
            shares = None if on_bounds is None else on_bounds.get(j)
            if shares is not None:
                u, at = _off_bounds(u, cell, cells, shares)
            shape = None if shapes is None else shapes.get(j)
            if levels >= 2 and shape is not None and self.per_level(j):
                level = _level_within(u, cell, shape, cells, shares)
                out[:, j] = -1.0 + 2.0 * level / (levels - 1)
            elif levels >= 2:
                first = -(
                    -(cell * levels) // cells
                )  # the levels l with l * cells // levels == cell
                last = -(-((cell + 1) * levels) // cells) - 1
                if shares is not None:  # the rest of an edge cell with a share: off the bound
                    off = (cell == 0) & (last > first) & _off(shares, 0)
                    first = np.where(off, first + 1, first)
                    off = (cell == cells - 1) & (last > first) & _off(shares, 1)
                    last = np.where(off, last - 1, last)
                if shape is not None:  # sub-cells of equally many levels
                    where = (cell + _within(u, cell, np.reshape(shape, (cells, -1)))) / cells
                    level = np.clip(np.floor(where * levels), first, last).astype(np.int64)
                else:
                    level = first + np.floor(u * (last - first + 1)).astype(np.int64)
                out[:, j] = -1.0 + 2.0 * np.minimum(level, levels - 1) / (levels - 1)
            else:
                if shape is not None:
                    u = _within(u, cell, np.reshape(shape, (cells, -1)))
                out[:, j] = -1.0 + 2.0 * (cell + u) / cells
            if shares is not None:
                out[:, j] = np.where(at < 0, -1.0, np.where(at > 0, 1.0, out[:, j]))
        return np.where(nulls, np.nan, out), nulls


def _off_bounds(
    u: np.ndarray, cell: np.ndarray, cells: int, shares: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """``(u, at)``: which rows sit on a bound (``at`` -1 the lower, +1 the upper, else 0: the
    first ``shares[0]`` of the first cell's stratified uniforms ``u``, the last ``shares[1]`` of
    the last cell's), and the other rows' uniforms stretched over what is left of their cell."""
    lower, upper = shares
    first, last = cell == 0, cell == cells - 1
    at = np.where(first & (u < lower), -1, np.where(last & (u >= 1.0 - upper), 1, 0))
    rest = np.where(first, (u - lower) / max(1.0 - lower, 1e-12), u)
    rest = np.where(last, rest / max(1.0 - upper, 1e-12), rest)
    return np.clip(rest, 0.0, 1.0 - 1e-12), at


def bounds_apart(one_way: np.ndarray, bounds: np.ndarray, cells: int) -> np.ndarray:
    """A one-way of ``cells`` value cells (then its null cell, if any) with ``bounds``' rows (on
    the lower, then the upper bound) as cells of their own: the lower bound, the cells without
    the bounds' rows, the upper bound, the null cell."""
    inner = np.array(one_way, dtype=np.result_type(one_way, bounds))
    inner[0] -= bounds[0]
    inner[cells - 1] -= bounds[1]
    return np.concatenate([[bounds[0]], inner[:cells], [bounds[1]], inner[cells:]])


def _off(shares: tuple[float, float] | None, side: int) -> bool:
    """Whether ``shares`` puts rows on the lower (0) or upper (1) bound."""
    return shares is not None and shares[side] > 0.0


def _within(u: np.ndarray, cell: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Positions in [0, 1) of uniforms ``u`` through the inverse distribution of each row's
    ``cell``: uniform within each of its equal sub-cells, which hold ``shape[cell]`` of it."""
    shape = np.asarray(shape, dtype=np.float64)
    parts = shape.shape[1]
    cdf = np.concatenate([np.zeros((shape.shape[0], 1)), np.cumsum(shape, axis=1)], axis=1)
    cdf /= np.maximum(cdf[:, -1:], 1e-300)
    rows = cdf[cell]
    k = np.clip((rows[:, 1:] <= u[:, None]).sum(axis=1), 0, parts - 1)
    lo, hi = rows[np.arange(u.size), k], rows[np.arange(u.size), k + 1]
    within = np.where(hi > lo, (u - lo) / np.maximum(hi - lo, 1e-300), 0.5)
    return np.clip((k + within) / parts, 0.0, 1.0 - 1e-12)


def _level_within(
    u: np.ndarray,
    cell: np.ndarray,
    shape: np.ndarray,
    cells: int,
    shares: tuple[float, float] | None,
) -> np.ndarray:
    """Levels of uniforms ``u`` through each row's ``cell``'s distribution over its levels,
    ``shape`` (each level's share of its cell); a bound level whose share puts rows on the
    bound is left to those rows."""
    w = np.asarray(shape, dtype=np.float64).copy()
    levels = w.size
    owner = (np.arange(levels) * cells) // levels
    if _off(shares, 0) and owner[1] == 0:
        w[0] = 0.0
    if _off(shares, 1) and owner[-2] == cells - 1:
        w[-1] = 0.0
    total = np.bincount(owner, weights=w, minlength=cells)
    even = 1.0 / np.bincount(owner, minlength=cells)
    w = np.where(total[owner] > 0.0, w / np.maximum(total[owner], 1e-300), even[owner])
    start = np.concatenate([[0.0], np.cumsum(w)])[np.searchsorted(owner, np.arange(cells))]
    ends = owner + np.cumsum(w) - start[owner]
    level = np.searchsorted(ends, cell + u, side="right")
    return np.clip(level, 0, levels - 1)


@dataclass(frozen=True)
class CellMarginals:
    """The joint cell counts of column sets (``scopes``), each flattened in C order."""

    coding: CellCoding
    scopes: tuple[Scope, ...]
    points: tuple[int, ...] = ()
    """Columns of :attr:`CellCoding.points` whose rows on each bound are counted after the
    scopes (their one-ways must be among the scopes: :meth:`split_points`)."""
    shapes: tuple[int, ...] = ()
    """Columns of :attr:`CellCoding.points` whose rows strictly between the bounds are counted
    in the sub-cells of their shape, after the bounds (:meth:`split_shapes`)."""

    @property
    def sizes(self) -> np.ndarray:
        """Counts of each scope, then two (the rows on the lower and the upper bound) of each
        column of :attr:`points`, then the sub-cells of each column of :attr:`shapes`."""
        cells = self.coding.sizes
        scopes = [int(np.prod([cells[v] for v in s])) for s in self.scopes]
        shapes = [self.coding.shape_cells(j).size for j in self.shapes]
        return np.array(scopes + [2] * len(self.points) + shapes, dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """Position of each scope's first count (``(m + 1,)``)."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def counts(self, x: np.ndarray, nulls: np.ndarray | None = None) -> np.ndarray:
        """One chunk's counts of every scope, concatenated (int64)."""
        codes = self.coding.codes(x, nulls)
        cells = self.coding.sizes
        offsets = self.offsets  # once per chunk: each call sums every scope's size
        out = np.zeros(int(offsets[-1]), dtype=np.int64)
        for scope, start, size in zip(self.scopes, offsets, np.diff(offsets), strict=False):
            index = np.ravel_multi_index(
                tuple(codes[:, v] for v in scope), [cells[v] for v in scope]
            )
            out[start : start + size] = np.bincount(index, minlength=int(size))
        if self.points:
            columns = list(self.points)
            values = np.nan_to_num(np.atleast_2d(np.asarray(x, dtype=np.float64))[:, columns])
            kept = (
                np.ones(values.shape, bool) if nulls is None else ~np.atleast_2d(nulls)[:, columns]
            )
            on = np.stack([((values <= -1.0) & kept).sum(axis=0), ((values >= 1.0) & kept).sum(0)])
            start = int(offsets[len(self.scopes)])
            out[start : start + 2 * len(columns)] = on.T.ravel()
        if self.shapes:
            values = np.atleast_2d(np.asarray(x, dtype=np.float64))
            first = len(self.scopes) + len(self.points)
            for k, j in enumerate(self.shapes):
                v = values[:, j]
                inside = (v > -1.0) & (v < 1.0)  # NaN (a null) is neither
                if nulls is not None:
                    inside &= ~np.atleast_2d(nulls)[:, j]
                levels = self.coding.levels[j]
                parts = self.coding.shape_cells(j).size
                if levels >= 2:
                    sub = lattice_level(v[inside], levels)
                    sub = sub[(sub > 0) & (sub < levels - 1)]
                    if not self.coding.per_level(j):
                        sub = (sub * parts) // levels
                else:
                    sub = np.clip(np.floor((v[inside] + 1.0) * parts / 2.0), 0, parts - 1)
                start = int(offsets[first + k])
                out[start : start + parts] = np.bincount(
                    np.asarray(sub, dtype=np.int64), minlength=parts
                )
        return out

    def split(self, counts: np.ndarray) -> dict[Scope, np.ndarray]:
        """Every scope's counts from the concatenated ones."""
        offsets = self.offsets
        return {s: counts[offsets[i] : offsets[i + 1]] for i, s in enumerate(self.scopes)}

    def split_points(self, counts: np.ndarray) -> dict[int, np.ndarray]:
        """Each column of :attr:`points`: its one-way with its bounds as cells of their own,
        from the concatenated counts: the lower bound, its cells (the first and the last
        without the rows on the bounds), the upper bound, then its null cell (``sizes[j] + 2``
        counts)."""
        found = self.split(counts)
        start = int(self.offsets[len(self.scopes)])
        out = {}
        for k, j in enumerate(self.points):
            if (j,) not in found:
                raise ValueError(f"column {j}'s one-way is not counted: its bounds cannot split it")
            bounds = counts[start + 2 * k : start + 2 * k + 2]
            out[j] = bounds_apart(found[(j,)], bounds, self.coding.value_cells[j])
        return out

    def split_shapes(self, counts: np.ndarray) -> dict[int, np.ndarray]:
        """Each column of :attr:`shapes`: its rows strictly between its bounds in the sub-cells
        of its shape (a wide lattice's levels, else :data:`SHAPE_CELLS` equal ones per cell),
        in order, from the concatenated counts."""
        offsets, first = self.offsets, len(self.scopes) + len(self.points)
        return {
            j: counts[offsets[first + k] : offsets[first + k + 1]]
            for k, j in enumerate(self.shapes)
        }
