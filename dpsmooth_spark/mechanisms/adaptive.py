"""The adaptive mechanism: select, measure, estimate (AIM, McKenna, Mullins, Sheldon, Miklau 2022).

Every column is coded into cells (``core.cell_marginals``: a category's levels, at most 16
otherwise). The candidates are the 1-, 2- and 3-way marginals of those cells, each a
:class:`Candidate` record whose exact answer one data pass computes. The loop on the driver:

1. measures every one-way marginal; the first one's noisy total (:data:`TOTAL_CLEAR`) decides
   the later rounds' budget and share (:data:`MIN_SIGNAL`, :data:`LOW_SELECTION_SHARE`) and the
   other one-ways' cells (``Tables.first_cells``, ``join_first``, ``coarsen``);
2. then, round after round, estimates the table (``core.graphical.fit_model``, warm-started),
   scores every candidate by its weighted L1 error under the estimate less the error its noise
   alone would leave, picks one with the exponential mechanism, and measures it;
3. anneals: where a new measurement barely moved the estimate, the rounds that follow spend
   twice the budget each (half the noise);
4. stops when the budget is spent; the last round takes whatever is left.

Pure epsilon-DP: Laplace counts and permute-and-flip selection under basic composition. The
(epsilon, delta) mode: Gaussian counts and the exponential mechanism in zCDP. Each measurement
is a ``Measurement`` (scope, noisy counts, noise); the fit reads only that list. What the loop
may measure, and how the model reads it, is a ``Tables`` (``mechanisms/loop_tables.py``).
``docs/privacy.md`` section 3j derives the sensitivities and the composition.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpsmooth_spark.core.cell_marginals import CellCoding
from dpsmooth_spark.core.graphical import GraphicalModel, TreeSize, fit_model
from dpsmooth_spark.mechanisms.loop_tables import (
    Candidate,
    Measurement,
    Scope,
    Tables,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

SELECTION_SHARE = 0.1
"""Share of each round's budget that the selection spends (AIM's split); the measurement gets the
rest."""
LOW_SELECTION_SHARE = 0.2
"""The selection's share where a median pair measured at half a round's budget would fall below
:data:`MIN_SIGNAL`: there every measurement is mostly noise, and a sharper pick of the few
tables whose relations stand out gains more than the measurement loses (Adult at epsilon 0.1,
3-way TVD 0.1187 -> 0.1146; docs/mechanisms.md)."""
MIN_SIGNAL = 2.0
"""Where a later round's measurement of a median pair (a 2-way marginal of the rows, its cells as
``Tables.pairing_cells`` counts them) would expect fewer counts per cell per noise sd, rounds
pair up: half as many, twice the budget each (once: on small tables every pair is below it, and
fewer pairs measured lose more). Where fewer than two paired rounds would be left, a release of
persons gives their budget to the first round; a table of records keeps them
(``Tables.keeps_low_picks``)."""
ZCDP_ROUNDS = 4
"""Rounds per column in zCDP, where a round's noise grows only with the square root of the
rounds: more than pure DP's ``2 d``, fewer than AIM's ``16 d``, which leaves the one-ways that a
smooth query reads first a sixteenth of the budget (WDBC at epsilon 10, worst kernel error at
sigma 4: 0.0154 at ``16 d``, 0.0108 at ``4 d``; docs/mechanisms.md)."""
FIRST_SHARE = 0.05
"""Share of the first round at which a first table of a smaller share is measured again where
its total is unclear (:data:`TOTAL_CLEAR`): that total decides the runs, pooling, shapes and
pairing. WDBC's label gets 1.1%, and its total's noise (3,600 rows at epsilon 0.1) swamps the
569 rows."""
TOTAL_CLEAR = 10.0
"""Noise sds by which the first table's noisy total must clear zero not to be measured again.
WDBC's label at epsilon 10 is 16 sds clear, and a twentieth more took from the one-ways a
smooth query reads (worst kernel error at sigma 4, zCDP: 0.0108 -> 0.0120)."""
ANCHOR_WEIGHT = 4.0
"""Factor on the score weight of a table of two or three columns with an anchor column
(``pair_columns``, a label) where the pick takes :data:`LOW_SELECTION_SHARE`: there a selection
barely tells its candidates apart, and the features' coarse tables outscored the label's (WDBC
at 1: train-on-synthetic AUC 0.73 without, 0.81 with it). Where pairs are clear the weight only
took picks from the features (docs/mechanisms.md, "Anchors")."""
MAX_MODEL_CELLS = 2_000_000
"""Largest model (cells of the junction tree's cliques) the loop may grow to; AIM grows its
limit with the budget spent, and so does the loop."""


@dataclass(frozen=True)
class LoopSettings:
    """Public settings of the loop.

    Attributes:
        rounds: the number of rounds the budget is first split into (one-way marginals count as
            one round each); annealing then ends the loop sooner. ``None``: ``2 d`` under pure
            epsilon-DP, ``4 d`` in zCDP, where a round's noise grows only with the square root of
            the rounds (:data:`ZCDP_ROUNDS`).
        max_way: largest candidate marginal (1 to 3).
        iterations: mirror-descent steps of each round's estimate; the final one takes ten times
            as many.
        anchors: the columns whose relations the user asks for first (``pair_columns``, a label):
            where the signal is low, a candidate with one of them weighs more in the score
            (:data:`ANCHOR_WEIGHT`), and the first pick is one of theirs (docs/mechanisms.md,
            "Anchors").
    """

    rounds: int | None = None
    max_way: int = 3
    iterations: int = 60
    anchors: tuple[int, ...] = ()

    @classmethod
    def named(
        cls, rounds: int | None, columns: Sequence[str], pair_columns: Sequence[str] = ()
    ) -> LoopSettings:
        """The settings of a release of ``columns`` (their names), its ``pair_columns`` the
        anchors."""
        names = list(columns)
        return cls(rounds=rounds, anchors=tuple(names.index(c) for c in pair_columns))


@dataclass
class LoopResult:
    """What the loop released and what it estimates."""

    measurements: list[Measurement]
    model: GraphicalModel
    total: float
    selected: list[Scope] = field(default_factory=list)
    on_bounds: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Per column with bounds apart, the shares of its edge cells on its bounds
    (``Tables.on_bounds``)."""
    shapes: dict[int, np.ndarray] = field(default_factory=dict)
    """Per column with a measured shape, the shares of each cell's rows in its sub-cells
    (``Tables.shapes``)."""
    groups: dict[int, np.ndarray] = field(default_factory=dict)
    """Per column that the coarse tables read in coarser cells, the group of each of its cells
    (``Tables.coarsen``)."""

    def to_dict(self) -> dict[str, Any]:
        """The released measurements, JSON-ready (the model is their post-processing)."""
        return {
            "kind": "adaptive_marginals",
            "groups": {str(v): g.tolist() for v, g in self.groups.items()},
            "measurements": [m.to_dict() for m in self.measurements],
        }

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], tables: Sequence[int] | Tables, iterations: int
    ) -> LoopResult:
        """The fit again from persisted measurements (post-processing only), replayed round by
        round as the loop warm-started it, so a retry draws the first attempt's model.
        ``tables``: what the loop measured (:class:`Tables`; cells per column: a record table)."""
        if not isinstance(tables, Tables):
            tables = Tables(tables, lambda scope: np.zeros(0), 0)
        found = [Measurement.from_dict(m) for m in data["measurements"]]
        first = sum(1 for m in found if m.round == 0)
        tables.groups = {int(v): np.asarray(g, np.int64) for v, g in data.get("groups", {}).items()}
        model, total = _estimate(tables, found[:first], iterations, None)
        for end in range(first + 1, len(found) + 1):
            model, total = _estimate(tables, found[:end], iterations, model)
        model, total = _estimate(tables, found, 10 * iterations, model)
        selected = [m.scope for m in found if m.round > 0]
        on_bounds = tables.on_bounds(model, total, found)
        shapes = tables.shapes(found)
        return cls(found, model, total, selected, on_bounds, shapes, tables.groups)

    def sample(
        self, coding: CellCoding, rows: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` records drawn from the model (stratified along its tree):
        ``(scaled values, null mask)``."""
        return coding.decode(self.model.sample(rows, rng), rng, self.on_bounds, self.shapes)


def _measure(
    scope: Scope,
    exact: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    round_: int,
    kind: str = "rows",
    sensitivity: float = 1.0,
) -> Measurement:
    """A table's counts with the noise that spends ``budget``; ``sensitivity`` in the
    accountant's units (1 for a marginal of records: one record moves one count by one)."""
    scale = accountant.noise_scale(sensitivity, budget)
    stage = "marginal" if kind == "rows" else kind
    accountant.charge(f"adaptive.{stage}.{round_}", sensitivity, scale)
    if accountant.pure:
        values, std = noise.laplace(exact, scale), math.sqrt(2.0) * scale
    else:
        values, std = noise.gaussian(exact, scale), scale
    return Measurement(scope, values, std, round_, kind)


def _select(
    scores: np.ndarray,
    weights: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    round_: int,
) -> int:
    """The exponential mechanism's pick among the candidates' ``scores``: a record moves the
    score of a candidate of weight ``w`` by at most ``w`` (one count of its marginal by one),
    either way, so the sensitivity is the largest weight (permute-and-flip under pure DP, Gumbel
    noise in zCDP; ``NoiseSource.top_k``)."""
    sensitivity = float(weights.max())
    scale = accountant.selection_scale(sensitivity, budget, 1)
    accountant.charge_selection(f"adaptive.select.{round_}", sensitivity, scale, 1)
    return int(noise.top_k(scores, 1, scale, accountant.pure)[0])


def _noise_l1(measurement_std: float, cells: int, pure: bool) -> float:
    """Expected L1 norm of a marginal's noise: ``b`` per Laplace count, ``sqrt(2/pi) sigma`` per
    Gaussian one."""
    per_cell = (
        measurement_std / math.sqrt(2.0) if pure else math.sqrt(2.0 / math.pi) * measurement_std
    )
    return per_cell * cells


def _estimate(
    tables: Tables,
    measurements: Sequence[Measurement],
    iterations: int,
    start: GraphicalModel | None,
) -> tuple[GraphicalModel, float]:
    """The model of the measurements, and the table's size: every measured sum, each weighted
    by its inverse variance."""
    total = max(1.0, _rows(tables, measurements)[0])
    observed = [
        replace(o, values=o.values / total, std=o.std / total)
        for m in measurements
        for o in tables.observed(m)
    ]
    return fit_model(tables.sizes, observed, iterations, start, tables.structure), total


def run_loop(
    tables: Tables,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    settings: LoopSettings | None = None,
) -> LoopResult:
    """Spend what ``accountant`` has left on tables picked round by round (module docstring)."""
    settings = settings or LoopSettings()
    sizes = tables.sizes
    pure = accountant.pure
    budget = accountant.share(1.0)
    first = tables.first()

    def measure(c: Candidate, share: float, round_: int) -> Measurement:
        sensitivity = tables.sensitivity(c)
        return _measure(
            c.scope, tables.exact(c), share, accountant, noise, round_, c.kind, sensitivity
        )

    noise_std = functools.partial(_noise_std, accountant, 1.0)  # a count's, at a budget

    def first_round(c: Candidate, share: float, total: float) -> list[Measurement]:
        """``c`` and the table that may follow it, from ``c``'s budget (``Tables.reserve``)."""
        kept = tables.reserve(c, share, total, noise_std) * share
        c = tables.first_cells(c, total, noise_std(share - kept))
        found = [measure(c, share - kept, 0)]
        return [*found, measure(tables.follow(c), kept, 0)] if kept > 0.0 else found

    rounds = settings.rounds or (2 if pure else ZCDP_ROUNDS) * len(sizes)
    per_round = budget / rounds
    pool = tables.pool()
    # the first round: one round's budget per table, split in proportion to sqrt(cells times
    # sensitivity), which minimises their summed expected L1 noise at a fixed sum of budgets;
    # with fewer than two later rounds, the whole budget
    shares = np.sqrt([tables.size(c) * tables.sensitivity(c) for c in first])
    later = rounds - len(first)
    spent = budget if later < 2.0 - 1e-9 else per_round * len(first)
    split = spent * shares / shares.sum()
    measurements = [measure(first[0], float(split[0]), 0)]
    # the first table's noisy total decides the rest: where it is unclear and the first table's
    # share small, the first table is measured again, at FIRST_SHARE of the round
    total, total_std = _rows(tables, measurements)
    top = FIRST_SHARE * spent
    if len(first) > 1 and split[0] < top and total < TOTAL_CLEAR * total_std:
        measurements.append(measure(first[0], top, 0))
        split[0] += top
        split[1:] = (spent - split[0]) * shares[1:] / shares[1:].sum()
        total, total_std = _rows(tables, measurements)
    # the pick's larger share where even two rounds' budget leaves a median pair below MIN_SIGNAL
    measured = 1.0 - SELECTION_SHARE  # a later round's measurement's share of it
    pairs = [c for c in pool if c.kind == "rows" and len(c.scope) == 2]
    half, alone = (noise_std(measured * per_round / k) for k in (2.0, 1.0))
    low = _low_signal([c.cells for c in pairs], total, total_std, half)
    share = LOW_SELECTION_SHARE if low else SELECTION_SHARE
    # the later rounds pair up once (twice the budget each) where one would read a median pair
    # below MIN_SIGNAL; where fewer than two are then left, a release of persons gives them to
    # the first round
    if spent < budget and _low_signal(map(tables.pairing_cells, pairs), total, total_std, alone):
        per_round *= 2.0
        if later < 4.0 - 1e-9 and len(first) > 1 and not tables.keeps_low_picks:
            split[1:] = (budget - split[0]) * shares[1:] / shares[1:].sum()
            spent = budget
    for c, b in tables.join_first(first[1:], split[1:], total, noise_std):
        measurements += first_round(c, float(b), total)
    # the first table measured the count: what follows it is paid from the later rounds
    kept = tables.reserve(first[0], float(split[0]), total, noise_std) * float(split[0])
    if 0.0 < kept < budget - spent:
        measurements.append(measure(tables.follow(first[0]), kept, 0))
        spent += kept
    # the later rounds may read ordered columns in coarser cells (the first round's output)
    tables.coarsen(measurements, total, noise_std((1.0 - share) * per_round))
    anchors = set(settings.anchors)
    pool = [  # at low signal the anchors' tables weigh more
        replace(c, weight=c.weight * ANCHOR_WEIGHT) if low and _holds(c, anchors) else c
        for c in tables.pool()
    ]
    model, total = _estimate(tables, measurements, settings.iterations, None)
    scopes = [c.scope for c in pool]
    tables.prepare(model, total, scopes)  # each round's end prepares the next round's model
    selected: list[Scope] = []
    round_ = 0
    while budget - spent > 1e-12 * budget:
        round_ += 1
        if budget - spent < 2.0 * per_round:
            per_round = budget - spent
        spent += per_round
        select_budget = share * per_round
        measure_budget = per_round - select_budget
        std = {  # a later round's tables of one kind share their sensitivity
            kind: _noise_std(accountant, tables.sensitivity(c), measure_budget)
            for kind, c in {c.kind: c for c in pool}.items()
        }
        limit = MAX_MODEL_CELLS * spent / budget
        size = TreeSize(model.sizes, model.scopes)
        grows = {tables.model_scope(c) for c in pool}  # a scope's tables fit alike
        fits = {s: _fits(s, model, size, limit) for s in grows}
        fitting = [c for c in pool if fits[tables.model_scope(c)]]
        if round_ == 1:  # the first pick is among the anchors' relations (where there are any)
            fitting = [c for c in fitting if _holds(c, anchors)] or fitting
        scales = np.array([tables.scale(c) * c.weight for c in fitting])
        scores = scales * np.array(
            [
                np.abs(tables.exact(c) - tables.predict(c)).sum()
                - _noise_l1(std[c.kind], c.cells, pure)
                for c in fitting
            ]
        )
        weights = scales * np.array([tables.sensitivity(c) for c in fitting])
        pick = fitting[_select(scores, weights, select_budget, accountant, noise, round_)]
        before = tables.predict(pick)
        measurements.append(measure(pick, measure_budget, round_))
        selected.append(pick.scope)
        model, total = _estimate(tables, measurements, settings.iterations, model)
        tables.prepare(model, total, scopes)
        moved = np.abs(tables.predict(pick) - before).sum()
        if moved <= _noise_l1(std[pick.kind], pick.cells, pure):
            per_round *= 2.0
    model, total = _estimate(tables, measurements, 10 * settings.iterations, model)
    on_bounds = tables.on_bounds(model, total, measurements)
    shapes = tables.shapes(measurements)
    return LoopResult(measurements, model, total, selected, on_bounds, shapes, tables.groups)


def _rows(tables: Tables, measurements: Sequence[Measurement]) -> tuple[float, float]:
    """The rows' noisy count from ``measurements`` (their sums, each weighted by its inverse
    variance; 0 where none holds one) and its noise standard deviation."""
    sums = [s for s in map(tables.rows_sum, measurements) if s is not None]
    if not sums:
        return 0.0, math.inf
    weight = sum(1.0 / v for _, v in sums)
    return sum(t / v for t, v in sums) / weight, math.sqrt(1.0 / weight)


def _low_signal(cells: Iterable[int], total: float, std: float, noise: float) -> bool:
    """Whether a median pair of ``cells`` (public sizes) measured with count noise ``noise``
    would expect fewer than :data:`MIN_SIGNAL` counts per cell per noise sd, from the first
    round's noisy ``total`` of noise ``std`` (a DP output; infinite: no table measured it)."""
    found = sorted(cells) if std < math.inf else []
    return bool(found) and max(total, 1.0) / found[len(found) // 2] < MIN_SIGNAL * noise


def _holds(c: Candidate, anchors: set[int]) -> bool:
    """Whether ``c`` is a table of two or more columns with an anchor among them."""
    return len(c.scope) > 1 and bool(anchors & set(c.scope))


def _noise_std(accountant: PrivacyAccountant, sensitivity: float, budget: float) -> float:
    """Standard deviation of a measurement's noise at ``budget`` (Laplace's is ``sqrt 2`` times
    its scale)."""
    spread = math.sqrt(2.0) if accountant.pure else 1.0
    return spread * accountant.noise_scale(sensitivity, budget)


def _fits(grows: Scope | None, model: GraphicalModel, size: TreeSize, limit: float) -> bool:
    """Whether measuring ``grows`` keeps the model within ``limit`` cells (``None``: it does not
    enter the model)."""
    if grows is None or model.tree.holding(grows):
        return True
    return size.with_scope(grows) <= limit
