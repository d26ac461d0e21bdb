"""Coefficients that turn a smooth query into a linear combination of Chebyshev basis answers.

For ``f`` on [-1, 1]^d, ``g_f(theta) = f(cos theta_1, ..., cos theta_d)`` is even and its cosine
coefficients are the Chebyshev coefficients of ``f`` (``T_n(cos s) = cos(n s)``). Two operators
of degree < t map them to the coefficients ``c_r`` of Algorithm 2:

* ``chebyshev``: the truncated Chebyshev series, ``c_r = fhat_r``;
* ``jackson``: the paper's operator ``I_{t,K}`` (Definition 7, equation (2)). By Fact 9 it acts
  on each cosine mode separately: ``c_r = prod_i m_{r_i} * fhat_r`` with
  ``m_n = sum_{k=1..K+1} (-1)^{k+1} C(K+1, k) h_{kn}`` and ``h_l = int H(s) cos(l s) ds``.

``fhat`` comes from a type-II DCT of ``f`` at Chebyshev points (scipy.fft.dctn), O(M^d log M).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy.fft import dctn

QueryFunction = Callable[[np.ndarray], np.ndarray]
"""A vectorised query: ``(n, d)`` points in [-1, 1]^d -> ``(n,)`` values."""


def chebyshev_nodes(m: int) -> np.ndarray:
    """The ``m`` Chebyshev points of the first kind ``cos(pi (j + 1/2) / m)``."""
    return np.cos(np.pi * (np.arange(m) + 0.5) / m)


def chebyshev_coefficients(f: QueryFunction, d: int, t: int, oversample: int = 4) -> np.ndarray:
    """Chebyshev coefficients ``fhat_r`` for ``r`` in ``{0..t-1}^d``: shape ``(t,)*d``.

    ``f`` is sampled on the tensor grid of ``M = oversample * t`` Chebyshev points per axis and
    the interpolant's coefficients are read off a type-II DCT; with ``M > t`` they approximate the
    series coefficients up to aliasing from degrees >= 2M - t, negligible for smooth ``f``.
    """
    m = max(t, oversample * t)
    if m**d > 50_000_000:
        raise ValueError(f"sampling f on {m}^{d} points is too large; lower t or the oversampling")
    nodes = chebyshev_nodes(m)
    grid = np.stack(np.meshgrid(*([nodes] * d), indexing="ij"), axis=-1).reshape(-1, d)
    values = np.asarray(f(grid), dtype=np.float64).reshape((m,) * d)
    coef = dctn(values, type=2) / m**d
    coef = coef[(slice(0, t),) * d]
    for axis in range(d):
        np.moveaxis(coef, axis, 0)[0] *= 0.5  # the DCT counts the constant mode twice
    return coef


def fejer_power_coefficients(width: int, power: int) -> list[int]:
    """Coefficients of ``e^{ijs}``, ``j = -power(width-1)..power(width-1)``, of
    ``(sin(width s / 2) / sin(s / 2))^{2 power}`` as exact integers.

    ``(sin(w s/2) / sin(s/2))^2 = sum_{|j| < w} (w - |j|) e^{ijs}`` (the Fejer kernel), so the
    power is an integer convolution power.
    """
    base = [width - abs(j) for j in range(-(width - 1), width)]
    out = [1]
    for _ in range(power):
        nxt = [0] * (len(out) + len(base) - 1)
        for i, a in enumerate(out):
            for j, b in enumerate(base):
                nxt[i + j] += a * b
        out = nxt
    return out


def jackson_normaliser(width: int, power: int) -> float:
    """``lambda_{t,r}``, the integral of ``(sin(ts/2)/sin(s/2))^{2r}`` over [-pi, pi]: ``2 pi
    c_0``."""
    coef = fejer_power_coefficients(width, power)
    return 2.0 * math.pi * coef[len(coef) // 2]


def jackson_normaliser_closed_form(width: int, power: int) -> float:
    """Lemma 15 (Vyazovskaya and Pupashenko 2006), a test oracle for :func:`jackson_normaliser`."""
    total = 0
    for k in range(math.floor(power - power / width) + 1):
        total += (
            (-1) ** k
            * math.comb(2 * power, k)
            * math.comb(power * (width + 1) - width * k - 1, power * (width - 1) - width * k)
        )
    return 2.0 * math.pi * total


def jackson_kernel_parameters(degree: int, smoothness: int) -> tuple[int, int]:
    """``(t', r)`` of ``H_{t,r} = J_{t',r}``: ``r = ceil((K+3)/2)``, ``t' = floor(t/r) + 1``."""
    power = math.ceil((smoothness + 3) / 2)
    return degree // power + 1, power


def jackson_multipliers(t: int, smoothness: int) -> np.ndarray:
    """``m_n`` for ``n = 0..t-1`` of the operator ``I_{t-1,K}`` (degree <= t - 1, so it fits a
    summary that stores indices ``0..t-1``)."""
    width, power = jackson_kernel_parameters(t - 1, smoothness)
    coef = fejer_power_coefficients(width, power)
    centre = len(coef) // 2
    h = [
        coef[centre + j] / coef[centre] if j <= centre else 0.0
        for j in range(t * (smoothness + 1) + 1)
    ]
    mult = np.zeros(t)
    for n in range(t):
        mult[n] = sum(
            (-1) ** (k + 1) * math.comb(smoothness + 1, k) * h[k * n]
            for k in range(1, smoothness + 2)
        )
    return mult


def query_coefficients(
    f: QueryFunction,
    d: int,
    t: int,
    operator: str = "chebyshev",
    smoothness: int = 2,
    oversample: int = 4,
) -> np.ndarray:
    """Coefficients ``c_r`` of Algorithm 2 for the operator ``chebyshev`` or ``jackson``."""
    fhat = chebyshev_coefficients(f, d, t, oversample)
    if operator == "chebyshev":
        return fhat
    if operator == "jackson":
        mult = jackson_multipliers(t, smoothness)
        factor = mult
        for _ in range(d - 1):
            factor = np.multiply.outer(factor, mult)
        return fhat * factor
    raise ValueError(f"unknown operator {operator!r} (chebyshev or jackson)")


def evaluate_series(coef: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``sum_r c_r prod_i T_{r_i}(x_i)`` at ``points`` ``(n, d)``."""
    from dpsmooth_spark.core.kernel import tensor_products

    t = coef.shape[0]
    return tensor_products(np.atleast_2d(points), t) @ coef.ravel()
