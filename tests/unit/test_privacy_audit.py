"""Statistical privacy audits of every released statistic of the synthesizer.

Each stage (the count's two draws together, one-way histograms, basis sums, one PSI iteration,
the spread along a private direction; pair terms on spread factors) gets epsilon = 1. On
neighbouring tables built to attain each sensitivity (an added corner record), the mechanism
runs many times; a threshold test on the region where every noisy coordinate lies beyond both
tables' true values certifies a lower bound on the privacy loss (Clopper-Pearson, alpha = 1e-3,
Bonferroni over events). The audit must not exceed the claimed epsilon for the real calibration
(false-failure rate <= 1e-3 per stage for a fresh seed; seeded here, so deterministic) and must
exceed it when the noise is halved, which proves the audit can fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.chebyshev import coarsen_histograms
from dpsmooth_spark.core.kernel import partial_sums
from dpsmooth_spark.core.marginals import COARSE_WEIGHT, coarse_cell_of, level_counts
from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams, release_summary
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.audit import beyond_both, clopper_pearson, epsilon_lower_bound
from dpsmooth_spark.privacy.noise import NoiseSource

RUNS = 12_000
MUTANT_RUNS = 3_000
"""Runs of a half-noise mutant's audit (where the real one runs more). Its privacy loss is twice
epsilon: 3,000 runs certify 1.35 to 1.57 on the summary's four stages, while the real calibration
needs more to certify over 0.7 of epsilon."""
SUMMARY_RUNS = 8_000
"""Runs of the summary's real calibration: 0.79 to 0.83 of epsilon certified on its four stages
(6,000: 0.74 to 0.80; 3,000: 0.54 to 0.71). The stages audited with :data:`RUNS` need all 12,000
(the coarse parts certify 0.63 at 8,000)."""
ALPHA = 1e-3
BOUNDS = PublicBounds.from_mapping({"a": (-1.0, 1.0), "b": (-1.0, 1.0)})
PARAMS = SynthesizerParams(
    basis="marginal",
    degree=1,
    candidate_strategy="psi",
    pca_dim=1,
    pca_iterations=1,
    count_fraction=1 / 6.2,  # its two draws at 0.28 and sqrt(1 - 0.28^2) = 0.96 of it: 1 / 5
    count_probe=0.28,
    psi_fraction=1 / 5,
    directions_fraction=1 / 5,
    marginal_fraction=1 / 4,
    marginal_bins=4,
    candidates=10,
)
EPSILON = 5.0  # one per stage


class Recorded(Exception):
    """Raised by a :class:`RecordingNoise` with ``stop_after`` once its log holds that many
    vectors: the rest of a release draws noise the audit does not read (a third to three fifths
    of each run's time)."""


@dataclass(frozen=True)
class RecordingNoise(NoiseSource):
    """Records every noisy vector the mechanism releases; ``factor`` < 1 miscalibrates it, and
    ``stop_after`` ends the release with :class:`Recorded` once the log holds that many."""

    factor: float = 1.0
    log: list = field(default_factory=list)
    stop_after: int | None = None

    def _add(self, values, scale, kind):
        out = super()._add(values, scale * self.factor, kind)
        self.log.append(out.copy())
        if self.stop_after is not None and len(self.log) >= self.stop_after:
            raise Recorded
        return out


def release_until_recorded(sums, bounds, params, accountant, noise: RecordingNoise, *rest):
    """``release_summary`` (same arguments) up to the stage where ``noise`` has recorded what
    the audit reads: the summary, or ``None`` where it stopped there."""
    try:
        return release_summary(sums, bounds, params, accountant, noise, *rest)
    except Recorded:
        return None


def runs_at(factor: float, runs: int = RUNS) -> int:
    """An audit's runs at noise ``factor``: all of them at the real calibration, at most
    :data:`MUTANT_RUNS` (or a quarter, where that is more) for a miscalibrated mutant."""
    return runs if factor == 1.0 else min(runs, max(runs // 4, MUTANT_RUNS))


def psi_start_seed() -> int:
    """A public PSI start X0 close to (1, 1)/sqrt(2), where the corner record attains the bound."""
    for seed in range(1000):
        g = np.random.default_rng(seed).standard_normal((2, 1))
        x0 = g[:, 0] / np.linalg.norm(g)
        if abs(x0.sum()) / np.sqrt(2) > 0.99:
            return seed
    raise AssertionError("no suitable seed")


def run_stages(table: np.ndarray, factor: float, seed: int, start_seed: int) -> list[np.ndarray]:
    sums = partial_sums([table], BOUNDS.lower, BOUNDS.upper, PARAMS.pass_spec(BOUNDS.d))
    noise = RecordingNoise(np.random.default_rng(seed), factor, stop_after=5)
    outputs = []
    for _ in range(runs_at(factor, SUMMARY_RUNS)):
        noise.log.clear()
        release_until_recorded(
            sums,
            BOUNDS,
            PARAMS,
            PrivacyAccountant(EPSILON),
            noise,
            np.random.default_rng(start_seed),
        )
        outputs.append([np.ravel(v) for v in noise.log])
    # a 40-row table's count is not clear at its first draw: its second follows (the count's
    # two draws audited together, at their sum of epsilon), then the histograms, basis sums and
    # PSI (the directions after them are not read)
    assert all(len(run) == 5 and run[0].size == run[1].size == 1 for run in outputs)
    count = np.array([np.concatenate(run[:2]) for run in outputs])
    return [count] + [np.array([run[stage] for run in outputs]) for stage in range(2, 5)]


@pytest.fixture(scope="module")
def audit_samples():
    base = np.random.default_rng(0).uniform(-0.5, 0.5, size=(40, 2))
    neighbour = np.vstack([base, [[1.0, 1.0]]])  # a corner: |T_1| = 1 in every coordinate
    start = psi_start_seed()
    x0 = np.linalg.qr(np.random.default_rng(start).standard_normal((2, 1)))[0]
    truth = {}
    for name, table in (("d", base), ("d_prime", neighbour)):
        sums = partial_sums([table], BOUNDS.lower, BOUNDS.upper, PARAMS.pass_spec(BOUNDS.d))
        # each column's bins (its values at its bounds taken out) and its two bounds' cells
        binned = coarsen_histograms(sums.histograms, PARAMS.marginal_bins).astype(float)
        binned[:, [0, -1]] -= sums.atoms
        histograms = np.hstack([binned, sums.atoms]).ravel()
        truth[name] = [
            np.array([sums.count, sums.count]),
            histograms,
            sums.first_moments(),
            (sums.second_moments() @ x0).ravel(),
        ]
    samples = {}
    for factor in (1.0, 0.5):
        samples[factor] = (
            run_stages(base, factor, 11, start),
            run_stages(neighbour, factor, 12, start),
        )
    return truth, samples


@pytest.mark.parametrize("stage", [0, 1, 2, 3], ids=["count", "histograms", "basis_sums", "psi"])
def test_audit_respects_claimed_epsilon_and_catches_half_noise(audit_samples, stage):
    truth, samples = audit_samples
    claimed = EPSILON / 5
    bounds = {}
    for factor, (out_d, out_p) in samples.items():
        score_d = beyond_both(out_d[stage], truth["d"][stage], truth["d_prime"][stage])
        score_p = beyond_both(out_p[stage], truth["d"][stage], truth["d_prime"][stage])
        bounds[factor] = epsilon_lower_bound(score_d, score_p, np.array([0.0, 0.5, 1.0]), ALPHA)
    assert bounds[1.0] <= claimed, bounds
    assert bounds[0.5] > claimed, bounds
    # and the audit is not vacuous for the real calibration: it certifies most of epsilon
    assert bounds[1.0] > 0.7 * claimed, bounds


def test_clopper_pearson_brackets_the_rate():
    low, high = clopper_pearson(30, 100, 0.05)
    assert low < 0.3 < high
    assert clopper_pearson(0, 10, 0.05)[0] == 0.0 and clopper_pearson(10, 10, 0.05)[1] == 1.0


# --- the other papers' mechanisms (docs/privacy.md sections 10 and 11) ---------------------------


def audit(outputs_d, outputs_p, truth_d, truth_p):
    score_d = beyond_both(outputs_d, truth_d, truth_p)
    score_p = beyond_both(outputs_p, truth_d, truth_p)
    return epsilon_lower_bound(score_d, score_p, np.array([0.0, 0.5, 1.0]), ALPHA)


def assert_calibrated(outputs, base, neighbour, seeds, shift, atol):
    """The audit of a stage whose ``outputs(table, factor, seed)`` are its noisy releases and
    exact values: the added record moves them by ``shift`` (the sensitivity, attained); at the
    real noise the bound stays below epsilon 1 and certifies more than 0.7 of it, at half the
    noise it exceeds 1."""
    for factor, expect_above in ((1.0, False), (0.5, True)):
        out_d, truth_d = outputs(base, factor, seeds[0])
        out_p, truth_p = outputs(neighbour, factor, seeds[1])
        np.testing.assert_allclose(truth_p - truth_d, shift, atol=atol)
        bound = audit(out_d, out_p, truth_d, truth_p)
        assert (bound > 1.0) == expect_above, bound
        if not expect_above:
            assert bound > 0.7, bound  # not vacuous


def test_direction_spread_audit():
    """The directions stage (privacy.md 4b) with epsilon = 1 on a fixed direction (in a release
    its input is PSI's DP output): the added corner record adds ``T_2(v . corner) = 1`` to the
    sum, attaining the L1 sensitivity."""
    from dpsmooth_spark.core.chebyshev import ProjectionBasis
    from dpsmooth_spark.mechanisms.stages import release_basis_sums

    directions = ProjectionBasis.from_vectors(np.array([[1.0], [1.0]]))
    base = np.random.default_rng(0).uniform(-0.5, 0.5, size=(40, 2))
    neighbour = np.vstack([base, [[1.0, 1.0]]])

    def outputs(table, factor, seed):
        exact = directions.sums(table.shape[0], table.T @ table)
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        return np.array(
            [
                release_basis_sums(exact, 1.0, PrivacyAccountant(1.0), noise, stage="directions")[0]
                for _ in range(RUNS)
            ]
        ), exact

    for factor, expect_above in ((1.0, False), (0.5, True)):
        out_d, truth_d = outputs(base, factor, 21)
        out_p, truth_p = outputs(neighbour, factor, 22)
        bound = audit(out_d, out_p, truth_d, truth_p)
        assert (bound > 1.0) == expect_above, bound
        if not expect_above:
            assert bound > 0.7, bound  # not vacuous


def test_factor_pair_audit():
    """Pair terms on spread factors (privacy.md 3d) with epsilon = 1 and the factors a release
    picks for narrow columns (monotone steps of degree 16, the default on a few columns; in a
    release they are post-processing of the noisy histograms): the added record at (1, 1), where
    a non-decreasing factor takes its maximum, adds 1 (less the factors' rounding margin, checked
    below 1e-3) to the pair's sum and to each one-way factor sum, attaining the L1 sensitivity of
    3 functions. The sums go through the data pass's Gram matrix and ``FactorPairs.sums``, as in
    a release."""
    from numpy.polynomial import chebyshev

    from dpsmooth_spark.core.factors import FactorPairs, spread_factors
    from dpsmooth_spark.core.kernel import PassSpec
    from dpsmooth_spark.mechanisms.stages import release_basis_sums

    degree = 16
    base = np.random.default_rng(0).normal(0.0, 0.05, size=(40, 2))
    narrow = np.random.default_rng(1).normal(0.0, 0.05, size=(20_000, 2))
    probs = np.array(
        [np.histogram(narrow[:, i], bins=64, range=(-1, 1))[0] / 20_000 for i in range(2)]
    )
    coefficients = spread_factors(probs, degree)
    assert not np.any(np.all(coefficients == np.eye(degree + 1)[1], axis=1))  # spread, not T_1
    assert np.all(chebyshev.chebval(1.0, coefficients.T) >= 1.0 - 1e-3)
    # a third column with the constant factor 1 makes pairs (0, 2) and (1, 2) the one-way
    # factor sums: three functions that the added record moves by 1 each
    factors = FactorPairs(
        np.vstack([coefficients, np.eye(degree + 1)[0]]), np.array([[0, 1], [0, 2], [1, 2]])
    )
    neighbour = np.vstack([base, [[1.0, 1.0]]])

    def outputs(table, factor, seed):
        padded = np.column_stack([table, np.zeros(len(table))])
        exact = factors.sums(partial_sums([padded], -np.ones(3), np.ones(3), PassSpec(degree)))
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        return np.array(
            [release_basis_sums(exact, 1.0, PrivacyAccountant(1.0), noise)[0] for _ in range(RUNS)]
        ), exact

    assert_calibrated(outputs, base, neighbour, (31, 32), [1.0, 1.0, 1.0], 2e-3)


def test_bernstein_lattice_audit():
    """KDE lattice values with epsilon_lattice = 1: k = 1 and a bandwidth of 10 ranges, so the added
    record (at the centre) moves both lattice sums by 0.999 sup K: the L1 sensitivity is
    attained."""
    from dpsmooth_spark.mechanisms.bernstein_release import (
        BernsteinParams,
        kde_bandwidths,
        kde_sums,
        lattice_points,
        release_kde,
    )

    params = BernsteinParams(k=1, bandwidth=10.0, count_fraction=0.25)
    lower, upper = np.zeros(1), np.ones(1)
    points, widths = lattice_points(1, lower, upper), kde_bandwidths(params, lower, upper)
    base = np.random.default_rng(0).uniform(0.2, 0.8, (40, 1))
    neighbour = np.vstack([base, [[0.5]]])

    def lattice_outputs(table, factor, seed):
        sums = kde_sums(table, points, widths)
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        out = []
        for _ in range(RUNS):
            noise.log.clear()
            release_kde(
                sums, table.shape[0], params, ["x"], lower, upper, PrivacyAccountant(4 / 3), noise
            )
            out.append(noise.log[1])  # [count, lattice]
        return np.array(out)

    truth_d, truth_p = kde_sums(base, points, widths), kde_sums(neighbour, points, widths)
    real = audit(
        lattice_outputs(base, 1.0, 1), lattice_outputs(neighbour, 1.0, 2), truth_d, truth_p
    )
    half = audit(
        lattice_outputs(base, 0.5, 1), lattice_outputs(neighbour, 0.5, 2), truth_d, truth_p
    )
    assert 0.7 < real <= 1.0, real  # measured 0.82
    assert half > 1.0, half  # measured 1.78


def test_distance_tangent_audit():
    """The tangent stage of the distance release with epsilon_tangents = 1 (one update): the
    added record at 1 moves the value sum at y = 0 by +1 and the slope sum by -1, attaining the
    L1 sensitivity 2. Runs whose update landed elsewhere (slope > 0: at y = 1; about 1%) are left
    out."""
    from dpsmooth_spark.core.distances import distance_sums, grid_statistics, slope_sums
    from dpsmooth_spark.mechanisms.distance_release import (
        DistanceParams,
        Embedding,
        release_distances,
        statistics_grid,
    )

    params = DistanceParams(
        grid=2, alpha=1e-3, max_updates=1, passes=1, count_fraction=0.25, svt_fraction=0.5
    )
    bounds = PublicBounds.from_mapping({"u": (0.0, 1.0)})
    embedding = Embedding.build(params, bounds, None, np.random.default_rng(0))
    grid = statistics_grid(params)
    base = np.random.default_rng(0).uniform(0.2, 0.8, (40, 1))
    neighbour = np.vstack([base, [[1.0]]])

    def tangent_outputs(table, factor, seed):
        stats = grid_statistics(table, grid)
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        out = []
        for _ in range(runs_at(factor)):
            noise.log.clear()
            release_distances(
                stats, table.shape[0], embedding, params, PrivacyAccountant(8 / 3), noise
            )
            tangents = [v for v in noise.log if v.shape == (2,)]
            if tangents and tangents[0][1] < 0:
                out.append(tangents[0])
        assert len(out) > 0.98 * runs_at(factor)
        return np.array(out)

    def truth(table):
        stats = grid_statistics(table, grid)
        return np.array([distance_sums(stats, grid)[0, 0], slope_sums(stats)[0, 0]])

    real = audit(
        tangent_outputs(base, 1.0, 1),
        tangent_outputs(neighbour, 1.0, 2),
        truth(base),
        truth(neighbour),
    )
    half = audit(
        tangent_outputs(base, 0.5, 1),
        tangent_outputs(neighbour, 0.5, 2),
        truth(base),
        truth(neighbour),
    )
    assert 0.7 < real <= 1.0, real  # measured 0.78
    assert half > 1.0, half  # measured 1.45 (3,000 runs)


def test_sparse_vector_audit():
    """Sparse vector with c = 1 and epsilon = 1 on sensitivity-1 queries (D: all 0, D': all 1,
    threshold 3), scored by the index of the first "above". The analysis is not tight for such
    events (measured: 0.24 certified), so this audit guards against gross miscalibration: it
    must stay under epsilon and exceed it when the noise is 10x too small."""
    from dpsmooth_spark.privacy.sparse_vector import SparseVector

    def first_above(value, factor, seed):
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        index = []
        for _ in range(RUNS):
            svt = SparseVector.start(3.0, 1.0, 1, 1.0, PrivacyAccountant(1.0), noise)
            index.append(next((i for i in range(10) if svt.above(value)), 10))
        return -np.array(index, dtype=float)

    thresholds = -np.arange(10) + 0.5
    real = epsilon_lower_bound(
        first_above(0.0, 1.0, 3), first_above(1.0, 1.0, 4), thresholds, ALPHA
    )
    tenth = epsilon_lower_bound(
        first_above(0.0, 0.1, 3), first_above(1.0, 0.1, 4), thresholds, ALPHA
    )
    assert real <= 1.0, real
    assert tenth > 1.0, tenth  # measured 1.65


@dataclass(frozen=True)
class ScaledSelection(NoiseSource):
    """Noisy top-k whose noise is ``factor`` times the calibrated scale."""

    factor: float = 1.0

    def top_k(self, scores, k, scale, pure):
        return super().top_k(scores, k, scale * self.factor, pure)


def test_pair_selection_audit():
    """Noisy top-1 among 100 scores (privacy.md section 3e) with epsilon = 1 through
    ``select_top_k``, as the pair selection calls it: on D every score is 0; on D' a record
    moves the first up by 1 and every other down by 1 (the scores ``|S - n~ E|`` may move either
    way), where the loss on the event "the first is picked" comes close to ``2 / scale``: its
    probability is 1/100 on D and ``e / (e + 99)`` on D', a loss of 0.98 at the real scale
    (certified: 0.81) and 1.94 at half of it (certified: 1.76). 100,000 runs on each table, 25,000
    at half the scale (Clopper-Pearson, alpha = 1e-3; seeded, so deterministic)."""
    from dpsmooth_spark.mechanisms.stages import select_top_k

    runs = 100_000
    d = np.zeros(100)
    d_prime = np.concatenate([[1.0], -np.ones(99)])

    def picked_first(scores, factor, seed):
        noise = ScaledSelection(np.random.default_rng(seed), factor)
        return np.array(
            [
                float(
                    select_top_k(scores, 1, 1.0, 1.0, PrivacyAccountant(1.0), noise, "audit")[0]
                    == 0
                )
                for _ in range(runs_at(factor, runs))
            ]
        )

    bounds = {
        factor: epsilon_lower_bound(
            picked_first(d, factor, 41), picked_first(d_prime, factor, 42), np.array([0.5]), ALPHA
        )
        for factor in (1.0, 0.5)
    }
    assert 0.5 < bounds[1.0] <= 1.0, bounds  # not vacuous
    assert bounds[0.5] > 1.0, bounds


HISTOGRAM_STAGE = {
    "basis": "marginal",
    "degree": 1,
    "candidate_strategy": "moments",
    "count_fraction": 0.2,
    "count_probe": 1.0,
    "marginal_fraction": 0.5,
    "marginal_bins": 4,
    "candidates": 10,
}
"""The histogram audits' configuration: 4 bins a column, the histograms' share of the budget
0.8 x 0.5 (epsilon 1 / 0.4 gives them 1), the rest small; the count in one draw, so that each
stage's place in the noise log is fixed."""


def test_pooled_histogram_audit():
    """The pooled histogram (privacy.md 3f) with epsilon = 1, through ``release_summary`` as a
    release runs it (``pooled_histogram: on``): on 3 columns the added corner record puts its 3
    values in the last cell, moving the pooled count there by 3, the L1 sensitivity ``m``."""
    bounds = PublicBounds.from_mapping({c: (-1.0, 1.0) for c in "abc"})
    params = SynthesizerParams(**HISTOGRAM_STAGE, pooled_histogram="on", pooled_fraction=0.5)
    epsilon = 1.0 / (0.8 * 0.5 * 0.5)  # the pooled histogram's share is 1
    base = np.random.default_rng(0).uniform(-0.5, 0.5, size=(40, 3))
    neighbour = np.vstack([base, [[1.0, 1.0, 1.0]]])

    def outputs(table, factor, seed):
        runs, sums, _, accountant = mixed_stage_outputs(
            table, bounds, params, epsilon, None, None, 2, factor, seed
        )  # count, histograms, pooled histogram, basis sums
        charge = next(c for c in accountant.charges if c.stage == "pooled_histogram")
        assert charge.sensitivity == 3.0 and charge.epsilon == pytest.approx(1.0)
        return runs, coarsen_histograms(sums.histograms, 4).sum(axis=0)

    for factor, expect_above in ((1.0, False), (0.5, True)):
        out_d, truth_d = outputs(base, factor, 51)
        out_p, truth_p = outputs(neighbour, factor, 52)
        np.testing.assert_array_equal(truth_p - truth_d, [0.0, 0.0, 0.0, 3.0])
        bound = audit(out_d, out_p, truth_d, truth_p)
        assert (bound > 1.0) == expect_above, bound
        if not expect_above:
            assert bound > 0.7, bound  # not vacuous


def mixed_stage_outputs(
    table, bounds, params, epsilon, lattice, nominal, stage, factor, seed, runs=RUNS, read=None
):
    """``runs`` releases (fewer for a mutant: ``runs_at``) through ``release_summary``, with the
    columns' ``lattice`` levels and ``nominal`` flags, of the exact sums of ``table``: the noisy
    vector each released at ``stage`` (the log's index; with ``read``, what it makes of the log
    and the summary), the exact sums, and the last summary and accountant."""
    spec = params.pass_spec(bounds.d, lattice, nominal)
    sums = partial_sums([table], bounds.lower, bounds.upper, spec)
    rng, log = np.random.default_rng(seed), []
    whole = RecordingNoise(rng, factor, log)
    # up to the audited stage, but with ``read`` and in the last run, which returns its summary
    partial = whole if read is not None else RecordingNoise(rng, factor, log, stage + 1)
    out = []
    count = runs_at(factor, runs)
    for run in range(count):
        log.clear()
        accountant = PrivacyAccountant(epsilon)
        summary = release_until_recorded(
            sums,
            bounds,
            params,
            accountant,
            whole if run == count - 1 else partial,
            np.random.default_rng(0),
            None,
            lattice,
            nominal,
        )
        out.append(log[stage] if read is None else read(log, summary))
    return np.array(out), sums, summary, accountant


def test_level_histogram_audit():
    """One-way histograms with a lattice column measured per level and a continuous column's
    bounds in cells of their own (privacy.md 3c) at epsilon = 1, through ``release_summary`` as
    a release runs it: an 8-level category on 4 bins gets its 8 level counts, released with the
    other column's 4 bins and 2 bound cells; the added record moves one count of each column,
    the L1 sensitivity ``d = 2``."""
    bounds = PublicBounds.from_mapping({"a": (0.0, 7.0), "b": (-1.0, 1.0)})
    params = SynthesizerParams(**HISTOGRAM_STAGE)
    epsilon = 1.0 / (0.8 * 0.5)  # the histograms' share is 1
    rng = np.random.default_rng(0)
    base = np.column_stack([rng.integers(0, 7, 40), rng.uniform(-0.5, 0.5, 40)])
    neighbour = np.vstack([base, [[7.0, 1.0]]])
    lattice, nominal = np.array([8, 0]), np.array([True, False])

    def outputs(table, factor, seed):
        runs, sums, _, accountant = mixed_stage_outputs(
            table, bounds, params, epsilon, lattice, nominal, 1, factor, seed, RUNS // 2
        )  # count, histograms, basis sums
        charge = next(c for c in accountant.charges if c.stage == "histograms")
        assert charge.sensitivity == 2.0 and charge.epsilon == pytest.approx(1.0)
        fine, atoms = sums.histograms, sums.atoms
        binned = coarsen_histograms(fine[1:], 4).ravel() - [atoms[1, 0], 0, 0, atoms[1, 1]]
        truth = np.concatenate([level_counts(fine[0], 8), binned, atoms[1]])
        return runs, truth

    for factor, expect_above in ((1.0, False), (0.5, True)):
        out_d, truth_d = outputs(base, factor, 61)
        out_p, truth_p = outputs(neighbour, factor, 62)
        # b = 1.0 is its upper bound: the record is in b's cell of that bound, not its last bin
        np.testing.assert_array_equal(truth_p - truth_d, [0] * 7 + [1] + [0, 0, 0, 0] + [0, 1])
        bound = audit(out_d, out_p, truth_d, truth_p)
        assert (bound > 1.0) == expect_above, bound
        if not expect_above:
            assert bound > 0.7, bound  # not vacuous


def test_coarse_parts_audit():
    """An ordered integer's levels and then its coarse parts, the histograms' two draws
    (privacy.md 3c) at epsilon = 1, through ``release_summary`` as a release runs it: a
    16-level integer on 4 bins gets its 16 level counts at 0.2 of its weight (released with the
    other column's 4 bins and 2 bound cells) and, where its levels' noise is large (40 rows),
    its 2 coarse cells, a spike in a part of its own, at 0.8. The added record moves a level by
    0.2, its cell by 0.8 and the other column's bound cell by 1: the L1 sensitivity ``d = 2``
    over the two draws. The second draw is audited summed into its cells (post-processing:
    the parts vary with the first draw)."""
    bounds = PublicBounds.from_mapping({"a": (0.0, 15.0), "b": (-1.0, 1.0)})
    params = SynthesizerParams(**HISTOGRAM_STAGE)
    epsilon = 1.0 / (0.8 * 0.5)  # the histograms' share is 1
    rng = np.random.default_rng(0)
    base = np.column_stack([rng.integers(0, 15, 40), rng.uniform(-0.5, 0.5, 40)])
    neighbour = np.vstack([base, [[15.0, 1.0]]])
    lattice, nominal = np.array([16, 0]), np.array([False, False])
    cell = coarse_cell_of(16, 2)
    fine, coarse = 1.0 - COARSE_WEIGHT, COARSE_WEIGHT

    def read(log, summary):
        """The first draw, then the second's parts summed into their levels' cells."""
        part = summary.level_parts[0][0]
        owner = np.array([cell[np.flatnonzero(part == k)[0]] for k in range(part.max() + 1)])
        return np.concatenate([log[1], np.bincount(owner, weights=log[2], minlength=2)])

    def outputs(table, factor, seed):
        runs, sums, _, accountant = mixed_stage_outputs(
            table, bounds, params, epsilon, lattice, nominal, 1, factor, seed, RUNS // 2, read
        )  # count, levels and the rest, parts, basis sums
        charge = [c for c in accountant.charges if c.stage == "histograms"]
        assert len(charge) == 1
        assert charge[0].sensitivity == 2.0 and charge[0].epsilon == pytest.approx(1.0)
        hist, atoms = sums.histograms, sums.atoms
        levels = level_counts(hist[0], 16)
        binned = coarsen_histograms(hist[1:], 4).ravel() - [atoms[1, 0], 0, 0, atoms[1, 1]]
        cells = np.bincount(cell, weights=levels, minlength=2)
        return runs, np.concatenate([levels * fine, binned, atoms[1], cells * coarse])

    shift = [0] * 15 + [fine] + [0, 0, 0, 0] + [0, 1] + [0, coarse]
    assert_calibrated(outputs, base, neighbour, (65, 66), shift, 1e-12)


def test_weighted_histogram_audit():
    """The one-way histograms of two lattice columns weighted by the noise their marginals
    carry (privacy.md 3c, ``core.marginals.histogram_weights``) at epsilon = 1, through
    ``release_summary``: an 8-level category measured per level and a 0/1 flag on its two held
    bins of 4 get the weights 4 sqrt(2) / (2 sqrt(2) + sqrt(2)) and half that (their sum, the
    L1 sensitivity, stays ``d = 2``); the noise is added to the weighted counts, which the added
    record moves by each column's weight."""
    bounds = PublicBounds.from_mapping({"a": (0.0, 7.0), "b": (0.0, 1.0)})
    params = SynthesizerParams(**HISTOGRAM_STAGE, contingency_tables="off")
    epsilon = 1.0 / (0.8 * 0.5)  # the histograms' share is 1
    rng = np.random.default_rng(0)
    base = np.column_stack([rng.integers(0, 7, 40), rng.integers(0, 2, 40)]).astype(float)
    neighbour = np.vstack([base, [[7.0, 1.0]]])
    lattice, nominal = np.array([8, 2]), np.array([True, True])
    weights = np.array([4.0 / 3.0, 2.0 / 3.0])

    def outputs(table, factor, seed):
        runs, sums, summary, accountant = mixed_stage_outputs(
            table, bounds, params, epsilon, lattice, nominal, 1, factor, seed
        )  # count, histograms
        charge = next(c for c in accountant.charges if c.stage == "histograms")
        assert charge.sensitivity == 2.0 and charge.epsilon == pytest.approx(1.0)
        np.testing.assert_allclose(
            summary.histogram_noise_stds, charge.scale * np.sqrt(2.0) / weights
        )
        fine = sums.histograms
        counts = np.concatenate([level_counts(fine[0], 8), coarsen_histograms(fine[1:], 4)[0]])
        return runs, counts * np.repeat(weights, [8, 4])

    shift = [0] * 7 + [weights[0]] + [0, 0, 0, weights[1]]
    assert_calibrated(outputs, base, neighbour, (63, 64), shift, 1e-12)


def test_contingency_table_audit():
    """The contingency tables (privacy.md 3g) with epsilon = 1, through ``release_summary`` as
    a release runs it: two categories (4 and 3 values) have one table, measured without a
    selection; the added record moves one of its 12 cells by 1, the L1 sensitivity of one
    table."""
    from dpsmooth_spark.core.tables import table_pairs

    bounds = PublicBounds.from_mapping({"a": (0.0, 3.0), "b": (0.0, 2.0)})
    params = SynthesizerParams(
        basis="marginal",
        degree=1,
        candidate_strategy="moments",
        count_fraction=0.2,
        count_probe=1.0,  # in one draw: the tables' share is 1 whatever the count reads
        marginal_fraction=0.5,
        table_fraction=0.5,
        candidates=10,
    )
    epsilon = 1.0 / (0.8 * 0.5 * 0.5)  # the tables' share is 1
    rng = np.random.default_rng(0)
    base = np.column_stack([rng.integers(0, 3, 2000), rng.integers(0, 2, 2000)]).astype(float)
    neighbour = np.vstack([base, [[3.0, 2.0]]])
    lattice, nominal = np.array([4, 3]), np.array([True, True])
    tables = table_pairs(lattice, nominal)

    def outputs(table, factor, seed):
        runs, sums, summary, accountant = mixed_stage_outputs(
            table, bounds, params, epsilon, lattice, nominal, 2, factor, seed, RUNS // 2
        )  # count, histograms, tables, basis sums
        assert summary.tables is not None and summary.tables.query == tables
        charge = next(c for c in accountant.charges if c.stage == "tables")
        assert charge.sensitivity == 1.0 and charge.epsilon == pytest.approx(1.0)
        return runs, sums.tables.astype(float)

    for factor, expect_above in ((1.0, False), (0.5, True)):
        out_d, truth_d = outputs(base, factor, 71)
        out_p, truth_p = outputs(neighbour, factor, 72)
        assert (truth_p - truth_d).sum() == 1 and truth_p[-1] - truth_d[-1] == 1
        bound = audit(out_d, out_p, truth_d, truth_p)
        assert (bound > 1.0) == expect_above, bound
        if not expect_above:
            assert bound > 0.7, bound  # not vacuous


def test_clipped_pairs_audit():
    """The norm-clipped pairs (privacy.md 3h) with epsilon = 1, through the data pass's bands and
    ``ExactSums.clipped_second_moments``, as a release reads them: on three columns clipped to
    L1 norm 1.2, the added corner (1, 1, 1) is clipped to (0.4, 0.4, 0.4) and moves each of the
    three pairs by 0.16, their L1 sensitivity ``(1 - 1/3) 1.2^2 / 2 = 0.48`` (less the rounding
    slack the bound adds, below 1e-4)."""
    from dpsmooth_spark.core.kernel import PassSpec
    from dpsmooth_spark.mechanisms.stages import release_clipped_pairs
    from dpsmooth_spark.privacy import sensitivity

    levels = (0.6, 1.2, 2.4)
    base = np.random.default_rng(0).uniform(-0.3, 0.3, size=(40, 3))
    neighbour = np.vstack([base, [[1.0, 1.0, 1.0]]])
    assert sensitivity.clipped_pairs_l1(1.2, 3) == pytest.approx(0.48, abs=1e-4)

    def outputs(table, factor, seed):
        sums = partial_sums([table], -np.ones(3), np.ones(3), PassSpec(1, clip_levels=levels))
        exact = sums.clipped_second_moments(1)
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):  # cheap runs: twice as many narrow the bound's interval
            accountant = PrivacyAccountant(1.0)
            runs.append(release_clipped_pairs(exact, 1.2, 3, 1.0, accountant, noise)[0])
        assert accountant.charges[-1].stage == "clipped_pairs"
        return np.array(runs), exact

    assert_calibrated(outputs, base, neighbour, (81, 82), [0.16, 0.16, 0.16], 1e-4)


def test_quadrant_pairs_audit():
    """The quadrant pairs (privacy.md 3i) with epsilon = 1, through ``sign_gram`` as the second
    pass sums them and ``release_basis_sums`` as ``_measure_quadrant_pairs`` releases them: on
    three columns with thresholds at 0, the added record (1, 1, 1) lies above each threshold and
    adds 1 to each of the three pairs' sums, their L1 sensitivity 3."""
    from dpsmooth_spark.core.quadrants import sign_gram
    from dpsmooth_spark.mechanisms.stages import release_basis_sums

    base = np.random.default_rng(0).uniform(-1.0, 1.0, size=(40, 3))
    neighbour = np.vstack([base, [[1.0, 1.0, 1.0]]])

    def outputs(table, factor, seed):
        exact = sign_gram(table, np.zeros(3)).reshape(3, 3)[[0, 0, 1], [1, 2, 2]]
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):  # cheap runs: twice as many narrow the bound's interval
            accountant = PrivacyAccountant(1.0)
            runs.append(
                release_basis_sums(exact, 1.0, accountant, noise, stage="quadrant_pairs")[0]
            )
        assert accountant.charges[-1].stage == "quadrant_pairs"
        return np.array(runs), exact

    assert_calibrated(outputs, base, neighbour, (91, 92), [1.0, 1.0, 1.0], 0.0)


def test_adaptive_marginal_audit():
    """A marginal of the adaptive loop (privacy.md 3j) with epsilon = 1, through
    ``adaptive._measure`` as every round calls it, on the cells the kernel counts: the added
    record lands in one cell of a 2-way marginal, moving one count by 1 (its L1 sensitivity)."""
    from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals
    from dpsmooth_spark.mechanisms import adaptive

    spec = CellMarginals(CellCoding((3, 0), (False, False), (True, False)), ((0, 1),))
    base = np.random.default_rng(0).uniform(-1.0, 1.0, size=(40, 2))
    neighbour = np.vstack([base, [[1.0, 1.0]]])

    def outputs(table, factor, seed):
        exact = spec.counts(table).astype(np.float64)
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):
            accountant = PrivacyAccountant(1.0)
            runs.append(adaptive._measure((0, 1), exact, 1.0, accountant, noise, 1).values)
        assert accountant.spent_epsilon() == pytest.approx(1.0)
        return np.array(runs), exact

    shift = np.zeros(spec.sizes[0])
    shift[-1] = 1.0
    assert_calibrated(outputs, base, neighbour, (93, 94), shift, 0.0)


@pytest.mark.parametrize("kind", ["points", "runs", "pooled", "shape"])
def test_adaptive_points_and_shape_audit(kind):
    """A continuous column's first-round one-way with its bounds apart, the same in 8 runs of
    its cells, two such columns' pooled one-way, and a column's shape (privacy.md 3j), with
    epsilon = 1, through ``adaptive._measure`` on the counts the kernel counts (the runs' and the
    pooled one-way's as ``RecordTables.exact`` sums them): the added record sits on the upper
    bound, a cell of its own (``points``), in the last cell, so the last run (``runs``) and the
    pooled one-way's last cell, once per column (``pooled``: that count moves by 2, at the
    sensitivity ``RecordTables.sensitivity`` states), or inside the bounds in the last sub-cell
    (``shape``); it moves the one count by 1 (a histogram's L1 sensitivity) or 2."""
    from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals
    from dpsmooth_spark.mechanisms import adaptive, records
    from dpsmooth_spark.mechanisms.loop_tables import Candidate

    width = 2 if kind == "pooled" else 1
    coding = CellCoding((0,) * width, (False,) * width, (False,) * width)
    spec = CellMarginals(coding, tuple((v,) for v in range(width)), coding.points, coding.points)
    base = np.random.default_rng(0).uniform(-0.9, 0.9, size=(40, width))
    added = {"points": 1.0, "runs": 0.95, "pooled": 0.95, "shape": 0.999}[kind]
    neighbour = np.vstack([base, [[added] * width]])
    pooled = Candidate((0, 1), 16, 1.0, records.POOLED)

    def tables_of(table):
        counts = spec.counts(table).astype(np.float64)
        points = spec.split_points(counts)
        tables = records.RecordTables(coding, spec.split(counts).__getitem__, points, 1)
        if kind == "pooled":  # a first table's total of 0: both columns are swamped
            first = [Candidate((v,), 18, 1.0, records.POINTS) for v in (0, 1)]
            assert tables.join_first(first, [0.5, 0.5], 0.0, lambda b: 1.0) == [(pooled, 1.0)]
        return counts, tables

    def exact_counts(table):
        counts, tables = tables_of(table)
        if kind == "shape":
            return spec.split_shapes(counts)[0]
        if kind == "points":
            return spec.split_points(counts)[0]
        if kind == "pooled":
            return tables.exact(pooled)
        return tables.exact(Candidate((0,), 10, 1.0, records.POINTS))  # 8 runs and 2 bounds

    sensitivity = tables_of(base)[1].sensitivity(pooled) if kind == "pooled" else 1.0

    def outputs(table, factor, seed):
        exact = exact_counts(table)
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):
            accountant = PrivacyAccountant(1.0)
            stage = records.POINTS if kind == "runs" else kind
            measured = adaptive._measure((0,), exact, 1.0, accountant, noise, 0, stage, sensitivity)
            runs.append(measured.values)
        assert accountant.spent_epsilon() == pytest.approx(1.0)
        return np.array(runs), exact

    shift = np.zeros({"points": 18, "runs": 10, "pooled": 16, "shape": 256}[kind])
    shift[-2 if kind == "runs" else -1] = float(width)
    assert_calibrated(outputs, base, neighbour, (97, 98), shift, 0.0)


def test_adaptive_coarse_audit():
    """A later round's coarse table (privacy.md 3j) with epsilon = 1, through
    ``adaptive._measure`` on the counts ``RecordTables.exact`` sums from the kernel's: the added
    record lands in one cell of the 16 x 16 marginal, so in one cell of its 4 x 2 groups, and
    moves that one count by 1 (a histogram of the rows in coarser cells)."""
    from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals
    from dpsmooth_spark.mechanisms import adaptive, records
    from dpsmooth_spark.mechanisms.loop_tables import Candidate

    coding = CellCoding((0, 0), (False, False), (False, False))
    spec = CellMarginals(coding, ((0, 1),))
    base = np.random.default_rng(0).uniform(-0.9, 0.9, size=(40, 2))
    neighbour = np.vstack([base, [[0.95, 0.95]]])

    def outputs(table, factor, seed):
        answers = spec.split(spec.counts(table).astype(np.float64))
        tables = records.RecordTables(coding, answers.__getitem__, {}, 2)
        tables.groups = {0: np.arange(16) // 4, 1: np.arange(16) // 8}
        exact = tables.exact(Candidate((0, 1), 8, 2.0, records.COARSE))
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):
            accountant = PrivacyAccountant(1.0)
            measured = adaptive._measure((0, 1), exact, 1.0, accountant, noise, 1, records.COARSE)
            runs.append(measured.values)
        assert accountant.spent_epsilon() == pytest.approx(1.0)
        return np.array(runs), exact

    shift = np.zeros(8)
    shift[-1] = 1.0
    assert_calibrated(outputs, base, neighbour, (99, 100), shift, 0.0)


def test_adaptive_selection_audit():
    """The adaptive loop's pick (privacy.md 3j) with epsilon = 1, through ``run_loop``'s own
    selection step: 100 candidates of weight 1 whose L1 errors a record moves by at most 1 each,
    either way (on D all equal; on D' the first up by 1, every other down by 1). Its loss on "the
    first is picked" approaches ``2 / scale``, as for the pair selection (section 3e): certified
    above 0.7 and at most 1 at the real scale, above 1 at half of it. 100,000 picks on each,
    25,000 at half the scale."""
    from dpsmooth_spark.mechanisms import adaptive

    runs = 100_000
    d = np.zeros(100)
    d_prime = np.concatenate([[1.0], -np.ones(99)])
    weights = np.ones(100)

    def picked_first(scores, factor, seed):
        noise = ScaledSelection(np.random.default_rng(seed), factor)
        return np.array(
            [
                float(adaptive._select(scores, weights, 1.0, PrivacyAccountant(1.0), noise, 1) == 0)
                for _ in range(runs_at(factor, runs))
            ]
        )

    bounds = {
        factor: epsilon_lower_bound(
            picked_first(d, factor, 51), picked_first(d_prime, factor, 52), np.array([0.5]), ALPHA
        )
        for factor in (1.0, 0.5)
    }
    assert 0.7 < bounds[1.0] <= 1.0, bounds
    assert bounds[0.5] > 1.0, bounds


def test_person_shape_audit():
    """A release of persons' shape of a continuous column (privacy.md 3k) with epsilon = 1 and
    k = 4, through ``adaptive._measure`` at the sensitivity ``PersonTables`` states (a row
    table's: the accountant multiplies it by ``k``): the neighbouring table has one more unit,
    of four rows in one sub-cell, which moves that count by 4 (the L1 sensitivity, attained)."""
    from dpsmooth_spark.core.cell_marginals import CellCoding
    from dpsmooth_spark.core.unit_tables import SCALE
    from dpsmooth_spark.mechanisms import adaptive, persons, records
    from dpsmooth_spark.mechanisms.loop_tables import Candidate

    k = 4
    coding = CellCoding((2, 0), (False, False), (True, False))
    spec = persons.unit_tables(coding, (True, False), k, adaptive.LoopSettings(max_way=2))
    tables = persons.PersonTables(spec, {}, 2)
    rng = np.random.default_rng(0)
    units = np.repeat(np.arange(20), rng.integers(1, k + 1, 20))
    values = np.column_stack([2.0 * (units % 2) - 1.0, rng.uniform(-0.9, 0.9, units.size)])
    base = (values, units)
    added = np.array([[1.0, 0.999]] * k)
    neighbour = (np.vstack([values, added]), np.r_[units, np.full(k, 99)])

    def outputs(table, factor, seed):
        x, labels = table
        counts = spec.counts(coding.codes(x), labels, x)
        exact = spec.split(counts)["shape", (1,)] / SCALE
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):
            accountant = PrivacyAccountant(1.0, unit_rows=k)
            sensitivity = tables.sensitivity(Candidate((1,), 256, 1.0, records.SHAPE))
            measured = adaptive._measure(
                (1,), exact, 1.0, accountant, noise, 0, records.SHAPE, sensitivity
            )
            runs.append(measured.values)
        assert accountant.spent_epsilon() == pytest.approx(1.0)
        return np.array(runs), exact

    shift = np.zeros(256)
    shift[255] = float(k)
    assert_calibrated(outputs, base, neighbour, (93, 94), shift, 1e-5)


@pytest.mark.parametrize("kind", ["units", "agreement"])
def test_person_table_audit(kind):
    """A release of persons' unit and pair tables (privacy.md 3k) with epsilon = 1 and k = 4,
    through ``adaptive._measure`` at the sensitivity ``PersonTables`` states: the neighbouring
    table has one more unit, of two rows in one cell of ``ward``, which moves one count by 1 (the
    L1 sensitivity, attained: its rows' shares, or its two ordered pairs of rows, both agreeing,
    over 2)."""
    from dpsmooth_spark.core.cell_marginals import CellCoding
    from dpsmooth_spark.core.unit_tables import SCALE
    from dpsmooth_spark.mechanisms import adaptive, persons
    from dpsmooth_spark.mechanisms.loop_tables import Candidate

    k = 4
    coding = CellCoding((3, 3), (False, False), (True, True))
    spec = persons.unit_tables(coding, (True, False), k, adaptive.LoopSettings(max_way=2))
    tables = persons.PersonTables(spec, {}, 2)
    scope = (1, 2) if kind == "units" else (1,)
    candidate = Candidate(scope, 1, 1.0, kind)
    rng = np.random.default_rng(0)
    units = np.repeat(np.arange(20), rng.integers(1, k + 1, 20))
    base = (np.column_stack([units % 3, rng.integers(0, 3, units.size)]), units)
    added = np.array([[0, 0], [0, 0]])
    neighbour = (np.vstack([base[0], added]), np.r_[units, np.full(2, 99)])

    def outputs(table, factor, seed):
        exact = spec.split(spec.counts(*table))[kind, scope] / SCALE
        noise = RecordingNoise(np.random.default_rng(seed), factor)
        runs = []
        for _ in range(2 * RUNS):
            accountant = PrivacyAccountant(1.0, unit_rows=k)
            measured = adaptive._measure(
                scope, exact, 1.0, accountant, noise, 1, kind, tables.sensitivity(candidate)
            )
            runs.append(measured.values)
        assert accountant.spent_epsilon() == pytest.approx(1.0)
        return np.array(runs), exact

    shift = np.zeros(1 if kind == "agreement" else 3 * k)
    shift[0 if kind == "agreement" else 1] = 1.0  # ward 0 twice; ward 0 at rows = 2
    assert_calibrated(outputs, base, neighbour, (95, 96), shift, 1e-5)
