"""Stage 3, fit: weights on the candidates from the measurements (post-processing only).

With ``fit: maxent`` (the default): first the distribution on the candidates closest to the
noisy answers in chi-square (``core.maxent.closest_fit``, accelerated projected gradient): it
certifies what the candidates can reach. Then the distribution closest (in KL) to the
independent-columns prior among those whose chi-square to the measurements is, in each group, at
most ``max(|G|, (1 + slack) chi2_G(u_closest))``: within the noise when the candidates allow it,
else as close as the closest fit got; and every answer within ``answer_bound`` noise units of
its measurement (a histogram cell: or as far as the prior has it), so that no group's slack sits
on its strongest relation. Relations the measurements cannot tell from noise stay
independent, and mass stays spread over the candidates.

With ``fit: lp``: the paper's reduced LP ``min ||W u - b||_1, u >= 0, sum u = 1`` (OR-Tools,
answers weighed by their noise) alone. It was the first step of ``maxent`` until the LP's cost
(minutes at R = 1785, C = 3000; ``docs/scaling.md``) made it the job's bottleneck.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from dpsmooth_spark.core.chebyshev import (
    HistogramBasis,
    LevelHistogram,
    LevelParts,
    histogram_cell,
    lattice_level,
)
from dpsmooth_spark.core.function_values import FunctionValues
from dpsmooth_spark.core.lp import solve_l1_fit
from dpsmooth_spark.core.marginals import (
    level_bins,
    max_entropy_correlation,
    weighted_correlation,
)
from dpsmooth_spark.core.maxent import (
    effective_support,
    fit_within_noise,
    james_stein_tolerance,
    kl_divergence,
    largest_noise_draw,
    match_correlation,
    rake,
    signal_groups,
)
from dpsmooth_spark.mechanisms.synthesizer.candidates import (
    Candidates,
    RareLevels,
    make_candidates,
    private_correlation,
    whole_copula,
)
from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams
from dpsmooth_spark.mechanisms.synthesizer.summary import (
    LowRankPairs,
    Measurement,
    NoisySummary,
    measurements,
    modelled_pairs,
)

JOINT_MARGINAL_TOLERANCE = 0.1
"""Chi-square per answer the joint fit may leave on a one-way marginal: it keeps the marginals
the candidates were drawn from (a target of 0 would make the dual ill-conditioned)."""


@dataclass
class SynthesisResult:
    """State of a fitted synthesizer (all of it DP).

    Attributes:
        summary: the noisy summary.
        candidates: ``(C, d)`` support points (scaled units).
        weights: ``(C,)`` the fitted distribution.
        reference_objective: ``||W u - b~||_1`` at the reference fit: the closest fit
            (``maxent``) or the LP's solution (``lp``).
        fit_objective: ``||W u - b~||_1`` of ``weights``.
        chi2: ``sum ((W u - b~) / sigma)^2`` of ``weights``; ``functions`` is its expectation
            for the true table.
        functions: number of measured functions R.
        kl: ``KL(weights || independent prior)`` in nats.
        jitter: per-column neighbourhood standard deviation (scaled units).
        timings: seconds per driver stage.
        independent: no relation between columns was measured: records beyond the herded ones
            are drawn column by column (:func:`core.sampling.sample_records`).
        rare: the rare values of large categories, each group at its representative level in
            the candidates; the sample spreads them back (:func:`core.sampling.spread_levels`).
        atoms: the point masses at continuous columns' bounds the sample places
            (:func:`point_masses`, :func:`core.sampling.sample_records`).
        copula: where the fit reads the pairs through their low-rank model, the Gaussian-copula
            correlation the candidates were drawn from; records that are not herded are
            reordered to it (:func:`core.sampling.sample_records`). ``None`` elsewhere.
    """

    summary: NoisySummary
    candidates: np.ndarray
    weights: np.ndarray
    reference_objective: float
    fit_objective: float
    chi2: float
    functions: int
    kl: float
    jitter: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)
    independent: bool = False
    rare: tuple[RareLevels, ...] = ()
    atoms: tuple[tuple[int, float, float, float, float], ...] = ()
    copula: np.ndarray | None = None

    @property
    def support_size(self) -> int:
        """Effective number of candidates carrying mass, ``1 / sum u^2``."""
        return round(effective_support(self.weights))


def fit_weights(
    a: FunctionValues,
    z: np.ndarray,
    sigma: np.ndarray,
    groups: np.ndarray,
    tolerance: np.ndarray,
    support: Candidates,
    params: SynthesizerParams,
    timings: dict[str, float] | None = None,
    bound: np.ndarray | None = None,
    shrunk: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(weights, u_ref, KL to the prior)`` from the basis values at the candidates in noise
    units (``a = W / sigma``, ``(R, C)``, and ``z = b / sigma``); ``u_ref`` is the closest fit
    (``maxent``) or the LP's solution (``lp``). ``bound``: each answer's largest residual in
    noise units (``inf``: none), or ``None``; ``shrunk``: each group's tolerance for the
    maximum-entropy step where it is tighter than the closest fit's stopping ``tolerance``."""
    if params.fit == "maxent":
        projected, closest = fit_within_noise(
            a,
            z,
            1.0,
            groups,
            support.reference_log_weights(),
            params.fit_slack,
            tolerance if shrunk is None else shrunk,
            timings=timings,
            answer_bound=bound,
            start=support.start_weights(),
            closest_tolerance=tolerance,
        )
        return projected.weights, closest.weights, projected.kl
    # The LP's rows are scaled back by one constant (the noise's geometric mean), which leaves
    # its optimum as it is: in z-scores, entries reach 1e4-1e5 at 10^6 rows and GLOP then
    # stops ABNORMAL.
    scale = float(np.exp(np.mean(np.log(sigma))))
    lp = solve_l1_fit(a.dense().astype(np.float64) * scale, z * scale, solver=params.lp_solver)
    return lp.weights, lp.weights, kl_divergence(lp.weights, support.prior_weights())


def noise_scaled_values(found: list[Measurement], points: np.ndarray) -> FunctionValues:
    """The ``R x C`` values of every measured function at the candidates, each row divided by
    its noise standard deviation (a z-score per unit of probability mass), as an operator that
    computes its products from the functions' structure (``core.function_values``): no
    ``R x C`` matrix is held (1.2 GB at R = 3000, C = 10^5 in float32)."""
    scales = [1.0 / np.broadcast_to(m.std, m.values.shape) for m in found]
    return FunctionValues.from_functions([m.queries for m in found], scales, points)


def _global_groups(found: list[Measurement]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every answer's group across the measurements, each group's tolerance and whether it holds
    relations: labels are offset per measurement, except that measurements of one
    ``group_space`` share theirs."""
    offsets: dict[object, int] = {}
    groups: list[np.ndarray] = []
    tolerance: list[np.ndarray] = []
    relations: list[np.ndarray] = []
    for k, m in enumerate(found):
        space = k if m.group_space is None else m.group_space
        if space not in offsets:
            offsets[space] = sum(t.size for t in tolerance)
            tolerance.append(np.asarray(m.tolerance, dtype=np.float64))
            relations.append(
                np.zeros(m.tolerance.size, dtype=bool)
                if m.relations is None
                else np.asarray(m.relations, dtype=bool)
            )
        groups.append(m.groups + offsets[space])
    return np.concatenate(groups), np.concatenate(tolerance), np.concatenate(relations)


def _keep_prior_marginals(
    found: list[Measurement],
    support: Candidates,
    levels: np.ndarray | None = None,
    shrunk: bool = False,
) -> list[Measurement]:
    """Let each histogram group leave at least the chi-square of the marginal the candidates were
    drawn from (a shrunk histogram is not pulled back to the noisy one); on a lattice column
    (``levels[j] > 0``), whose candidates sit on its levels, at least that of the marginal with
    the cells no candidate holds emptied (a boolean's two middle cells of four, where its shrunk
    marginal may have spread over all four): the fit must not chase the noise of cells that no
    candidate can fill. Neither kind takes the chi-square of the candidates' own marginal, which
    adds their sampling noise and lets the fit weaken clear relations: with it, age (a lattice
    of 78 levels, ``benchmarks relation``) keeps 11 times its noise's chi-square and its
    correlation 0.69 with bmi came out at 0.57-0.59 (six seeds) instead of 0.60-0.62 (with the
    independent prior as the maximum-entropy reference)
    (``test_a_lattice_columns_slack_is_not_its_candidates_sampling_noise``); on continuous
    columns, ``test_the_maximum_entropy_step_keeps_clear_relations_under_either_target``. With
    ``shrunk`` (:attr:`NoisySummary.shares_shape`), a continuous column's histogram is read as
    the marginal the candidates were drawn from, its noise kept: within the chi-square the
    shrinkage left, the fit moved the marginals of the 100-column factor table back towards
    their noise (W1 0.0055 against 0.0041, one seed)."""
    out = []
    probabilities = support.marginals.probabilities
    for m in found:
        if isinstance(m.queries, HistogramBasis | LevelHistogram | LevelParts):
            if isinstance(m.queries, LevelParts):  # an ordered column's parts: their levels'
                columns, cells = np.array(m.queries.columns), np.array(m.queries.counts)
                grid = probabilities.shape[1]
                drawn = np.concatenate(
                    [
                        np.bincount(
                            np.asarray(part),
                            weights=probabilities[c, level_bins(len(part), grid)],
                            minlength=count,
                        )
                        for c, part, count in zip(columns, m.queries.parts, cells, strict=True)
                    ]
                )
                lattice = np.array([len(part) for part in m.queries.parts])
            elif isinstance(m.queries, HistogramBasis):
                columns, bins = m.queries.measured, m.queries.bins
                cells = np.full(columns.size, bins)
                drawn = probabilities[columns].reshape(columns.size, bins, -1).sum(axis=2).ravel()
                lattice = np.zeros(columns.size) if levels is None else levels[columns]
                if shrunk:
                    continuous = np.repeat(lattice < 2, bins)
                    m = dataclasses.replace(m, values=np.where(continuous, drawn, m.values))
            else:  # one cell per level: each level's grid cell
                columns, cells = np.array(m.queries.columns), np.array(m.queries.levels)
                grid = probabilities.shape[1]
                groups = {group.column: group for group in support.rare}
                parts = [
                    probabilities[c, level_bins(k, grid)]
                    for c, k in zip(columns, cells, strict=True)
                ]
                drawn = np.concatenate(
                    [
                        groups[c].merged(part) if c in groups else part
                        for c, part in zip(columns, parts, strict=True)
                    ]
                )
                lattice = cells
            chi2 = np.bincount(
                m.groups, weights=((drawn - m.values) / m.std) ** 2, minlength=columns.size
            )
            if np.any(lattice):
                # a cell that candidates hold can take any mass by reweighting, so only the
                # cells none holds stay out of reach (their noisy mass)
                held = m.queries.mass(support.points, support.prior_weights())
                reach = np.where(held > 0.0, drawn, 0.0)
                on_levels = np.bincount(
                    m.groups, weights=((reach - m.values) / m.std) ** 2, minlength=columns.size
                )
                chi2 = np.where(lattice > 0, np.maximum(chi2, on_levels), chi2)
            m = dataclasses.replace(m, tolerance=np.maximum(m.tolerance, chi2 / cells))
        out.append(m)
    return out


def _answer_bounds(
    found: list[Measurement],
    a: FunctionValues,
    z: np.ndarray,
    support: Candidates,
    bound: float | None,
) -> np.ndarray | None:
    """Each answer's largest residual (noise units) in the maxent fit: ``bound`` for a relation
    answer; for a histogram cell ``bound`` or, where the shrunk marginal the candidates were
    drawn from is further from the noisy cell, that distance (the fit may not move a cell further
    from its measurement than the prior has it, nor leave a group's slack on a few cells)."""
    if bound is None:
        return None
    z_prior = np.abs(a @ support.prior_weights() - z)
    cells = np.concatenate(
        [
            np.full(
                m.values.size, isinstance(m.queries, HistogramBasis | LevelHistogram | LevelParts)
            )
            for m in found
        ]
    )
    return np.where(cells, np.maximum(bound, z_prior), bound)


MATCH_KL_LIMIT = 10.0
""":func:`completed_where_unmeasured` moves the weights by at most ``MATCH_KL_LIMIT * pairs /
ESS`` nats (about 20x the expected cost); beyond, the candidates cannot reach the target and
the fit's weights stay."""


MATCH_PAIRS_PER_CANDIDATE = 0.25
""":func:`completed_where_unmeasured` matches at most this many column pairs per candidate (the
dual is ill-conditioned beyond); past it the fit's weights stay."""


CHANCE_DEVIATIONS = 2.0
""":func:`completed_where_unmeasured` sets an unmeasured pair to the correlation the measured
pairs imply where that is below this many chance deviations ``1 / sqrt(ESS)``, and keeps the
fit's elsewhere (docs/decisions/0005)."""


def completed_where_unmeasured(
    summary: NoisySummary,
    points: np.ndarray,
    weights: np.ndarray,
    modelled: LowRankPairs | None = None,
) -> np.ndarray:
    """The weights closest in KL to ``weights`` under which every two columns that no measured
    function covers (:meth:`NoisySummary.covered_pairs`) have the correlation the measured
    pairs imply, where that is small: the correlation of most entropy that holds the fitted
    correlations of the covered pairs (:func:`core.marginals.max_entropy_correlation`; 0
    between columns no chain of measurements joins, ``r_iL r_jL`` between two columns measured
    only with a 0/1 label ``L``), wherever it is below :data:`CHANCE_DEVIATIONS` of the
    candidates' chance correlation (with ``modelled``: the pairs' low-rank model's). Each column
    keeps its mean and variance and every other pair its fitted correlation
    (:func:`core.maxent.match_correlation`). ``weights`` themselves where no pair qualifies,
    where there are more pairs than :data:`MATCH_PAIRS_PER_CANDIDATE` allows, or where the move
    costs more than :data:`MATCH_KL_LIMIT` allows.

    The fit leaves such pairs as the candidates hold them: C = 20,000 of them carry a
    correlation of order ``1 / sqrt(ESS)`` between any two columns, which the release would show
    as structure no measurement supports (digits at epsilon 1, where only the label's pairs are
    measured: the fitted pixel pairs' error was 0.2-0.9% of the independent table's above it).
    Where the implied correlation is larger the fit's stays: the fit, on spread factors, holds
    more than the Gaussian completion (matching every unmeasured pair took WDBC at 10 from a
    correlation ratio of 0.46 to 0.51)."""
    covered = summary.covered_pairs()
    d = covered.shape[0]
    if covered.all() or d * (d - 1) / 2 > MATCH_PAIRS_PER_CANDIDATE * weights.size:
        return weights
    u = weights / weights.sum()
    fitted = weighted_correlation(points, u)
    upper = np.triu_indices(d, 1)
    given = np.column_stack(upper)[covered[upper]]
    implied = (
        max_entropy_correlation(d, given, fitted[given[:, 0], given[:, 1]])
        if modelled is None
        else modelled.correlation
    )
    support = effective_support(u)
    kept = covered | (np.abs(implied) >= CHANCE_DEVIATIONS / np.sqrt(support))
    if kept.all():
        return weights
    matched = match_correlation(points, u, np.where(kept, fitted, implied))
    moved = kl_divergence(matched, u)
    if not np.isfinite(moved) or moved > MATCH_KL_LIMIT * (~kept)[upper].sum() / 2 / support:
        return weights
    return matched


def fit_from_summary(
    summary: NoisySummary, params: SynthesizerParams, rng: np.random.Generator
) -> SynthesisResult:
    """Candidates, then the fit, then the sampling neighbourhood.

    ``summary.levels[j] = L > 0`` marks a column whose values are ``L`` equally spaced points
    from -1 to 1 (integer, date, boolean and categorical columns, ``core/columns.py``; public,
    from the config): its candidates sit on those points, as the data do, and it gets no jitter.
    """
    levels = None if summary.levels is None else np.asarray(summary.levels)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    modelled = modelled_pairs(summary, params)
    support = make_candidates(summary, params, rng, modelled)
    found = _keep_prior_marginals(
        measurements(
            summary,
            max(params.marginal_tolerance or 0.0, JOINT_MARGINAL_TOLERANCE),
            modelled=modelled,
            rare=support.rare,
        ),
        support,
        levels,
        summary.shares_shape,
    )
    a = noise_scaled_values(found, support.points)
    b = np.concatenate([m.values for m in found])
    sigma = np.concatenate([np.broadcast_to(m.std, m.values.shape) for m in found])
    z = b / sigma
    groups, tolerance, relations = _global_groups(found)
    shrunk, quiet = None, None
    if params.fit == "maxent" and params.group_shrinkage == "james_stein" and relations.any():
        # terms are clipped where the answer bound lies (its default, 2.5, when it is off)
        z_prior = (a @ support.prior_weights().astype(np.float32)).astype(np.float64) - z
        clip = params.answer_bound or 2.5
        single = largest_noise_draw(int(relations[groups].sum()), summary.noise)
        js = james_stein_tolerance(z_prior, groups, summary.noise, clip)
        shrunk = np.where(relations, np.minimum(tolerance, js), tolerance)
        # a relation group that one answer alone makes clear may stay where the prior has it
        quiet = relations & signal_groups(z_prior, groups, summary.noise, clip, single=single)[1]
        held = np.bincount(groups, weights=z_prior * z_prior) / np.maximum(np.bincount(groups), 1)
        shrunk = np.where(quiet, np.maximum(tolerance, held), shrunk)
    timings["candidates"] = time.perf_counter() - start

    start = time.perf_counter()
    steps: dict[str, float] = {}
    bound = _answer_bounds(found, a, z, support, params.answer_bound)
    if bound is not None and quiet is not None:
        bound = np.where(quiet[groups], np.maximum(bound, np.abs(z_prior)), bound)
    weights, reference, kl = fit_weights(
        a, z, sigma, groups, tolerance, support, params, steps, bound, shrunk
    )
    timings["fit"] = time.perf_counter() - start
    # the quadrant pairs' candidates all come from the completed copula, and the sample is
    # reordered to it: the unmeasured pairs hold what the measured ones imply already
    if params.unrelated_independent and summary.quadrant_pairs is None:
        start = time.perf_counter()
        fitted, weights = (
            weights,
            completed_where_unmeasured(summary, support.points, weights, modelled),
        )
        if weights is not fitted:
            kl = kl_divergence(weights, support.prior_weights())
        timings["completion"] = time.perf_counter() - start
    if summary.shares_shape or levels is not None and np.any(levels >= 2):
        start = time.perf_counter()
        raked = raked_to_marginals(summary, support, weights, levels)
        if raked is not weights:
            kl = kl_divergence(raked, support.prior_weights())
        weights = raked
        timings["raking"] = time.perf_counter() - start
    timings.update({f"fit.{name}": seconds for name, seconds in steps.items()})

    centres = support.marginals.centres(support.marginals.cells)
    probs = support.marginals.probabilities
    spread = np.sqrt(np.maximum(probs @ centres**2 - (probs @ centres) ** 2, 1e-8))
    jitter = params.jitter * spread
    if levels is not None:
        jitter = np.where(levels > 0, 0.0, jitter)
    residual = (a @ weights.astype(np.float32)).astype(np.float64) - z  # in noise units
    reference_residual = (a @ reference.astype(np.float32)).astype(np.float64) - z
    return SynthesisResult(
        summary,
        support.points,
        weights,
        float(np.abs(sigma * reference_residual).sum()),
        float(np.abs(sigma * residual).sum()),
        float(residual @ residual),
        int(b.size),
        kl,
        jitter,
        timings,
        independent=not relations.any() or no_relation_found(summary, modelled),
        rare=support.rare,
        atoms=point_masses(summary, support.points, weights),
        copula=copula_of(summary, modelled),
    )


RAKE_DEVIATIONS = 0.0
""":func:`raked_to_marginals` rakes a lattice column of a table with a continuous column where
its fitted marginal's chi-square against its private marginal exceeds its ``m`` cells by this
many of the chi-square's deviations ``sqrt(2 m)``: at 0, wherever the fit left it further from
that marginal than the marginal's own noise puts it from the table (denoised, it is closer)."""


RAKE_CELLS = 16
""":func:`raked_to_marginals` rakes a wide table's continuous columns on this many equal cells
(where they divide the histogram's): raked on the histogram's 64 cells, the weights grew more
unequal (effective support 46,000 -> 42,000 on the 100-column independent table under zCDP)
and the candidates' chance correlations with them (correlation ratio 1.53 -> 1.64), for a W1
no better (0.0028 either way; the factor table's 0.0050-0.0053 against 0.0047-0.0054)."""


def raked_to_marginals(
    summary: NoisySummary, support: Candidates, weights: np.ndarray, levels: np.ndarray | None
) -> np.ndarray:
    """The weights raked (:func:`core.maxent.rake`) to the private marginals that the candidates
    were drawn from: of the lattice columns (``levels[j] >= 2``; a rare-level group
    (:class:`RareLevels`) as its representative level), and in a wide table
    (:attr:`NoisySummary.shares_shape`) of every continuous column, on :data:`RAKE_CELLS`
    cells. The fit may leave a fitted marginal anywhere within its histogram's noise of the
    measurement, and where it leaves it depends on the candidates and the other groups' noise
    as much as on what they know. In a table of lattice columns only, every one is raked: its
    private marginal holds what the contingency tables know of it
    (:meth:`NoisySummary.with_table_margins`). On Adult (12 seeded releases) the one-way TVD
    went from 0.0049 to 0.0044 at epsilon 1, the 2- and 3-way TVD no worse, level at 0.1 and
    10. Beside a continuous column, a lattice column is raked where its fitted marginal (or
    its coarse parts', :attr:`NoisySummary.level_parts`) lies beyond its noise
    (:data:`RAKE_DEVIATIONS`): raking a 0/1 label alone moves the continuous columns related
    to it, which no raking takes back (WDBC at 0.1, four seeds: one TSTR AUC 0.61 -> 0.07). A
    wide table's continuous marginals are known far better than their own noise (the shared
    shape): on the 100-column factor table at epsilon 1 raking them took the release's W1
    from 0.0061-0.0076 to 0.0047-0.0054 over four seeds, correlation ratio 0.30-0.42 ->
    0.30-0.39. Raking keeps the fitted relations (every ratio within a cell).
    Post-processing only."""
    grid = support.marginals.cells
    groups = {group.column: group for group in support.rare}
    u = weights / weights.sum()
    cells, targets = [], []
    lattice = np.zeros(summary.bounds.d, np.int64) if levels is None else np.asarray(levels)
    every = bool(np.all(lattice >= 2))
    if summary.shares_shape and summary.histograms is not None:
        measured = summary.histograms.shape[1]
        bins = RAKE_CELLS if measured % RAKE_CELLS == 0 else measured
        for j in (int(c) for c in np.flatnonzero(lattice < 2)):
            cells.append(histogram_cell(support.points[:, j], bins).astype(np.int32))
            targets.append(support.marginals.probabilities[j].reshape(bins, -1).sum(axis=1))
    for j in (int(c) for c in np.flatnonzero(lattice >= 2)):
        where = lattice_level(support.points[:, j], int(lattice[j]))
        target = support.marginals.probabilities[j, level_bins(int(lattice[j]), grid)]
        if j in groups:
            target = groups[j].merged(target)
        if not every:  # beside a continuous column: only a marginal beyond its noise
            held = target.size if j not in groups else target.size - groups[j].group.size + 1
            gap = np.bincount(where, weights=u, minlength=target.size) - target
            if not _beyond_its_noise(summary, j, gap, held):
                continue
        cells.append(where)
        targets.append(target)
    if not cells:
        return weights
    return rake(weights, np.column_stack(cells), targets)


def _beyond_its_noise(summary: NoisySummary, column: int, gap: np.ndarray, held: int) -> bool:
    """Whether a lattice column's fitted marginal lies ``gap`` (per level, in shares) from its
    private marginal on its ``held`` cells further than its histogram's noise allows
    (:data:`RAKE_DEVIATIONS`), or its coarse parts' further than theirs, each known better than
    a level."""
    total = summary.histogram_totals[column]
    std = summary.histogram_noise_stds[column] / total
    further = _beyond_noise((gap / max(std, 1e-12)) ** 2, held)
    if column in summary.level_parts:
        part, _, part_std = summary.level_parts[column]
        parts = np.bincount(part, weights=gap) * total
        further |= _beyond_noise((parts / part_std) ** 2, parts.size)
    return further


def _beyond_noise(squares: np.ndarray, cells: int) -> bool:
    """Whether a chi-square (the sum of ``squares``, over ``cells`` cells) lies past
    :data:`RAKE_DEVIATIONS` of its standard deviations above its mean under the noise alone."""
    return float(squares.sum()) > cells + RAKE_DEVIATIONS * np.sqrt(2.0 * cells)


def copula_of(summary: NoisySummary, modelled: LowRankPairs | None) -> np.ndarray | None:
    """The Gaussian-copula correlation the candidates were drawn from and the sample is reordered
    to where every candidate comes from it (:func:`.candidates.whole_copula`): the low-rank
    model's, or the quadrant pairs' correlation of most entropy; ``None`` elsewhere."""
    return private_correlation(summary, modelled) if whole_copula(summary, modelled) else None


def no_relation_found(summary: NoisySummary, modelled: LowRankPairs | None) -> bool:
    """Whether the only relations measured are pairs read through their low-rank model and the
    model finds none (rank 0, no pair kept as measured): every pair is then independence within
    its noise, and the sample draws the columns independently (:func:`core.sampling
    .sample_records`) rather than keep the candidates' chance correlation. Post-processing."""
    return (
        modelled is not None
        and modelled.model.rank == 0
        and not modelled.model.kept.any()
        and summary.basis.size == 0
        and summary.tables is None
        and summary.pca is None
    )


def point_masses(
    summary: NoisySummary, points: np.ndarray, weights: np.ndarray
) -> tuple[tuple[int, float, float, float, float], ...]:
    """``(column, bound, low, high, probability)`` for each bound that holds a clear share of
    its column's values (:meth:`NoisySummary.atom_shares`): the sample sets that share of its
    rows to the bound, drawn from the rows in the histogram cell ``[low, high]`` that holds it,
    each with ``probability`` (the share over the fitted mass of that cell, at most 1).
    Post-processing only."""
    shares = summary.atom_shares()
    if summary.histograms is None or not shares.any():
        return ()
    width = 2.0 / summary.histograms.shape[1]
    u = weights / weights.sum()
    out = []
    for column, side in zip(*np.nonzero(shares), strict=True):
        bound = -1.0 if side == 0 else 1.0
        low, high = (-1.0, -1.0 + width) if side == 0 else (1.0 - width, 1.0)
        mass = float(u[(points[:, column] >= low) & (points[:, column] <= high)].sum())
        if mass > 0:
            share = float(shares[column, side])
            out.append((int(column), bound, low, high, min(1.0, share / mass)))
    return tuple(out)
