"""The budget plan of a synthesize release: how its budget splits over the statistics, computed
from public inputs alone (the config, the public bounds and levels, the noisy count) before any
statistic but the count is measured. The manifest prints it; docs/privacy.md section 5 states
the split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsmooth_spark.core.chebyshev import BasisSet
from dpsmooth_spark.core.marginals import SHARED_SHAPE_MIN_COLUMNS, largest_shrinkage_factor
from dpsmooth_spark.mechanisms.stages import PlanError, histograms_sensitivity, noise_std
from dpsmooth_spark.mechanisms.synthesizer.params import (
    ANCHOR_PICK_SELECTION,
    SynthesizerParams,
    choose_basis,
    missing_pairs,
    pickable_anchor_pairs,
    selectable_pairs,
)
from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant


@dataclass(frozen=True)
class BudgetPlan:
    """Which statistics a release measures and the share of the whole budget each gets.

    Attributes:
        strategy: where the candidates' correlation comes from: ``moments`` or ``psi``.
        basis: the Chebyshev products (and first-order pairs) chosen up front.
        selected: first-order pairs the pair selection adds.
        picks: anchor pairs picked privately where the anchor pairs are too noisy to measure.
        tables: contingency tables measured (picked privately where fewer than the pairs the
            data pass counted).
        table_share: share of the tables, their selection included.
        table_selection: share of the tables' noisy top-k (part of ``table_share``).
        count: share of the noisy count's first draw.
        marginals: share of the one-way histograms (with the pooled histogram's, if any).
        pooled: whether the pooled histogram is measured (``pooled_fraction`` of ``marginals``).
        histogram_cells: cells of each one-way histogram.
        relations: share of the basis sums, the selected pairs and the anchor picks together.
        selection: share of the pair selection's noisy top-k (part of ``relations``).
        per_function: share of each basis function's sum (the same for chosen and picked pairs).
        psi: share of Private Subspace Iteration (0 where it does not run).
        directions: share of the second moments along PSI's directions.
        clipped: share of the norm-clipped pairs (0 where they are not measured).
        quadrants: share of the quadrant pairs, their partner picks included (0 where they are
            not measured).
        quadrant_selection: share of the quadrant pairs' partner picks (part of ``quadrants``).
        count_top_up: share of the count's second draw (0 where the first was clear enough:
            :func:`count_top_up`).
    """

    strategy: str
    basis: BasisSet
    selected: int
    picks: int
    tables: int
    table_share: float
    table_selection: float
    count: float
    marginals: float
    pooled: bool
    histogram_cells: int
    relations: float
    selection: float
    per_function: float
    psi: float
    directions: float
    clipped: float = 0.0
    quadrants: float = 0.0
    quadrant_selection: float = 0.0
    count_top_up: float = 0.0

    def to_dict(self, pooled_fraction: float) -> dict[str, Any]:
        """The plan as the manifest prints it: each stage's share of the budget and what it buys."""
        pooled = self.marginals * pooled_fraction if self.pooled else 0.0
        shares = {
            "count": self.count,
            "count_top_up": self.count_top_up,
            "histograms": self.marginals - pooled,
            "pooled_histogram": pooled,
            "basis_sums": self.per_function * self.basis.size,
            "pair_selection": self.selection,
            "selected_pairs": self.per_function * self.selected,
            "anchor_selection": self.relations * ANCHOR_PICK_SELECTION if self.picks else 0.0,
            "anchor_pairs": self.relations * (1.0 - ANCHOR_PICK_SELECTION) if self.picks else 0.0,
            "psi": self.psi,
            "directions": self.directions,
            "table_selection": self.table_selection,
            "tables": self.table_share - self.table_selection,
            "clipped_pairs": self.clipped,
            "quadrant_selection": self.quadrant_selection,
            "quadrant_pairs": self.quadrants - self.quadrant_selection,
        }
        return {
            "shares": {k: float(v) for k, v in shares.items() if v > 0},
            "candidate_strategy": self.strategy,
            "basis_functions": self.basis.size,
            "selected_pairs": self.selected,
            "anchor_picks": self.picks,
            "contingency_tables": self.tables,
            "histogram_cells": self.histogram_cells,
        }


def plan_budget(
    params: SynthesizerParams,
    columns: tuple[str, ...],
    noisy_count: float,
    accountant: PrivacyAccountant,
    cells: int,
    lattice: np.ndarray | None = None,
    table_pairs: int = 0,
    clippable: bool = False,
    quadrant_columns: int = 0,
    count_shares: tuple[float, float] | None = None,
) -> BudgetPlan:
    """The release's plan from public values: the config (``params``), the column names, the
    data pass's histogram ``cells``, the ``lattice`` levels per column (0 continuous), the number
    of pairs the data pass counted contingency tables for, whether it computed the norm-clipped
    second moments (``clippable``), how many columns a second pass could measure quadrant pairs
    of (``quadrant_columns``: 0 where there is no such pass), the noisy count and the shares its
    two draws spent (``count_shares``, :func:`count_top_up`; ``None``: ``count_fraction`` in
    one). ``accountant`` converts shares to noise scales; nothing is charged."""
    d = len(columns)
    count, top_up = (params.count_fraction, 0.0) if count_shares is None else count_shares
    rest = 1.0 - count - top_up
    anchors = tuple(columns.index(c) for c in params.pair_columns)
    relations = rest * (1.0 - params.marginal_fraction)
    tables = affordable_tables(
        params, table_pairs, d, noisy_count, accountant, relations * params.table_fraction
    )
    table_share = relations * params.table_fraction if tables else 0.0
    share = relations - table_share
    basis = choose_basis(
        params, d, noisy_count, accountant, accountant.share(share), anchors, lattice
    )
    selected = selectable_pairs(params, basis, noisy_count, accountant, accountant.share(share))
    strategy = params.candidate_strategy
    if strategy == "auto":  # PSI only where its fractions leave the basis its share
        strategy = (
            "psi"
            if not all_pairs_of(basis)
            and not selected
            and d >= 2
            and share >= params.psi_fraction + params.directions_fraction
            and _psi_affordable(params, d, noisy_count, accountant)
            else "moments"
        )
    extra = params.psi_fraction + params.directions_fraction if strategy == "psi" else 0.0
    basis_share = share - extra
    picks = 0  # every anchor pair too noisy to measure: a few of them picked and measured instead
    if anchors and basis.size == 0 and not selected and basis_share > 0:
        anchor_pairs = (
            BasisSet(d, 1, np.zeros((0, d), dtype=np.int64)).with_anchor_pairs(anchors).size
        )
        picks = pickable_anchor_pairs(
            params, anchor_pairs, noisy_count, accountant, accountant.share(basis_share)
        )
    # no pair term affordable from a wide table under pure epsilon
    unmeasured = (
        accountant.pure
        and strategy == "moments"
        and basis.size == 0
        and not selected
        and not tables
    )
    # each column's most related partner, picked on the signs about the private medians, costs
    # what d picks among d - 1 cost: far less than every pair at once
    quadrants = (
        share
        if unmeasured
        and params.quadrant_pairs == "auto"
        and quadrant_columns >= QUADRANT_MIN_COLUMNS
        and quadrants_affordable(quadrant_columns, noisy_count, accountant, share)
        else 0.0
    )
    # else every pair's second moment, each row clipped to a norm near the table's typical one,
    # costs far less than its worst case
    clipped = (
        share
        if clippable
        and unmeasured
        and not quadrants
        and clipped_affordable(d, noisy_count, accountant, share)
        else 0.0
    )
    if quadrants:
        picks = 0
        marginal_share, share = rest * params.marginal_fraction, 0.0
    elif clipped:
        picks = 0  # the anchors' pairs are among the clipped ones
        marginal_share, share = rest - clipped, 0.0
    elif basis.size == 0 and not selected and not picks and not tables:
        marginal_share, share = rest - extra, 0.0
    elif basis.size == 0 and not selected and not picks:  # the tables alone
        alone = min(rest * params.table_alone_fraction, table_share)
        fewer = affordable_tables(params, table_pairs, d, noisy_count, accountant, alone)
        if fewer:
            tables, table_share = fewer, alone
        marginal_share, share = rest - extra - table_share, 0.0
    else:
        marginal_share, share = rest * params.marginal_fraction, basis_share
    if share < 0 or marginal_share <= 0:  # excluded before any noise by check_fractions
        raise PlanError(
            "count, PSI and direction fractions leave no budget for the histograms and basis sums"
        )
    if strategy == "psi" and (basis.size or selected):
        basis = choose_basis(
            params, d, noisy_count, accountant, accountant.share(share), anchors, lattice
        )
        selected = selectable_pairs(params, basis, noisy_count, accountant, accountant.share(share))
    # every basis function, chosen up front or picked later, gets the same noise: the basis's
    # share less the selection's, split in proportion to the number of functions; where the
    # budget affords every missing pair, none is picked and the selection's share is not spent
    select_share = share * params.selection_fraction if 0 < selected < missing_pairs(basis) else 0.0
    per_function = (share - select_share) / max(basis.size + selected, 1)
    marginal_budget = accountant.share(marginal_share)
    bins = params.marginal_bins or histogram_bins(
        noisy_count, accountant, marginal_budget, d, cells
    )
    continuous = np.arange(d) if lattice is None else np.flatnonzero(np.asarray(lattice) < 2)
    pooled = pools_histograms(
        params, accountant, noisy_count, marginal_budget, d, continuous.size, bins
    )
    return BudgetPlan(
        strategy=strategy,
        basis=basis,
        selected=selected,
        picks=picks,
        tables=tables,
        table_share=table_share,
        table_selection=(table_share * params.selection_fraction if tables < table_pairs else 0.0),
        count=count,
        count_top_up=top_up,
        marginals=marginal_share,
        pooled=pooled,
        histogram_cells=bins,
        relations=share,
        selection=select_share,
        per_function=per_function,
        psi=params.psi_fraction if strategy == "psi" else 0.0,
        directions=params.directions_fraction if strategy == "psi" else 0.0,
        clipped=clipped,
        quadrants=quadrants,
        quadrant_selection=quadrants * QUADRANT_SELECTION,
    )


def check_fractions(params: SynthesizerParams, tables: bool) -> None:
    """Refuse, before any noise, fractions that leave :func:`plan_budget` no budget for some
    noisy count: with ``candidate_strategy: psi``, PSI's and the directions' fractions must fit
    in the basis's share at its smallest (the count's two draws at their largest, and the
    contingency tables' share where the config lets tables be measured: ``tables``). ``auto``
    chooses PSI only where they fit. A function of the config alone, so the refusal says nothing
    of the data.

    Raises:
        PlanError: the fractions cannot fit (names them).
    """
    if params.candidate_strategy != "psi":
        return
    rest = 1.0 - params.count_fraction * (1.0 + params.count_probe)
    smallest = rest * (1.0 - params.marginal_fraction) * (1.0 - params.table_fraction * tables)
    extra = params.psi_fraction + params.directions_fraction
    if extra > smallest:
        raise PlanError(
            f"candidate_strategy: psi with psi_fraction + directions_fraction = {extra:g} leaves "
            f"no budget for the basis sums, whose share can be as small as {smallest:.3g} of the "
            "budget (after the count, the histograms"
            + (" and the contingency tables" if tables else "")
            + "); lower them, or use candidate_strategy: auto. Nothing was spent."
        )


COUNT_NOISE_TARGET = 0.05
""":func:`count_top_up` draws the count again where its first draw's noise std is above this
share of its noisy count. The plan reads the count against thresholds (a table's or
a function's noise as a share of it, the histogram cells as a power of two of it) that a 5%
error moves by less than their steps. Adult at epsilon 0.1 (48,842 rows) is clear at 0.01 of
the budget (2.9%); its count then costs 0.01 instead of 0.05, and twelve seeded releases gain
0.0006 in one-way TVD and 0.0009 and 0.0016 in 2- and 3-way. Wine at epsilon 1 (178 rows)
needs its count as clear as one draw at 0.05 gives it: at 0.02 its correlation ratio went from
0.86 to 0.90 and its TSTR AUC from 0.98 to 0.95."""


def count_top_up(
    params: SynthesizerParams, noisy_count: float, accountant: PrivacyAccountant
) -> float:
    """The share of the budget the count spends in a second draw after its first, at
    ``count_probe`` of ``count_fraction``: where the first draw's noise std is above
    :data:`COUNT_NOISE_TARGET` of its ``noisy_count``, what gives the two draws, pooled by
    inverse variance, the noise of one at ``count_fraction`` (a precision that grows with the
    square of epsilon, or with rho: ``sqrt(1 - p^2)`` or ``1 - p`` of it); else 0 (public values
    and the first noisy count only)."""
    probe = params.count_probe
    first = count_noise_std(accountant, params.count_fraction * probe)
    if probe >= 1.0 or first <= COUNT_NOISE_TARGET * max(noisy_count, 1.0):
        return 0.0
    rest = math.sqrt(1.0 - probe**2) if accountant.pure else 1.0 - probe
    return params.count_fraction * rest


def count_noise_std(accountant: PrivacyAccountant, share: float) -> float:
    """Noise std of a count released with ``share`` of the budget."""
    scale = accountant.noise_scale(sensitivity.count_sensitivity(), accountant.share(share))
    return noise_std(scale, accountant)


TABLE_NOISE_TARGET = 0.02
""":func:`affordable_tables` measures as many contingency tables as keep each cell's noise, as a
share of the noisy count, at most this. At 0.005 Adult at epsilon 0.1 measured two tables, none
with its label (a classifier trained on the release scored an AUC of 0.50); at 0.02 ten (0.81),
with lower 2- and 3-way TVD (``python -m benchmarks mixed``)."""


def affordable_tables(
    params: SynthesizerParams,
    pairs: int,
    d: int,
    noisy_count: float,
    accountant: PrivacyAccountant,
    share: float,
) -> int:
    """How many of the ``pairs`` whose tables the data pass counted a release measures with
    ``share`` of the budget (public values only): the most, up to ``d - 1`` (a tree over the
    columns, as MST measures), whose cells' noise stays within :data:`TABLE_NOISE_TARGET` of
    the noisy count (a table's cells have L1 sensitivity 1, L2 1: ``k`` tables ``k`` and
    ``sqrt(k)``); the selection's share (``selection_fraction``) is set aside where fewer than
    ``pairs`` are measured. 0 without pairs or with ``contingency_tables: off``."""
    if not pairs or params.contingency_tables == "off" or share <= 0:
        return 0
    for k in range(min(pairs, max(d - 1, 1)), 0, -1):
        spend = share * (1.0 - params.selection_fraction) if k < pairs else share
        sens = float(k) if accountant.pure else math.sqrt(k)
        scale = accountant.noise_scale(sens, accountant.share(spend))
        if noise_std(scale, accountant) <= TABLE_NOISE_TARGET * max(noisy_count, 1.0):
            return k
    return 0


CLIP_NOISE_TARGET = 0.03
"""The norm-clipped pairs are measured where the noise std of one pair's normalised answer,
predicted at the clip norm :data:`CLIP_TYPICAL_NORM`, is at most this: blocks of ten columns
correlated 0.35-0.9 then stand clear of the noise's spectral edge ``2 std sqrt(d)`` at 100
columns (epsilon 1 on 10^5 rows: std 0.026, all ten blocks found). Nearer the edge the model
finds a few of several equally strong blocks, mixed (epsilon 0.6: rank 2, a correlation error
1.27 times the independent columns')."""

CLIP_TYPICAL_NORM = 0.375
"""The clip norm, per column, that :func:`clipped_affordable` predicts from public values: a
column spread over +-3 standard deviations of its bounds has a mean absolute scaled value of
0.27, 1.25 times that (:data:`measure.CLIP_MARGIN`) lies on the ladder level 0.375. The release
clips at a norm found from the private marginals instead."""


def clipped_affordable(
    d: int, noisy_count: float, accountant: PrivacyAccountant, share: float
) -> bool:
    """Whether ``share`` of the budget measures the ``d (d - 1) / 2`` norm-clipped pairs with a
    predicted noise std of one normalised answer within :data:`CLIP_NOISE_TARGET` (public
    values only)."""
    if share <= 0:
        return False
    sens = sensitivity.clipped_pairs_l1(CLIP_TYPICAL_NORM * d, d)
    scale = accountant.noise_scale(sens, accountant.share(share))
    return noise_std(scale, accountant) <= CLIP_NOISE_TARGET * max(noisy_count, 1.0)


QUADRANT_MIN_COLUMNS = 50
"""Fewest continuous columns on which ``quadrant_pairs: auto`` measures quadrant pairs (the
norm-clipped pairs' lower limit too)."""

QUADRANT_SELECTION = 0.5
"""Share of the quadrant pairs' budget that picks each column's partner; the rest measures the
picked pairs. Picking is the costly part: each of ``d`` picks must stand out among ``d - 1``."""

QUADRANT_RESOLUTION = 0.5
"""The quadrant pairs are measured where a partner pick, predicted from public values, resolves a
quadrant correlation of this or less (its noise scale times ``ln(d - 1)`` over the noisy count:
about the largest noise draw among ``d - 1`` partners): copula correlations from 0.7 up are then
found. On the 300-column factor table at epsilon 1 it is 0.11; at 0.1, 1.1 (no pairs)."""


QUADRANT_NOISE = 0.05
"""The quadrant pairs are measured where the noise std of a picked pair's copula correlation,
predicted from public values for ``d`` pairs, is at most this: at 0.12 (100 columns at epsilon
0.1) a pair must read 0.47 to clear :data:`summary.QUADRANT_DEVIATIONS`, and each false one
that does is a large invented relation (the table without relations: ratio 1.09)."""


def quadrants_affordable(
    columns: int, noisy_count: float, accountant: PrivacyAccountant, share: float
) -> bool:
    """Whether ``share`` of the budget picks a partner for each of ``columns`` columns at a
    predicted resolution within :data:`QUADRANT_RESOLUTION` and measures up to ``columns``
    pairs at a copula noise within :data:`QUADRANT_NOISE` (public values only)."""
    if share <= 0 or columns < 3:
        return False
    n = max(noisy_count, 1.0)
    scale = accountant.selection_scale(1.0, accountant.share(share * QUADRANT_SELECTION), columns)
    sens = float(columns) if accountant.pure else math.sqrt(columns)
    measure = accountant.noise_scale(sens, accountant.share(share * (1.0 - QUADRANT_SELECTION)))
    return (
        scale * math.log(columns - 1) / n <= QUADRANT_RESOLUTION
        and 0.5 * math.pi * noise_std(measure, accountant) / n <= QUADRANT_NOISE
    )


PSI_NOISE_TARGET = 0.05
"""``candidate_strategy: auto`` runs PSI only when the noise of one entry of its normalised matrix
product, predicted from the noisy count, is below this; else the budget goes to the basis."""


POOL_FACTOR = 0.5
"""``pooled_histogram: auto`` pools where the James-Stein factor of the histogram farthest from
uniform would be below this at the marginals' whole budget: a typical histogram then keeps
little of its own shape (:func:`pools_histograms`; docs/decisions/0004)."""


def all_pairs_of(basis: BasisSet) -> bool:
    """Whether ``basis`` has ``T_1(x_i) T_1(x_j)`` for every pair of columns."""
    return basis.d < 2 or missing_pairs(basis) <= 0


def pools_histograms(
    params: SynthesizerParams,
    accountant: PrivacyAccountant,
    noisy_count: float,
    budget: float,
    d: int,
    continuous: int,
    bins: int,
) -> bool:
    """Whether the marginals' ``budget`` measures the pooled histogram of the ``continuous``
    columns too (``params.pooled_histogram``; public values only): under pure epsilon-DP, with
    at least :data:`core.marginals.SHARED_SHAPE_MIN_COLUMNS` continuous columns, where even
    the histogram farthest from uniform would keep little of its shape at the noise of the whole
    ``budget`` (its James-Stein factor bound below :data:`POOL_FACTOR`, ``bins`` cells).

    Each of ``d`` histograms then shows little of its own column, but one histogram of every
    continuous column's values costs a sensitivity of ``m`` for ``n m`` values: its shares have
    ``sqrt(m)`` times less noise than the mean of the ``m`` histograms at the same budget, and
    that mean is the shape the swamped histograms were shrunk towards (docs/mechanisms.md).
    Under zCDP its L2 sensitivity is ``m`` as well, which gains nothing over the histograms'
    ``sqrt(d)``."""
    if params.pooled_histogram == "off" or continuous < SHARED_SHAPE_MIN_COLUMNS:
        return False
    if params.pooled_histogram == "on":
        return True  # under zCDP, release_pooled_histogram refuses it
    if not accountant.pure:
        return False
    share_std = histogram_count_std(accountant, budget, d) / max(noisy_count, 1.0)
    return largest_shrinkage_factor(bins, share_std) < POOL_FACTOR


def histogram_count_std(accountant: PrivacyAccountant, budget: float, d: int) -> float:
    """Noise standard deviation of one count of ``d`` histograms released with ``budget``."""
    return noise_std(
        accountant.noise_scale(histograms_sensitivity(d, accountant), budget), accountant
    )


def histogram_bins(
    noisy_count: float, accountant: PrivacyAccountant, budget: float, d: int, cells: int
) -> int:
    """Cells per histogram from public values: the power of two nearest ``(n~ / std)^(2/3)``
    (``std`` the noise of one count; more records per unit of noise buy a finer histogram),
    in ``[4, 64]`` and dividing ``cells``. Chosen with ``python -m benchmarks fidelity``."""
    wanted = (max(noisy_count, 1.0) / histogram_count_std(accountant, budget, d)) ** (2.0 / 3.0)
    bins = 2 ** int(np.clip(round(math.log2(max(wanted, 1.0))), 2, 6))
    while cells % bins:
        bins //= 2
    return max(bins, 1)


def psi_sensitivity(params: SynthesizerParams, d: int, accountant: PrivacyAccountant) -> float:
    """Per-record sensitivity of one PSI product, L1 or L2 by the mode (docs/privacy.md 4)."""
    k = min(params.pca_dim or 2, d)
    return sensitivity.psi_product_l1(d, k) if accountant.pure else sensitivity.psi_product_l2(d)


def _psi_affordable(
    params: SynthesizerParams, d: int, noisy_count: float, accountant: PrivacyAccountant
) -> bool:
    """Whether PSI's per-entry noise, normalised by the noisy count, is below PSI_NOISE_TARGET."""
    scale = accountant.noise_scale(
        psi_sensitivity(params, d, accountant),
        accountant.share(params.psi_fraction),
        params.pca_iterations,
    )
    return scale / max(noisy_count, 1.0) <= PSI_NOISE_TARGET
