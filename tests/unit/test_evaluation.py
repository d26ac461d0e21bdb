"""The paper's query protocol (Section 5.2.1) against a direct evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.evaluation.queries import GaussianMixtureQueries, query_errors


@pytest.mark.parametrize(
    ("sigmas", "rel"), [((0.5, 2.0), 1e-5), ((0.1, 2.0), 1e-10)], ids=["float32", "float64"]
)
def test_answers_match_direct_formula(rng, sigmas, rel):
    """Kernels whose exponents stay within float32's range are float32 (relative error below
    1e-5); a width of 0.1 on 3 columns reaches exponents of 600, and the kernels are float64."""
    d = 3
    queries = GaussianMixtureQueries.draw(d, 7, rng, components=4)
    points = rng.uniform(-1, 1, size=(50, d))
    got = queries.answers(points, sigmas, cells=14 * 28)  # blocks of 14 rows, 7 x 4 kernels
    for s, sigma in enumerate(sigmas):
        for q in range(7):
            f = [
                sum(
                    queries.weights[q, j]
                    * np.exp(-np.sum((x - queries.centres[q, j]) ** 2) / (2 * sigma**2))
                    for j in range(4)
                )
                for x in points
            ]
            assert got[s, q] == pytest.approx(np.mean(f), rel=rel)
    assert np.all((got > 0) & (got <= 1))
    np.testing.assert_allclose(queries.weights.sum(axis=1), 1.0)


def test_identical_tables_have_zero_error_and_shifted_tables_do_not(rng):
    points = rng.uniform(-1, 1, size=(200, 4))
    queries = GaussianMixtureQueries.draw(4, 100, rng)
    same = query_errors(points, points.copy(), queries, sigmas=(1.0,))
    assert same[1.0]["worst_abs"] == 0.0
    shifted = query_errors(points, np.clip(points + 0.5, -1, 1), queries, sigmas=(1.0,))
    assert shifted[1.0]["worst_rel"] > 0.05
    assert shifted[1.0]["mean_abs"] <= shifted[1.0]["worst_abs"]
