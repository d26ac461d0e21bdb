"""Stage 2, candidates: support points drawn from the private one-way marginals, shaped by the
private correlation, with the prior weights that make them a table of independent columns.

Post-processing of the noisy summary only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsmooth_spark.core.chebyshev import HistogramBasis, chebyshev_table, lattice_level
from dpsmooth_spark.core.marginals import (
    GridMarginals,
    correlation_from_covariance,
    level_bins,
    marginal_candidates,
    mean_from_pairs,
    nearest_psd,
    tilt_to_mean,
)
from dpsmooth_spark.core.maxent import fit_within_noise
from dpsmooth_spark.core.sampling import herds, snap_to_lattice
from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams, grid_cells
from dpsmooth_spark.mechanisms.synthesizer.summary import (
    VARIANCE_FLOOR,
    LowRankPairs,
    NoisySummary,
)

CORRELATION_FLOOR = 1e-3
"""Smallest eigenvalue of the proposal correlation (keeps the copula density finite)."""


RARE_CANDIDATES = 10.0
"""A value of a category measured per level is rare where the candidates are expected to hold
fewer than this many points at it (its private share times their count): :class:`RareLevels`."""


@dataclass(frozen=True)
class RareLevels:
    """The rare values of a category, which share one representative level among the
    candidates and in the fit (their noisy counts summed into its cell), and which the sample
    spreads the rows at it over by their private shares. Without it, 20,000 candidates held
    about a third of a 10,000-value column's long tail, and the release lost the rest (TVD
    0.15 on 10^6 rows). Post-processing only.

    Attributes:
        column: the column.
        levels: its number of levels.
        group: ``(m,)`` the rare levels.
        representative: the level that stands for them (the most likely).
        shares: ``(m,)`` their private shares, normalised.
    """

    column: int
    levels: int
    group: np.ndarray
    representative: int
    shares: np.ndarray

    def merged(self, values: np.ndarray) -> np.ndarray:
        """Per-level ``values`` with the group's summed into the representative, 0 at the rest."""
        out = np.array(values, dtype=np.float64, copy=True)
        out[self.representative] = values[self.group].sum()
        out[self.group[self.group != self.representative]] = 0.0
        return out


def rare_levels(
    summary: NoisySummary, marginals: GridMarginals, count: int
) -> tuple[RareLevels, ...]:
    """The :class:`RareLevels` of each category measured per level that has two or more values
    with fewer than :data:`RARE_CANDIDATES` expected candidates out of ``count``."""
    out = []
    for column, counts in summary.level_histograms.items():
        if column in summary.ordered_levels:
            continue
        shares = marginals.probabilities[column, level_bins(counts.size, marginals.cells)]
        group = np.flatnonzero(shares * count < RARE_CANDIDATES)
        if group.size < 2:
            continue
        weights = shares[group]
        total = weights.sum()
        out.append(
            RareLevels(
                column,
                counts.size,
                group,
                int(group[np.argmax(weights)]),
                weights / total if total > 0 else np.full(group.size, 1.0 / group.size),
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class Candidates:
    """The support of the fit.

    Attributes:
        points: ``(C, d)`` candidates in [-1, 1]^d.
        log_prior: ``(C,)`` log weights of the independent-columns prior over them, as
            :func:`core.marginals.marginal_candidates` returns them (``-log q``, unnormalised;
            :meth:`start_weights` reads the copula's share from them).
        marginals: the private one-way marginals they were drawn from.
        copula_share: share of them drawn from the private-correlation copula (0: none).
        rare: the rare values of large categories, each group at its representative level.
        log_reference: ``(C,)`` log weights of what the maximum-entropy step moves towards
            (:func:`reference_correlation`), unnormalised; ``None``: the prior.
    """

    points: np.ndarray
    log_prior: np.ndarray
    marginals: GridMarginals
    copula_share: float = 0.0
    rare: tuple[RareLevels, ...] = ()
    log_reference: np.ndarray | None = None

    def reference_log_weights(self) -> np.ndarray:
        """``log_reference``, or the prior's where there is none."""
        return self.log_prior if self.log_reference is None else self.log_reference

    def prior_weights(self) -> np.ndarray:
        """The prior as a distribution over the candidates (``(C,)``, summing to 1)."""
        prior = np.exp(self.log_prior - self.log_prior.max())
        return prior / prior.sum()

    def start_weights(self) -> np.ndarray:
        """Where the closest fit starts: the copula part of the proposal when there is one
        (weights ``c_R / q = (1 - (1 - s) p_ind / q) / s``: the private correlation the
        candidates were shaped by, which the pair answers ask for), else the prior. At 10^7 rows
        x 30 its chi-square on the pair terms after 1000 steps is 60x below the prior's."""
        if self.copula_share <= 0:
            return self.prior_weights()
        share = self.copula_share
        weights = np.maximum(1.0 - (1.0 - share) * np.exp(self.log_prior), 0.0) / share
        return weights / weights.sum()


def marginal_priors(summary: NoisySummary, params: SynthesizerParams) -> GridMarginals:
    """Per column, a density on a grid of cells from the column's noisy histogram (and
    ``T_r(x_i)`` answers, if measured). With ``marginal_tolerance: null`` (the default) a
    histogram alone is denoised by :meth:`NoisySummary.marginal_density`: a clear histogram
    is kept as measured (less the noise in its empty cells), one the noise cannot tell from
    uniform stays uniform; a lattice column's reads only the cells that hold its points.
    Otherwise, the maximum-entropy density within ``marginal_tolerance`` per answer
    (0: as close as the grid allows)."""
    levels = max((c.size for c in summary.level_histograms.values()), default=0)
    cells = grid_cells(params.marginal_cells, levels)  # the data pass's (histogram_cells)
    centres = GridMarginals.centres(cells)
    n = max(summary.noisy_count, 1.0)
    table = chebyshev_table(centres, summary.basis.degree)  # (cells, g + 1)
    nonzero = summary.basis.indices != 0
    single = nonzero.sum(axis=1) == 1
    probs = np.full((summary.basis.d, cells), 1.0 / cells)
    for i in range(summary.basis.d):
        rows = np.flatnonzero(single & nonzero[:, i])
        w = [table[:, summary.basis.indices[rows, i]].T]  # (K, cells)
        b = [summary.normalised[rows]]
        std = [summary.basis_noise_std[rows] / n]
        if summary.histograms is not None:
            bins = summary.histograms.shape[1]
            w.append(HistogramBasis(1, bins).evaluate(centres[:, None]))
            total = summary.histogram_totals[i]
            b.append(summary.histograms[i] / total)
            std.append(np.full(bins, summary.histogram_noise_stds[i] / total))
        if sum(len(v) for v in b) == 0:
            continue
        per_level = i in summary.level_histograms  # a nominal column: its levels' counts alone
        if (
            per_level or rows.size == 0 and params.marginal_tolerance is None
        ) and summary.histograms is not None:
            probs[i] = summary.marginal_density(i, cells)
            continue
        fit, _ = fit_within_noise(
            np.vstack(w),
            np.concatenate(b),
            np.concatenate(std),
            slack=params.fit_slack,
            tolerance=params.marginal_tolerance or 0.0,
        )
        probs[i] = fit.weights
    return GridMarginals(probs)


HUB_MIN_PAIRS = 8
""":func:`hub_marginals` reads a column's mean off its pair answers only where it is in at least
this many measured pairs (an anchor): fewer give no estimate of the relations' spread."""

HUB_PAIRS_PRECISION = 0.15
""":func:`hub_marginals` uses the pairs' estimate of a hub's mean only where its variance is at
most this share of the histogram's: the estimate assumes relations uncorrelated with the
partners' means (docs/decisions/0005)."""


def hub_marginals(summary: NoisySummary, marginals: GridMarginals) -> GridMarginals:
    """``marginals`` with the prior of each hub column (one in :data:`HUB_MIN_PAIRS` or more pairs
    on spread factors, not nullable) tilted to the mean of its factor that its pair answers and
    histogram imply together (:func:`core.marginals.mean_from_pairs`), where the pairs know it
    much better than the histogram (:data:`HUB_PAIRS_PRECISION`); a lattice column's factor is
    read at its levels (``summary.levels``). Post-processing only.

    A hub's histogram is one of ``d`` that share the marginals' budget; its pairs' answers
    ``E[p_h p_i]`` each read ``E[p_h] E[p_i]`` where there is no relation. On digits at epsilon 1
    the label's histogram put its mean at 0.26 and 0.31 in two of 16 releases (truth 0.003): the
    prior then expects every pair answer off by ``0.3 E[p_i]``, and the fit, which keeps the
    marginal the candidates were drawn from, invented relations to explain them (correlation
    ratio 1.05 and 1.11). The pairs put the mean at 0.017 and -0.033."""
    pairs = summary.factor_pairs
    if (
        pairs is None
        or summary.factor_sums is None
        or summary.histograms is None
        or summary.factor_noise_std <= 0
    ):
        return marginals  # no pair answers, or noiseless ones: nothing to pool
    d, bins = summary.histograms.shape
    hubs = np.flatnonzero(np.bincount(pairs.pairs.ravel(), minlength=d) >= HUB_MIN_PAIRS)
    if summary.null_counts is not None:
        hubs = hubs[np.isnan(summary.null_counts[hubs])]
    if not hubs.size:
        return marginals
    n = max(summary.noisy_count, 1.0)
    points = np.repeat(GridMarginals.centres(marginals.cells)[:, None], d, axis=1)
    if summary.levels is not None:
        points = snap_to_lattice(points, summary.levels, marginals.cells)
    factors = pairs.factors(points)  # (cells, d): each column's factor on its grid
    means = np.einsum("dc,cd->d", marginals.probabilities, factors)
    answers = np.clip(summary.factor_sums / n, -1.0, 1.0)
    cell_var = (summary.histogram_noise_stds / n) ** 2  # per column
    answer_var = (summary.factor_noise_std / n) ** 2
    probabilities = marginals.probabilities.copy()
    for hub in hubs:
        rows = np.flatnonzero((pairs.pairs == hub).any(axis=1))
        partners = np.where(pairs.pairs[rows, 0] == hub, pairs.pairs[rows, 1], pairs.pairs[rows, 0])
        if hub in summary.level_histograms:  # its mean from one count per level
            levels = summary.level_histograms[int(hub)].size
            per_cell = factors[level_bins(levels, marginals.cells), hub]
        else:
            per_cell = factors[:, hub].reshape(bins, -1).mean(axis=1)
        histogram_var = cell_var[hub] * float(per_cell @ per_cell)
        if histogram_var <= 0:
            continue  # a noiseless histogram: nothing to pool
        mean, pairs_var = mean_from_pairs(
            means[hub], histogram_var, answers[rows], means[partners], answer_var
        )
        if pairs_var <= HUB_PAIRS_PRECISION * histogram_var:
            probabilities[hub] = tilt_to_mean(probabilities[hub], factors[:, hub], mean)
    return GridMarginals(probabilities)


def private_correlation(
    summary: NoisySummary, modelled: LowRankPairs | None = None
) -> np.ndarray | None:
    """The correlation the candidates should cover: the pairs' low-rank model's where the fit
    reads the pairs through one (``modelled``, :func:`.summary.modelled_pairs`); else from the
    pair terms when the basis has all of them; where it has some (anchor and selected pairs),
    the correlation of most entropy that holds them, each shrunk by its noise
    (:meth:`NoisySummary.completed_correlation`); else from
    PSI's directions and eigenvalues; ``None`` when none of these was measured. Without it,
    candidates drawn as independent columns could not hold the anchor pairs' relations (WDBC at
    epsilon 10: the label's correlations came back 2-3 noise deviations short, and pairs
    measured at 12 deviations kept 0.4 of a correlation of 1.0)."""
    if summary.basis.d < 2:
        return None
    if modelled is not None:
        return modelled.correlation
    if summary.has_all_pairs():
        _, cov = summary.moments()
    else:
        completed = summary.completed_correlation()
        if completed is not None:
            return completed
        if summary.pca is None:
            return None
        _, cov = summary.moments()
        n = max(summary.noisy_count, 1.0)
        values = np.clip(summary.pca.values / n, 0.0, None)
        low_rank = (summary.pca.vectors * values) @ summary.pca.vectors.T
        residual = np.maximum(np.diag(cov) - np.diag(low_rank), VARIANCE_FLOOR)
        cov = low_rank + np.diag(residual)
    corr = nearest_psd(correlation_from_covariance(cov), CORRELATION_FLOOR)
    return correlation_from_covariance(corr)


REFERENCE_DEVIATIONS = 4.0
"""A measured pair enters :func:`reference_correlation` only where its private correlation
exceeds this many noise deviations. A pair is measured whatever the table holds, and the
step keeps what its reference holds: at one deviation (the completed correlation's cut), on
2,000 rows of 6 independent columns at epsilon 1 the largest released correlation exceeded 0.1
on 3 seeds of 5 (``test_independent_columns_stay_independent``); Laplace tails pass 3
deviations about once in 70 pairs, 4 once in 280."""


def reference_correlation(summary: NoisySummary, marginals: GridMarginals) -> np.ndarray | None:
    """The correlation of the copula the maximum-entropy step moves towards: each measured pair
    clear of its noise (:data:`REFERENCE_DEVIATIONS`) at its private correlation shrunk by that
    noise (:meth:`NoisySummary.shrunk_pair_correlations`), every other pair 0, raised to
    positive definite. Where the noise cannot tell a pair from independence the step moves
    towards independence, as it does from the independent prior; where it can, towards the
    measured correlation, which the pair answers on bounded spread factors do not pin down: from
    the independent prior the step met their moments with a weaker Pearson correlation (age and
    bmi, ``benchmarks relation``: 0.600-0.618 for the data's 0.694; the correlated table at
    epsilon 1: pairs of 0.8 released at 0.60-0.65). The spread-factor pairs are read under
    ``marginals``, the candidates' (a hub's mean from its pairs, :func:`hub_marginals`): under a
    histogram whose mean is off, every pair of that column reads as a relation. ``None`` when no
    pair is measured."""
    pairs, rho, std, shrink = summary.shrunk_pair_correlations(marginals.probabilities)
    if not pairs.size:
        return None
    clear = np.abs(rho) > REFERENCE_DEVIATIONS * std
    corr = np.eye(summary.basis.d)
    values = np.clip(np.where(clear, np.nan_to_num(rho * shrink), 0.0), -1.0, 1.0)
    corr[pairs[:, 0], pairs[:, 1]] = corr[pairs[:, 1], pairs[:, 0]] = values
    return correlation_from_covariance(nearest_psd(corr, CORRELATION_FLOOR))


MODEL_CANDIDATES_PER_COLUMN = 500
"""Where the fit reads the pairs through their low-rank model, at least this many candidates per
column (up to :data:`MODEL_CANDIDATES_CAP`): the candidates carry a chance correlation of
order ``1 / sqrt(C)`` between any two columns, which the model's pairs without relation do not
(docs/decisions/0007)."""

MODEL_CANDIDATES_CAP = 100_000
"""Most candidates :data:`MODEL_CANDIDATES_PER_COLUMN` asks for."""

MODEL_CANDIDATE_VALUES = 30_000_000
"""Most values ``C x d`` that :func:`candidate_count` raises the count to, per column or per
table cell (240 MB of float64): 100,000 candidates up to 300 columns, 30,000 at 1,000 (whose
driver stays under 4 GB)."""


MODELLED_COPULA_SHARE = 1.0
"""Where the pairs are read through their low-rank model, every candidate comes from the copula
of the model's correlation (``copula_share`` elsewhere): the model already sets to zero what its
noise cannot tell from independence, and half the candidates drawn independently let the
maximum-entropy fit shrink the blocks it did find. On the 100-column factor table at epsilon 1:
correlation ratio 0.48 -> 0.29 under pure epsilon (its clipped pairs), 0.13 -> 0.11 under zCDP;
W1 no worse."""


TABLE_CANDIDATES_PER_CELL = 128
"""Where contingency tables are measured, the fit weighs at least this many candidates per
measured table cell (up to :data:`MODEL_CANDIDATES_CAP`): the weights settle on about one
candidate in 13, and the tables' joint cells and the combinations across them need that support.
Adult at epsilon 10 (13 tables, 798 cells), one seeded release: 20,000 candidates 2-way / 3-way
TVD 0.041 / 0.098, 40,000 0.035 / 0.083, 60,000 0.032 / 0.074, 100,000 0.030 / 0.069; the
6-column mixed table (20,000 already over 128 per cell) gained nothing from 60,000."""

SAMPLED_TABLE_CANDIDATES_PER_CELL = 512
"""Where the release's rows are drawn from the weights rather than herded (a noisy count over
``herding_rows``, or a table of lattice columns only: ``core.sampling.herds``), candidates per
measured table cell, up to :data:`SAMPLED_TABLE_CANDIDATES_CAP`:
a 3-way marginal combines cells of several tables, which more candidates hold. Adult, three
seeded releases each, 512 per cell against 128: 3-way TVD 0.142 / 0.074 / 0.061 against 0.149
/ 0.080 / 0.067 at epsilon 0.1 / 1 / 10 (2-way 0.079 / 0.035 / 0.026 against 0.081 / 0.037 /
0.028), 20-26 s a release at 10 against 8-12. Herded rows gain nothing (the 20,000-row mixed
table at 1: 3-way 0.070 against 0.069) and herding's cost grows with the candidates (20 s
against 7)."""

SAMPLED_TABLE_CANDIDATES_CAP = 200_000
"""Most candidates :data:`SAMPLED_TABLE_CANDIDATES_PER_CELL` asks for, within
:data:`MODEL_CANDIDATE_VALUES` values."""


def candidate_count(
    params: SynthesizerParams,
    d: int,
    modelled: bool,
    table_cells: int = 0,
    herded: bool = True,
) -> int:
    """How many candidates the fit weighs: ``params.candidates``, raised to
    :data:`MODEL_CANDIDATES_PER_COLUMN` per column where the pairs are read through their
    low-rank model or the quadrant pairs' copula (``modelled``), and to
    :data:`TABLE_CANDIDATES_PER_CELL` per measured contingency-table cell (``table_cells``),
    either at most :data:`MODEL_CANDIDATES_CAP`; where the rows are drawn, not herded
    (``herded``), to :data:`SAMPLED_TABLE_CANDIDATES_PER_CELL` per table cell up to
    :data:`SAMPLED_TABLE_CANDIDATES_CAP`. What is raised stays within
    :data:`MODEL_CANDIDATE_VALUES` values."""
    wanted = min(TABLE_CANDIDATES_PER_CELL * table_cells, MODEL_CANDIDATES_CAP)
    if not herded:
        sampled = SAMPLED_TABLE_CANDIDATES_PER_CELL * table_cells
        wanted = max(wanted, min(sampled, SAMPLED_TABLE_CANDIDATES_CAP))
    if modelled:
        wanted = max(wanted, min(MODEL_CANDIDATES_PER_COLUMN * d, MODEL_CANDIDATES_CAP))
    return max(params.candidates, min(wanted, MODEL_CANDIDATE_VALUES // max(d, 1)))


def whole_copula(summary: NoisySummary, modelled: LowRankPairs | None) -> bool:
    """Whether every candidate comes from the copula of :func:`private_correlation`: where the
    pairs are read through their low-rank model or the quadrant pairs' completion, whose
    correlations are shrunk by their noise already."""
    return modelled is not None or summary.quadrant_pairs is not None


def make_candidates(
    summary: NoisySummary,
    params: SynthesizerParams,
    rng: np.random.Generator,
    modelled: LowRankPairs | None = None,
) -> Candidates:
    """:func:`candidate_count` points from the private marginals (and copula: the pairs'
    low-rank model's where ``modelled``), with their prior; columns with ``summary.levels``
    ``L > 0`` are snapped to the nearest of their ``L`` points."""
    marginals = marginal_priors(summary, params)
    if params.hub_means:
        marginals = hub_marginals(summary, marginals)
    correlation = private_correlation(summary, modelled)
    tables = summary.tables
    whole = whole_copula(summary, modelled)
    count = candidate_count(
        params,
        summary.basis.d,
        whole,
        0 if tables is None else tables.values.size,
        herds(round(summary.noisy_count), params.herding_rows, summary.levels),
    )
    copula_share = MODELLED_COPULA_SHARE if whole else params.copula_share
    reference = None if whole or correlation is None else reference_correlation(summary, marginals)
    points, log_prior, log_reference = marginal_candidates(
        marginals, count, rng, correlation, copula_share, reference
    )
    if summary.levels is not None:
        points = snap_to_lattice(points, summary.levels, marginals.cells)
    rare = rare_levels(summary, marginals, count)
    for group in rare:
        at = np.isin(lattice_level(points[:, group.column], group.levels), group.group)
        points[at, group.column] = -1.0 + 2.0 * group.representative / (group.levels - 1)
    share = copula_share if correlation is not None and summary.basis.d >= 2 else 0.0
    return Candidates(points, log_prior, marginals, share, rare, log_reference)
