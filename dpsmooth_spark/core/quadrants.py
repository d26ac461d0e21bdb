"""Quadrant (median-sign) pairs: ``s_i(x_i) s_j(x_j)`` with ``s_i = +1`` above a threshold
``t_i`` and ``-1`` at or below it.

At each column's median, ``E[s_i s_j]`` is the quadrant correlation ``q`` (Blomqvist's beta),
and under a Gaussian copula ``q = (2 / pi) arcsin(rho)``. A record moves each sum by at most 1
(the same sensitivity as a pair term bounded by 1), and the sign uses a column's whole range
of values: on a column that fills a quarter of its bounds, a pair's sum carries several times
the signal of a polynomial factor's (docs/mechanisms.md, quadrant pairs). Executors import
this module with numpy alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def signs(x: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``(rows, d)`` float64 of ``+1`` where ``x > thresholds`` and ``-1`` elsewhere."""
    return np.where(np.asarray(x) > np.asarray(thresholds), 1.0, -1.0)


def sign_gram(x: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """``sum_rows s(x) s(x)^T`` (``(d, d)``, flattened) of the rows ``x`` (scaled to [-1, 1]).

    Every product is +-1, so float64 holds each sum exactly up to 2**53 rows, whatever the
    partitioning: the sums are exact."""
    s = signs(x, thresholds)
    return (s.T @ s).ravel()


def copula_rho(q: np.ndarray) -> np.ndarray:
    """The Gaussian copula correlation of quadrant correlation ``q``: ``sin(pi q / 2)``."""
    return np.sin(0.5 * np.pi * np.clip(np.asarray(q, dtype=np.float64), -1.0, 1.0))


def copula_rho_std(q: np.ndarray, std: np.ndarray | float) -> np.ndarray:
    """Noise std of :func:`copula_rho` for a quadrant correlation ``q`` of noise ``std`` (the
    delta method: ``(pi / 2) cos(pi q / 2) std``, floored at a tenth of its value at 0)."""
    slope = np.maximum(np.cos(0.5 * np.pi * np.clip(np.asarray(q, dtype=np.float64), -1, 1)), 0.1)
    return 0.5 * np.pi * slope * np.asarray(std, dtype=np.float64)


def medians(probabilities: np.ndarray) -> np.ndarray:
    """Each column's median (scaled units) under its marginal on equal cells of [-1, 1]
    (``(d, B)``), linear within a cell."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    d, cells = probabilities.shape
    edges = np.linspace(-1.0, 1.0, cells + 1)
    out = np.empty(d)
    for i, p in enumerate(probabilities):
        cdf = np.concatenate([[0.0], np.cumsum(p / max(p.sum(), 1e-300))])
        k = int(np.clip(np.searchsorted(cdf, 0.5, side="left"), 1, cells))
        inside = p[k - 1] / max(p.sum(), 1e-300)
        frac = 0.5 if inside <= 0 else (0.5 - cdf[k - 1]) / inside
        out[i] = edges[k - 1] + float(np.clip(frac, 0.0, 1.0)) * (edges[k] - edges[k - 1])
    return out


@dataclass(frozen=True)
class QuadrantPairs:
    """The functions ``s_i(x_i) s_j(x_j)`` for ``(i, j)`` in ``pairs``, at ``thresholds``.

    Attributes:
        thresholds: ``(d,)`` each column's threshold (scaled units; its private median).
        pairs: ``(R, 2)`` column pairs.
    """

    thresholds: np.ndarray
    pairs: np.ndarray

    @property
    def d(self) -> int:
        return int(np.size(self.thresholds))

    @property
    def size(self) -> int:
        return int(self.pairs.shape[0])

    def factors(self, points: np.ndarray) -> np.ndarray:
        """``s_i`` at every point: ``(C, d)``."""
        return signs(points, self.thresholds)

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        """``(R, C)`` function values at ``points`` (``(C, d)``)."""
        values = self.factors(points)
        return (values[:, self.pairs[:, 0]] * values[:, self.pairs[:, 1]]).T
