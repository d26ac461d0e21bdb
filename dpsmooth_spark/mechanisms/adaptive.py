"""The adaptive mechanism: select, measure, estimate (AIM, McKenna, Mullins, Sheldon, Miklau 2022).

Every column is coded into cells (``core.cell_marginals``: a category's levels, at most 16
otherwise). The candidates are the 1-, 2- and 3-way marginals of those cells, each a
:class:`Candidate` record whose exact answer one data pass computes. The loop on the driver:

1. measures every one-way marginal;
2. then, round after round, estimates the table (``core.graphical.fit_model``, warm-started),
   scores every candidate by its weighted L1 error under the estimate less the error its noise
   alone would leave, picks one with the exponential mechanism, and measures it;
3. anneals: where a new measurement barely moved the estimate, the rounds that follow spend
   twice the budget each (half the noise);
4. stops when the budget is spent; the last round takes whatever is left.

Pure epsilon-DP: Laplace counts and permute-and-flip selection under basic composition. The
(epsilon, delta) mode: Gaussian counts and the exponential mechanism in zCDP. Each measurement
is a :class:`Measurement` (scope, noisy counts, noise); the fit reads only that list.
``docs/privacy.md`` section 3j derives the sensitivities and the composition.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals
from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.core.graphical import GraphicalModel, Observed, fit_model, junction_tree
from dpsmooth_spark.core.kernel import ExactSums, PassSpec
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

Scope = tuple[int, ...]

SELECTION_SHARE = 0.1
"""Share of each round's budget that the selection spends (AIM's split); the measurement gets the
rest."""
MAX_MODEL_CELLS = 2_000_000
"""Largest model (cells of the junction tree's cliques) the loop may grow to; AIM grows its
limit with the budget spent, and so does the loop."""
MAX_CANDIDATE_CELLS = 65_536
"""Largest marginal a candidate may be."""
MAX_PASS_CELLS = 4_000_000
"""Most counts the data pass computes for the candidates: 3-way candidates are offered only
where all of them fit (their cost grows with the cube of the columns)."""


@dataclass(frozen=True)
class Candidate:
    """A marginal the loop may measure: its columns, its cells and its weight (how many columns
    of the scored workload of 3-way marginals it covers, its score's sensitivity)."""

    scope: Scope
    cells: int
    weight: float


@dataclass(frozen=True)
class Measurement:
    """A measured marginal as plain data: its scope, noisy counts (flattened, C order), the noise
    standard deviation of each count, and the round that measured it (0: the one-way round)."""

    scope: Scope
    values: np.ndarray
    std: float
    round: int


@dataclass(frozen=True)
class LoopSettings:
    """Public settings of the loop.

    Attributes:
        rounds: the number of rounds the budget is first split into (one-way marginals count as
            one round each); annealing then ends the loop sooner. ``None``: ``2 d`` under pure
            epsilon-DP, ``16 d`` in zCDP (AIM's, whose composition grows with the square root).
        max_way: largest candidate marginal (1 to 3).
        iterations: mirror-descent steps of each round's estimate; the final one takes ten times
            as many.
    """

    rounds: int | None = None
    max_way: int = 3
    iterations: int = 100


@dataclass
class LoopResult:
    """What the loop released and what it estimates."""

    measurements: list[Measurement]
    model: GraphicalModel
    total: float
    selected: list[Scope] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The released measurements, JSON-ready (the model is their post-processing)."""
        return {
            "kind": "adaptive_marginals",
            "measurements": [
                {
                    "scope": list(m.scope),
                    "values": m.values.tolist(),
                    "std": m.std,
                    "round": m.round,
                }
                for m in self.measurements
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], sizes: Sequence[int], iterations: int) -> LoopResult:
        """The fit again from persisted measurements (post-processing only), replayed round by
        round as the loop warm-started it, so a retry draws the first attempt's model."""
        found = [
            Measurement(tuple(m["scope"]), np.asarray(m["values"], float), m["std"], m["round"])
            for m in data["measurements"]
        ]
        first = sum(1 for m in found if m.round == 0)
        model, total = _estimate(sizes, found[:first], iterations, None)
        for end in range(first + 1, len(found) + 1):
            model, total = _estimate(sizes, found[:end], iterations, model)
        model, total = _estimate(sizes, found, 10 * iterations, model)
        return cls(found, model, total, [m.scope for m in found if m.round > 0])

    def sample(
        self, coding: CellCoding, rows: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` records drawn from the model (stratified along its tree):
        ``(scaled values, null mask)``."""
        return coding.decode(self.model.sample(rows, rng), rng)


def candidates(sizes: Sequence[int], max_way: int) -> list[Candidate]:
    """Every marginal of up to ``max_way`` columns within the public size limits: a way's
    candidates are offered only where all of them fit in :data:`MAX_PASS_CELLS` with the
    smaller ways'."""
    d = len(sizes)
    out: list[Candidate] = []
    for way in range(1, max_way + 1):
        found = []
        for scope in itertools.combinations(range(d), way):
            cells = int(np.prod([sizes[v] for v in scope]))
            if cells <= MAX_CANDIDATE_CELLS:
                found.append(Candidate(scope, cells, float(way)))
        if way > 1 and sum(c.cells for c in out + found) > MAX_PASS_CELLS:
            break
        out += found
    return out


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
    model, nullable = result.model, any(coding.nullable)

    def draw(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        scaled, nulls = coding.decode(model.sample(count, rng), rng)
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
    """What the data pass counts: every candidate's cells."""
    max_way = (settings or LoopSettings()).max_way
    return CellMarginals(coding, tuple(c.scope for c in candidates(coding.sizes, max_way)))


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
    answers = spec.marginals.split(sums.marginals.astype(np.float64))
    return run_loop(spec.marginals.coding.sizes, answers.__getitem__, accountant, noise, settings)


def _measure(
    scope: Scope,
    exact: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    round_: int,
) -> Measurement:
    """A marginal's counts with the noise that spends ``budget`` (sensitivity 1 per record: one
    record moves one count by one)."""
    scale = accountant.noise_scale(1.0, budget)
    accountant.charge(f"adaptive.marginal.{round_}", 1.0, scale)
    if accountant.pure:
        return Measurement(scope, noise.laplace(exact, scale), math.sqrt(2.0) * scale, round_)
    return Measurement(scope, noise.gaussian(exact, scale), scale, round_)


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


def _total(measurements: Sequence[Measurement]) -> float:
    """The table's size from every measurement's sum, each weighted by its inverse variance."""
    totals = np.array([m.values.sum() for m in measurements])
    variances = np.array([m.std**2 * m.values.size for m in measurements])
    return max(1.0, float(np.sum(totals / variances) / np.sum(1.0 / variances)))


def _estimate(
    sizes: Sequence[int],
    measurements: Sequence[Measurement],
    iterations: int,
    start: GraphicalModel | None,
) -> tuple[GraphicalModel, float]:
    total = _total(measurements)
    observed = [Observed(m.scope, m.values / total, m.std / total) for m in measurements]
    return fit_model(sizes, observed, iterations, start), total


def run_loop(
    sizes: Sequence[int],
    answer: Callable[[Scope], np.ndarray],
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    settings: LoopSettings | None = None,
) -> LoopResult:
    """Spend what ``accountant`` has left on marginals picked round by round (module docstring).

    ``sizes``: cells per column; ``answer(scope)``: the exact counts of a candidate's cells.
    """
    settings = settings or LoopSettings()
    d = len(sizes)
    pure = accountant.pure
    budget = accountant.share(1.0)
    rounds = settings.rounds or (2 * d if pure else 16 * d)
    per_round = budget / rounds
    pool = candidates(sizes, min(settings.max_way, d))
    # the one-way round: d rounds' budget, split in proportion to sqrt(cells), which minimises
    # the marginals' summed expected L1 noise (cells_j / budget_j, at a fixed sum of budgets)
    shares = np.sqrt(np.asarray(sizes, dtype=np.float64))
    one_way = per_round * d * shares / shares.sum()
    measurements = [
        _measure((v,), answer((v,)), float(one_way[v]), accountant, noise, 0) for v in range(d)
    ]
    spent = per_round * d
    model, total = _estimate(sizes, measurements, settings.iterations, None)
    selected: list[Scope] = []
    round_ = 0
    while budget - spent > 1e-12 * budget:
        round_ += 1
        if budget - spent < 2.0 * per_round:
            per_round = budget - spent
        spent += per_round
        select_budget = SELECTION_SHARE * per_round
        measure_budget = per_round - select_budget
        measure_std = accountant.noise_scale(1.0, measure_budget) * (
            math.sqrt(2.0) if pure else 1.0
        )
        limit = MAX_MODEL_CELLS * spent / budget
        scopes = [m.scope for m in measurements]
        fitting = [
            c
            for c in pool
            if any(set(c.scope) <= set(k) for k in model.tree.cliques)
            or _model_cells(sizes, scopes, c.scope) <= limit
        ]
        cliques = model.clique_marginals()
        scores = np.array(
            [
                c.weight
                * (
                    np.abs(answer(c.scope) - total * model.marginal(c.scope, cliques)).sum()
                    - _noise_l1(measure_std, c.cells, pure)
                )
                for c in fitting
            ]
        )
        weights = np.array([c.weight for c in fitting])
        pick = fitting[_select(scores, weights, select_budget, accountant, noise, round_)]
        before = total * model.marginal(pick.scope)
        measurements.append(
            _measure(pick.scope, answer(pick.scope), measure_budget, accountant, noise, round_)
        )
        selected.append(pick.scope)
        model, total = _estimate(sizes, measurements, settings.iterations, model)
        moved = np.abs(total * model.marginal(pick.scope) - before).sum()
        if moved <= _noise_l1(measure_std, pick.cells, pure):
            per_round *= 2.0
    model, total = _estimate(sizes, measurements, 10 * settings.iterations, model)
    return LoopResult(measurements, model, total, selected)


def _model_cells(sizes: Sequence[int], scopes: Sequence[Scope], extra: Scope) -> int:
    """Cells of the junction tree over ``scopes`` and ``extra``."""
    return _tree_cells(tuple(sizes), tuple(sorted(set(scopes) | {extra})))


@functools.lru_cache(maxsize=4096)
def _tree_cells(sizes: tuple[int, ...], scopes: tuple[Scope, ...]) -> int:
    """Cached: a round asks again for most of the previous round's trees."""
    return junction_tree(sizes, scopes).cells(sizes)
