"""Private Subspace Iteration (Hardt 2013; Algorithm 4 of Wang et al. 2016).

The function is pure: the caller passes the exact matrix product and a ``perturb`` callable that
adds calibrated noise, so the privacy accounting stays in :mod:`dpsmooth_spark.privacy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SubspaceEstimate:
    """Output of PSI.

    Attributes:
        vectors: ``(d, k)`` orthonormal columns, the private top-k eigenvectors.
        values: ``(k,)`` private eigenvalue estimates ``||w_s^{(T)}||`` in the units of the matrix.
    """

    vectors: np.ndarray
    values: np.ndarray


def private_subspace_iteration(
    data_product: Callable[[np.ndarray], np.ndarray],
    public_product: Callable[[np.ndarray], np.ndarray],
    perturb: Callable[[np.ndarray], np.ndarray],
    d: int,
    k: int,
    iterations: int,
    rng: np.random.Generator,
) -> SubspaceEstimate:
    """Noisy power iteration ``W = perturb(S X) + P X``, ``X = GS(W)``, ``iterations`` times.

    Args:
        data_product: ``X -> S X`` for the data-dependent matrix ``S`` (e.g. ``sum x x^T``); only
            its output is perturbed, so its sensitivity sets the noise.
        public_product: ``X -> P X`` for a matrix built from already-released DP values (e.g.
            ``-n~ mu~ mu~^T`` to centre the second moment); post-processing, no noise needed.
        perturb: adds the calibrated noise of one iteration (one adaptive invocation).
        d, k, iterations: dimension, subspace size, number of iterations ``T``.
        rng: public randomness for the starting subspace ``X^{(0)} = GS(N(0, 1)^{d x k})``.
    """
    if not 1 <= k <= d:
        raise ValueError(f"PCA dimension k must be in [1, d={d}], got {k}")
    if iterations < 1:
        raise ValueError("PSI needs at least one iteration")
    x, _ = np.linalg.qr(rng.standard_normal((d, k)))
    w = x
    for _ in range(iterations):
        w = perturb(data_product(x)) + public_product(x)
        x, _ = np.linalg.qr(w)
    values = np.linalg.norm(w, axis=0)
    order = np.argsort(-values)
    return SubspaceEstimate(vectors=x[:, order], values=values[order])
