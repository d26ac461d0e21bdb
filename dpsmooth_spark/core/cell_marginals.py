"""Every column coded into a few cells, and the marginals (joint cell counts) of column sets.

A categorical column, and a lattice column with at most :data:`MAX_CELLS` levels, keeps one cell
per level; a wider lattice (an integer or date column) is cut into :data:`MAX_CELLS` cells of
equally many levels, and a continuous column into :data:`MAX_CELLS` equal cells of [-1, 1] (the
cells the marginal yardstick ``shared/tools/marginals.py`` scores). A nullable column has one
more cell, its nulls. The coding is a function of the config alone. Decoding draws a value within
the cell: a uniform level among the cell's levels, a uniform point of a continuous cell, the
rows of one cell as one stratified sample (so they spread over it evenly).
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

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(scaled values, null mask)`` of ``(n, d)`` cells: a uniform level among a lattice
        cell's levels, a uniform point of a continuous cell (the rows of one cell as one
        stratified sample: ``core.sampling.stratified_uniforms``); null cells give NaN."""
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
        return np.where(nulls, np.nan, out), nulls


@dataclass(frozen=True)
class CellMarginals:
    """The joint cell counts of column sets (``scopes``), each flattened in C order."""

    coding: CellCoding
    scopes: tuple[Scope, ...]

    @property
    def sizes(self) -> np.ndarray:
        cells = self.coding.sizes
        return np.array([int(np.prod([cells[v] for v in s])) for s in self.scopes], dtype=np.int64)

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
        return out

    def split(self, counts: np.ndarray) -> dict[Scope, np.ndarray]:
        """Every scope's counts from the concatenated ones."""
        offsets = self.offsets
        return {s: counts[offsets[i] : offsets[i + 1]] for i, s in enumerate(self.scopes)}
