"""Algorithm 3 (exact grid LP) in memory: plan, grid, rounding, accuracy at a large budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums, snap_to_grid
from dpsmooth_spark.mechanisms.smooth_grid import (
    GridParams,
    fit_grid,
    grid_axis,
    plan_grid,
    release_grid,
    round_to_levels,
    sample_grid,
    theorem17_plan,
)
from dpsmooth_spark.mechanisms.stages import release_count
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def test_theorem17_parameters():
    plan = theorem17_plan(569, 2, 2)
    assert (plan.degree, plan.grid_points, plan.levels, plan.rows) == (
        math.ceil(569 ** (1 / 6)),
        math.ceil(569 ** (2 / 6)),
        math.ceil(569 ** (4 / 6)),
        math.ceil(569 ** (1 + 3 / 6)),
    )
    eps_delta = theorem17_plan(1e5, 2, 2, delta=1e-6)
    log = math.log(1e6)
    assert eps_delta.degree == math.ceil(1e5 ** (2 / 10) * log ** (-1 / 10))
    assert eps_delta.rows == math.ceil(1e5 ** (18 / 10) * log ** (-9 / 10))


def test_snapping_and_rounding():
    axis = grid_axis(4)
    np.testing.assert_allclose(axis, [-0.75, -0.25, 0.25, 0.75])
    x = np.array([-1.0, -0.51, -0.49, 0.0, 0.6, 1.0])
    np.testing.assert_allclose(snap_to_grid(x, 4), [-0.75, -0.75, -0.25, 0.25, 0.75, 0.75])
    np.testing.assert_allclose(round_to_levels(np.array([0.26, -2.0, 0.74]), 4), [0.25, -1.0, 0.75])


def test_refuses_a_large_lp_with_its_size():
    with pytest.raises(ValueError, match="entries > grid.max_lp_entries"):
        plan_grid(1e6, 6, GridParams(), 0.0)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_large_budget_release_matches_smooth_statistics(rng, delta):
    n, d = 20_000, 2
    data = np.clip(rng.normal([0.2, -0.3], [0.3, 0.2], size=(n, d)), -1, 1)
    bounds = PublicBounds.from_mapping({"a": (-1.0, 1.0), "b": (-1.0, 1.0)})
    params = GridParams(rows=50_000)
    acc = PrivacyAccountant(10.0, delta)
    noise = NoiseSource(np.random.default_rng(3))
    noisy_count = release_count(n, params.count_fraction, acc, noise)
    plan = plan_grid(noisy_count, d, params, delta)
    sums = partial_sums(
        [data], bounds.lower, bounds.upper, PassSpec(1, plan.degree, plan.grid_points)
    )
    release = release_grid(
        sums, bounds, plan, noisy_count, acc.share(1 - params.count_fraction), acc, noise
    )
    assert acc.spent_epsilon() == pytest.approx(10.0)
    points, weights, _ = fit_grid(release)
    assert weights.shape == (plan.grid_points**d,)
    synthetic = sample_grid(points, weights, plan.rows, np.random.default_rng(4))
    assert synthetic.shape == (50_000, 2)
    assert set(np.unique(synthetic[:, 0])) <= set(grid_axis(plan.grid_points))
    # smooth statistics: means within the grid's resolution plus noise, a wide Gaussian query
    np.testing.assert_allclose(synthetic.mean(axis=0), data.mean(axis=0), atol=2 / plan.grid_points)

    def f(x):
        return np.exp(-((x - [0.1, 0.0]) ** 2).sum(axis=1) / 2)

    assert abs(f(synthetic).mean() - f(data).mean()) < 0.01
