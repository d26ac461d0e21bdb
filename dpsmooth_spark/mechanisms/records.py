"""A table of records through the adaptive loop (``mechanisms/adaptive.py``): its cells, the
data pass that counts every candidate marginal, the loop on those counts, and the records drawn
from the model (on the driver, or by the executors through :func:`record_sampler`).

A continuous or wide lattice column's first-round table is its one-way with the bounds as cells
of their own (kind ``points``, ``core.cell_marginals``): still a histogram of the rows, so one
record moves one count by one. Its sums per cell tell the model the column's one-way; its bound
cells tell the share of the edge cells' rows that sit on a bound, which the model does not hold.
Where even runs of its cells would be noise, such columns are measured together as one pooled
one-way (kind ``pooled``, :meth:`RecordTables.join_first`): a record moves one count per
column. A continuous or wide lattice column keeps :data:`SHAPE_SHARE` of its
first-round budget for its shape (kind ``shape``: its rows off the bounds in sub-cells of each
cell or per level, a histogram too) where the first table's noisy count says the sub-cells
would show (:meth:`RecordTables.reserve`). Decoding places a cell's rows by its shape. After
the first round such a column may be read in groups of its cells as well (kind ``coarse``):
where the rows are too few for a pair of 16-cell columns to show through the noise
(:meth:`RecordTables.coarsen`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pyarrow as pa

from dpsmooth_spark.core.cell_marginals import MAX_CELLS, CellCoding, CellMarginals
from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.core.graphical import GraphicalModel, Observed, coarse_table, spread_evenly
from dpsmooth_spark.core.kernel import ExactSums, PassSpec
from dpsmooth_spark.core.maxent import project_to_simplex
from dpsmooth_spark.mechanisms.adaptive import (
    MIN_SIGNAL,
    LoopResult,
    LoopSettings,
    run_loop,
)
from dpsmooth_spark.mechanisms.loop_tables import (
    Candidate,
    Measurement,
    Scope,
    Tables,
    candidates,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def cell_coding(codec: TableCodec) -> CellCoding:
    """The cells of a table's columns (``core.cell_marginals``), from its public domains."""
    return CellCoding(
        tuple(int(v) for v in codec.lattice()),
        tuple(bool(v) for v in codec.null_columns),
        tuple(bool(v) for v in codec.nominal()),
    )


def record_sampler(
    result: LoopResult, coding: CellCoding
) -> Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray | None]]:
    """``draw(count, rng) -> (scaled records, null mask or None)``: what an executor needs of the
    model (its clique tables and the coding), to draw its share of the rows."""
    model, nullable, on_bounds = result.model, any(coding.nullable), result.on_bounds
    shapes = result.shapes

    def draw(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        scaled, nulls = coding.decode(model.sample(count, rng), rng, on_bounds, shapes)
        return scaled, nulls if nullable else None

    return draw


def sample_table(
    result: LoopResult, codec: TableCodec, rows: int, rng: np.random.Generator
) -> pa.Table:
    """``rows`` records from the model, decoded to the input's types."""
    scaled, nulls = result.sample(cell_coding(codec), rows, rng)
    values = codec.bounds().unscale(np.where(nulls, 0.0, scaled))
    return codec.decode(values, nulls if nulls.any() else None)


def marginal_spec(coding: CellCoding, settings: LoopSettings | None = None) -> CellMarginals:
    """What the data pass counts: every candidate's cells, and the rows on each bound and in
    each sub-cell (its shape) of each column of ``CellCoding.points``."""
    max_way = (settings or LoopSettings()).max_way
    scopes = tuple(c.scope for c in candidates(coding.sizes, max_way))
    return CellMarginals(coding, scopes, coding.points, coding.points)


POINTS = "points"
"""Kind of a continuous or wide lattice column's one-way with its bounds as cells of their
own."""
SHAPE = "shape"
"""Kind of a column's rows off its bounds in the sub-cells of its cells
(``CellCoding.shape_cells``)."""
POOLED = "pooled"
"""Kind of several continuous columns' one-ways counted together: their 16 cells' counts summed
(:meth:`RecordTables.join_first`)."""
POOLED_FLOOR = 2.0
"""Noise standard deviations under which a pooled one-way's count is read as empty: at the
budgets that pool, a cell's noise is a sizeable share of the rows, and the simplex projection
alone would leave rows in empty cells far from the data."""
COARSE = "coarse"
"""Kind of a marginal of the rows that reads some of its ordered columns in coarser cells
(:meth:`RecordTables.coarsen`)."""
RUN_SIGNAL = 1.0
"""Noise standard deviations of a first-round one-way's count that ``total`` rows spread evenly
over its cells (or runs of them) must reach: below it a continuous or wide lattice column is
measured in 8 or 4 equal runs of its cells (:data:`MIN_RUNS`), the model even within a run. On
a small table a column's 16 cells are noise (WDBC at epsilon 1: 36 rows a cell against 86 of
noise), and the released values spread over its bounds. Sixteen seeded releases of iris, W1 /
correlation ratio, 16 cells -> runs: at 0.1 1.71 / 1.11 -> 1.50 / 1.01, at 1 0.69 / 0.85 ->
0.59 / 0.81; four of wine 2.00 -> 1.51 and 1.02 -> 0.68, of WDBC 1.21 -> 0.99 and 0.56 -> 0.38.
At two deviations (fewer runs) iris lost (W1 at 0.1 1.84 and at 1 0.64 over four seeds)."""
MIN_RUNS = 4
"""Fewest runs a first-round one-way is measured in: two keep too little of a column's shape
(wine at 0.1, four seeded releases: W1 ratio 1.74 with two, 1.51 with four)."""
CLEAR_POWER = 0.5
"""Where a pair of 16-cell columns is clear of a later round's noise and a triple is not, the
coarse triples read 8 groups, each an even share of the square roots of the column's counts:
the noise a fine pair puts in the empty cells off a relation cannot be taken out (the fit's
counts are at least zero), and it weakens the relation (5,000 rows at 10: a measured pair's
correlation 0.79, in the model 0.67). Square roots keep a skewed column's tail, where its
Pearson correlation lives, in groups of its own. Three seeded releases at 10, correlation
ratio without coarse triples -> with them: correlated 0.26 -> 0.18, heavy tails 0.49 -> 0.41,
skewed scales 0.33 -> 0.29. With coarse pairs as well, even shares lost the skewed table's
tail (0.37 against square roots' 0.19) and cube roots (the quantiser's optimal density) did no
better (0.21); 4 groups lost on the mixed table. Coarse pairs took the fine pairs' rounds
(the age/bmi table's correlation 0.656 -> 0.645). The cost: on the mixed table at 1 the coarse
triples take rounds from the fine pairs the 16-cell scorer rewards (3-way TVD 0.0245 -> 0.0269,
eight releases). Where the pairs are not clear, the groups hold even shares: at 1 square roots
weakened the correlated and skewed tables (0.45 -> 0.51, 0.57 -> 0.72; their tails' groups are
noise)."""
PAIRING_GROUPS = 8
"""Cells a column :meth:`RecordTables.coarsen` may group counts as in the test that pairs up
the later rounds (``adaptive.run_loop``): the groups of the coarse triples. Where such pairs
show through one round's noise the rounds stay one pick each: paired up, factors100 at 1 (100
columns in ten blocks) measured 49 pairs, too few for its blocks (one seeded release,
correlation ratio 0.77, W1 ratio 1.05; 99 picks unpaired: 0.35 / 0.92); four seeded releases
at 1 of the correlated / heavy-tailed / skewed tables, 0.48 / 0.57 / 0.73 -> 0.34 / 0.49 /
0.48 (heavy tails' W1 ratio 0.72 -> 0.78 over twelve). At 4 groups Adult at 0.1 did not pair
up either, and its 2- / 3-way TVD rose by 0.0011 / 0.0023 (12 seeded releases, se 0.0007 /
0.0012)."""
SHAPE_SHARE = 0.2
"""Share of a shaped column's first-round budget kept for its shape, where measured: its
one-way's noise grows by 1 / (1 - share) (1.25x)."""


class RecordTables(Tables):
    """The loop's tables for a table of records: the marginals (:class:`Tables`), a continuous
    or wide lattice column's first-round one-way with its bounds apart and its shape (module
    docstring). ``points``: each such column's one-way with its bounds apart
    (``CellMarginals.split_points``); ``shapes``: its shape's counts; ``sizes``: the model's
    variables' cells, where it has more than the columns (a release of persons)."""

    def __init__(
        self,
        coding: CellCoding,
        answer: Callable[[tuple[int, ...]], np.ndarray],
        points: dict[int, np.ndarray],
        max_way: int,
        shapes: dict[int, np.ndarray] | None = None,
        sizes: Sequence[int] | None = None,
    ) -> None:
        super().__init__(coding.sizes if sizes is None else sizes, answer, max_way)
        self._coarse_exact: dict[tuple[int, ...], np.ndarray] = {}
        self._coarse_ways = 2  # fewest columns of a coarse table (:meth:`coarsen`)
        self._predicted: dict[tuple[int, ...], np.ndarray] = {}
        self.cells, self.points, self.shaped = coding.value_cells, points, shapes or {}
        self.coding = coding
        self.apart = set(coding.points)
        self.signal = bound_signal(len(coding.points))

    def first(self) -> list[Candidate]:
        """Every one-way marginal (:meth:`one_ways`)."""
        return self.one_ways()

    def one_ways(self) -> list[Candidate]:
        """Every column's one-way, with its bounds apart where ``CellCoding.points`` has it;
        the shaped columns' last: the first table's total decides their shapes, and a first
        table's own shape is paid from the later rounds."""
        found = [
            Candidate((v,), self.sizes[v] + 2, 1.0, POINTS)
            if v in self.apart
            else Candidate((v,), self.sizes[v], 1.0)
            for v in range(len(self.cells))
        ]
        return sorted(found, key=lambda c: c.scope[0] in self.shaped)

    def coarsen(self, measurements: Sequence[Measurement], total: float, std: float) -> None:
        """A continuous or wide lattice column is read by the later rounds' coarse tables in
        ``c`` groups of its cells as well (2, 4 or 8), the most for which a pair of such columns
        gives each coarse cell :data:`adaptive.MIN_SIGNAL` noise standard deviations ``std``
        of the rows' noisy count ``total``: on small tables a pair of 16-cell columns is mostly
        noise, and the loop measured none. The groups hold even shares of the column's first-round
        one-way (its noisy counts projected onto the simplex): equal cells of its bounds would
        put a column that sits in a corner of them in one group. Where 16 cells clear it and a
        triple of them does not, 8 groups of even shares of the counts' square roots, read only
        by coarse tables of three columns (:data:`CLEAR_POWER`). Post-processing of the first
        round's output and public sizes."""
        self.groups, self._coarse_exact, self._coarse_ways = {}, {}, 2
        c = MAX_CELLS  # every such column has this many cells, so one count of groups for all
        while c > 2 and total / (c * c) < MIN_SIGNAL * std:
            c //= 2
        power = 1.0
        if c == MAX_CELLS:  # clear pairs: where a triple is not, coarse triples
            if min(self.max_way, len(self.cells)) < 3 or total / c**3 >= MIN_SIGNAL * std:
                return
            c, power, self._coarse_ways = MAX_CELLS // 2, CLEAR_POWER, 3
        for m in measurements:
            if m.round == 0 and m.kind in (POINTS, POOLED):
                for observed in self.observed(m):
                    fine = _fine(observed)
                    self.groups[observed.scope[0]] = _even_groups(fine, MAX_CELLS, c, power)

    def pool(self) -> list[Candidate]:
        """The marginals (:class:`Tables`), and those of two or three columns (three where pairs
        are clear) again with their grouped columns read in coarser cells (:meth:`coarsen`)."""
        found = super().pool()
        return found + [
            Candidate(
                c.scope, int(np.prod([self._coarse_size(v) for v in c.scope])), c.weight, COARSE
            )
            for c in found
            if len(c.scope) >= self._coarse_ways and any(v in self.groups for v in c.scope)
        ]

    def pairing_cells(self, c: Candidate) -> int:
        """A column :meth:`coarsen` may group counts :data:`PAIRING_GROUPS` cells."""
        return int(np.prod([PAIRING_GROUPS if v in self.apart else self.sizes[v] for v in c.scope]))

    def _coarse_size(self, v: int) -> int:
        return int(self.groups[v].max()) + 1 if v in self.groups else self.sizes[v]

    def _grouped(self, scope: tuple[int, ...]) -> tuple[np.ndarray | None, ...]:
        return tuple(self.groups.get(v) for v in scope)

    def _coarse(self, scope: tuple[int, ...], table: np.ndarray) -> np.ndarray:
        shape = [self.sizes[v] for v in scope]
        return coarse_table(table.reshape(shape), self._grouped(scope)).ravel()

    def prepare(self, model: GraphicalModel, total: float, scopes: Sequence[Scope] = ()) -> None:
        super().prepare(model, total, scopes)
        self._predicted = {}

    def predict(self, c: Candidate) -> np.ndarray:
        """The model's counts of ``c``; a scope's are computed once a round, for its table and
        its coarse table."""
        if c.kind not in (COARSE, "rows"):
            return super().predict(c)
        if c.scope not in self._predicted:
            self._predicted[c.scope] = super().predict(c)  # a scope's counts, of either kind
        found = self._predicted[c.scope]
        return self._coarse(c.scope, found) if c.kind == COARSE else found

    def exact(self, c: Candidate) -> np.ndarray:
        if c.kind == COARSE:  # the same every round
            if c.scope not in self._coarse_exact:
                self._coarse_exact[c.scope] = self._coarse(c.scope, self.answer(c.scope))
            return self._coarse_exact[c.scope]
        if c.kind == SHAPE:
            return self.shaped[c.scope[0]]
        if c.kind == POOLED:  # its columns have no null cell: their one-ways' counts
            return np.sum([self.answer((v,)) for v in c.scope], axis=0)
        if c.kind != POINTS:
            return super().exact(c)
        points = self.points[c.scope[0]]
        runs = self._runs(c.scope[0], c.cells)
        if runs is None:
            return points
        cells = runs.size
        inner = np.bincount(runs, weights=points[1 : cells + 1])
        return np.concatenate([points[:1], inner, points[cells + 1 :]])

    def _runs(self, v: int, size: int) -> np.ndarray | None:
        """The run of each of column ``v``'s value cells in its one-way with its bounds apart
        of ``size`` counts (:meth:`first_cells`; ``None``: each cell its own)."""
        cells = self.cells[v]
        runs = cells - (self.sizes[v] + 2 - size)
        return None if runs == cells else np.arange(cells) // (cells // runs)

    def reserve(
        self, c: Candidate, share: float, total: float, std: Callable[[float], float]
    ) -> float:
        """A shaped column's one-way keeps :data:`SHAPE_SHARE` for its shape where
        ``total`` rows spread evenly over its sub-cells would give each
        :data:`adaptive.MIN_SIGNAL` noise standard deviations of the shape (below that the shape
        is mostly noise, and its budget is worth more to the one-way)."""
        if c.kind != POINTS or c.scope[0] not in self.shaped:
            return 0.0
        each = total / self.coding.shape_cells(c.scope[0]).size
        return SHAPE_SHARE if each >= MIN_SIGNAL * std(SHAPE_SHARE * share) else 0.0

    def first_cells(self, c: Candidate, total: float, std: float) -> Candidate:
        """A one-way with its bounds apart in equal runs of its cells (16, 8 or 4): the most
        for which ``total`` rows spread evenly over them give each :data:`RUN_SIGNAL` noise
        standard deviations ``std``. Public sizes and a DP output: post-processing."""
        if c.kind != POINTS:
            return c
        cells = runs = self.cells[c.scope[0]]
        while runs > MIN_RUNS and runs % 2 == 0 and total / runs < RUN_SIGNAL * std:
            runs //= 2
        return replace(c, cells=c.cells - cells + runs)

    def join_first(
        self,
        found: Sequence[Candidate],
        budgets: Sequence[float],
        total: float,
        std: Callable[[float], float],
    ) -> list[tuple[Candidate, float]]:
        """The continuous or wide lattice columns (16 cells, no null cell) whose one-ways even
        :data:`MIN_RUNS` runs would leave below :data:`RUN_SIGNAL` noise standard deviations
        (``total`` rows spread evenly) are measured as one pooled one-way (kind ``pooled``)
        from their budgets together. For ``m`` columns at ``e / m`` each, a record moves ``m``
        pooled counts (L1 and, all in one cell, L2): under pure DP noise of scale ``m / e`` on
        ``n m`` values, where each column's own one-way has the same scale on ``n`` values (the
        mean of the ``m``, ``sqrt m`` times less); in zCDP the pooled counts are as precise as
        that mean. Either way each column then reads the shape they share, not its own noise.
        Public sizes and a DP output: post-processing."""
        pairs = list(zip(found, budgets, strict=True))
        swamped = [
            (c, b)
            for c, b in pairs
            if c.kind == POINTS
            and self.cells[c.scope[0]] == MAX_CELLS == self.sizes[c.scope[0]]
            and total / MIN_RUNS < RUN_SIGNAL * std(b)
        ]
        if len(swamped) < 2:
            return pairs
        joined = Candidate(tuple(c.scope[0] for c, _ in swamped), MAX_CELLS, 1.0, POOLED)
        return [p for p in pairs if p not in swamped] + [(joined, sum(b for _, b in swamped))]

    def sensitivity(self, c: Candidate) -> float:
        """A pooled one-way's: its columns (one record moves one count of each); else 1."""
        return float(len(c.scope)) if c.kind == POOLED else 1.0

    def follow(self, c: Candidate) -> Candidate:
        """The column's shape."""
        return Candidate(c.scope, self.coding.shape_cells(c.scope[0]).size, 1.0, SHAPE)

    def rows_sum(self, m: Measurement) -> tuple[float, float] | None:
        """A shape leaves out the rows on the bounds and the nulls: no estimate of the rows; a
        pooled one-way counts each row once per column."""
        if m.kind == POOLED:
            width = len(m.scope)
            return float(m.values.sum()) / width, m.std**2 * m.values.size / width**2
        return None if m.kind == SHAPE else super().rows_sum(m)

    def observed(self, m: Measurement) -> list[Observed]:
        """The one-way with its bounds apart tells the model its one-way: a bound's count is
        summed into its edge cell (that cell's noise ``sqrt 2`` times as large) where it shows
        rows on the bound (:func:`bound_signal`), and left out where it is noise (on a column
        with no value on its bounds it would only add noise where its tails are thinnest). A
        pooled one-way of ``m`` columns tells each its mean, with ``sqrt m`` times its noise:
        ``m`` equal one-ways then weigh as one measurement of their sum, and each column
        keeps the pooled shape unless a later table says otherwise."""
        if m.kind == SHAPE:
            return []  # what it tells is decoding's (:meth:`shapes`)
        if m.kind == COARSE:
            return [Observed(m.scope, m.values, m.std, groups=self._grouped(m.scope))]
        if m.kind == POOLED:
            width = len(m.scope)
            kept = np.where(m.values > POOLED_FLOOR * m.std, m.values, 0.0)
            return [Observed((v,), kept / width, m.std / math.sqrt(width)) for v in m.scope]
        if m.kind != POINTS:
            return super().observed(m)
        v, y = m.scope[0], m.values
        runs = self._runs(v, y.size)
        if runs is not None:
            return [self._observed_runs(m, runs)]
        cells = self.cells[v]
        values = np.concatenate([y[1 : cells + 1], y[cells + 2 :]])  # the null cell, if any
        std = np.full(values.size, m.std)
        for bound, edge in ((0, 0), (cells + 1, cells - 1)):
            if y[bound] > self.signal * m.std:
                values[edge] += y[bound]
                std[edge] *= np.sqrt(2.0)
        return [Observed(m.scope, values, std)]

    def _observed_runs(self, m: Measurement, runs: np.ndarray) -> Observed:
        """A one-way measured in runs of cells (:meth:`first_cells`): the model's one-way summed
        over each run. Where a bound shows rows, its edge cell leaves its run and holds the
        bound's count and an even share of the run's (the model then puts the bound's rows in
        the edge cell, which :meth:`on_bounds` puts on the bound; in the run they would spread
        over its cells)."""
        v, y = m.scope[0], m.values
        count, width = int(runs.max()) + 1, int(np.bincount(runs)[0])
        parts = [np.flatnonzero(runs == r) for r in range(count)]
        values, std = list(y[1 : count + 1]), [m.std] * count
        for bound, run in ((0, 0), (count + 1, count - 1)):
            if y[bound] > self.signal * m.std:
                edge = parts[run][0 if run == 0 else -1]
                share = values[run] / width
                parts[run] = parts[run][parts[run] != edge]
                values[run], std[run] = values[run] - share, std[run] * (width - 1) / width
                parts.append(np.array([edge]))
                values.append(y[bound] + share)
                std.append(m.std * math.sqrt(1.0 + 1.0 / width**2))
        order = np.argsort([p[0] for p in parts], kind="stable")
        groups = np.empty(self.cells[v], dtype=np.int64)
        for g, k in enumerate(order):
            groups[parts[k]] = g
        nulls = np.arange(self.sizes[v] - self.cells[v])  # the null cell, if any
        return Observed(
            m.scope,
            np.concatenate([np.asarray(values)[order], y[count + 2 :]]),
            np.concatenate([np.asarray(std)[order], np.full(nulls.size, m.std)]),
            groups=(np.concatenate([groups, order.size + nulls]),),
        )

    def on_bounds(
        self, model: GraphicalModel, total: float, measurements: Sequence[Measurement]
    ) -> dict[int, tuple[float, float]]:
        """Each such column's bound count and the rest of its edge cell, projected onto
        the counts that are at least zero and sum to the model's count of that cell (least
        squares given it), as a share of it."""
        cliques = model.clique_marginals()
        out = {}
        for m in measurements:
            v = m.scope[0]
            if m.kind != POINTS or v in out:
                continue
            counts, cells, y = total * model.marginal((v,), cliques, {}), self.cells[v], m.values
            runs = self._runs(v, y.size)
            width = 1 if runs is None else cells // (int(runs.max()) + 1)
            count = cells // width  # an edge run's rows taken as even over its cells
            threshold = self.signal * m.std
            lower = _share(y[0], y[1] / width, counts[0], threshold)
            upper = _share(y[count + 1], y[count] / width, counts[cells - 1], threshold)
            out[v] = (lower, upper)
        return out

    def shapes(self, measurements: Sequence[Measurement]) -> dict[int, np.ndarray]:
        """Each measured shape's sub-cells' shares of their cells (``CellCoding.decode``): per
        cell, its noisy sub-cell counts shrunk towards their mean by their positive-part
        James-Stein factor (a cell whose counts the noise cannot tell from even stays even),
        then projected onto the simplex. A wide lattice's bound levels are not in its shape:
        each gets its cell's mean share, taken where no rows are put on the bound."""
        out = {}
        for m in measurements:
            if m.kind != SHAPE:
                continue
            j = m.scope[0]
            owner = self.coding.shape_cells(j)
            bound = {0, owner.size - 1} if self.coding.per_level(j) else set()
            shares = np.zeros(owner.size)
            for cell in range(self.cells[j]):
                parts = np.flatnonzero(owner == cell)
                kept = np.array([p for p in parts if p not in bound], dtype=np.int64)
                left = 1.0 - (parts.size - kept.size) / parts.size
                shares[kept] = left * _cell_shape(m.values[kept], m.std)
                shares[[p for p in parts if p in bound]] = 1.0 / parts.size
            out[j] = shares
        return out


def _even_groups(counts: np.ndarray, cells: int, groups: int, power: float = 1.0) -> np.ndarray:
    """The group of each of a column's cells: ``groups`` runs of adjacent value cells, each
    about an even share of ``counts`` (the first ``cells``, noisy, projected onto the simplex,
    raised to ``power``; a cell goes where its middle falls), numbered in order; the null cell,
    if any, is a group of its own."""
    shares = project_to_simplex(counts[:cells] / max(float(counts[:cells].sum()), 1.0)) ** power
    shares /= shares.sum()  # the projection sums to 1, so some share is above 0
    middle = np.cumsum(shares) - shares / 2.0
    runs = np.minimum(np.floor(middle * groups), groups - 1).astype(np.int64)
    runs = np.unique(runs, return_inverse=True)[1].astype(np.int64)
    return np.concatenate([runs, runs.max() + 1 + np.arange(counts.size - cells)])


def _fine(observed: Observed) -> np.ndarray:
    """A one-way's counts per cell, a run's spread evenly over its cells."""
    if observed.groups is None or observed.groups[0] is None:
        return observed.values
    return spread_evenly(observed.values, observed.groups[0])


def _cell_shape(y: np.ndarray, std: float) -> np.ndarray:
    """Shares of a cell's sub-cells from their noisy counts ``y`` (:meth:`RecordTables.shapes`)."""
    even = np.full(y.size, 1.0 / y.size)
    mean = float(y.mean())
    if mean <= 0.0:
        return even
    spread = float(((y - mean) ** 2).sum())
    factor = max(0.0, 1.0 - (y.size - 1) * std**2 / spread) if spread > 0.0 else 0.0
    return project_to_simplex((mean + factor * (y - mean)) / (mean * y.size))


BOUND_FALSE_RATE = 0.05
"""Chance that a release puts rows on any bound that no value sits on: one that passes puts up
to its whole (noisy) edge cell there, and each such row costs its column's W1 its distance to
the bulk (a fixed 3 sds, 0.007 a bound, put 0.6% of a 9-column table's values on such a bound
in one of two releases at epsilon 0.1)."""


def bound_signal(columns: int) -> float:
    """Noise standard deviations a bound's noisy count must exceed to put rows on it, for a
    table of ``columns`` columns with bounds apart (``2 columns`` bounds, public): Laplace noise of
    standard deviation ``s`` exceeds ``t s`` with probability ``exp(-sqrt 2 t) / 2`` (Gaussian
    noise less often, for ``t`` above 1.4), so ``t = ln(columns / rate) / sqrt 2`` keeps the
    chance that any of them passes within :data:`BOUND_FALSE_RATE`: 2.9 sds for 3 columns, 3.7
    for 9, 5.4 for 100."""
    return max(1.4, math.log(max(columns, 1) / BOUND_FALSE_RATE) / math.sqrt(2.0))


def _share(bound: float, rest: float, cell: float, threshold: float) -> float:
    """``bound``'s share of ``cell`` after projecting ``(bound, rest)`` onto the pairs at least
    zero that sum to ``cell`` (in closed form: the model's count of the cell may be far below
    the noisy counts, where dividing by it first loses the difference to rounding); 0 where
    ``bound`` is at most ``threshold``."""
    if cell <= 0.0 or bound <= threshold:
        return 0.0
    return float(np.clip(0.5 + (bound - rest) / (2.0 * cell), 0.0, 1.0))


def replay(data: dict, coding: CellCoding, settings: LoopSettings) -> LoopResult:
    """The fit again from a release's persisted measurements (post-processing only)."""
    tables = RecordTables(coding, lambda scope: np.zeros(0), {}, settings.max_way)
    return LoopResult.from_dict(data, tables, settings.iterations)


def pass_spec(coding: CellCoding, settings: LoopSettings | None = None) -> PassSpec:
    """The data pass of a release: every candidate's counts, nulls in their own cells."""
    return PassSpec(1, null_cells=any(coding.nullable), marginals=marginal_spec(coding, settings))


def release(
    sums: ExactSums,
    spec: PassSpec,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    settings: LoopSettings | None = None,
) -> LoopResult:
    """The loop on the exact counts of a data pass that ran ``spec`` (:func:`pass_spec`)."""
    if sums.marginals is None or spec.marginals is None:
        raise ValueError("the data pass did not count the candidates' cells")
    counts = sums.marginals.astype(np.float64)
    answers, points = spec.marginals.split(counts), spec.marginals.split_points(counts)
    shapes = spec.marginals.split_shapes(counts)
    settings = settings or LoopSettings()
    coding = spec.marginals.coding
    tables = RecordTables(coding, answers.__getitem__, points, settings.max_way, shapes)
    return run_loop(tables, accountant, noise, settings)
