"""The reduced LP solved by OR-Tools, against known optima and an independent solver."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from dpsmooth_spark.core.lp import solve_l1_fit


def test_target_inside_hull_is_fitted_exactly():
    w = np.array([[-1.0, 0.0, 1.0], [1.0, 0.0, 1.0]])
    target = 0.2 * w[:, 0] + 0.5 * w[:, 1] + 0.3 * w[:, 2]
    fit = solve_l1_fit(w, target)
    assert fit.objective == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(w @ fit.weights, target, atol=1e-9)
    assert fit.weights.sum() == pytest.approx(1.0)


def test_target_outside_hull_known_optimum():
    # One basis function with values -1 and 1 at the candidates; b = 2 lies outside [-1, 1].
    fit = solve_l1_fit(np.array([[-1.0, 1.0]]), np.array([2.0]))
    np.testing.assert_allclose(fit.weights, [0.0, 1.0], atol=1e-9)
    assert fit.objective == pytest.approx(1.0)


def test_matches_highs_on_random_instance(rng):
    r, c = 15, 60
    w = rng.uniform(-1, 1, size=(r, c))
    b = rng.uniform(-0.5, 0.5, size=r)
    fit = solve_l1_fit(w, b)
    # the same LP in scipy's HiGHS: variables [u, t], min sum t, -t <= W u - b <= t
    cost = np.concatenate([np.zeros(c), np.ones(r)])
    a_ub = np.block([[w, -np.eye(r)], [-w, -np.eye(r)]])
    b_ub = np.concatenate([b, -b])
    a_eq = np.concatenate([np.ones(c), np.zeros(r)])[None]
    ref = linprog(
        cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=[1.0], bounds=(0, None), method="highs"
    )
    assert ref.status == 0
    assert fit.objective == pytest.approx(ref.fun, rel=1e-6, abs=1e-8)
    # an L1 fit's basic solution has at most R + 1 non-zero weights
    assert (fit.weights > 1e-12).sum() <= r + 1


def test_shape_errors():
    with pytest.raises(ValueError):
        solve_l1_fit(np.ones((2, 3)), np.ones(3))


@pytest.mark.parametrize(("r", "c"), [(10, 400), (40, 2000)])
def test_column_generation_reaches_the_full_optimum(rng, r, c):
    w = rng.uniform(-1, 1, size=(r, c))
    b = w[:, :7].mean(axis=1) + rng.normal(0, 0.3, r)  # partly outside the hull
    full = solve_l1_fit(w, b, column_generation=False)
    priced = solve_l1_fit(w, b, column_generation=True)
    assert priced.objective == pytest.approx(full.objective, rel=1e-6, abs=1e-9)
    assert priced.weights.sum() == pytest.approx(1.0) and priced.weights.min() >= 0
    assert priced.columns_used < c  # it did not need every candidate
