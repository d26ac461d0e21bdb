"""Algorithms 1-2: coefficients, operators, degree rules, answers within their stated bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from dpsmooth_spark.core.approximation import (
    chebyshev_coefficients,
    evaluate_series,
    jackson_kernel_parameters,
    jackson_multipliers,
    jackson_normaliser,
    jackson_normaliser_closed_form,
    query_coefficients,
)
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.mechanisms.smooth_summary import (
    SmoothSummary,
    SummaryParams,
    answer,
    auto_degree,
    paper_degree,
    parse_query,
    release_tensor_summary,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource
from tests.unit.sparse_grid import chebyshev_coefficient_by_quadrature


def gaussian(sigma, centre):
    return lambda x: np.exp(-((np.atleast_2d(x) - centre) ** 2).sum(axis=1) / (2 * sigma**2))


def queries(d):
    rng = np.random.default_rng(d)
    out = {f"gaussian-{s}": gaussian(s, rng.uniform(-0.5, 0.5, d)) for s in (0.4, 0.8, 1.5)}
    w = rng.uniform(-2, 2, d)
    out["logistic"] = lambda x: 1 / (1 + np.exp(-(np.atleast_2d(x) @ w + 0.3)))
    out["polynomial"] = lambda x: (
        np.prod(np.atleast_2d(x) ** 2, axis=1) + np.atleast_2d(x)[:, 0] ** 5
    )
    return out


def sup_error(coef, f, d):
    points = np.random.default_rng(99).uniform(-1, 1, size=(2000, d))
    return float(np.abs(evaluate_series(coef, points) - f(points)).max())


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("operator", ["chebyshev", "jackson"])
def test_approximation_error_shrinks_with_degree(d, operator):
    """Theorem 8 is asymptotic: the Jackson operator's error is not monotone at small t (its
    kernel has degree about t / r), so its degrees start where the decay has set in."""
    degrees = (8, 32, 48) if d < 3 else (12, 18, 24)
    for name, f in queries(d).items():
        errors = [
            sup_error(query_coefficients(f, d, t, operator, smoothness=2), f, d) for t in degrees
        ]
        floor = 1e-12  # a polynomial of low degree is exact up to rounding
        assert errors[2] < errors[0] or errors[0] < floor, (name, errors)
        assert errors[2] <= max(errors[1] * 1.05, floor), (name, errors)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_dct_coefficients_agree_with_sparse_grid(d):
    f = gaussian(0.7, np.full(d, 0.2))
    t = 5
    coef = chebyshev_coefficients(f, d, t, oversample=8)
    level = d * math.ceil(math.log2(t)) + 2  # the "about d log2(t)", with margin
    for index in [(0,) * d, (1,) + (0,) * (d - 1), (2,) * d, (t - 1,) + (1,) * (d - 1)]:
        oracle = chebyshev_coefficient_by_quadrature(f, index, level)
        assert coef[index] == pytest.approx(oracle, abs=2e-6)


def test_chebyshev_operator_reproduces_low_degree_polynomials():
    def f(x):
        return 3 * x[:, 0] ** 3 * x[:, 1] - x[:, 1] ** 2 + 0.5

    coef = query_coefficients(f, 2, 4)
    assert sup_error(coef, f, 2) < 1e-12


@pytest.mark.parametrize(("width", "power"), [(3, 2), (5, 3), (8, 4), (2, 1)])
def test_jackson_normaliser_matches_lemma_15(width, power):
    assert jackson_normaliser(width, power) == pytest.approx(
        jackson_normaliser_closed_form(width, power)
    )


def test_jackson_multipliers_match_equation_2_by_quadrature():
    smoothness, t = 2, 10
    width, power = jackson_kernel_parameters(t - 1, smoothness)
    s = np.linspace(-np.pi, np.pi, 100_001)[:-1]
    ds = s[1] - s[0]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(
            np.abs(np.sin(s / 2)) < 1e-12, width, np.sin(width * s / 2) / np.sin(s / 2)
        )
    kernel = ratio ** (2 * power) / jackson_normaliser(width, power)

    def f(x):
        return 1 / (1 + np.exp(-3 * x[:, 0] + 0.5))

    coef = query_coefficients(f, 1, t, "jackson", smoothness, oversample=16)
    for x0 in (0.3, 1.7, 2.9):
        direct = -sum(
            (-1) ** k
            * math.comb(smoothness + 1, k)
            * (kernel * f(np.cos(x0 + k * s)[:, None])).sum()
            * ds
            for k in range(1, smoothness + 2)
        )
        assert evaluate_series(coef, np.array([[np.cos(x0)]]))[0] == pytest.approx(direct, abs=1e-8)
    mult = jackson_multipliers(t, smoothness)
    assert mult[0] == pytest.approx(1.0)  # constants are reproduced
    assert np.all(mult[power * (width - 1) + 1 :] == 0)  # degree <= t - 1


def test_degree_rules():
    assert paper_degree(569, 3, 2) == math.ceil(569 ** (1 / 8))
    assert paper_degree(1e6, 2, 2, delta=1e-6) == math.ceil(
        1e6 ** (2 / 10) * math.log(1e6) ** (-1 / 10)
    )
    acc = PrivacyAccountant(1.0)
    small = auto_degree(500, 2, 2, acc, 0.95, 30)
    large = auto_degree(5e7, 2, 2, acc, 0.95, 30)
    assert 2 <= small < large <= 30


def make_summary(rng, n=20_000, d=2, epsilon=1.0, delta=0.0, seed=0, t=6):
    data = np.clip(rng.normal(0.1, 0.35, size=(n, d)), -1, 1)
    bounds = PublicBounds.from_mapping({f"x{i}": (-1.0, 1.0) for i in range(d)})
    sums = partial_sums([data], bounds.lower, bounds.upper, PassSpec(1, t))
    acc = PrivacyAccountant(epsilon, delta)
    summary = release_tensor_summary(
        sums, bounds, SummaryParams(degree=t), acc, NoiseSource(np.random.default_rng(seed))
    )
    return data, sums, summary, acc


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_noisy_answers_fall_within_the_stated_bound(rng, delta):
    """200 seeded releases; the stated bound may fail with probability <= failure_probability
    (Lemma 16 / Gaussian tail). The test allows the number of failures that 200 draws exceed with
    probability < 1e-6 under that claim (binomial quantile), so a false failure has rate < 1e-6."""
    data, sums, _, _ = make_summary(rng, delta=delta)
    f = gaussian(0.6, np.array([0.2, -0.1]))
    coef = query_coefficients(f, 2, 6)
    exact = sums.tensor_sums()[:6, :6] / sums.count
    noise_free = float((coef * exact).sum())
    failures, errors, scales = 0, [], []
    for seed in range(200):
        summary, acc = _release(sums, delta, seed)
        got = answer(summary, f, units="scaled")
        failures += abs(got.value - noise_free) > got.noise_error_bound
        errors.append(abs(got.value - noise_free))
        scales.append(got.noise_error_scale)
        assert acc.spent_epsilon() == pytest.approx(1.0)
    allowed = binom.isf(1e-6, 200, got.failure_probability)
    assert failures <= allowed
    assert np.mean(errors) <= np.mean(scales)
    # the noise-free answer is off by at most the series' error on the data (+ fixed-point rounding)
    approximation = np.abs(evaluate_series(coef, data) - f(data)).max()
    assert abs(noise_free - f(data).mean()) <= approximation + 1e-6


def _release(sums, delta, seed):
    bounds = PublicBounds.from_mapping({"x0": (-1.0, 1.0), "x1": (-1.0, 1.0)})
    acc = PrivacyAccountant(1.0, delta)
    summary = release_tensor_summary(
        sums, bounds, SummaryParams(degree=6), acc, NoiseSource(np.random.default_rng(seed))
    )
    return summary, acc


def test_summary_round_trips_and_answers_in_original_units(rng, tmp_path):
    _, _, summary, _ = make_summary(rng)
    path = tmp_path / "summary.json"
    import json

    path.write_text(json.dumps(summary.to_dict()))
    loaded = SmoothSummary.load(path)
    np.testing.assert_array_equal(loaded.answers, summary.answers)
    assert loaded.answers[0, 0] == 1.0
    # with bounds [-1, 1] original and scaled units coincide
    f = parse_query(
        "gaussian(center=[0.1, 0.2], sigma=0.5) + logistic(w=[1, -1], b=0.2, weight=0.5)", 2
    )
    assert answer(loaded, f).value == pytest.approx(answer(loaded, f, units="scaled").value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gaussian(center=[0.1], sigma=1)", "2 entries"),
        ("cubic(a=1)", "unknown query"),
        ("gaussian(center=[0, 0], sigma=1, colour=2)", "unknown arguments"),
        ("gaussian(", "cannot parse"),
    ],
)
def test_bad_queries(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_query(spec, 2)


def test_polynomial_query():
    f = parse_query("polynomial(terms=[[2.0, [1, 0]], [1.0, [0, 2]]])", 2)
    np.testing.assert_allclose(f(np.array([[0.5, 3.0]])), [2 * 0.5 + 9.0])
