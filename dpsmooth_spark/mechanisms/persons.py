"""Synthetic persons: the adaptive loop's tables for a release whose privacy unit is a person.

The model is the adaptive mechanism's graphical model over the kept rows, with one more variable,
``rows`` (how many rows the row's unit kept, 1..k); a column declared per unit holds the unit's
value on each of its rows (``core/unit_tables.py``). The loop measures three kinds of table:

- ``rows``: a marginal of the rows, as for a table of records (sensitivity ``k`` per unit);
- ``units``: over a scope (one that holds ``rows``, or a per-unit column alone), each unit adds
  its rows' shares of the cells (``1 / m`` per row: sensitivity 1 per unit). Over per-unit
  columns it counts units. The model reads it as its marginal over the scope and ``rows`` times
  ``1 / m``, summed over ``rows`` where the scope does not hold it;
- ``agreement``: for a row column, how often two distinct rows of one unit share a cell, one
  number, at most one per unit with two rows or more (sensitivity 1). Its model: a unit
  draws a prototype row; each of its rows takes the prototype's cell with probability ``lambda``
  (else its own draw), so every row keeps the model's distribution given the unit and two rows
  agree with probability ``lambda^2 + (1 - lambda^2) q``, ``q`` the agreement of two independent
  draws. ``lambda`` matches the measured agreement where it exceeds ``q`` by more than twice its
  noise; else (or unmeasured) it is 0: no relation the budget cannot show.

The first round measures every column's one-way marginal, every row column's agreement, and the
units' table over the per-unit columns and ``rows``; a unit or agreement table's score is in rows
(its L1 error in units times the rows per unit), as a marginal's. The model always holds the
per-unit columns and ``rows`` in one clique. Sampling draws the units' attributes and row
counts from the model's unit distribution (its rows' marginal divided by ``rows``), then each
unit's prototype and rows from the model given them; one uniform per row decides, column by
column, which cells it takes from the prototype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals, bounds_apart
from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.core.graphical import GraphicalModel, Observed
from dpsmooth_spark.core.unit_tables import SCALE, UnitTables, row_share
from dpsmooth_spark.mechanisms.adaptive import (
    LoopResult,
    LoopSettings,
    run_loop,
)
from dpsmooth_spark.mechanisms.loop_tables import (
    MAX_CANDIDATE_CELLS,
    Candidate,
    Measurement,
    Scope,
    candidates,
)
from dpsmooth_spark.mechanisms.records import POINTS, POOLED, SHAPE, RecordTables
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def unit_tables(
    coding: CellCoding, per_unit: Sequence[bool], max_rows: int, settings: LoopSettings
) -> UnitTables:
    """What the pass counts for a release of persons: every candidate of the loop (the unit
    tables of up to ``max_way`` variables whose model scope, with ``rows``, fits in
    ``MAX_CANDIDATE_CELLS``, within the pass's limit; every row column's agreement table).

    Raises:
        ValueError: the per-unit columns and ``rows`` have more than ``MAX_CANDIDATE_CELLS``
            cells together (a function of the config).
    """
    d = len(coding.levels)
    sizes = (*coding.sizes, max_rows)
    unit = (*(j for j in range(d) if per_unit[j]), d)
    if int(np.prod([sizes[v] for v in unit])) > MAX_CANDIDATE_CELLS:
        raise ValueError(
            f"the per-unit columns and the rows per unit have more than {MAX_CANDIDATE_CELLS} "
            "cells together: declare fewer per-unit columns, or narrower ones"
        )
    scopes = [
        c.scope
        for c in candidates(sizes, min(settings.max_way, d + 1))
        if int(np.prod([sizes[v] for v in {*c.scope, d}])) <= MAX_CANDIDATE_CELLS
    ]
    rows = [c.scope for c in candidates(sizes, min(settings.max_way, d + 1))]
    return UnitTables(
        coding,
        tuple(bool(v) for v in per_unit),
        max_rows,
        tuple(dict.fromkeys([*(s for s in scopes if d in s), unit, *((v,) for v in unit)])),
        tuple(j for j in range(d) if not per_unit[j]),
        tuple(rows),
        CellMarginals(coding, (), coding.points, coding.points) if coding.points else None,
    )


ROWS_LIKE = ("rows", POINTS, SHAPE, POOLED)
"""Kinds that count rows (a unit moves them by ``k``): a marginal, a one-way with its bounds
apart, a shape, a pooled one-way (``mechanisms/records.py``)."""


class PersonTables(RecordTables):
    """The loop's tables for a release of persons (module docstring); a column's bounds and
    shape as for a table of records (:class:`RecordTables`)."""

    def __init__(
        self, spec: UnitTables, answers: dict[tuple[str, Scope], np.ndarray], max_way: int
    ) -> None:
        coding = spec.coding
        points = {
            j: bounds_apart(answers["rows", (j,)], answers["points", (j,)], coding.value_cells[j])
            / SCALE
            for j in coding.points
            if ("points", (j,)) in answers and ("rows", (j,)) in answers
        }
        shapes = {j: v / SCALE for (kind, (j, *_)), v in answers.items() if kind == "shape"}
        super().__init__(
            coding, lambda scope: answers["rows", scope], points, max_way, shapes, spec.sizes
        )
        self.spec, self.answers = spec, answers
        self._agreement_tables: dict[int, dict[int, Measurement]] = {}
        self.k = spec.max_rows
        self.rows = spec.rows_variable
        self.unit = (*(j for j, on in enumerate(spec.per_unit) if on), self.rows)
        self.units = 0.0  # the prepared model's unit count: each rows value's rows over it

    def first(self) -> list[Candidate]:
        """Every column's one-way marginal (its bounds apart where it has them,
        :meth:`RecordTables.one_ways`), every row column's agreement, and the units' table over
        the per-unit columns and ``rows``."""
        rows = self.one_ways()
        rows += [self._candidate("agreement", (j,)) for j in self.spec.pair_columns]
        return [*rows, self._candidate("units", self.unit)]

    @property
    def keeps_low_picks(self) -> bool:
        """A release of persons gives a short loop's low picks to its first round, whose tables
        (the one-ways, agreements and units) are worth more at that signal (``docs/mechanisms.md``,
        persons)."""
        return False

    def coarsen(self, measurements: Sequence[Measurement], total: float, std: float) -> None:
        """A release of persons reads every table in its cells."""

    def pairing_cells(self, c: Candidate) -> int:
        """A release of persons reads every table in its cells."""
        return c.cells

    def pool(self) -> list[Candidate]:
        found = [self._candidate("rows", s) for s in self.spec.row_scopes]
        found += [self._candidate("units", s) for s in self.spec.unit_scopes]
        return found + [self._candidate("agreement", (j,)) for j in self.spec.pair_columns]

    def scale(self, c: Candidate) -> float:
        """A unit or agreement table counts units: times the rows per unit (``total / units``, at
        most ``k``), its error is in rows, as a marginal's."""
        if c.kind in ROWS_LIKE:
            return 1.0
        return min(float(self.k), self._total / max(self.units, 1.0))

    def _cells(self, scope: Scope) -> int:
        return int(np.prod([self.sizes[v] for v in scope]))

    def _candidate(self, kind: str, scope: Scope) -> Candidate:
        cells = 1 if kind == "agreement" else self._cells(scope)
        return Candidate(scope, cells, float(len(scope)), kind)

    def size(self, c: Candidate) -> float:
        """An agreement counts as its column's cells: it sums that column's pairs of rows."""
        return float(self.sizes[c.scope[0]] if c.kind == "agreement" else c.cells)

    def exact(self, c: Candidate) -> np.ndarray:
        if c.kind in (POINTS, SHAPE, POOLED):
            return super().exact(c)
        return self.answers[c.kind, c.scope] / SCALE

    def sensitivity(self, c: Candidate) -> float:
        """In the accountant's units (it multiplies by ``k``): a marginal of the rows moves by
        ``k`` when a unit comes or goes, a unit or agreement table by 1."""
        return super().sensitivity(c) if c.kind in ROWS_LIKE else 1.0 / self.k

    @property
    def structure(self) -> tuple[Scope, ...]:
        """The per-unit columns and ``rows`` in one clique: the sampler draws units there."""
        return (self.unit,)

    def prepare(self, model: GraphicalModel, total: float, scopes: Sequence[Scope] = ()) -> None:
        super().prepare(model, total, scopes)
        rows = self.marginal((self.rows,))
        self.units = total * float(np.sum(rows / np.arange(1, self.k + 1)))

    def model_scope(self, c: Candidate) -> Scope | None:
        if c.kind == "agreement":
            return None
        return tuple(sorted({*c.scope, self.rows})) if c.kind == "units" else c.scope

    def _per_row(self, scope: Scope) -> np.ndarray:
        """Each cell's ``rows`` value over ``scope`` (which holds ``rows``), shaped to broadcast
        over its table."""
        at = scope.index(self.rows)
        shape = [self.k if i == at else 1 for i in range(len(scope))]
        return np.arange(1, self.k + 1, dtype=np.float64).reshape(shape)

    def _shares(self, scope: Scope) -> np.ndarray:
        """What a row adds to a unit table, per cell of ``scope`` (``row_share``)."""
        return row_share(self._per_row(scope).astype(np.int64))

    def _unit_query(self, scope: Scope, values: np.ndarray, std: float) -> Observed:
        """A units' table over ``scope`` as the model reads it: the rows' marginal over ``scope``
        and ``rows``, each cell divided by its ``rows`` value, summed over ``rows`` unless
        ``scope`` holds it."""
        full = tuple(sorted({*scope, self.rows}))
        return Observed(full, values, std, self._shares(full), scope)

    def observed(self, m: Measurement) -> list[Observed]:
        if m.kind == "agreement":
            self._agreement_tables.setdefault(m.scope[0], {})[m.round] = m
            return []
        if m.kind == "units":
            return [self._unit_query(m.scope, m.values, m.std)]
        return super().observed(m)

    def rows_sum(self, m: Measurement) -> tuple[float, float] | None:
        """A table of the rows (a shape: none, ``RecordTables.rows_sum``); a unit table that
        holds ``rows``: each cell divided by what a row adds to it; other tables: none."""
        if m.kind in ROWS_LIKE:
            return super().rows_sum(m)
        if m.kind == "units" and self.rows in m.scope:
            per_row = (
                1.0
                / np.broadcast_to(self._shares(m.scope), [self.sizes[v] for v in m.scope]).ravel()
            )
            return float(np.dot(m.values, per_row)), m.std**2 * float(np.sum(per_row**2))
        return None

    def _pair_model(self, column: int) -> tuple[float, float]:
        """``(independent, units)``: under the prepared model, how often two independent rows
        of a unit share ``column``'s cell given the unit, among the units with two rows or more
        (``units``, how many)."""
        scope = tuple(sorted({*self.unit, column}))
        joint = self.marginal(scope).reshape([self.sizes[v] for v in scope])
        joint = np.moveaxis(joint, scope.index(column), -1).reshape(-1, self.sizes[column])
        cell = joint.sum(axis=1)
        per_row = np.broadcast_to(
            self._per_row(self.unit), [self.sizes[v] for v in self.unit]
        ).ravel()
        weight = np.where(per_row >= 2, self._total * cell / per_row, 0.0)
        given = joint / np.maximum(cell, 1e-300)[:, None]
        units = max(float(weight.sum()), 1e-300)
        return float((given**2 * weight[:, None]).sum()) / units, units

    def agreement(self, column: int) -> float:
        """``lambda`` of ``column`` (module docstring): the inverse-variance mean of its measured
        agreement against the prepared model; 0 where none was measured, or where it exceeds the
        model's ``q`` by less than twice its noise."""
        found = list(self._agreement_tables.get(column, {}).values())
        if not found:
            return 0.0
        weights = np.array([1.0 / m.std**2 for m in found])
        measured = sum(w * float(m.values[0]) for w, m in zip(weights, found, strict=True))
        measured /= weights.sum()
        q, units = self._pair_model(column)
        excess = measured - units * q
        if excess <= 2.0 / np.sqrt(weights.sum()):
            return 0.0
        return float(np.sqrt(np.clip(excess / units / max(1.0 - q, 1e-12), 0.0, 1.0)))

    def predict(self, c: Candidate) -> np.ndarray:
        if c.kind == "units":
            query = self._unit_query(c.scope, np.zeros(0), 1.0)
            marginal = self.marginal(query.scope)
            return self._total * query.answer(
                marginal.reshape([self.sizes[v] for v in query.scope])
            )
        if c.kind == "agreement":
            q, units = self._pair_model(c.scope[0])
            share = self.agreement(c.scope[0]) ** 2
            return np.array([units * (share + (1.0 - share) * q)])
        return super().predict(c)

    def agreements(self, model: GraphicalModel, total: float) -> np.ndarray:
        """``lambda`` per released column (0 for per-unit columns) under ``model``."""
        self.prepare(model, total)
        out = np.zeros(len(self.spec.per_unit))
        for j in self.spec.pair_columns:
            out[j] = self.agreement(j)
        return out


def release(
    counts: np.ndarray,
    spec: UnitTables,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    settings: LoopSettings | None = None,
) -> tuple[LoopResult, PersonTables]:
    """The loop on the exact counts of a pass that counted ``spec``."""
    settings = settings or LoopSettings()
    tables = PersonTables(spec, spec.split(np.asarray(counts, np.float64)), settings.max_way)
    return run_loop(tables, accountant, noise, settings), tables


def replay(data: dict, spec: UnitTables, settings: LoopSettings) -> tuple[LoopResult, PersonTables]:
    """The fit again from persisted measurements (a retry: post-processing only)."""
    tables = PersonTables(spec, {}, settings.max_way)
    return LoopResult.from_dict(data, tables, settings.iterations), tables


def units_released(result: LoopResult, tables: PersonTables) -> int:
    """The model's unit count (the noisy counts' post-processing)."""
    tables.prepare(result.model, result.total)
    return max(1, round(tables.units))


def draw_persons(
    result: LoopResult,
    tables: PersonTables,
    lambdas: np.ndarray,
    units: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """``(unit of each row, cells of each row)`` of ``units`` synthetic units: their attributes
    and row counts from the unit distribution (systematic sampling), then a prototype and their
    rows from the model given them, each row taking the prototype's cell of column ``j`` where
    its uniform is below ``lambdas[j]``."""
    spec, model = tables.spec, result.model
    cliques = model.clique_marginals()  # one belief propagation for every draw below
    shape = [tables.sizes[v] for v in tables.unit]
    shares = model.marginal(tables.unit, cliques).reshape(shape) / tables._per_row(tables.unit)
    shares = shares.ravel()
    shares = shares / shares.sum()
    cumulative = np.cumsum(shares)
    cumulative[-1] = 1.0
    picked = np.searchsorted(cumulative, (np.arange(units) + rng.random()) / units, side="right")
    picked = rng.permutation(np.minimum(picked, shares.size - 1))
    attributes = np.column_stack(np.unravel_index(picked, [tables.sizes[v] for v in tables.unit]))
    rows = attributes[:, -1] + 1
    d = spec.rows_variable
    prototypes = model.sample(units, rng, given=(tables.unit, attributes), marginals=cliques)
    prototypes = prototypes[:, :d]
    unit = np.repeat(np.arange(units), rows)
    place = np.arange(unit.size) - np.repeat(np.cumsum(rows) - rows, rows)  # the row's number
    codes = np.empty((unit.size, d), dtype=np.int64)
    # the units' r-th rows are one stratified set each (so are their uniforms): a column's
    # counts follow the model up to rounding, and a unit's own rows stay independent draws
    for r in range(int(rows.max(initial=0))):
        at = np.flatnonzero(place == r)
        given = (tables.unit, attributes[unit[at]])
        fresh = model.sample(at.size, rng, given=given, marginals=cliques)[:, :d]
        u = (rng.permutation(at.size) + rng.random()) / at.size
        take = u[:, None] < lambdas[None, :]
        codes[at] = np.where(take, prototypes[unit[at]], fresh)
    return unit, codes


def persons_table(
    result: LoopResult,
    tables: PersonTables,
    lambdas: np.ndarray,
    codec: TableCodec,
    units: int,
    rng: np.random.Generator,
    unit_column: str,
    first_id: int = 0,
    prefix: str = "u",
) -> pa.Table:
    """``units`` synthetic units decoded to the input's types, with ``unit_column`` first: fresh
    ids ``{prefix}-{n}`` from ``first_id`` (never a real one); a per-unit column's value is
    decoded once per unit; ``lambdas``: :meth:`PersonTables.agreements`."""
    unit, codes = draw_persons(result, tables, lambdas, units, rng)
    scaled, nulls = tables.spec.coding.decode(codes, rng, result.on_bounds, result.shapes)
    owner = np.r_[0, np.flatnonzero(np.diff(unit)) + 1][unit]  # each unit's first row
    per_unit = np.flatnonzero(tables.spec.per_unit)
    scaled[:, per_unit] = scaled[owner][:, per_unit]
    nulls[:, per_unit] = nulls[owner][:, per_unit]
    values = codec.bounds().unscale(np.where(nulls, 0.0, scaled))
    table = codec.decode(values, nulls if nulls.any() else None)
    ids = pa.array([f"{prefix}-{first_id + u}" for u in unit], type=pa.string())
    return table.add_column(0, unit_column, ids)


def unit_table(
    rows: pa.Table, unit_column: str, per_unit: Sequence[str], count_column: str
) -> pa.Table:
    """The units of a table of persons, one row each in the order they first appear: the unit's
    id, its per-unit columns (constant over its rows) and ``count_column``, its row count. A
    function of the released rows: it spends nothing."""
    found = rows.group_by(unit_column, use_threads=False).aggregate(
        [*((name, "first") for name in per_unit), ([], "count_all")]
    )
    names = {f"{name}_first": name for name in per_unit} | {"count_all": count_column}
    found = found.rename_columns([names.get(n, n) for n in found.column_names])
    return found.select([unit_column, *per_unit, count_column])
