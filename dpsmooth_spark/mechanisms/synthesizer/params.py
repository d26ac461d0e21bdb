"""Parameters of the synthesize mechanism and the choice of its measured basis."""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsmooth_spark.core.chebyshev import BasisSet
from dpsmooth_spark.core.kernel import PassSpec
from dpsmooth_spark.core.tables import table_pairs
from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant


class SynthesizerParams(BaseModel):
    """Parameters of the synthesize job: what it measures, how it fits, how it samples
    (docs/mechanisms.md says why each default is what it is)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["fixed", "adaptive"] = Field(
        default="fixed",
        description=(
            "fixed: the budget plan below (Chebyshev basis, histograms, tables, PSI); adaptive: "
            "one loop that measures the 1-, 2- and 3-way cell marginals its estimate gets most "
            "wrong, picked privately round by round (mechanisms/adaptive.py), and ignores the "
            "other keys but rounds."
        ),
    )
    rounds: int | None = Field(
        default=None,
        ge=2,
        le=10_000,
        description=(
            "adaptive: rounds the budget is first split into (each one-way marginal counts as "
            "one); null: 2 d under pure epsilon-DP, 4 d in zCDP."
        ),
    )
    basis: Literal["auto", "marginal", "pairwise", "pairs"] = Field(
        default="auto",
        description=(
            "Measured basis: auto (the largest pair basis the budget affords), marginal, pairwise "
            "or pairs."
        ),
    )
    degree: int | None = Field(
        default=None,
        ge=1,
        le=8,
        description=(
            "Highest Chebyshev degree per column with a fixed basis; null: the basis's own (auto: "
            "up to 3)."
        ),
    )
    candidates: int = Field(
        default=20_000,
        ge=10,
        le=500_000,
        description=(
            "Number of candidate points C the fit weighs, at least: raised to 128 per measured "
            "contingency-table cell, or 500 per column where the pairs are read through their "
            "low-rank model, up to 100,000; to 512 per table cell, up to 200,000, where the "
            "release's rows are drawn, not herded (its noisy count more than herding_rows, or a "
            "table of lattice columns only)."
        ),
    )
    candidate_strategy: Literal["auto", "moments", "psi"] = Field(
        default="auto",
        description=(
            "Source of the candidates' correlation: moments (the pair terms), psi (private "
            "subspace) or auto."
        ),
    )
    pca_dim: int | None = Field(
        default=None, ge=1, description="k of Private Subspace Iteration; null: min(2, d)."
    )
    pca_iterations: int = Field(
        default=5, ge=1, le=100, description="T of Private Subspace Iteration."
    )
    count_fraction: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        description=(
            "Share of the budget whose single draw gives the noisy count the noise it needs "
            "where count_probe of it is not clear: a second draw then makes up the rest."
        ),
    )
    count_probe: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description=(
            "Share of count_fraction the count spends first (1: all of it in one draw). A "
            "large table's count is clear at this share, and the rest goes to the other "
            "statistics."
        ),
    )
    marginal_fraction: float = Field(
        default=0.6,
        gt=0,
        lt=1,
        description="Share of the rest for the one-way histograms when a basis is measured too.",
    )
    histogram_allocation: Literal["auto", "equal"] = Field(
        default="auto",
        description=(
            "auto: the lattice columns' histograms share their budget by the noise their "
            "marginals carry (many levels more, a 0/1 column less); equal: every column alike."
        ),
    )
    marginal_bins: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Histogram cells per column; null: from the noisy count and the noise (4 to 64)."
        ),
    )
    psi_fraction: float = Field(
        default=0.1,
        gt=0,
        lt=0.9,
        description="Share of the budget for Private Subspace Iteration when it runs.",
    )
    directions_fraction: float = Field(
        default=0.1,
        gt=0,
        lt=0.9,
        description=(
            "Share of the budget for the second moments along the private directions when PSI runs."
        ),
    )
    fit: Literal["maxent", "lp"] = Field(
        default="maxent",
        description=(
            "maxent (closest to independence within the noise) or lp (the paper's reduced LP "
            "alone)."
        ),
    )
    group_shrinkage: Literal["james_stein", "ball"] = Field(
        default="james_stein",
        description=(
            "Target of a clearly measured relation group: james_stein (shrunk estimate) or ball "
            "(within its noise)."
        ),
    )
    fit_slack: float = Field(
        default=0.05,
        ge=0,
        le=10,
        description=(
            "Factor by which the maxent fit may exceed the closest fit's chi-square where the "
            "noise level is out of reach."
        ),
    )
    answer_bound: float | None = Field(
        default=2.5,
        gt=0,
        le=100,
        description=(
            "Largest distance, in noise deviations, the fit may leave between any answer and its "
            "measurement; null: none."
        ),
    )
    marginal_cells: int = Field(
        default=256,
        ge=4,
        le=65_536,
        description=(
            "Grid cells per column of the private one-way marginals (and of the data pass's "
            "histograms)."
        ),
    )
    marginal_tolerance: float | None = Field(
        default=None,
        ge=0,
        le=10,
        description=(
            "null: each histogram denoised by its James-Stein factor; a number: chi-square per "
            "cell the marginal may leave."
        ),
    )
    copula_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of candidates drawn from the private-correlation copula.",
    )
    jitter: float = Field(
        default=0.02,
        ge=0,
        le=2,
        description=(
            "Sampling neighbourhood per column, as a fraction of its private standard deviation "
            "(0: none)."
        ),
    )
    auto_noise_target: float = Field(
        default=0.03,
        gt=0,
        description="Per-function noise (normalised) up to which basis auto measures pair terms.",
    )
    max_functions: int | None = Field(
        default=None, ge=1, description="Cap on the basis size auto may pick; null: none."
    )
    lp_solver: Literal["glop", "pdlp", "clp"] = Field(
        default="glop", description="OR-Tools backend of fit: lp."
    )
    herding_rows: int = Field(
        default=20_000,
        ge=0,
        le=1_000_000,
        description=(
            "Releases up to this many rows of a table with a continuous column are picked by"
            " kernel herding and reordered to the fit's correlation (0: never); a table of"
            " lattice columns only is drawn by systematic resampling."
        ),
    )
    unrelated_independent: bool = Field(
        default=True,
        description=(
            "Columns no measurement joins get the correlation the measured pairs imply, not the "
            "candidates' chance one."
        ),
    )
    pair_denoise: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Read the measured pairs through their low-rank model in the candidates and the fit: "
            "on, off, or auto (from 50 columns, where the model explains the measured pairs)."
        ),
    )
    point_masses: Literal["auto", "off"] = Field(
        default="auto",
        description=(
            "Measure how many of a continuous column's values sit exactly at each of its bounds "
            "(cells of their own in its histogram, no extra budget) and reproduce them (auto), "
            "or not (off)."
        ),
    )
    contingency_tables: Literal["auto", "off"] = Field(
        default="auto",
        description=(
            "Measure the two-way contingency tables of the pairs with a categorical column that a "
            "private selection picks (auto), or none (off)."
        ),
    )
    table_fraction: float = Field(
        default=0.5,
        gt=0.0,
        lt=1.0,
        description=(
            "Share of the relations' budget that the contingency tables get, where any can be "
            "measured."
        ),
    )
    table_alone_fraction: float = Field(
        default=0.15,
        gt=0.0,
        lt=1.0,
        description=(
            "Share of the budget left after the count that the contingency tables get where "
            "they are the only relations measured (no pair term affordable: small epsilon); "
            "the histograms get the rest. At most what table_fraction gives them."
        ),
    )
    hub_means: bool = Field(
        default=True,
        description=(
            "A label's (hub's) prior mean also comes from its pair answers where they know it far "
            "better than its histogram."
        ),
    )
    pair_factors: Literal["spread", "chebyshev"] = Field(
        default="spread",
        description=(
            "Pair terms as p_i(x_i) p_j(x_j) on spread factors (spread) or as the paper's T_1 T_1 "
            "(chebyshev)."
        ),
    )
    factor_degree: int | None = Field(
        default=None,
        ge=2,
        le=32,
        description=(
            "Degree of the spread factors; null: the highest up to 16 within 192 design columns of"
            " the data pass."
        ),
    )
    clipped_pairs: Literal["auto", "off"] = Field(
        default="auto",
        description=(
            "Under pure epsilon-DP on 50 to 400 columns, where no pair term is affordable, measure "
            "every pair's second moment with each row clipped to an L1 norm found from the "
            "private marginals (auto), or not (off)."
        ),
    )
    quadrant_pairs: Literal["auto", "off"] = Field(
        default="auto",
        description=(
            "Under pure epsilon-DP on 50 or more continuous columns, where no pair term is "
            "affordable, let each column pick its most related partner privately on the signs "
            "of the columns about their private medians, and measure those pairs (auto), or "
            "not (off)."
        ),
    )
    pair_columns: tuple[str, ...] = Field(
        default=(),
        description=(
            "Anchor columns (e.g. a label) whose pair with every other column is measured; the "
            "adaptive loop picks one of their tables first and weighs them 4 times after."
        ),
    )
    anchor_picks: int = Field(
        default=1,
        ge=0,
        le=64,
        description=(
            "Where the anchor pairs are too noisy to measure all, pick this many of the clearest "
            "privately (0: none)."
        ),
    )
    pair_selection: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Pick the pairs the basis lacks by noisy top-k and measure them: on, off, or auto (on "
            "where the basis is not empty)."
        ),
    )
    selection_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="Share of the basis budget spent on picking pairs."
    )
    selection_noise_target: float = Field(
        default=0.05,
        gt=0,
        description="Per-function noise (normalised) up to which picked pairs are added.",
    )
    selection_rounds: int = Field(
        default=1, ge=1, le=100, description="Rounds of pick-then-measure."
    )
    pooled_histogram: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "auto, on or off: where the budget swamps every histogram, measure one histogram of "
            "all continuous columns."
        ),
    )
    pooled_fraction: float = Field(
        default=0.9,
        gt=0,
        lt=1,
        description="Share of the marginals' budget the pooled histogram takes.",
    )

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

    def pass_spec(
        self, d: int, lattice: np.ndarray | None = None, nominal: np.ndarray | None = None
    ) -> PassSpec:
        """What the data pass computes for this mechanism on ``d`` columns: the Gram matrix, the
        histograms and, with ``contingency_tables: auto``, the tables of the pairs with a
        nominal column (``lattice``: levels per column; ``nominal``: the categorical ones)."""
        tables = table_pairs(lattice, nominal) if self.contingency_tables == "auto" else None
        return PassSpec(
            self.data_pass_degree(d),
            histogram_cells=self.histogram_cells(lattice, nominal),
            tables=tables,
            clip_levels=clip_levels(d) if self.clipped_pairs == "auto" else (),
        )

    def histogram_cells(
        self, lattice: np.ndarray | None = None, nominal: np.ndarray | None = None
    ) -> int:
        """Cells of the data pass's histograms (and of the private marginals' grid):
        ``marginal_cells``, doubled until every categorical column has one per value."""
        needed = 0
        if lattice is not None and nominal is not None and np.any(nominal):
            needed = int(np.max(np.asarray(lattice)[np.asarray(nominal, dtype=bool)]))
        return grid_cells(self.marginal_cells, needed)


CLIP_COLUMNS = (50, 400)
"""Widths at which the data pass computes the norm-clipped second moments (``clipped_pairs:
auto``): from 50 columns, where a pure-epsilon basis rarely affords a pair term; up to 400, where
the ``d^2 / 2`` sums, noised at ``kappa^2 / 2`` with ``kappa`` growing like ``d``, stop being
affordable at any table size this machine holds (they would double the pass's result)."""

CLIP_LADDER = 13
"""Clip norms the data pass computes: ``d * 0.75 * 2**(-k / 4)``, ``k = 0 .. 12`` (``0.094 d`` to
``0.75 d``, each 19% above the next): the release clips at the lowest at or above the norm it
wants, so its noise std is at most 41% above that norm's."""


def clip_levels(d: int) -> tuple[float, ...]:
    """The clip norms of the data pass on ``d`` columns (scaled units, increasing); empty outside
    :data:`CLIP_COLUMNS`. Public: from ``d`` alone."""
    if not CLIP_COLUMNS[0] <= d <= CLIP_COLUMNS[1]:
        return ()
    return tuple(sorted(d * 0.75 * 2.0 ** (-k / 4.0) for k in range(CLIP_LADDER)))


def grid_cells(cells: int, levels: int) -> int:
    """``cells`` doubled until it holds ``levels`` (one cell per level of a lattice column)."""
    while cells < levels:
        cells *= 2
    return cells


MAX_FACTOR_DEGREE = 16
"""Highest degree of the spread factors that ``factor_degree: null`` picks."""

FACTOR_DESIGN_COLUMNS = 192
"""Design columns ``1 + d g`` up to which ``factor_degree: null`` raises the Gram's degree for the
spread factors: the Gram's cost per row grows with their square (docs/decisions/0002)."""


AUTO_BASES: tuple[tuple[str, int], ...] = (
    ("pairs", 2),
    ("pairs", 3),
)
"""Basis sets that ``basis: auto`` chooses from, smallest first (the anchor pairs alone when
none is affordable)."""


ANCHOR_NOISE_LIMIT = 0.5
"""``auto`` measures the anchor pairs only where their per-function noise (normalised) is at most
this, a quarter of a pair term's range; noisier, ``anchor_picks`` spends on the clearest few."""


ANCHOR_PICK_SELECTION = 0.7
"""Share of the basis budget that picks the anchor pairs (``anchor_picks``); the rest measures
them (docs/decisions/0003)."""


DENOISE_MIN_COLUMNS = 50
"""``pair_denoise: auto`` reads the pairs through their low-rank model from this many columns:
the model needs many pairs per column to tell its factors from the noise."""


def pickable_anchor_pairs(
    params: SynthesizerParams,
    anchor_pairs: int,
    noisy_count: float,
    accountant: PrivacyAccountant,
    budget: float,
) -> int:
    """How many of ``anchor_pairs`` anchor pairs ``anchor_picks`` picks and measures with
    ``budget`` where they are too noisy to measure all: as many as keep each one's noise, with
    :data:`ANCHOR_PICK_SELECTION` of ``budget`` taken out for the picks, at
    :data:`ANCHOR_NOISE_LIMIT`, up to ``params.anchor_picks`` and fewer than ``anchor_pairs``
    (public inputs only)."""
    if params.anchor_picks <= 0 or params.basis != "auto" or anchor_pairs <= 1 or budget <= 0:
        return 0
    affordable = affordable_functions(
        ANCHOR_NOISE_LIMIT, noisy_count, accountant, budget * (1.0 - ANCHOR_PICK_SELECTION)
    )
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


def per_function_noise(
    size: int, noisy_count: float, accountant: PrivacyAccountant, budget: float
) -> float:
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


def selectable_pairs(
    params: SynthesizerParams,
    basis: BasisSet,
    noisy_count: float,
    accountant: PrivacyAccountant,
    budget: float,
) -> int:
    """How many first-order pairs the pair selection adds to ``basis``: as many as keep every
    function's noise, with the selection's
    share of ``budget`` taken out, at ``selection_noise_target``, and no more than are missing; 0
    with a fixed basis, with ``pair_selection: off`` (or ``auto`` under pure epsilon-DP where the
    basis is empty, whose budget the anchor picks spend better), or when no more are
    affordable."""
    missing = missing_pairs(basis)
    wanted = params.pair_selection == "on" or (
        params.pair_selection == "auto" and (basis.size > 0 or not accountant.pure)
    )
    if not wanted or params.basis != "auto" or missing <= 0 or budget <= 0:
        return 0
    affordable = affordable_functions(
        params.selection_noise_target,
        noisy_count,
        accountant,
        budget * (1.0 - params.selection_fraction),
    )
    return int(np.clip(affordable - basis.size, 0, missing))


def affordable_functions(
    noise_target: float, noisy_count: float, accountant: PrivacyAccountant, budget: float
) -> int:
    """The most functions that ``budget`` measures with each one's normalised noise at most
    ``noise_target``: the noise grows like their number (pure) or its square root (zCDP)."""
    ratio = noise_target / per_function_noise(1, noisy_count, accountant, budget)
    return math.floor(ratio if accountant.pure else ratio**2)


def choose_basis(
    params: SynthesizerParams,
    d: int,
    noisy_count: float,
    accountant: PrivacyAccountant,
    budget: float,
    anchors: tuple[int, ...] = (),
    lattice: np.ndarray | None = None,
) -> BasisSet:
    """Pick the basis: fixed by ``params`` or, for ``auto``, the largest affordable one; every
    option includes the anchor columns' pair terms and none of the functions that repeat lower
    ones on a column's lattice (``lattice``: levels per column, 0 continuous;
    :meth:`BasisSet.on_lattice`)."""
    if params.basis != "auto":
        return (
            build_basis(params.basis, d, params.degree or 2)
            .with_anchor_pairs(anchors)
            .on_lattice(lattice)
        )
    options = [spec for spec in AUTO_BASES if params.degree is None or spec[1] <= params.degree]
    empty = BasisSet(d, 1, np.zeros((0, d), dtype=np.int64))
    chosen = empty.with_anchor_pairs(anchors).on_lattice(lattice)
    if (
        chosen.size
        and per_function_noise(chosen.size, noisy_count, accountant, budget) > ANCHOR_NOISE_LIMIT
    ):
        chosen = empty  # noise beyond what a pair term can tell: the budget goes to the marginals
    for kind, degree in options:
        if kind == "pairs" and (
            per_function_noise(d * (d - 1) // 2, noisy_count, accountant, budget)
            > params.auto_noise_target
        ):
            continue  # not even its first-order pairs are affordable: never built (4 GB at 1,000)
        base = build_basis(kind, d, degree)
        if params.max_functions is not None and base.size > params.max_functions:
            continue
        candidate = base.with_anchor_pairs(anchors).on_lattice(lattice)
        if (
            per_function_noise(candidate.size, noisy_count, accountant, budget)
            <= params.auto_noise_target
        ):
            chosen = candidate
    return chosen
