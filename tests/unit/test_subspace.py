"""Private Subspace Iteration on matrices with a known spectrum."""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.core.subspace import private_subspace_iteration


def known_matrix(rng, eigenvalues):
    d = len(eigenvalues)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q, (q * eigenvalues) @ q.T


def principal_sines(a, b):
    """Largest sine of the principal angles between the column spans of a and b."""
    s = np.linalg.svd(a.T @ b, compute_uv=False)
    return np.sqrt(max(0.0, 1 - s.min() ** 2))


def test_recovers_top_subspace_without_noise(rng):
    eig = np.array([10.0, 6.0, 3.0, 0.5, 0.4, 0.3, 0.2, 0.1])
    q, a = known_matrix(rng, eig)
    est = private_subspace_iteration(
        lambda x: a @ x, lambda x: 0 * x, lambda m: m, d=8, k=3, iterations=60, rng=rng
    )
    assert principal_sines(est.vectors, q[:, :3]) < 1e-6
    np.testing.assert_allclose(est.values, eig[:3], rtol=1e-6)


def test_small_noise_keeps_estimate_close(rng):
    eig = np.array([10.0, 6.0, 3.0, 0.5, 0.4, 0.3, 0.2, 0.1])
    q, a = known_matrix(rng, eig)
    noise_rng = np.random.default_rng(7)
    est = private_subspace_iteration(
        lambda x: a @ x,
        lambda x: 0 * x,
        lambda m: m + noise_rng.laplace(0, 0.01, m.shape),
        d=8,
        k=3,
        iterations=30,
        rng=rng,
    )
    # Davis-Kahan: sin(angle) <~ ||noise|| / gap = O(0.03 / 2.5)
    assert principal_sines(est.vectors, q[:, :3]) < 0.05
    np.testing.assert_allclose(est.values, eig[:3], rtol=0.05)


def test_public_part_is_added(rng):
    # S = identity-ish second moment, minus a public rank-one term along e_0: top direction moves.
    d = 4
    second = np.diag([5.0, 4.0, 1.0, 1.0])
    offset = -np.diag([4.5, 0.0, 0.0, 0.0])
    est = private_subspace_iteration(
        lambda x: second @ x, lambda x: offset @ x, lambda m: m, d=d, k=1, iterations=100, rng=rng
    )
    assert abs(est.vectors[1, 0]) == pytest.approx(1.0, abs=1e-6)


def test_rejects_bad_dimensions(rng):
    with pytest.raises(ValueError):
        private_subspace_iteration(
            lambda x: x, lambda x: x, lambda m: m, d=3, k=4, iterations=2, rng=rng
        )
