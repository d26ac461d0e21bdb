"""Candidates and their prior: hub means, tilts, the completed correlation, covered pairs.

All randomness is seeded (test mode), so each assertion is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_mean_from_pairs_reads_a_mean_off_pair_answers_where_the_partners_means_differ():
    """61 partners with means spread over [-0.9, 0.5], relations of spread 0.05 unrelated to
    them, answer noise 0.12; the histogram's estimate sits at 0.3, two of its deviations (0.15)
    off the true mean 0. The combined estimate lies within 3 of the pairs' own deviations of
    the truth in each of 20 seeded draws (a Gaussian estimate misses that about 0.3% of the
    time). Where all partners have one mean, the pairs cannot tell the mean from the relations:
    the estimate stays the histogram's and the pairs' variance is infinite."""
    from dpsmooth_spark.core.marginals import mean_from_pairs

    partners = np.linspace(-0.9, 0.5, 61)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        answers = rng.normal(0, 0.05, 61) + rng.normal(0, 0.12, 61)  # mean 0: relations + noise
        mean, pairs_var = mean_from_pairs(0.3, 0.15**2, answers, partners, 0.12**2)
        assert pairs_var < 0.15 * 0.15**2
        assert abs(mean) <= 3 * np.sqrt(pairs_var), (seed, mean, pairs_var)
    flat = np.full(61, -0.5)
    mean, pairs_var = mean_from_pairs(0.3, 0.15**2, rng.normal(0, 0.12, 61), flat, 0.12**2)
    assert mean == pytest.approx(0.3) and pairs_var == np.inf


def test_tilt_to_mean_is_the_exponential_tilt_that_reaches_the_target():
    """The tilted distribution has the target mean, and ``log(q / p)`` is linear in the values
    (the KL-closest distribution with that mean); a target beyond the values' range stays
    inside it."""
    from dpsmooth_spark.core.marginals import tilt_to_mean

    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(64))
    v = np.sort(rng.uniform(-1, 1, 64))
    q = tilt_to_mean(p, v, 0.4)
    assert q @ v == pytest.approx(0.4, abs=1e-9) and q.sum() == pytest.approx(1.0)
    slope, intercept = np.polyfit(v, np.log(q / p), 1)
    np.testing.assert_allclose(np.log(q / p), slope * v + intercept, atol=1e-8)
    assert v.min() < tilt_to_mean(p, v, 5.0) @ v < v.max()


def test_covered_pairs_are_those_a_measured_function_holds():
    """Columns 0-1 share a basis term, 1-2 a pair on spread factors (0-2 are joined through 1
    but no function holds both), 3-5 a three-way term; 6 stands alone. PSI's subspace covers
    every pair."""
    from dpsmooth_spark.core.bounds import PublicBounds
    from dpsmooth_spark.core.chebyshev import BasisSet
    from dpsmooth_spark.core.factors import FactorPairs
    from dpsmooth_spark.core.subspace import SubspaceEstimate
    from dpsmooth_spark.mechanisms.synthesizer import NoisyStatistic, NoisySummary

    indices = np.zeros((4, 7), dtype=np.int64)
    indices[0, 0] = 1  # one-way terms relate nothing
    indices[1, [0, 1]] = 1
    indices[2, [3, 4, 5]] = [1, 2, 1]
    indices[3, 6] = 2
    bounds = PublicBounds.from_mapping({f"c{i}": (0.0, 1.0) for i in range(7)})
    basis = NoisyStatistic("basis", "basis_sums", BasisSet(7, 2, indices), np.zeros(4), 1.0)
    pairs = NoisyStatistic(
        "factor_pairs",
        "basis_sums",
        FactorPairs(np.zeros((7, 3)), np.array([[1, 2]])),
        np.zeros(1),
        1.0,
    )
    summary = NoisySummary(bounds, 100.0, (basis, pairs))
    covered = summary.covered_pairs()
    assert covered[0, 1] and covered[1, 2] and covered[3, 4] and covered[3, 5] and covered[4, 5]
    assert not covered[0, 2]  # joined through column 1 only: not covered
    assert (
        not covered[6, :6].any() and np.array_equal(covered, covered.T) and covered.diagonal().all()
    )
    unmeasured = NoisySummary(bounds, 100.0, (basis,))  # pairs not released: not covered
    assert not unmeasured.covered_pairs()[1, 2]
    psi = SubspaceEstimate(np.eye(7)[:, :2], np.ones(2))
    with_psi = summary.with_statistics(NoisyStatistic("pca", "psi", psi, psi.values, 1.0))
    assert with_psi.covered_pairs().all()


def test_max_entropy_correlation_is_the_graphical_model_of_the_measured_pairs():
    """A Gaussian whose precision is zero off a graph (a chain over 8 columns plus two chords)
    is the largest-determinant completion of its own correlations on the graph's edges
    (Dempster 1972): given those entries alone, ``max_entropy_correlation`` returns the whole
    matrix, built here by inverting the precision (no code under test), to 1e-6; and a star
    around one column (a label) gets ``r_iL r_jL`` between the others."""
    from dpsmooth_spark.core.marginals import correlation_from_covariance, max_entropy_correlation

    d = 8
    edges = [(i, i + 1) for i in range(d - 1)] + [(0, 4), (2, 7)]
    precision = np.eye(d) * 2.0
    for i, j in edges:
        precision[i, j] = precision[j, i] = -0.45
    truth = correlation_from_covariance(np.linalg.inv(precision))
    assert np.linalg.eigvalsh(precision).min() > 0
    pairs = np.array(edges)
    completed = max_entropy_correlation(d, pairs, truth[pairs[:, 0], pairs[:, 1]])
    assert np.abs(completed - truth).max() < 1e-6
    assert np.abs(truth[np.triu_indices(d, 1)]).min() > 0.01  # the entries not given are not 0

    r = np.array([0.8, -0.6, 0.5, 0.7])
    star = max_entropy_correlation(5, np.array([[4, j] for j in range(4)]), r)
    assert np.abs(star[:4, :4] - (np.outer(r, r) + np.diag(1 - r**2))).max() < 1e-6
    assert np.abs(star[4, :4] - r).max() < 1e-9


def test_drawn_rows_get_more_candidates_per_table_cell_within_the_values_cap():
    """Rows drawn from the weights (not herded) ask for more candidates per contingency-table
    cell than herded ones, never fewer than the config's, and never more values than the cap."""
    from dpsmooth_spark.mechanisms.synthesizer.candidates import (
        MODEL_CANDIDATE_VALUES,
        candidate_count,
    )
    from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams

    params = SynthesizerParams()
    for cells in (0, 10, 200, 800, 5_000):
        herded = candidate_count(params, 14, False, cells, herded=True)
        drawn = candidate_count(params, 14, False, cells, herded=False)
        assert params.candidates <= herded <= drawn
        assert (drawn > herded) == (cells > 40)  # 20,000 candidates cover 39 cells at 512 each
    wide = candidate_count(params, 1_000, False, 5_000, herded=False)
    assert wide * 1_000 <= max(MODEL_CANDIDATE_VALUES, params.candidates * 1_000)
    assert candidate_count(SynthesizerParams(candidates=300_000), 14, False, 800, False) == 300_000
