"""The counts a release of synthetic persons reads, from the kept rows grouped by privacy unit.

With a privacy unit the loop's table is the kept rows (at most ``k`` per unit) with one more
column, ``rows``: how many rows the row's unit kept (1..k). A column declared per unit takes, on
every row of a unit, the value of the unit's first kept row. One pass over the rows, grouped by
unit, counts two kinds of tables, each moved by at most one (in L1) when a unit comes or goes
(docs/privacy.md section 3k):

- unit tables: over a scope of these variables, each unit adds its rows' shares of its cells:
  a row of a unit of ``m`` rows adds ``floor(SCALE / m)`` to its cell (a unit adds at most
  ``SCALE`` in all). Over per-unit columns and ``rows`` alone, that is the units' count;
- agreement: for a row column, how often two distinct rows of one unit share a cell: each unit
  of ``m >= 2`` rows adds ``sum_x (n_x^2 - n_x) / (m (m - 1))`` (``n_x`` its rows in cell ``x``:
  the share of its ordered pairs of distinct rows that agree, at most one), times ``SCALE`` and
  floored per unit and cell;
- the rows on each bound of a column with bounds apart and its shape, as a table of records'
  (``CellMarginals.points`` and ``shapes``, each row adding ``SCALE``: a unit moves them by at
  most ``k``, as a marginal of the rows).

Everything is exact integers of the unit's own rows, so the merged counts do not depend on how
the rows were partitioned, as long as each unit's rows meet in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.bounds import scale_to_unit
from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals

Scope = tuple[int, ...]

SCALE = 1 << 20
"""A table's integers are its values times this, floored."""


def row_share(rows: np.ndarray | int) -> np.ndarray:
    """What one row of a unit of ``rows`` rows adds to a unit table: ``floor(SCALE / m) / SCALE``
    (at most ``1 / m``, so a unit adds at most one)."""
    return (SCALE // np.asarray(rows, dtype=np.int64)) / SCALE


@dataclass(frozen=True)
class UnitTables:
    """What the pass counts for a release of persons.

    Attributes:
        coding: the cells of the released columns.
        per_unit: per released column, whether it is an attribute of the unit.
        max_rows: ``k``, the most rows a unit keeps (the ``rows`` column has ``k`` cells).
        unit_scopes: scopes of the unit tables, over the released columns and ``rows`` (the
            last variable, :attr:`rows_variable`).
        pair_columns: the row columns whose agreement is counted.
    """

    coding: CellCoding
    per_unit: tuple[bool, ...]
    max_rows: int
    unit_scopes: tuple[Scope, ...]
    pair_columns: tuple[int, ...]
    row_scopes: tuple[Scope, ...] = ()
    detail: CellMarginals | None = None
    """The columns whose rows on the bounds and whose shapes are counted (its ``points`` and
    ``shapes``; its ``scopes`` empty)."""

    @property
    def rows_variable(self) -> int:
        """Index of the ``rows`` variable (after the released columns)."""
        return len(self.coding.levels)

    @property
    def sizes(self) -> tuple[int, ...]:
        """Cells of every variable: the released columns', then ``rows`` (``k`` cells)."""
        return (*self.coding.sizes, self.max_rows)

    def _cells(self, scope: Scope) -> int:
        return int(np.prod([self.sizes[v] for v in scope]))

    @property
    def blocks(self) -> list[tuple[str, Scope, int]]:
        """``(kind, scope, cells)`` of every counted table in the order of :meth:`counts`."""
        out = [("rows", s, self._cells(s)) for s in self.row_scopes]
        out += [("units", s, self._cells(s)) for s in self.unit_scopes]
        out += [("agreement", (j,), 1) for j in self.pair_columns]
        if self.detail is not None:
            sizes = self.detail.sizes
            out += [("points", (j,), 2) for j in self.detail.points]
            out += [
                ("shape", (j,), int(n))
                for j, n in zip(self.detail.shapes, sizes[len(self.detail.points) :], strict=True)
            ]
        return out

    @property
    def size(self) -> int:
        return sum(cells for _, _, cells in self.blocks)

    def split(self, counts: np.ndarray) -> dict[tuple[str, Scope], np.ndarray]:
        """Every table's counts from the concatenated ones, keyed by ``(kind, scope)``."""
        out, start = {}, 0
        for kind, scope, cells in self.blocks:
            out[kind, scope] = counts[start : start + cells]
            start += cells
        return out

    def counts(
        self, codes: np.ndarray, units: np.ndarray, scaled: np.ndarray | None = None
    ) -> np.ndarray:
        """The concatenated int64 counts of every table (:attr:`blocks`) over valid rows' cells
        ``codes`` (``(n, d)``) and their units' labels; the rows of one unit come in the order
        of their rank (the first is the unit's first kept row), other units' rows between them
        or not. ``scaled``: the rows' scaled values (NaN for a null), which :attr:`detail`
        counts."""
        codes = np.asarray(codes, dtype=np.int64).reshape(-1, len(self.coding.levels))
        if self.detail is not None and scaled is None:
            raise ValueError("the bounds and shapes are counted from the rows' scaled values")
        order = np.argsort(np.asarray(units), kind="stable")
        codes, labels = codes[order], np.asarray(units)[order]
        n = labels.shape[0]
        starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]]) if n else np.zeros(0, int)
        rows = np.diff(np.r_[starts, n]).astype(np.int64)
        if rows.size and rows.max() > self.max_rows:
            raise ValueError("a unit has more rows than the bound allows")
        unit_of_row = np.repeat(np.arange(starts.size), rows)
        first = codes[starts]
        per_unit = np.flatnonzero(self.per_unit)
        row_table = codes.copy()
        row_table[:, per_unit] = first[unit_of_row][:, per_unit]
        row_table = np.column_stack([row_table, (rows - 1)[unit_of_row]])
        share = (SCALE // rows)[unit_of_row]
        every = np.full(n, SCALE)
        parts = [_marginal(row_table, s, self.sizes, every) for s in self.row_scopes]
        parts += [_marginal(row_table, s, self.sizes, share) for s in self.unit_scopes]
        parts += [
            _agreement(codes[:, j], unit_of_row, rows, self.sizes[j]) for j in self.pair_columns
        ]
        if self.detail is not None and scaled is not None:
            values = np.asarray(scaled, dtype=np.float64).reshape(codes.shape)[order]
            values[:, per_unit] = values[starts][unit_of_row][:, per_unit]
            parts.append(self.detail.counts(values) * SCALE)
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _marginal(
    table: np.ndarray, scope: Scope, sizes: tuple[int, ...], weights: np.ndarray
) -> np.ndarray:
    """The integer ``weights`` of the rows summed per cell of ``scope`` (exact below 2**53)."""
    cells = [sizes[v] for v in scope]
    index = np.ravel_multi_index(tuple(table[:, v] for v in scope), cells)
    summed = np.bincount(index, weights=weights, minlength=int(np.prod(cells)))
    return summed.round().astype(np.int64)


def _agreement(codes: np.ndarray, unit: np.ndarray, rows: np.ndarray, cells: int) -> np.ndarray:
    """``sum over units with m >= 2 and cells x of floor(SCALE (n_x^2 - n_x) / (m (m - 1)))``,
    ``n_x`` the unit's rows in cell ``x`` (one number)."""
    keys, count = np.unique(unit * cells + codes, return_counts=True)
    m = rows[keys // cells]
    two = m >= 2
    value = (count[two] * (count[two] - 1) * SCALE) // (m[two] * (m[two] - 1))
    return np.array([int(value.sum())], dtype=np.int64)


def valid_codes(
    x: np.ndarray,
    nulls: np.ndarray | None,
    lower: np.ndarray,
    upper: np.ndarray,
    coding: CellCoding,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The data pass's per-record rule (``core.kernel.partial_sums``) on encoded rows ``x``:
    ``(cells of the valid rows, which rows are valid, rows left out, valid rows with a value
    outside the bounds)``. A row is valid where its only non-finite values are nulls of
    nullable columns (``nulls``); the others are clamped to the bounds."""
    codes, _, ok, invalid, outside = valid_codes_and_values(x, nulls, lower, upper, coding)
    return codes, ok, invalid, outside


def valid_codes_and_values(
    x: np.ndarray,
    nulls: np.ndarray | None,
    lower: np.ndarray,
    upper: np.ndarray,
    coding: CellCoding,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """:func:`valid_codes` with the valid rows' scaled values (NaN for a null) after their
    cells."""
    x = np.asarray(x, dtype=np.float64)
    nulls = np.zeros(x.shape, dtype=bool) if nulls is None else np.asarray(nulls, dtype=bool)
    ok = (np.isfinite(x) | nulls).all(axis=1)
    filled = np.where(nulls, lower, x)
    with np.errstate(invalid="ignore"):
        outside = (((filled < lower) | (filled > upper)) & ~nulls).any(axis=1) & ok
    scaled = scale_to_unit(np.clip(filled[ok], lower, upper), lower, upper)
    codes = coding.codes(scaled, nulls[ok])
    return codes, np.where(nulls[ok], np.nan, scaled), ok, int((~ok).sum()), int(outside.sum())
