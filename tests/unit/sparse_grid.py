"""Clenshaw-Curtis Smolyak sparse-grid quadrature: a test oracle for the DCT coefficients (d <= 3).

The paper computes the coefficient integrals with a sparse grid (Section 3.3.4); we compute them
with a DCT and keep this as an independent check.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np


@functools.cache
def clenshaw_curtis(level: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights on [-1, 1] with ``m = 2^(level-1) + 1`` points (1 point at level 1)."""
    if level == 1:
        return np.array([0.0]), np.array([2.0])
    m = 2 ** (level - 1) + 1
    n = m - 1
    theta = np.pi * np.arange(m) / n
    nodes = np.cos(theta)
    weights = np.zeros(m)
    for j in range(m):
        total = 0.0
        for k in range(n // 2 + 1):
            b = 1.0 if k in (0, n // 2) else 2.0
            total += b / (1 - 4 * k * k) * np.cos(2 * k * theta[j])
        c = 1.0 if j in (0, n) else 2.0
        weights[j] = c / n * total
    return nodes, weights


def smolyak_integral(g, d: int, level: int, lower: float, upper: float) -> float:
    """Integral of ``g`` (vectorised on ``(n, d)``) over ``[lower, upper]^d`` by Smolyak's
    formula."""
    half = (upper - lower) / 2
    total = 0.0
    q = level + d - 1
    for levels in itertools.product(range(1, level + 1), repeat=d):
        norm = sum(levels)
        if not (q - d + 1 <= norm <= q):
            continue
        coeff = (-1) ** (q - norm) * math.comb(d - 1, q - norm)
        rules = [clenshaw_curtis(lv) for lv in levels]
        points = np.array(list(itertools.product(*[lower + half * (r[0] + 1) for r in rules])))
        weights = np.prod(np.array(list(itertools.product(*[half * r[1] for r in rules]))), axis=1)
        total += coeff * float(weights @ g(points))
    return total


def chebyshev_coefficient_by_quadrature(f, index: tuple[int, ...], level: int) -> float:
    """``fhat_r = (2/pi)^d / 2^{#zeros} * int_{[0,pi]^d} f(cos theta) prod cos(r_i theta_i)``."""
    d = len(index)
    r = np.array(index)

    def integrand(theta: np.ndarray) -> np.ndarray:
        return f(np.cos(theta)) * np.prod(np.cos(r * theta), axis=1)

    scale = (2 / np.pi) ** d / 2 ** int((r == 0).sum())
    return scale * smolyak_integral(integrand, d, level, 0.0, np.pi)
