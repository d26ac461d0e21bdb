"""Distance-query release: grid statistics, the tangent learner's mistake bound, the sparse
vector, the embeddings' distortion, and the mechanism's accuracy and accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.distances import (
    BourgainEmbedding,
    TangentLearner,
    distance_sums,
    gaussian_projection,
    grid_statistics,
    mistake_bound,
    named_metric,
    slope_sums,
)
from dpsmooth_spark.mechanisms.distance_release import (
    DistanceParams,
    DistanceRelease,
    Embedding,
    plan,
    release_from_records,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource
from dpsmooth_spark.privacy.sparse_vector import SparseVector


def test_grid_statistics_give_the_distance_and_slope_sums():
    rng = np.random.default_rng(0)
    u = np.round(rng.uniform(size=(500, 3)), 2)  # ties with grid points on purpose
    grid = np.linspace(0, 1, 11)
    stats = grid_statistics(u[:200], grid) + grid_statistics(u[200:], grid)  # batches add up
    brute = np.abs(u.T[:, :, None] - grid[None, None, :]).sum(axis=1)
    np.testing.assert_allclose(distance_sums(stats, grid), brute, atol=1e-9)
    np.testing.assert_array_equal(
        slope_sums(stats), np.sign(grid[None, None, :] - u.T[:, :, None]).sum(axis=1)
    )


def learn_with_exact_oracle(g, dg, alpha, queries):
    learner, mistakes = TangentLearner(), 0
    for y in queries:
        if abs(g(y) - float(learner(y))) > alpha:
            mistakes += 1
            learner.update(y, g(y), dg(y))
    return learner, mistakes


@pytest.mark.parametrize("alpha", [0.1, 0.01, 0.001])
def test_tangent_learner_meets_lemma_3_2_mistake_bound(alpha):
    """A convex 1-Lipschitz G on [0, 1] (a mean distance to 1000 points) asked adversarially
    (random order, many repeats, plus a sweep): at most 3 / sqrt(alpha) updates, and afterwards
    accurate everywhere on a fine grid (the learner stays a lower bound)."""
    x = np.random.default_rng(1).beta(2, 5, 1000)

    def g(y):
        return float(np.abs(x - y).mean())

    def dg(y):
        return float(np.sign(y - x).mean())

    queries = np.r_[np.random.default_rng(2).uniform(size=5000), np.linspace(0, 1, 4001)]
    learner, mistakes = learn_with_exact_oracle(g, dg, alpha, queries)
    assert mistakes <= mistake_bound(alpha) == math.ceil(3 / math.sqrt(alpha))
    fine = np.linspace(0, 1, 3001)
    truth = np.array([g(y) for y in fine])
    assert np.all(learner(fine) <= truth + 1e-12)
    assert np.abs(learner(fine) - truth).max() <= alpha + 1e-9


def test_sparse_vector_answers_exactly_without_noise_and_stops_after_c():
    accountant = PrivacyAccountant(1e9)
    svt = SparseVector.start(5.0, 1.0, 2, 1e9, accountant, NoiseSource(np.random.default_rng(0)))
    answers = [svt.above(v) for v in (1.0, 6.0, 4.0, 7.0)]
    assert answers == [False, True, False, True] and svt.exhausted
    with pytest.raises(RuntimeError):
        svt.above(0.0)


def test_sparse_vector_charges_c_rounds_of_above_threshold():
    accountant = PrivacyAccountant(2.0)
    svt = SparseVector.start(0.0, 1.0, 4, 1.0, accountant, NoiseSource(np.random.default_rng(0)))
    # Dwork and Roth, Algorithm 2: sigma = 2 c s / epsilon for sensitivity s, c rounds
    assert svt.sigma == pytest.approx(2 * 4 / 1.0)
    assert accountant.spent_epsilon() == pytest.approx(1.0)
    approx = PrivacyAccountant(1.0, 1e-6)
    SparseVector.start(
        0.0, 1.0, 4, approx.share(0.5), approx, NoiseSource(np.random.default_rng(0))
    )
    assert approx.charges[0].rho == pytest.approx(approx.total_rho / 2)


def test_random_projection_preserves_l2_distances_in_l1():
    """Lemma 4.1: ||P(x - y)||_1 / ||x - y||_2 concentrates at 1 (relative std
    sqrt(pi/2 - 1) / sqrt(m) = 1.7% at m = 2000; a 10% deviation is a 5.9-sigma event, so the
    false-failure rate over 200 pairs is below 1e-6)."""
    rng = np.random.default_rng(3)
    p = gaussian_projection(5, 2000, rng)
    x, y = rng.uniform(size=(200, 5)), rng.uniform(size=(200, 5))
    ratio = np.abs((x - y) @ p.T).sum(axis=1) / np.linalg.norm(x - y, axis=1)
    assert np.all(np.abs(ratio - 1) < 0.10), (ratio.min(), ratio.max())


def test_bourgain_embedding_expansion_and_contraction():
    """Theorem 4.4 with the theorem's K = 512 (log k + log n): expansion <= 1 always, and every
    data-query distance shrinks by at most 64 log k (w.p. >= 1 - 1/n by Corollary 4.1; seeded)."""
    rng = np.random.default_rng(4)
    queries, data = rng.uniform(size=(16, 3)), rng.uniform(size=(40, 3))
    metric = named_metric("l2", 3)
    repeats = math.ceil(512 * (math.log(16) + math.log(40)))
    emb = BourgainEmbedding.draw(queries, repeats, rng)
    embedded = np.abs(emb(data, metric)[:, None, :] - emb(queries, metric)[None, :, :]).sum(axis=2)
    true = metric(data, queries)
    assert np.all(embedded <= true + 1e-12)
    assert np.all(embedded >= true / (64 * math.log(16)))
    assert embedded.mean() > 0.05 * true.mean()  # measured: far less contraction than the bound


def test_planned_alpha_shrinks_with_n_and_epsilon():
    params = DistanceParams()
    alphas = [
        plan(params, 3, n, PrivacyAccountant(eps)).alpha
        for n, eps in ((1e3, 1), (1e5, 1), (1e5, 10))
    ]
    assert alphas[0] > alphas[1] > alphas[2]


def table(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(
        rng.normal([5.0, 0.0, 100.0], [2.0, 0.3, 20.0], size=(n, 3)), [0, -1, 50], [10, 1, 150]
    )


BOUNDS = PublicBounds.from_mapping({"a": (0, 10), "b": (-1, 1), "c": (50, 150)})


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_l1_release_answers_within_its_planned_accuracy(delta):
    """n = 20,000, epsilon = 1: every one of 300 random queries within 3 alpha of the truth on each
    axis (sum of 3 alpha x axis widths); measured max errors are 0.09-0.31 of that bound over seeds
    0-19, so this seeded check has a wide margin. The budget is spent exactly."""
    x = table(20_000)
    params = DistanceParams(metric="l1")
    emb = Embedding.build(params, BOUNDS, None, np.random.default_rng(1))
    accountant = PrivacyAccountant(1.0, delta)
    release = release_from_records(
        x, emb, params, accountant, NoiseSource(np.random.default_rng(2))
    )
    q = np.random.default_rng(3).uniform([0, -1, 50], [10, 1, 150], size=(300, 3))
    truth = np.abs(x[None, :, :] - q[:, None, :]).sum(axis=2).mean(axis=1)
    error = np.abs(release.answer(q) - truth).max()
    assert error <= 3 * release.alpha * (BOUNDS.upper - BOUNDS.lower).sum(), (error, release.alpha)
    assert release.updates_used <= release.max_updates
    assert accountant.spent_epsilon() == pytest.approx(1.0, rel=1e-9)
    again = DistanceRelease.from_dict(release.to_dict())
    np.testing.assert_array_equal(again.answer(q), release.answer(q))


def test_l2_release_tracks_euclidean_distances():
    """n = 50,000, epsilon = 1, 64 projections. Two sources of error: the embedding (its l1
    distances vs the true l2 ones: median relative 5% on this seed, std sqrt(pi/2 - 1)/8 = 9% per
    direction) and the private learning of the embedded distances (within 3 alpha x widths, as
    for l1). Measured: median relative error 3%, learning error 0.19 of its bound."""
    x = table(50_000)
    params = DistanceParams(metric="l2", projection_dim=64)
    emb = Embedding.build(params, BOUNDS, None, np.random.default_rng(1))
    release = release_from_records(
        x, emb, params, PrivacyAccountant(1.0), NoiseSource(np.random.default_rng(2))
    )
    q = np.random.default_rng(3).uniform([0, -1, 50], [10, 1, 150], size=(100, 3))
    truth = np.linalg.norm(x[None, :, :] - q[:, None, :], axis=2).mean(axis=1)
    assert emb.projection is not None
    embedded = np.abs((x[None, :, :] - q[:, None, :]) @ emb.projection.T).sum(axis=2).mean(axis=1)
    answers = release.answer(q)
    assert np.abs(answers - embedded).max() <= 3 * release.alpha * emb.widths.sum()
    assert np.median(np.abs(answers - truth) / truth) < 0.10
