"""The evaluation protocol of Wang et al. (2016), Section 5.2.1.

Queries are Gaussian-kernel mixtures ``f(x) = sum_{j<=J} a_j exp(-||x - x_j||^2 / (2 sigma^2))``
with ``a_j ~ U[0, 1]`` and ``x_j ~ U[-1, 1]^d``, divided by ``sum_j a_j`` so that answers lie in
[0, 1]. A query's answer on a table is the mean of ``f`` over its rows (scaled units). Errors are
the worst case and the mean over the query set, absolute ``|q(D) - q(D~)|`` and relative
``|q(D) - q(D~)| / q(D)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAPER_SIGMAS = (2.0, 4.0, 6.0, 8.0, 10.0)
"""The kernel widths of the paper's tables."""

PAPER_WDBC_EPS1 = {
    "worst_abs": {2.0: 0.032, 4.0: 0.060, 6.0: 0.038, 8.0: 0.027, 10.0: 0.019},
    "worst_rel": {2.0: 0.510, 4.0: 0.127, 6.0: 0.053, 8.0: 0.034, 10.0: 0.022},
}
"""Published worst-case errors on WDBC at epsilon = 1 (the slides, 001_2a0a92313e44323f.txt)."""


@dataclass(frozen=True)
class GaussianMixtureQueries:
    """A random set of normalised Gaussian-kernel-mixture queries.

    Attributes:
        centres: ``(N, J, d)`` kernel centres in [-1, 1]^d.
        weights: ``(N, J)`` mixture weights, each row summing to 1.
    """

    centres: np.ndarray
    weights: np.ndarray

    @classmethod
    def draw(cls, d: int, count: int, rng: np.random.Generator, components: int = 10) -> GaussianMixtureQueries:
        """``count`` queries with ``components`` kernels each, as in the paper (J = 10)."""
        centres = rng.uniform(-1.0, 1.0, size=(count, components, d))
        alphas = rng.uniform(0.0, 1.0, size=(count, components))
        return cls(centres, alphas / alphas.sum(axis=1, keepdims=True))

    def answers(self, points: np.ndarray, sigmas: tuple[float, ...], chunk: int = 4096) -> np.ndarray:
        """Mean of every query over ``points`` (``(n, d)``, scaled): array ``(len(sigmas), N)``."""
        n_queries, j, d = self.centres.shape
        flat = self.centres.reshape(-1, d)
        centre_sq = (flat**2).sum(axis=1)
        out = np.zeros((len(sigmas), n_queries * j))
        for start in range(0, points.shape[0], chunk):
            block = points[start : start + chunk]
            sq = (block**2).sum(axis=1)[:, None] + centre_sq[None, :] - 2.0 * block @ flat.T
            np.maximum(sq, 0.0, out=sq)
            for s, sigma in enumerate(sigmas):
                out[s] += np.exp(-sq / (2.0 * sigma**2)).sum(axis=0)
        out /= max(points.shape[0], 1)
        per_kernel = out.reshape(len(sigmas), n_queries, j)
        return (per_kernel * self.weights[None]).sum(axis=2)


def query_errors(real: np.ndarray, synthetic: np.ndarray, queries: GaussianMixtureQueries,
                 sigmas: tuple[float, ...] = PAPER_SIGMAS) -> dict[float, dict[str, float]]:
    """Worst-case and mean absolute and relative errors per sigma."""
    truth = queries.answers(real, sigmas)
    released = queries.answers(synthetic, sigmas)
    out = {}
    for s, sigma in enumerate(sigmas):
        abs_err = np.abs(truth[s] - released[s])
        rel_err = abs_err / np.maximum(truth[s], 1e-300)
        out[sigma] = {
            "worst_abs": float(abs_err.max()),
            "worst_rel": float(rel_err.max()),
            "mean_abs": float(abs_err.mean()),
            "mean_rel": float(rel_err.mean()),
        }
    return out
