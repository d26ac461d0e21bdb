"""Evaluation metrics and baselines (pure numpy), including the sharper pairwise family."""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.chebyshev import BasisSet
from dpsmooth_spark.core.factors import FactorPairs
from dpsmooth_spark.evaluation.baselines import independent_laplace, real_half, uniform_rows
from dpsmooth_spark.evaluation.metrics import (
    PairwiseKernelQueries,
    basis_residuals,
    correlation_difference,
    distinct_rows,
    marginal_wasserstein,
    svm_auc,
)
from dpsmooth_spark.evaluation.release_metrics import QuerySets, evaluate
from dpsmooth_spark.mechanisms.synthesizer.summary import NoisyStatistic, NoisySummary
from dpsmooth_spark.privacy.noise import NoiseSource


def correlated(rng, n=4000, d=6):
    base = rng.normal(size=(n, 1))
    return np.clip(0.35 * (base + 0.4 * rng.normal(size=(n, d))), -1, 1)


def test_identical_tables_score_zero(rng):
    x = correlated(rng)
    assert marginal_wasserstein(x, x).max() == 0.0
    assert correlation_difference(x, x) == pytest.approx(0.0, abs=1e-12)
    assert distinct_rows(np.vstack([x, x])) == distinct_rows(x) > 1000


def test_pairwise_family_separates_joint_from_independent_releases(rng):
    """Column-wise shuffling keeps every marginal but destroys correlation: the paper's wide
    kernels barely see it, the pairwise kernels do (seeded; margins of >3x in both directions)."""
    real = correlated(rng)
    joint = correlated(np.random.default_rng(1))  # a fresh sample of the same distribution
    independent = np.column_stack([rng.permutation(real[:, i]) for i in range(real.shape[1])])
    queries = PairwiseKernelQueries.draw(real.shape[1], 500, rng)
    truth = queries.answers(real)
    err_joint = np.abs(queries.answers(joint) - truth).mean()
    err_indep = np.abs(queries.answers(independent) - truth).mean()
    assert err_indep > 3 * err_joint
    assert marginal_wasserstein(real, independent).max() < 1e-12  # marginals identical
    assert correlation_difference(real, independent) > 0.5


def test_svm_auc_on_separable_data(rng):
    x = rng.normal(size=(400, 2))
    y = (x[:, 0] + x[:, 1] > 0).astype(float)
    assert svm_auc(x[:200], y[:200], x[200:], y[200:]) > 0.97
    assert np.isnan(svm_auc(x[:200], np.zeros(200), x[200:], y[200:]))  # one class: undefined


def test_baselines_shapes_and_bounds(rng):
    real = correlated(rng)
    for rows in (
        uniform_rows(6, 100, rng),
        independent_laplace(real, 1.0, 100, rng, NoiseSource(rng)),
        real_half(real, rng),
    ):
        assert rows.shape[1] == 6 and np.all(np.abs(rows) <= 1)
    assert real_half(real, rng).shape[0] == real.shape[0] // 2


def test_evaluate_reports_every_metric(rng):
    real = correlated(rng, n=600)
    real[:, -1] = np.where(real[:, 0] > 0, 1.0, -1.0)  # a label column in scaled units
    synthetic = correlated(np.random.default_rng(2), n=600)
    synthetic[:, -1] = np.where(synthetic[:, 0] > 0, 1.0, -1.0)
    queries = QuerySets.draw(6, np.arange(5), 200, seed=3)
    metrics = evaluate(real, synthetic, [f"c{i}" for i in range(6)], queries, label=5)
    assert set(metrics) >= {
        "rows",
        "paper_protocol",
        "marginal_wasserstein1",
        "correlation_max_abs_diff",
        "pairwise_kernels",
        "svm",
    }
    assert metrics["svm"]["auc_synthetic_trained"] > 0.9
    assert metrics["paper_protocol"]["4.0"]["worst_rel"] < 0.1


def test_basis_fit_covers_the_basis_and_the_spread_factor_pairs(rng):
    """Residuals over both kinds of released function, each answer computed here from its formula
    (cos(r arccos x)); the noisy answers are the real ones plus known offsets."""
    x = correlated(rng, n=500, d=3)
    coefficients = np.array([[0.0, 0.6, 0.4], [0.0, 1.0, 0.0], [0.1, 0.5, 0.3]])

    def cheb(r, v):
        return np.cos(r * np.arccos(v))

    def factor(i, v):
        return sum(c * cheb(r, v) for r, c in enumerate(coefficients[i]))

    basis_answers = np.array(
        [cheb(2, x[:, 0]).mean(), (cheb(1, x[:, 1]) * cheb(3, x[:, 2])).mean()]
    )
    pair_answers = np.array([(factor(0, x[:, 0]) * factor(2, x[:, 2])).mean()])
    offsets = np.array([0.01, -0.02, 0.05])
    n = 480.0  # a noisy count: the noisy values are sums over it
    basis = BasisSet(3, 3, np.array([[2, 0, 0], [0, 1, 3]]))
    pairs = FactorPairs(coefficients, np.array([[0, 2]]))
    noisy_basis = NoisyStatistic(
        "basis", "basis_sums", basis, (basis_answers + offsets[:2]) * n, 1.0
    )
    noisy_pairs = NoisyStatistic(
        "factor_pairs", "basis_sums", pairs, (pair_answers + offsets[2:]) * n, 1.0
    )
    bounds = PublicBounds.from_mapping({c: (-1.0, 1.0) for c in "abc"})
    summary = NoisySummary(bounds, n, (noisy_basis, noisy_pairs)).to_dict()
    fit = basis_residuals(summary, x, x)
    assert fit["functions"] == 3
    assert fit["fit_max_abs"] == pytest.approx(0.05, abs=1e-9)
    assert fit["noise_mean_abs"] == pytest.approx(np.abs(offsets).mean(), abs=1e-9)
    assert fit["synthetic_vs_real_max_abs"] == pytest.approx(0.0, abs=1e-12)
    only_pairs = NoisySummary(bounds, n, (noisy_pairs,)).to_dict()
    assert basis_residuals(only_pairs, x, x)["fit_max_abs"] == pytest.approx(0.05, abs=1e-9)
    assert basis_residuals(NoisySummary(bounds, n).to_dict(), x) is None


def test_sdmetrics_scores_a_wide_table_on_a_column_sample_that_estimates_the_whole(monkeypatch):
    """A table wider than ``SDMETRICS_COLUMNS`` (here 10, on 16 columns, to keep the report's
    per-pair cost small) is scored on a seeded sample of that many columns, the same in both
    tables: its scores are within 0.01 of the report on every column (a block of 6 columns with
    a shared factor, which the release keeps; the others independent). Seeded, deterministic."""
    from dpsmooth_spark.evaluation import verdict

    rng = np.random.default_rng(3)
    n, d = 800, 16
    shared = rng.normal(size=(n, 1))

    def table() -> np.ndarray:
        x = rng.normal(size=(n, d))
        x[:, :6] += 1.5 * shared
        return np.tanh(0.4 * x)

    real, release = table(), np.tanh(0.4 * rng.normal(size=(n, d)))
    release[:, :6] = table()[:, :6]
    names = [f"c{i}" for i in range(d)]
    monkeypatch.setattr(verdict, "SDMETRICS_COLUMNS", d)
    whole = verdict.sdmetrics_scores(real, release, names)
    monkeypatch.setattr(verdict, "SDMETRICS_COLUMNS", 10)
    sampled = verdict.sdmetrics_scores(real, release, names, seed=0)
    for key, value in whole.items():
        assert abs(sampled[key] - value) < 0.01, (key, sampled[key], value)
