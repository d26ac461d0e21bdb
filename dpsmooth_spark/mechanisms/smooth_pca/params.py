"""Parameters of the synthesize mechanism and the choice of its measured basis."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsmooth_spark.core.basis import BasisSet, PassSpec
from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant


class SmoothPCAParams(BaseModel):
    """Mechanism parameters; defaults chosen from ``python -m benchmarks fidelity`` (docs/benchmarks.md).

    Attributes:
        basis: ``marginal`` (``T_r(x_i)``), ``pairwise`` (plus ``T_r(x_i) T_s(x_j)``), ``pairs``
            (the pair terms alone) or ``auto``: the largest set in :data:`AUTO_BASES` whose
            per-function noise, predicted from the noisy count, stays below
            ``auto_noise_target``, else the anchor pairs alone (where even they are noisier
            than :data:`ANCHOR_NOISE_LIMIT`, ``anchor_picks`` of them, picked privately). The
            one-way marginals are measured as histograms (``marginal_fraction``) whatever the
            basis.
        degree: highest per-coordinate degree (with ``basis`` fixed); ``auto`` allows up to 3.
        candidates: number of candidate points C.
        candidate_strategy: where the private correlation that shapes the candidates comes from:
            ``moments`` (the pair terms of the basis: no extra budget), ``psi`` (the paper's
            Private Subspace Iteration, plus the second moment along each private direction) or
            ``auto``: ``moments`` when the basis has every pair term, ``psi`` otherwise.
        pca_dim: k of PSI (default ``min(2, d)``).
        pca_iterations: T of PSI.
        count_fraction: share of the budget for the count.
        marginal_fraction: share of the rest for the one-way histograms when a basis is measured
            too (all of the rest, less PSI's, when the basis is empty).
        marginal_bins: histogram cells per column (a divisor of ``marginal_cells``); ``None``:
            the power of two nearest ``(n~ / noise std)^(2/3)``, between 4 and 64.
        psi_fraction: share of the budget for PSI when it runs.
        directions_fraction: share of the budget for the second moments along the k private
            directions when PSI runs.
        fit: ``maxent`` (the distribution closest to the independent prior among those that fit
            the measurements within their noise, docs/mechanisms.md) or ``lp`` (the paper's
            reduced LP alone).
        group_shrinkage: ``james_stein`` (the default): a group of relation answers whose
            signal is clear (its clipped chi-square from the prior 2 deviations above what
            noise alone gives) is fitted to within the chi-square that positive-part
            James-Stein shrinkage toward the independent prior leaves, or, where its signal is
            at least 1.5x its noise, that shrinkage to its estimated strength leaves (James-Stein
            would weaken it; ``core.maxent.STRENGTH_SIGNAL``); any other group, and
            every group with ``ball``, to within ``|G|`` (its noise), which moves a clear group
            only ``1 - sqrt(|G| / chi2)`` of the way from the prior
            (``core.maxent.james_stein_tolerance``; docs/mechanisms.md, "James-Stein targets").
        fit_slack: the maxent fit may exceed the closest fit's chi-square by this factor when the
            noise level cannot be reached on the candidates.
        answer_bound: largest distance, in noise standard deviations, that the maxent fit may
            leave between any answer and its measurement, on top of each group's chi-square
            target (a histogram cell: this or its distance under the prior, if larger);
            ``null``: the group targets alone, which let the fit leave a group's whole slack on
            its strongest relation (up to ``sqrt(|G|)`` sigma). 2.5 holds 97% of Laplace draws.
        marginal_cells: grid cells per column for the private one-way marginals.
        marginal_tolerance: ``null``: each noisy histogram denoised by its James-Stein factor
            (kept, less its cells below the noise, where it is clear; uniform where it is noise;
            ``core.candidates.histogram_density``); a number:
            the chi-square per measured function a one-way marginal may leave (1: within the
            noise; 0: as close as the grid allows).
        copula_share: share of candidates drawn from the private-correlation copula.
        jitter: per-column standard deviation of the sampling neighbourhood, as a fraction of the
            private per-column standard deviation (0 disables it).
        auto_noise_target: per-function noise standard deviation (normalised) that ``auto`` allows
            (0.03 since the first-order pairs are on spread factors; 0.02 before, see
            docs/mechanisms.md).
        max_functions: largest basis (R, before anchor terms) that ``auto`` may pick; ``None``: no cap
            (the fit's cost is measured in ``benchmarks/stages.json``; no cap is needed for it).
        lp_solver: OR-Tools backend of ``fit: lp``.
        herding_rows: releases of up to this many rows pick their candidates by kernel herding
            (``core.sampling.herded_indices``): the sample's one- and two-way marginals and
            correlations follow the fitted distribution instead of adding the ``1 / sqrt(rows)``
            error of independent draws (about 1 ms a row at d = 30), and the jittered columns'
            values are then reordered among the rows so that the sample's correlation is the
            fit's (``core.sampling.reorder_to_correlation``); larger releases (and those
            sampled on the executors) draw independently. 0 disables both.
        unrelated_independent: every two columns no measurement covers get, in the fitted
            weights, the correlation the measured pairs imply where that is below the
            candidates' resolution (0 between columns no chain of measurements joins, ``r_iL
            r_jL`` through a 0/1 label measured with both; ``fit.completed_where_unmeasured``),
            keeping each column's mean and variance and every other pair's correlation
            (``core.maxent.match_correlation``): the candidates' own sampling correlation, of
            order ``1 / sqrt(C)``, is not released as structure. ``false``: the fit's weights.
        hub_means: a column in many pairs on spread factors (an anchor) gets, in the
            candidates' prior, the mean of its factor that its pair answers imply together with
            its histogram, where they know it far better than the histogram alone
            (:func:`.candidates.hub_marginals`): a label's mean read off one of ``d`` noisy
            histograms would otherwise make the fit invent relations to explain every pair
            answer. ``false``: the histogram's.
        pair_factors: ``spread`` (the default): the first-order pair terms are measured as
            ``p_i(x_i) p_j(x_j)``, ``p_i`` the non-decreasing polynomial bounded by 1 that
            covaries most with ``x_i`` under its private marginal (``core/factors.py``; ``T_1``
            where that gains under 5%, or where the column fills its range and the noise already
            resolves its linear term): the same sensitivity as ``T_1(x_i) T_1(x_j)`` and several
            times its signal on columns whose data fill a small part of their range;
            ``chebyshev``: the paper's ``T_1(x_i) T_1(x_j)``.
        factor_degree: degree of the spread factors, which the data pass's Gram matrix must
            reach (a higher one allows a sharper step where a column's data are); ``None``: the
            highest up to 16 that keeps the Gram within :data:`FACTOR_DESIGN_COLUMNS` design
            columns (16 up to 11 columns, 13 at 14, 6 at 31, the basis's own 3 from 48 on): its cost
            per row grows with their square (docs/benchmarks.md).
        pair_columns: anchor columns (e.g. a label) whose first-order interaction with every
            other column is added to the basis (``T_1(x_a) T_1(x_j)``): keeps their correlations
            for d - 1 extra functions each.
        anchor_picks: with ``basis: auto``, where the anchor pairs are too noisy to measure
            all of them (:data:`ANCHOR_NOISE_LIMIT`), up to this many of them are picked by
            noisy top-k on how far each pair's exact sum lies from what independent columns
            give, and measured, with the basis's share of the budget
            (:data:`ANCHOR_PICK_SELECTION` of it for the picks; docs/privacy.md section 3e):
            the anchor's clearest relation survives a low budget, where without it the
            release holds none and a classifier trained on it points anywhere. Only as many as
            the share measures at :data:`ANCHOR_NOISE_LIMIT` (none on a table too small for
            one); 0: never.
        pair_selection: ``on`` (with ``basis: auto``): when the chosen basis lacks some
            first-order pairs but the budget affords more functions at
            ``selection_noise_target``, that many more pairs are picked adaptively, in
            ``selection_rounds`` rounds, each by noisy top-k on how far a pair's exact sum lies
            from what the model of the pairs measured so far expects, and measured
            (docs/mechanisms.md, privacy.md section 3e), among the pairs their measurement
            would resolve (``measure.RESOLVABLE_STD``); ``auto``: the same, except under pure
            epsilon-DP where the basis is empty (too little budget for the anchor pairs): the
            ``anchor_picks`` find a label's relation there, which one general pick missed
            (WDBC at 0.1: AUC 0.97 against 0.41 in a release whose noisy count afforded one).
            Until stop 32 ``auto`` was ``off`` under pure epsilon-DP, where picks of columns
            that sit on one value made digits worse (docs/mechanisms.md); ``off``: never.
        selection_fraction: share of the basis budget spent on picking pairs.
        selection_noise_target: per-function noise (normalised) up to which pairs are added
            (looser than ``auto_noise_target``: a picked pair is one of the strongest).
        selection_rounds: rounds of pick-then-measure (more rounds let a pair that the new
            measurements explain give way to one they do not; the budget is the same).
        pooled_histogram: ``auto``: under pure epsilon-DP, where the marginals' budget is so low
            that a column's histogram keeps little of its own shape (the James-Stein factor of
            the histogram farthest from uniform below ``measure.POOL_FACTOR``, from public
            values) and at least 3 columns are continuous, ``pooled_fraction`` of the
            marginals' budget measures one histogram of every continuous column's values
            together (docs/privacy.md section 3f), the shape that the swamped histograms are
            shrunk towards; ``on``: wherever at least 3 columns are continuous (pure
            epsilon-DP only: under zCDP it costs what the columns' own histograms do);
            ``off``: never.
        pooled_fraction: share of the marginals' budget that the pooled histogram takes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    basis: Literal["auto", "marginal", "pairwise", "pairs"] = "auto"
    degree: int | None = Field(default=None, ge=1, le=8)
    candidates: int = Field(default=20_000, ge=10, le=500_000)
    candidate_strategy: Literal["auto", "moments", "psi"] = "auto"
    pca_dim: int | None = Field(default=None, ge=1)
    pca_iterations: int = Field(default=5, ge=1, le=100)
    count_fraction: float = Field(default=0.05, gt=0, lt=0.5)
    marginal_fraction: float = Field(default=0.6, gt=0, lt=1)
    marginal_bins: int | None = Field(default=None, ge=1)
    psi_fraction: float = Field(default=0.1, gt=0, lt=0.9)
    directions_fraction: float = Field(default=0.1, gt=0, lt=0.9)
    fit: Literal["maxent", "lp"] = "maxent"
    group_shrinkage: Literal["james_stein", "ball"] = "james_stein"
    fit_slack: float = Field(default=0.05, ge=0, le=10)
    answer_bound: float | None = Field(default=2.5, gt=0, le=100)
    marginal_cells: int = Field(default=256, ge=4, le=65_536)
    marginal_tolerance: float | None = Field(default=None, ge=0, le=10)
    copula_share: float = Field(default=0.5, ge=0, le=1)
    jitter: float = Field(default=0.02, ge=0, le=2)
    auto_noise_target: float = Field(default=0.03, gt=0)
    max_functions: int | None = Field(default=None, ge=1)
    lp_solver: Literal["glop", "pdlp", "clp"] = "glop"
    herding_rows: int = Field(default=20_000, ge=0, le=1_000_000)
    unrelated_independent: bool = True
    hub_means: bool = True
    pair_factors: Literal["spread", "chebyshev"] = "spread"
    factor_degree: int | None = Field(default=None, ge=2, le=32)
    pair_columns: tuple[str, ...] = ()
    anchor_picks: int = Field(default=1, ge=0, le=64)
    pair_selection: Literal["auto", "on", "off"] = "auto"
    selection_fraction: float = Field(default=0.2, gt=0, lt=1)
    selection_noise_target: float = Field(default=0.05, gt=0)
    selection_rounds: int = Field(default=1, ge=1, le=100)
    pooled_histogram: Literal["auto", "on", "off"] = "auto"
    pooled_fraction: float = Field(default=0.9, gt=0, lt=1)

    def basis_degree(self) -> int:
        """Highest Chebyshev degree of any basis this config may pick."""
        if self.degree is not None:
            return self.degree
        return max(spec[1] for spec in AUTO_BASES) if self.basis == "auto" else 2

    def data_pass_degree(self, d: int) -> int:
        """Chebyshev degree the data pass must compute on ``d`` columns: the basis's, or the
        spread factors' where higher."""
        own = self.basis_degree()
        if self.pair_factors != "spread":
            return own
        if self.factor_degree is not None:
            return max(own, self.factor_degree)
        return max(own, min(MAX_FACTOR_DEGREE, (FACTOR_DESIGN_COLUMNS - 1) // max(d, 1)))

    def pass_spec(self, d: int) -> PassSpec:
        """What the data pass computes for this mechanism on ``d`` columns: the Gram matrix and
        the histograms."""
        return PassSpec(self.data_pass_degree(d), histogram_cells=self.marginal_cells)


MAX_FACTOR_DEGREE = 16
"""Highest degree of the spread factors that ``factor_degree: null`` picks."""

FACTOR_DESIGN_COLUMNS = 192
"""Design columns ``1 + d g`` up to which ``factor_degree: null`` raises the Gram's degree for the
spread factors: the Gram's cost per row stays about that of a 64-column table at degree 3, and
digits (62 columns) keeps degree 3, where 4 raised its correlation error at epsilon 1 from 1.02
to 1.11 (docs/benchmarks.md, stop 22)."""


AUTO_BASES: tuple[tuple[str, int], ...] = (
    ("pairs", 2),
    ("pairs", 3),
)
"""Basis sets that ``basis: auto`` chooses from, smallest first (the anchor pairs alone when
none is affordable)."""


ANCHOR_NOISE_LIMIT = 0.5
"""``auto`` measures the anchor pairs alone only when their per-function noise (normalised) is at
most this: a quarter of the range [-1, 1] of a pair term. Noisier, they cannot tell any relation
from none: the budget goes to the one-way marginals instead, less what ``anchor_picks`` spends on
the clearest few (:func:`pickable_anchor_pairs`)."""


ANCHOR_PICK_SELECTION = 0.7
"""Share of the basis budget that picks the anchor pairs (``anchor_picks``); the rest measures
them. With 0.5, WDBC at epsilon 0.1 picked pairs of correlation -0.01 to 0.36 with the label in
3 of 8 seeded releases (the strongest: 0.79); 0.9 leaves too little to measure one on WDBC
(docs/benchmarks.md, stop 25)."""


def pickable_anchor_pairs(params: SmoothPCAParams, anchor_pairs: int, noisy_count: float,
                          accountant: PrivacyAccountant, budget: float) -> int:
    """How many of ``anchor_pairs`` anchor pairs ``anchor_picks`` picks and measures with
    ``budget`` where they are too noisy to measure all: as many as keep each one's noise, with
    :data:`ANCHOR_PICK_SELECTION` of ``budget`` taken out for the picks, at
    :data:`ANCHOR_NOISE_LIMIT`, up to ``params.anchor_picks`` and fewer than ``anchor_pairs``
    (public inputs only)."""
    if params.anchor_picks <= 0 or params.basis != "auto" or anchor_pairs <= 1 or budget <= 0:
        return 0
    affordable = affordable_functions(ANCHOR_NOISE_LIMIT, noisy_count, accountant,
                                      budget * (1.0 - ANCHOR_PICK_SELECTION))
    return int(np.clip(affordable, 0, min(params.anchor_picks, anchor_pairs - 1)))


def build_basis(kind: str, d: int, degree: int) -> BasisSet:
    """The basis set named by ``kind`` at per-coordinate ``degree``."""
    if kind == "marginal":
        return BasisSet.marginal(d, degree)
    if kind == "pairwise":
        return BasisSet.pairwise(d, degree)
    if kind == "pairs":
        return BasisSet.pairs(d, degree)
    raise ValueError(f"unknown basis {kind!r}")


def per_function_noise(size: int, noisy_count: float, accountant: PrivacyAccountant, budget: float) -> float:
    """Predicted std of one normalised basis answer ``(sum + noise) / n~`` (public inputs only)."""
    if accountant.pure:
        std = math.sqrt(2.0) * accountant.noise_scale(sensitivity.basis_sums_l1(size), budget)
    else:
        std = accountant.noise_scale(sensitivity.basis_sums_l2(size), budget)
    return std / max(noisy_count, 1.0)


def first_pairs(indices: np.ndarray) -> np.ndarray:
    """Which rows of multi-indices ``indices`` are first-order pair terms ``T_1(x_i) T_1(x_j)``."""
    return ((indices == 1).sum(axis=1) == 2) & ((indices != 0).sum(axis=1) == 2)


def missing_pairs(basis: BasisSet) -> int:
    """How many column pairs ``basis`` has no ``T_1(x_i) T_1(x_j)`` term for."""
    return basis.d * (basis.d - 1) // 2 - int(first_pairs(basis.indices).sum())


def selectable_pairs(params: SmoothPCAParams, basis: BasisSet, noisy_count: float,
                     accountant: PrivacyAccountant, budget: float) -> int:
    """How many first-order pairs the pair selection adds to ``basis``: as many as keep every function's noise, with the selection's
    share of ``budget`` taken out, at ``selection_noise_target``, and no more than are missing; 0
    with a fixed basis, with ``pair_selection: off`` (or ``auto`` under pure epsilon-DP where the
    basis is empty, whose budget the anchor picks spend better), or when no more are
    affordable."""
    missing = missing_pairs(basis)
    wanted = params.pair_selection == "on" or (params.pair_selection == "auto"
                                               and (basis.size > 0 or not accountant.pure))
    if not wanted or params.basis != "auto" or missing <= 0 or budget <= 0:
        return 0
    affordable = affordable_functions(params.selection_noise_target, noisy_count, accountant,
                                      budget * (1.0 - params.selection_fraction))
    return int(np.clip(affordable - basis.size, 0, missing))


def affordable_functions(noise_target: float, noisy_count: float, accountant: PrivacyAccountant,
                         budget: float) -> int:
    """The most functions that ``budget`` measures with each one's normalised noise at most
    ``noise_target``: the noise grows like their number (pure) or its square root (zCDP)."""
    ratio = noise_target / per_function_noise(1, noisy_count, accountant, budget)
    return math.floor(ratio if accountant.pure else ratio**2)


def choose_basis(
    params: SmoothPCAParams, d: int, noisy_count: float, accountant: PrivacyAccountant, budget: float,
    anchors: tuple[int, ...] = (),
    lattice: np.ndarray | None = None,
) -> BasisSet:
    """Pick the basis: fixed by ``params`` or, for ``auto``, the largest affordable one; every
    option includes the anchor columns' pair terms and none of the functions that repeat lower
    ones on a column's lattice (``lattice``: levels per column, 0 continuous;
    :meth:`BasisSet.on_lattice`)."""
    if params.basis != "auto":
        return build_basis(params.basis, d, params.degree or 2).with_anchor_pairs(anchors).on_lattice(lattice)
    options = [spec for spec in AUTO_BASES if params.degree is None or spec[1] <= params.degree]
    empty = BasisSet(d, 1, np.zeros((0, d), dtype=np.int64))
    chosen = empty.with_anchor_pairs(anchors).on_lattice(lattice)
    if chosen.size and per_function_noise(chosen.size, noisy_count, accountant, budget) > ANCHOR_NOISE_LIMIT:
        chosen = empty  # noise beyond what a pair term can tell: the budget goes to the marginals
    for kind, degree in options:
        base = build_basis(kind, d, degree)
        if params.max_functions is not None and base.size > params.max_functions:
            continue
        candidate = base.with_anchor_pairs(anchors).on_lattice(lattice)
        if per_function_noise(candidate.size, noisy_count, accountant, budget) <= params.auto_noise_target:
            chosen = candidate
    return chosen
