"""Stage 1, measure: every DP statistic of the mechanism, from the exact sums of the data pass.

1. the noisy count (sensitivity 1), in a second draw too where the first is not clear enough
   for the plan;
2. one noisy histogram per column (L1 sensitivity d, L2 sqrt(d)), with cells chosen from the
   noisy count: the one-way marginals; where the budget swamps every one of them, also one
   histogram of all the continuous columns' values together (L1 sensitivity m, the columns
   pooled; pure epsilon-DP only);
3. noisy basis sums ``sum_x prod_i T_{r_i}(x_i)`` over R multi-indices (L1 sensitivity R,
   L2 sqrt(R)); the basis (pair terms) is picked from the noisy count when ``basis: auto``;
   with ``pair_factors: spread`` its first-order pair terms ``T_1(x_i) T_1(x_j)`` are measured
   as ``p_i(x_i) p_j(x_j)`` instead, ``p_i`` a polynomial bounded by 1 chosen from column
   ``i``'s noisy histogram (``core/factors.py``): the same sensitivity, released with the
   basis sums;
4. with the ``psi`` strategy: Private Subspace Iteration (Algorithm 4) on the centred second
   moment, then the noisy sums of ``T_2`` along each of its k directions (L1 sensitivity k),
   which say how strongly the columns vary together along them.

The result is a :class:`.summary.NoisySummary`; everything later is post-processing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.chebyshev import (
    BasisSet,
    HistogramBasis,
    LevelHistogram,
    LevelParts,
    ProjectionBasis,
    coarsen_histograms,
)
from dpsmooth_spark.core.factors import (
    FactorPairs,
    copula_answers,
    copula_noise,
    linear_factors,
    spread_factors,
)
from dpsmooth_spark.core.kernel import ExactSums
from dpsmooth_spark.core.marginals import (
    GridMarginals,
    coarse_level_cells,
    coarse_weights,
    histogram_weights,
    level_counts,
    level_parts,
    measured_per_level,
)
from dpsmooth_spark.core.pooling import inverse_variance_mean
from dpsmooth_spark.core.quadrants import QuadrantPairs, medians, sign_gram
from dpsmooth_spark.core.subspace import SubspaceEstimate, private_subspace_iteration
from dpsmooth_spark.core.tables import ContingencyTables, independent_tables, table_pairs
from dpsmooth_spark.mechanisms.stages import (
    add_noise,
    noise_std,
    release_basis_sums,
    release_clipped_pairs,
    release_count,
    release_histograms,
    release_histograms_in_two_draws,
    release_pooled_histogram,
    release_tables,
    select_partners,
    select_top_k,
)
from dpsmooth_spark.mechanisms.synthesizer.params import (
    ANCHOR_PICK_SELECTION,
    SynthesizerParams,
    first_pairs,
    per_function_noise,
)
from dpsmooth_spark.mechanisms.synthesizer.plan import (
    BudgetPlan,
    count_noise_std,
    count_top_up,
    histogram_count_std,
    plan_budget,
    psi_sensitivity,
)
from dpsmooth_spark.mechanisms.synthesizer.summary import NoisyStatistic, NoisySummary
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def release_summary(
    sums: ExactSums,
    bounds: PublicBounds,
    params: SynthesizerParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    rng: np.random.Generator,
    nullable: np.ndarray | None = None,
    lattice: np.ndarray | None = None,
    nominal: np.ndarray | None = None,
    rows_pass: RowsPass | None = None,
) -> NoisySummary:
    """Spend the whole budget of ``accountant`` on the DP statistics of the mechanism
    (``nullable``: the columns declared nullable, whose null counts are measured; ``lattice``:
    levels per column, 0 continuous, from the config: no basis function that repeats lower ones
    on a column's lattice is measured; ``nominal``: the categorical columns, whose levels have
    no order; ``rows_pass``: a second pass over the rows the data pass summed, for the
    quadrant pairs, whose thresholds come from the released marginals)."""
    d = sums.d
    continuous = np.arange(d) if lattice is None else np.flatnonzero(np.asarray(lattice) == 0)
    quadrant_columns = (
        continuous.size if rows_pass is not None and (nullable is None or not nullable.any()) else 0
    )
    noisy_count, count_std, count_shares = release_noisy_count(
        sums.count, params, accountant, noise
    )

    cells = params.marginal_cells if sums.histograms is None else sums.histograms.shape[1]
    counted = None if sums.tables is None else table_pairs(lattice, nominal)
    pairs = 0 if counted is None else len(counted.pairs)
    plan = plan_budget(
        params,
        bounds.columns,
        noisy_count,
        accountant,
        cells,
        lattice,
        pairs,
        clippable=sums.clipped is not None and bool(sums.clip_levels),
        quadrant_columns=quadrant_columns,
        count_shares=count_shares,
    )
    anchors = tuple(bounds.columns.index(c) for c in params.pair_columns)
    basis, selected, picks, share = plan.basis, plan.selected, plan.picks, plan.relations

    summary = _release_marginals(
        sums,
        bounds,
        params,
        accountant,
        noise,
        noisy_count,
        accountant.share(plan.marginals),
        plan.histogram_cells,
        plan.pooled,
        nullable,
        lattice,
        nominal,
    )
    summary = replace(
        summary,
        levels=None if lattice is None else np.asarray(lattice, dtype=np.int64),
        nominal=None if nominal is None else np.asarray(nominal, dtype=bool),
        plan=plan.to_dict(params.pooled_fraction),
    )
    if summary.null_counts is None and summary.histograms is not None:
        summary = replace(
            summary,
            count_alone=noisy_count,
            noisy_count=pooled_count(
                noisy_count,
                count_std,
                summary.histograms,
                summary.histogram_noise_stds,
                summary.pooled_histogram,
                summary.pooled_noise_std,
                0 if summary.pooled_columns is None else summary.pooled_columns.size,
                summary.histogram_cells(),
                summary.held_cells(),
            ),
        )
    if plan.tables and sums.tables is not None and counted is not None:
        summary = summary.with_statistics(
            _measure_tables(sums.tables, counted, summary, plan, accountant, noise)
        )
    if plan.quadrants and rows_pass is not None:
        summary = summary.with_statistics(
            _measure_quadrant_pairs(rows_pass, summary, plan, continuous, accountant, noise)
        )
    if plan.clipped:
        summary = summary.with_statistics(
            _measure_clipped_pairs(sums, summary, accountant.share(plan.clipped), accountant, noise)
        )
    select_share, per_function = plan.selection, plan.per_function
    if basis.size:
        noise_per_function = per_function_noise(
            1, summary.noisy_count, accountant, accountant.share(per_function)
        )
        basis, factors = _split_factor_pairs(
            basis, summary, params, sums.degree, noise_per_function
        )
        exact = sums.basis_sums(basis) if basis.size else np.zeros(0)
        if factors is not None:
            exact = np.concatenate([exact, factors.sums(sums)])
        noisy_sums, scale = release_basis_sums(
            exact, accountant.share(per_function * exact.size), accountant, noise
        )
        std = noise_std(scale, accountant)
        # one release, two records: the Chebyshev products and the pairs on spread factors
        summary = summary.with_statistics(
            NoisyStatistic(
                "basis", "basis_sums", basis, noisy_sums[: basis.size], std, _cols(basis)
            )
        )
        if factors is not None:
            summary = summary.with_statistics(
                NoisyStatistic(
                    "factor_pairs",
                    "basis_sums",
                    factors,
                    noisy_sums[basis.size :],
                    std,
                    tuple(np.unique(factors.pairs).tolist()),
                )
            )
    if picks:
        summary = _measure_selected_pairs(
            sums,
            summary,
            params,
            picks,
            accountant.share(share * ANCHOR_PICK_SELECTION),
            accountant.share(share * (1.0 - ANCHOR_PICK_SELECTION)),
            accountant,
            noise,
            among=anchors,
            stages=("anchor_selection", "anchor_pairs"),
        )
    if selected:
        summary = _measure_selected_pairs(
            sums,
            summary,
            params,
            selected,
            accountant.share(select_share),
            accountant.share(per_function * selected),
            accountant,
            noise,
        )

    if plan.strategy == "psi":
        pca, psi_std = _run_psi(
            sums, summary, params, accountant, noise, rng, accountant.share(params.psi_fraction)
        )
        directions = ProjectionBasis.from_vectors(pca.vectors)
        exact = directions.sums(sums.count, sums.second_moments())
        direction_sums, dir_scale = release_basis_sums(
            exact,
            accountant.share(params.directions_fraction),
            accountant,
            noise,
            stage="directions",
        )
        every = tuple(range(d))
        summary = summary.with_statistics(
            NoisyStatistic("pca", "psi", pca, pca.values, psi_std, every),
            NoisyStatistic(
                "directions",
                "directions",
                directions,
                direction_sums,
                noise_std(dir_scale, accountant),
                every,
            ),
        )
    return summary


RowsPass = Callable[[Callable[[np.ndarray], np.ndarray]], np.ndarray]
"""``rows_pass(sums_of)``: ``sum over the rows of sums_of(x)``, ``x`` a batch of the rows the data
pass summed (no null, clamped), scaled to [-1, 1]: a second pass over the data."""


def _measure_quadrant_pairs(
    rows_pass: RowsPass,
    summary: NoisySummary,
    plan: BudgetPlan,
    columns: np.ndarray,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> NoisyStatistic:
    """Each of ``columns`` picks its most related partner among them by noisy top-1 on
    ``|S_ij|`` (stage ``quadrant_selection``), then the picked pairs' ``S_ij`` are measured
    (stage ``quadrant_pairs``, L1 sensitivity the number of pairs): ``S_ij`` the sum over the
    rows of ``s_i s_j``, ``s_i`` the sign of ``x_i`` about its median under the released
    marginal (one pass over the rows, :data:`RowsPass`). A record moves each ``S_ij`` by at most
    1 (docs/privacy.md 3i). In a table of correlated blocks each column's partner is the
    column of its block it shares most with, and the pairs' correlation of most entropy
    (:meth:`NoisySummary.completed_correlation`) carries each block's other pairs through it."""
    d = summary.bounds.d
    thresholds = medians(summary.marginal_probabilities())
    gram = np.asarray(rows_pass(lambda x: sign_gram(x, thresholds)), dtype=np.float64)
    gram = gram.reshape(d, d)
    among = np.abs(gram[np.ix_(columns, columns)])
    partners = select_partners(
        among, accountant.share(plan.quadrant_selection), accountant, noise, "quadrant_selection"
    )
    pairs = np.unique(
        np.sort(np.column_stack([columns, columns[partners]]), axis=1), axis=0
    ).astype(np.int64)
    noisy, scale = release_basis_sums(
        gram[pairs[:, 0], pairs[:, 1]],
        accountant.share(plan.quadrants - plan.quadrant_selection),
        accountant,
        noise,
        stage="quadrant_pairs",
    )
    return NoisyStatistic(
        "quadrant_pairs",
        "quadrant_pairs",
        QuadrantPairs(thresholds, pairs),
        noisy,
        noise_std(scale, accountant),
        tuple(np.unique(pairs).tolist()),
    )


CLIP_MARGIN = 1.25
"""The release clips each row's scaled values to an L1 norm of at least this times their mean
norm under the private marginals (``sum_i E|x_i|``): on a table of ten correlated blocks of ten
columns that keeps 95% of the rows whole."""


def clip_norm(summary: NoisySummary, levels: tuple[float, ...]) -> int:
    """Which of the data pass's clip ``levels`` the release uses: the lowest at or above
    :data:`CLIP_MARGIN` times the rows' mean L1 norm under the private marginals (the highest
    where none is). Post-processing of the released marginals."""
    probabilities = summary.marginal_probabilities()
    centres = np.abs(GridMarginals.centres(probabilities.shape[1]))
    wanted = CLIP_MARGIN * float((probabilities @ centres).sum())
    return min(int(np.searchsorted(np.asarray(levels), wanted, side="left")), len(levels) - 1)


def _measure_clipped_pairs(
    sums: ExactSums,
    summary: NoisySummary,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> NoisyStatistic:
    """Every pair's second moment ``sum_x c(x)^2 x_i x_j`` with each row clipped to the L1 norm
    :func:`clip_norm` picks (``c(x) = min(1, kappa / |x|_1)``), plus Laplace noise for ``budget``
    (stage ``clipped_pairs``, L1 sensitivity about ``kappa^2 / 2``: docs/privacy.md 3h). A row of a
    table spread over its bounds has a norm far below the ``d`` its bounds allow, so the noise is
    ``(d / kappa)^2`` times less than measuring the pairs as basis sums (16x at 100 columns of
    a quarter of their bounds). They are read as the pairs ``T_1(x_i) T_1(x_j)`` (the few
    clipped rows' share, 5% by :data:`CLIP_MARGIN`, shrinks them by about 1%)."""
    d = summary.bounds.d
    level = clip_norm(summary, sums.clip_levels)
    kappa = sums.clip_levels[level]
    noisy, scale = release_clipped_pairs(
        sums.clipped_second_moments(level), kappa, d, budget, accountant, noise
    )
    pairs = FactorPairs(linear_factors(d), np.column_stack(np.triu_indices(d, 1)))
    return NoisyStatistic(
        "factor_pairs",
        "clipped_pairs",
        pairs,
        noisy,
        noise_std(scale, accountant),
        tuple(range(d)),
    )


def _cols(basis: BasisSet) -> tuple[int, ...]:
    """The columns a set of Chebyshev products touches."""
    return tuple(np.flatnonzero((basis.indices != 0).any(axis=0)).tolist())


RESOLVABLE_STD = 0.2
"""The pair selection picks only pairs whose measurement would read their copula correlation
with a noise std of at most this near independence (:func:`core.factors.copula_noise`):
one that resolves a correlation of 0.4 at two deviations (docs/decisions/0003)."""


def _measure_selected_pairs(
    sums: ExactSums,
    summary: NoisySummary,
    params: SynthesizerParams,
    k: int,
    select_budget: float,
    measure_budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    among: tuple[int, ...] | None = None,
    stages: tuple[str, str] = ("pair_selection", "selected_pairs"),
) -> NoisySummary:
    """Pick ``k`` more first-order pairs in ``params.selection_rounds`` rounds and measure them
    on the summary's factors (``T_1`` without spread factors), appending them to its factor
    pairs (docs/privacy.md section 3e); only pairs with one of the columns ``among`` when
    given, in one round (the anchor picks), charged as ``stages`` (selection, measurement).
    Without ``among``, where there are more unmeasured pairs than ``k``, only those that the
    measurement resolves (:data:`RESOLVABLE_STD`) are candidates; where they are fewer than
    ``k`` every one is measured, without a selection, at the noise planned for ``k``. The anchor
    picks are not restricted: they look for a label's clearest relation at a noise that resolves
    few of its pairs, and that pick keeps the label's relation (docs/decisions/0003).

    Each round scores every unmeasured pair by ``|S_ij - n~ E_ij|``: ``S_ij`` the exact sum of
    ``p_i(x_i) p_j(x_j)`` (moved by at most 1 by a record), ``E_ij`` the answer that the
    Gaussian copula of :meth:`NoisySummary.completed_correlation` (the model of what is
    measured so far, DP) expects. Noisy top-k picks that round's pairs from
    ``select_budget * k_t / k``, and they are measured with ``measure_budget * k_t / k``, the
    noise of every other basis function (``planned``)."""
    d = summary.bounds.d
    n = max(summary.noisy_count, 1.0)
    probabilities = summary.marginal_probabilities()
    planned = per_function_noise(1, n, accountant, measure_budget / k)  # each picked pair's noise
    if summary.factor_pairs is not None:
        coefficients = summary.factor_pairs.coefficients
    elif params.pair_factors == "spread" and sums.degree >= 2:
        coefficients = spread_factors(
            probabilities, sums.degree, noise=planned, levels=summary.levels
        )
    else:
        coefficients = linear_factors(d)
    measured = summary.measured_pairs()
    taken = np.zeros((d, d), dtype=bool)
    taken[measured[:, 0], measured[:, 1]] = taken[measured[:, 1], measured[:, 0]] = True
    upper = np.triu_indices(d, 1)
    if among is not None:
        touches = np.isin(np.arange(d), among)
        taken |= ~(touches[:, None] | touches[None, :])
    candidates = np.column_stack(upper)[~taken[upper]]
    if among is None and k < len(candidates):  # pick among pairs whose measurement can resolve one
        resolved = (
            copula_noise(FactorPairs(coefficients, candidates), probabilities, planned)
            <= RESOLVABLE_STD
        )
        candidates = candidates[resolved]
    exact = FactorPairs(coefficients, candidates).sums(sums)
    open_ = np.ones(len(candidates), dtype=bool)
    rounds = 1 if among is not None else min(params.selection_rounds, k)
    for k_t in np.diff(np.linspace(0, k, rounds + 1).round().astype(np.int64)):
        rest = np.flatnonzero(open_)
        if not rest.size:
            break  # fewer resolvable pairs than picks: every one is measured already
        if k_t < rest.size:
            model = summary.completed_correlation()
            pairs = candidates[rest]
            rho = np.zeros(len(rest)) if model is None else model[pairs[:, 0], pairs[:, 1]]
            expected = copula_answers(FactorPairs(coefficients, pairs), probabilities, rho)
            chosen = rest[
                select_top_k(
                    np.abs(exact[rest] - n * expected),
                    int(k_t),
                    1.0,
                    select_budget * k_t / k,
                    accountant,
                    noise,
                    stage=stages[0],
                )
            ]
        else:
            chosen = rest  # every remaining pair: nothing to pick
        open_[chosen] = False
        # each pair at the noise planned for k (that of every basis function); fewer measured
        # than planned leave the rest of the share unspent
        noisy, scale = release_basis_sums(
            exact[chosen], measure_budget * chosen.size / k, accountant, noise, stage=stages[1]
        )
        picked = FactorPairs(coefficients, candidates[chosen])
        summary = summary.with_statistics(
            NoisyStatistic(
                "factor_pairs",
                stages[1],
                picked,
                noisy,
                noise_std(scale, accountant),
                tuple(np.unique(picked.pairs).tolist()),
            )
        )
    return summary


def _split_factor_pairs(
    basis: BasisSet, summary: NoisySummary, params: SynthesizerParams, degree: int, noise: float
) -> tuple[BasisSet, FactorPairs | None]:
    """With ``pair_factors: spread``, the basis less its ``T_1(x_i) T_1(x_j)`` terms, and those
    pairs on the spread factors of the noisy histograms (post-processing of the released
    marginals and the summary's public levels; ``degree``: the data pass's; ``noise``: the
    predicted normalised noise of one pair answer, from public values)."""
    indices = basis.indices
    first = first_pairs(indices)
    if (
        params.pair_factors != "spread"
        or not first.any()
        or summary.histograms is None
        or degree < 2
    ):
        return basis, None
    pairs = np.array([np.flatnonzero(row) for row in indices[first]], dtype=np.int64)
    coefficients = spread_factors(
        summary.marginal_probabilities(), degree, noise=noise, levels=summary.levels
    )
    rest = BasisSet(basis.d, basis.degree, indices[~first])
    return rest, FactorPairs(coefficients, pairs)


def _measure_tables(
    exact: np.ndarray,
    counted: ContingencyTables,
    summary: NoisySummary,
    plan: BudgetPlan,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> NoisyStatistic:
    """``plan.tables`` of the contingency tables the data pass ``counted`` (``exact``: their
    cells), with noise (stage ``tables``; docs/privacy.md 3g). Where it counted more, they are
    picked by noisy top-k (stage ``table_selection``) on how far each table is from independent
    columns under the private marginals, ``|N - n~ p_i p_j^T|_1``, less the L1 norm its noise
    is expected to have: a record moves each score by at most 1."""
    k = plan.tables
    chosen = np.arange(len(counted.pairs))
    measure = plan.table_share - plan.table_selection
    sens = float(k) if accountant.pure else float(np.sqrt(k))
    if k < len(counted.pairs):
        n = max(summary.noisy_count, 1.0)
        model = n * independent_tables(counted, summary.table_marginals(counted))
        scale = accountant.noise_scale(sens, accountant.share(measure))
        expected = scale * (1.0 if accountant.pure else np.sqrt(2.0 / np.pi))
        distance = np.add.reduceat(np.abs(exact - model), counted.offsets[:-1])
        chosen = np.sort(
            select_top_k(
                distance - expected * counted.sizes,
                k,
                1.0,
                accountant.share(plan.table_selection),
                accountant,
                noise,
                "table_selection",
            )
        )
    picked = counted.with_pairs(chosen)
    cells = np.concatenate(
        [exact[counted.offsets[c] : counted.offsets[c + 1]] for c in chosen]
    ).astype(np.float64)
    noisy, scale = release_tables(cells, k, accountant.share(measure), accountant, noise)
    columns = tuple(sorted({c for pair in picked.pairs for c in pair}))
    return NoisyStatistic("tables", "tables", picked, noisy, noise_std(scale, accountant), columns)


def release_noisy_count(
    count: int, params: SynthesizerParams, accountant: PrivacyAccountant, noise: NoiseSource
) -> tuple[float, float, tuple[float, float]]:
    """The noisy count the plan reads, its noise std and the shares of its two draws: the
    first at ``count_probe`` of ``count_fraction`` (stage ``count``), the second (stage
    ``count_top_up``) only where the first is not clear enough for the plan
    (:func:`.plan.count_top_up`), the two then pooled by inverse variance, as noisy as one draw
    at ``count_fraction``. Each draw has sensitivity 1, and the second is decided from the
    first's noisy value alone (docs/privacy.md section 3)."""
    first = params.count_fraction * params.count_probe
    noisy = release_count(count, first, accountant, noise)
    std = count_noise_std(accountant, first)
    top_up = count_top_up(params, noisy, accountant)
    if top_up <= 0:
        return noisy, std, (first, 0.0)
    again = release_count(count, top_up, accountant, noise, stage="count_top_up")
    pooled, pooled_std = inverse_variance_mean(
        [noisy, again], [std, count_noise_std(accountant, top_up)]
    )
    return float(pooled), float(pooled_std), (first, top_up)


def pooled_count(
    noisy_count: float,
    count_std: float,
    histograms: np.ndarray,
    cell_std: float | np.ndarray,
    pooled: np.ndarray | None = None,
    pooled_std: float = 0.0,
    pooled_columns: int = 0,
    cells: np.ndarray | None = None,
    held: np.ndarray | None = None,
) -> float:
    """Inverse-variance mean of the noisy count and the total of each noisy histogram ``(d, B)``,
    and of the pooled histogram's total over its ``pooled_columns`` columns where one was measured.

    Every record lies in exactly one cell of each column's histogram, so each total is the count
    plus the sum of ``B`` independent noise draws (std ``sqrt(B) cell_std``, ``cell_std`` one
    number or each column's where the histograms are weighted; ``cells``: each
    column's number of noisy cells where they differ, as for the per-level ones; ``held``: ``(d,
    B)`` the cells summed, those that can hold a column's values), independent of the
    count's noise and of the other columns': ``d + 1`` unbiased estimates of the same count.
    At epsilon 0.1 on 150 rows the count's noise alone has a std of 280 rows; pooled with five
    histograms, 65. The pooled histogram holds each record once per pooled column, so its total
    over ``m`` is one more (noise std ``sqrt(B) pooled_std / m``): where it is measured it takes
    most of the histograms' budget, and its total is the best of them. Post-processing only."""
    if count_std <= 0 or np.any(np.asarray(cell_std) <= 0):
        return noisy_count
    totals = (histograms if held is None else histograms * held).sum(axis=1)
    summed = np.full(totals.size, histograms.shape[1]) if cells is None else cells
    estimates = [noisy_count, *totals]
    stds = [count_std, *np.broadcast_to(np.sqrt(summed) * cell_std, totals.shape)]
    if pooled is not None and pooled_columns > 0 and pooled_std > 0:
        estimates.append(pooled.sum() / pooled_columns)
        stds.append(np.sqrt(pooled.size) * pooled_std / pooled_columns)
    return float(inverse_variance_mean(estimates, stds)[0])


def _release_marginals(
    sums: ExactSums,
    bounds: PublicBounds,
    params: SynthesizerParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    noisy_count: float,
    budget: float,
    bins: int,
    pooled: bool,
    nullable: np.ndarray | None = None,
    lattice: np.ndarray | None = None,
    nominal: np.ndarray | None = None,
) -> NoisySummary:
    """A summary holding the one-way marginals as noisy histograms of ``bins`` cells; with
    ``nullable`` columns each histogram has a null cell too (a record is still in exactly one
    cell per column: the sensitivity is unchanged, docs/privacy.md 3c); a lattice column whose
    levels would share a bin (``lattice``: levels per column, 0 continuous) has one cell per
    level instead (:func:`core.marginals.measured_per_level`; ``nominal``: the categorical
    ones, whose levels have no order), released with the others at the same noise, and an
    ordered one whose levels are noisy (:func:`core.marginals.coarse_level_cells`) with its
    coarse parts in a second draw at the same scale, its weight split between the two (3c);
    where ``pooled``, with the pooled histogram of the continuous columns for
    ``params.pooled_fraction`` of ``budget`` (3f)."""
    if sums.histograms is None:
        raise ValueError("the data pass did not compute the one-way histograms")
    d, cells = sums.histograms.shape
    levels = np.zeros(d, dtype=np.int64) if lattice is None else np.asarray(lattice, np.int64)
    nominal = np.zeros(d, dtype=bool) if nominal is None else np.asarray(nominal, dtype=bool)
    per_level = np.array([measured_per_level(int(k), bins, cells) for k in levels], dtype=bool)
    binned = np.flatnonzero(~per_level)
    counts = coarsen_histograms(sums.histograms, bins)
    continuous = np.flatnonzero(levels < 2)
    pooled_budget = budget * params.pooled_fraction if pooled else 0.0
    budget -= pooled_budget
    with_nulls = nullable is not None and nullable.any()
    if with_nulls and sums.nulls is None:
        raise ValueError("the data pass did not count the nulls")
    # every column's cells (its bins or its levels, then its null cell where declared nullable)
    # end to end: a record is in one cell of each column
    parts = [
        level_counts(sums.histograms[j], int(levels[j])) if per_level[j] else counts[j]
        for j in range(d)
    ]
    # a continuous column's values exactly at its bounds in cells of their own (taken out of
    # the end bins: still one cell per record)
    atom_columns = (
        np.flatnonzero(levels < 2)
        if params.point_masses == "auto" and sums.atoms is not None
        else np.zeros(0, dtype=np.int64)
    )
    for j in atom_columns:
        assert sums.atoms is not None
        edges = parts[j].copy()
        edges[0] -= sums.atoms[j, 0]
        edges[-1] -= sums.atoms[j, 1]
        parts[j] = np.concatenate([edges, sums.atoms[j]])
    if with_nulls and sums.nulls is not None:
        parts = [np.append(part, sums.nulls[j]) for j, part in enumerate(parts)]
    share_std = histogram_count_std(accountant, budget, d) / max(noisy_count, 1.0)
    coarse = np.array(
        [
            coarse_level_cells(int(levels[j]), bins, cells, share_std)
            if per_level[j] and not nominal[j]
            else 0
            for j in range(d)
        ],
        dtype=np.int64,
    )
    weights = (
        histogram_weights(levels, nominal, bins, cells, accountant.pure, coarse)
        if params.histogram_allocation == "auto"
        else np.ones(d)
    )
    weighted = not np.all(weights == 1.0)
    coarse_columns = np.flatnonzero(coarse)
    coarse_share, level_share = coarse_weights(accountant.pure)
    cell_weights = np.repeat(weights, [part.size for part in parts])
    starts = np.cumsum([0] + [part.size for part in parts])
    for j in coarse_columns:  # its levels at their share of its weight, its null cell at all
        cell_weights[starts[j] : starts[j] + levels[j]] *= level_share
    level_parts_of: dict[int, np.ndarray] = {}

    def coarse_parts(first: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """Each coarse column's parts (its coarse cells, a spike alone) from its noisy levels,
        their exact counts and their weights: the column's weight less its levels' share."""
        found, found_weights = [], []
        for j in coarse_columns:
            noisy = first[starts[j] : starts[j] + levels[j]]
            level_std = noise_std(scale, accountant) / (weights[j] * level_share)
            level_parts_of[int(j)] = level_parts(noisy, level_std, int(coarse[j]))
            found.append(np.bincount(level_parts_of[int(j)], weights=parts[j][: levels[j]]))
            found_weights.append(np.full(found[-1].size, weights[j] * coarse_share))
        return np.concatenate(found), np.concatenate(found_weights)

    part_counts = np.zeros(0)
    if coarse_columns.size:
        noisy_cells, part_counts, scale = release_histograms_in_two_draws(
            np.concatenate(parts), cell_weights, coarse_parts, budget, accountant, noise, d
        )
    else:
        noisy_cells, scale = release_histograms(
            np.concatenate(parts),
            budget,
            accountant,
            noise,
            d,
            cell_weights if weighted else None,
        )
    split = np.split(noisy_cells, np.cumsum([part.size for part in parts])[:-1])
    null_counts = None
    if with_nulls and nullable is not None:
        null_counts = np.where(nullable, [part[-1] for part in split], np.nan)
        split = [part[:-1] for part in split]
    atoms = np.full((d, 2), np.nan)
    for j in atom_columns:
        atoms[j], split[j] = split[j][-2:], split[j][:-2]
    std = noise_std(scale, accountant)
    column_std = std / weights  # a weighted column's noise: the common one over its weight
    level_std = column_std / np.where(coarse > 0, level_share, 1.0)

    def stds(
        columns: np.ndarray, sizes: list[int], of: np.ndarray = column_std
    ) -> float | np.ndarray:
        """The noise std of each value of ``columns``' parts (one number where unweighted)."""
        return np.repeat(of[columns], sizes) if weighted or coarse.any() else std

    every = tuple(range(d))
    measured = None if binned.size == d else tuple(binned.tolist())
    statistics = [
        NoisyStatistic(
            "histograms",
            "histograms",
            HistogramBasis(d, bins, measured),
            np.array([split[j] for j in binned]).reshape(binned.size, bins),
            stds(binned, [bins] * binned.size),
            tuple(binned.tolist()),
        )
    ]
    if per_level.any():
        columns = np.flatnonzero(per_level)
        statistics.append(
            NoisyStatistic(
                "level_histograms",
                "histograms",
                LevelHistogram(
                    d,
                    tuple(columns.tolist()),
                    tuple(levels[columns].tolist()),
                    tuple(bool(not nominal[c]) for c in columns),
                ),
                np.concatenate([split[j] for j in columns]),
                stds(columns, [split[j].size for j in columns], level_std),
                tuple(columns.tolist()),
            )
        )
    if coarse_columns.size:  # the coarse columns' parts, the histograms' second draw
        maps = [level_parts_of[int(j)] for j in coarse_columns]
        statistics.append(
            NoisyStatistic(
                "level_parts",
                "histograms",
                LevelParts(
                    d, tuple(coarse_columns.tolist()), tuple(tuple(m.tolist()) for m in maps)
                ),
                part_counts,
                np.repeat(column_std[coarse_columns] / coarse_share, [m.max() + 1 for m in maps]),
                tuple(coarse_columns.tolist()),
            )
        )
    if atom_columns.size:  # the bounds' cells, released with them
        statistics.append(
            NoisyStatistic("atoms", "histograms", None, atoms, std, tuple(atom_columns.tolist()))
        )
    if null_counts is not None:  # the histograms' null cells, released with them
        statistics.append(
            NoisyStatistic(
                "null_counts", "histograms", None, null_counts, stds(np.arange(d), [1] * d), every
            )
        )
    if pooled:  # the value cells only: a null is not pooled
        pooled_counts, pooled_scale = release_pooled_histogram(
            counts[continuous].sum(axis=0), continuous.size, pooled_budget, accountant, noise
        )
        statistics.append(
            NoisyStatistic(
                "pooled_histogram",
                "pooled_histogram",
                None,
                pooled_counts,
                noise_std(pooled_scale, accountant),
                tuple(continuous.tolist()),
            )
        )
    return NoisySummary(bounds, noisy_count, tuple(statistics), noise=accountant.mechanism)


def _run_psi(
    sums: ExactSums,
    summary: NoisySummary,
    params: SynthesizerParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    rng: np.random.Generator,
    budget: float,
) -> tuple[SubspaceEstimate, float]:
    """Algorithm 4 on the second moment, centred with the private mean (privacy.md section 4);
    returns the estimate and the noise std of one entry of each noisy product."""
    d = sums.d
    k = min(params.pca_dim or 2, d)
    iterations = params.pca_iterations
    sens = psi_sensitivity(params, d, accountant)
    scale = accountant.noise_scale(sens, budget, invocations=iterations)
    second = sums.second_moments()
    mean = summary.mean()
    offset = -max(summary.noisy_count, 1.0) * np.outer(mean, mean)
    estimate = private_subspace_iteration(
        data_product=lambda x: second @ x,
        public_product=lambda x: offset @ x,
        perturb=lambda m: add_noise(m, scale, accountant, noise),
        d=d,
        k=k,
        iterations=iterations,
        rng=rng,
    )
    accountant.charge("psi", sens, scale, invocations=iterations)
    return estimate, noise_std(scale, accountant)
