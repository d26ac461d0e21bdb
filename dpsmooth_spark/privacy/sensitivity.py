"""Sensitivities under add/remove-one neighbours, for data scaled to [-1, 1]^d.

Derivations are in ``docs/privacy.md``; each function names its section there.
"""

from __future__ import annotations

import math


def count_sensitivity() -> float:
    """Adding or removing a record changes the count by 1 (L1 = L2 = 1). privacy.md §2."""
    return 1.0


def basis_sums_l1(num_functions: int) -> float:
    """L1 sensitivity of R basis sums: each ``|prod_i T_{r_i}(x_i)| <= 1`` (privacy.md §3)."""
    return float(num_functions)


def basis_sums_l2(num_functions: int) -> float:
    """L2 sensitivity of R basis sums: ``sqrt(R)`` (privacy.md §3)."""
    return math.sqrt(num_functions)


def histograms_l1(d: int) -> float:
    """L1 sensitivity of d one-way histograms: a record adds 1 to one cell of each (privacy.md
    §3c)."""
    return float(d)


def histograms_l2(d: int) -> float:
    """L2 sensitivity of d one-way histograms: ``sqrt(d)`` (privacy.md §3c)."""
    return math.sqrt(d)


def pooled_histogram_l1(m: int) -> float:
    """L1 sensitivity of the pooled histogram of ``m`` columns (all their values counted in one
    histogram): a record adds 1 to a cell for each of its ``m`` values (privacy.md §3f)."""
    return float(m)


def clipped_pairs_l1(kappa: float, d: int, fraction_bits: int = 16) -> float:
    """L1 sensitivity of the ``d (d - 1) / 2`` norm-clipped second moments
    ``sum_x c(x)^2 x_i x_j`` (``i < j``, ``c(x) = min(1, kappa / |x|_1)``) as the data pass
    rounds them (privacy.md §3h): a record adds ``sum_{i<j} |v_i v_j| <= (1 - 1/d) |v|_1^2 / 2``
    for its rounded, clipped values ``v`` (equality where they are equal in size), and each of
    its ``d`` fixed-point values is off by at most ``2**-(fraction_bits + 1)`` (relative to
    ``x / s`` when clipped, hence the factor ``kappa`` there):
    ``(1 - 1/d) (kappa + (kappa + 1) d 2**-(fraction_bits + 1))^2 / 2``."""
    slack = d * 2.0 ** -(fraction_bits + 1)
    return (1.0 - 1.0 / d) * (kappa + (kappa + 1.0) * slack) ** 2 / 2.0


def psi_product_l1(d: int, k: int) -> float:
    """L1 sensitivity of ``S X`` with ``S = sum x x^T``, ``X`` orthonormal ``d x k`` (privacy.md
    §4).

    ``||x x^T X||_1 = ||x||_1 ||X^T x||_1 <= d * sqrt(k) ||x||_2 <= d^{3/2} sqrt(k)``.
    """
    return d**1.5 * math.sqrt(k)


def psi_product_l2(d: int) -> float:
    """L2 (Frobenius) sensitivity of ``S X``: ``||x||_2 ||X^T x||_2 <= ||x||_2^2 <= d`` (privacy.md
    §4)."""
    return float(d)
