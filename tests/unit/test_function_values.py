"""The measured functions at the candidates: histogram cells and the operator that replaces the
R x C matrix. Pure numpy, seeded.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.core.chebyshev import (
    BasisSet,
    HistogramBasis,
    ProjectionBasis,
    coarsen_histograms,
)
from dpsmooth_spark.core.function_values import FunctionValues
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.mechanisms.synthesizer.plan import histogram_bins
from dpsmooth_spark.privacy.accountant import PrivacyAccountant


def test_histogram_cells_coarsen_and_evaluate_consistently(rng):
    x = rng.uniform(-1, 1, size=(1000, 2))
    x[0] = [1.0, -1.0]  # the bounds go to the end cells
    fine = partial_sums([x], -np.ones(2), np.ones(2), PassSpec(1, histogram_cells=16)).histograms
    coarse = coarsen_histograms(fine, 4)
    np.testing.assert_array_equal(
        coarse, HistogramBasis(2, 4).evaluate(x).sum(axis=1).reshape(2, 4)
    )
    assert coarse.sum() == 2000
    weights = rng.uniform(0.0, 1.0, 1000)
    np.testing.assert_allclose(
        HistogramBasis(2, 4).mass(x, weights), HistogramBasis(2, 4).evaluate(x) @ weights
    )
    with pytest.raises(ValueError, match="do not divide"):
        coarsen_histograms(fine, 3)


def test_histogram_cells_follow_the_budget():
    """More records per unit of noise buy finer histograms (public inputs only)."""
    accountant = PrivacyAccountant(1.0)
    found = [histogram_bins(n, accountant, 0.5, 10, 256) for n in (100, 2000, 10**5, 10**8)]
    assert found == sorted(found) and found[0] == 4 and found[-1] == 64


def test_function_values_operator_matches_the_functions_evaluated_one_by_one(rng):
    """The structured operator (factor products, sparse indicators, dense rest) gives the same
    ``A``, ``A u`` and ``A^T y`` as the functions' own ``evaluate`` (float32 rounding)."""
    points = rng.uniform(-1, 1, size=(500, 5))
    pairwise = BasisSet.pairwise(5, 3)
    pair_terms = pairwise.indices[(pairwise.indices != 0).sum(axis=1) == 2]
    functions = [
        HistogramBasis(5, 8),
        pairwise.with_anchor_pairs([1]),
        ProjectionBasis.from_vectors(rng.standard_normal((5, 2))),
        BasisSet.marginal(5, 2),
        BasisSet(5, 3, pair_terms),
    ]  # pair terms alone, as the `pairs` bases are
    scales = [rng.uniform(1.0, 100.0, f.size) for f in functions]
    operator = FunctionValues.from_functions(functions, scales, points)
    dense = np.vstack(
        [f.evaluate(points) * s[:, None] for f, s in zip(functions, scales, strict=False)]
    )
    assert operator.shape == dense.shape
    np.testing.assert_allclose(operator.dense(), dense, rtol=1e-6, atol=1e-4)
    u = rng.dirichlet(np.ones(500))
    y = rng.standard_normal(dense.shape[0])
    np.testing.assert_allclose(operator @ u, dense @ u, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(operator.T @ y, dense.T @ y, rtol=1e-5, atol=1e-2)
