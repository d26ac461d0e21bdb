"""Every column coded into a few cells, and the marginals (joint cell counts) of column sets.

A categorical column, and a lattice column with at most :data:`MAX_CELLS` levels, keeps one cell
per level; a wider lattice (an integer or date column) is cut into :data:`MAX_CELLS` cells of
equally many levels, and a continuous column into :data:`MAX_CELLS` equal cells of [-1, 1] (the
cells the marginal yardstick ``shared/tools/marginals.py`` scores). A nullable column has one
more cell, its nulls. The coding is a function of the config alone. Decoding draws a value within
the cell: a uniform level among the cell's levels, a uniform point of a continuous cell, the
rows of one cell as one stratified sample (so they spread over it evenly).

A continuous column's values may sit exactly on a bound (a rain gauge's zeros, a sensor clipped
at its top): its one-way is also counted with the two bounds as cells of their own
(:meth:`CellCoding.point_codes`), and decoding puts a share of its edge cells' rows on the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.chebyshev import lattice_level
from dpsmooth_spark.core.sampling import stratified_uniforms

MAX_CELLS = 16
"""Cells of a wide integer or a continuous column."""

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
        """The continuous columns: their bounds are cells of their own in :meth:`point_codes`."""
        return tuple(j for j, levels in enumerate(self.levels) if levels < 2)

    def point_codes(self, x: np.ndarray, codes: np.ndarray, column: int) -> np.ndarray:
        """``(n,)`` cells of a continuous column's one-way with its bounds apart, from scaled
        rows ``x`` and their cells (:meth:`codes`): 0 the lower bound, ``1 + c`` cell ``c``
        without the bounds, ``cells + 1`` the upper bound, then the null cell
        (``sizes[column] + 2`` cells)."""
        values = np.nan_to_num(np.atleast_2d(np.asarray(x, dtype=np.float64))[:, column])
        cells, code = self.value_cells[column], codes[:, column]
        out = np.where(values <= -1.0, 0, np.where(values >= 1.0, cells + 1, 1 + code))
        return np.where(code >= cells, cells + 2, out)

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
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scaled values, null mask)`` of ``(n, d)`` cells: a uniform level among a lattice
        cell's levels, a uniform point of a continuous cell (the rows of one cell as one
        stratified sample: ``core.sampling.stratified_uniforms``); null cells give NaN.
        ``on_bounds``: per continuous column, the shares of its first and last cells' rows that
        sit exactly on its lower and upper bound."""
        codes = np.asarray(codes, dtype=np.int64)
        out = np.empty(codes.shape, dtype=np.float64)
        nulls = np.zeros(codes.shape, dtype=bool)
        for j, (levels, cells) in enumerate(zip(self.levels, self.value_cells, strict=True)):
            code = codes[:, j]
            nulls[:, j] = code >= cells
            cell = np.minimum(code, cells - 1)
            # the rows of a cell draw one stratified sample: they spread over it evenly
            u = stratified_uniforms(code, cells + 1, rng)
            if levels >= 2:
                first = -(
                    -(cell * levels) // cells
                )  # the levels l with l * cells // levels == cell
                last = -(-((cell + 1) * levels) // cells) - 1
                level = first + np.floor(u * (last - first + 1)).astype(np.int64)
                out[:, j] = -1.0 + 2.0 * np.minimum(level, levels - 1) / (levels - 1)
            else:
                out[:, j] = -1.0 + 2.0 * (cell + u) / cells
                if on_bounds is not None and j in on_bounds:
                    out[:, j] = _on_bounds(out[:, j], cell, u, cells, on_bounds[j])
        return np.where(nulls, np.nan, out), nulls


def _on_bounds(
    values: np.ndarray, cell: np.ndarray, u: np.ndarray, cells: int, shares: tuple[float, float]
) -> np.ndarray:
    """``values`` of a continuous column with the first ``shares[0]`` of its first cell's
    stratified uniforms ``u`` on the lower bound, the last ``shares[1]`` of its last cell's on
    the upper one, and the rest spread over the cell."""
    lower, upper = shares
    first, last = cell == 0, cell == cells - 1
    within = np.where(first, (u - lower) / max(1.0 - lower, 1e-12), u)
    within = np.where(last, within / max(1.0 - upper, 1e-12), within)
    out = np.where(first | last, -1.0 + 2.0 * (cell + np.clip(within, 0.0, 1.0)) / cells, values)
    out = np.where(first & (u < lower), -1.0, out)
    return np.where(last & (u >= 1.0 - upper), 1.0, out)


@dataclass(frozen=True)
class CellMarginals:
    """The joint cell counts of column sets (``scopes``), each flattened in C order."""

    coding: CellCoding
    scopes: tuple[Scope, ...]
    points: tuple[int, ...] = ()
    """Continuous columns whose one-way with the bounds apart (:meth:`CellCoding.point_codes`)
    is counted after the scopes."""

    @property
    def sizes(self) -> np.ndarray:
        """Counts of each scope, then of each one-way with its bounds apart."""
        cells = self.coding.sizes
        scopes = [int(np.prod([cells[v] for v in s])) for s in self.scopes]
        return np.array(scopes + [cells[j] + 2 for j in self.points], dtype=np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """Position of each scope's first count (``(m + 1,)``)."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def counts(self, x: np.ndarray, nulls: np.ndarray | None = None) -> np.ndarray:
        """One chunk's counts of every scope, concatenated (int64)."""
        codes = self.coding.codes(x, nulls)
        cells = self.coding.sizes
        out = np.zeros(int(self.offsets[-1]), dtype=np.int64)
        for scope, start, size in zip(self.scopes, self.offsets, self.sizes, strict=False):
            index = np.ravel_multi_index(
                tuple(codes[:, v] for v in scope), [cells[v] for v in scope]
            )
            out[start : start + size] = np.bincount(index, minlength=int(size))
        at = len(self.scopes)
        for k, j in enumerate(self.points):
            start, size = self.offsets[at + k], self.sizes[at + k]
            found = self.coding.point_codes(x, codes, j)
            out[start : start + size] = np.bincount(found, minlength=int(size))
        return out

    def split(self, counts: np.ndarray) -> dict[Scope, np.ndarray]:
        """Every scope's counts from the concatenated ones."""
        offsets = self.offsets
        return {s: counts[offsets[i] : offsets[i + 1]] for i, s in enumerate(self.scopes)}

    def split_points(self, counts: np.ndarray) -> dict[int, np.ndarray]:
        """Every one-way with its bounds apart, from the concatenated counts."""
        offsets, at = self.offsets, len(self.scopes)
        return {j: counts[offsets[at + k] : offsets[at + k + 1]] for k, j in enumerate(self.points)}
