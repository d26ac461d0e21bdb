"""Iterated Bernstein polynomials on [0, 1]^l (Alda and Rubinstein, Definitions 6-9).

The Bernstein mechanism releases noisy evaluations of a function on the lattice
``{0, 1/k, ..., 1}^l`` and evaluates the iterated Bernstein polynomial built from them. Here the
pure math: the basis, the order-``h`` iterated basis as a matrix, lattice points and evaluation.

The iterated basis in matrix form: with ``M[mu, nu] = b_{nu,k}(mu/k)`` (basis ``nu`` at lattice
point ``mu``), ``B_k^{i}(b_nu)(y) = (b(y) M^{i})[nu]``, so
``b^{(h)}(y) = b(y) A_h`` with ``A_h = sum_{i=1..h} C(h, i) (-1)^{i-1} M^{i-1}``.
"""

from __future__ import annotations

from math import comb

import numpy as np


def bernstein_basis(k: int, y: np.ndarray) -> np.ndarray:
    """``b_{nu,k}(y) = C(k, nu) y^nu (1 - y)^(k - nu)`` for ``nu = 0..k``: shape ``(len(y), k +
    1)``."""
    if k < 1:
        raise ValueError("the Bernstein degree k must be >= 1")
    y = np.asarray(y, dtype=np.float64).reshape(-1, 1)
    nu = np.arange(k + 1)
    coef = np.array([comb(k, int(v)) for v in nu], dtype=np.float64)
    with np.errstate(invalid="ignore"):  # 0 ** 0 is 1 in numpy; no NaN arises on [0, 1]
        return coef * y**nu * (1.0 - y) ** (k - nu)


def iterated_matrix(k: int, h: int) -> np.ndarray:
    """``A_h`` with ``b^{(h)}(y) = b(y) A_h`` (Definition 8); ``A_1`` is the identity."""
    if h < 1:
        raise ValueError("the Bernstein order h must be >= 1")
    m = bernstein_basis(k, np.arange(k + 1) / k)
    out = np.zeros((k + 1, k + 1))
    power = np.eye(k + 1)
    for i in range(1, h + 1):
        out += comb(h, i) * (-1) ** (i - 1) * power
        power = power @ m
    return out


def iterated_basis(k: int, h: int, y: np.ndarray) -> np.ndarray:
    """``b^{(h)}_{nu,k}(y)``, shape ``(len(y), k + 1)``; rows sum to 1 (not all positive for h >=
    2)."""
    return bernstein_basis(k, y) @ iterated_matrix(k, h)


def lattice(k: int, dim: int) -> np.ndarray:
    """The cover ``{0, 1/k, ..., 1}^dim`` as ``((k + 1)^dim, dim)``, last axis varying fastest."""
    axes = np.meshgrid(*([np.arange(k + 1) / k] * dim), indexing="ij")
    return np.stack([a.ravel() for a in axes], axis=1)


def evaluate(values: np.ndarray, k: int, h: int, y: np.ndarray) -> np.ndarray:
    """The iterated Bernstein polynomial with lattice coefficients ``values`` at points ``y``.

    Args:
        values: ``((k + 1)^l,)`` function values at :func:`lattice` points (noisy or exact).
        k: lattice size per axis.
        h: Bernstein order.
        y: ``(m, l)`` points in ``[0, 1]^l``.

    Returns:
        ``(m,)``: ``sum_nu values[nu] prod_i b^{(h)}_{nu_i,k}(y_i)`` (Algorithm 1, line 7).
    """
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    dim = y.shape[1]
    coef = np.asarray(values, dtype=np.float64).reshape((k + 1,) * dim)
    a = iterated_matrix(k, h)
    # contract one axis at a time: (m, k+1, ..., k+1) -> (m,)
    out = np.einsum("mn,n...->m...", bernstein_basis(k, y[:, 0]) @ a, coef)
    for axis in range(1, dim):
        basis = bernstein_basis(k, y[:, axis]) @ a
        out = np.einsum("mn,mn...->m...", basis, out)
    return out


def nearest_lattice(values: np.ndarray, k: int, y: np.ndarray) -> np.ndarray:
    """The baseline of Section 4.2: the value at the nearest lattice point (piecewise constant)."""
    y = np.atleast_2d(np.asarray(y, dtype=np.float64))
    dim = y.shape[1]
    idx = np.clip(np.rint(y * k).astype(int), 0, k)
    flat = np.ravel_multi_index(tuple(idx[:, i] for i in range(dim)), (k + 1,) * dim)
    return np.asarray(values, dtype=np.float64)[flat]
