"""Noisy release steps that every mechanism shares: the count and a vector of basis sums.

Each step computes its sensitivity, asks the accountant for the noise scale of its budget, adds
the noise (Laplace in pure mode, Gaussian in the (epsilon, delta) mode) and records the charge.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


class PlanError(ValueError):
    """A plan the release cannot carry out; its message names public values and the noisy count
    only, so a refused release's ledger record keeps it."""


def add_noise(
    values: np.ndarray, scale: float, accountant: PrivacyAccountant, noise: NoiseSource
) -> np.ndarray:
    """The accountant's noise family at ``scale``."""
    return noise.laplace(values, scale) if accountant.pure else noise.gaussian(values, scale)


def _release(
    values: np.ndarray,
    sens: float,
    budget: float,
    stage: str,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> tuple[np.ndarray, float]:
    """``values`` plus the accountant's noise for ``sens`` and ``budget``, charged as ``stage``;
    returns (noisy values, scale)."""
    scale = accountant.noise_scale(sens, budget)
    noisy = add_noise(np.asarray(values, dtype=np.float64), scale, accountant, noise)
    accountant.charge(stage, sens, scale)
    return noisy, scale


def release_count(
    count: int,
    fraction: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    stage: str = "count",
) -> float:
    """The count plus noise for ``fraction`` of the budget (sensitivity 1), charged as
    ``stage``."""
    noisy, _ = _release(
        np.array([float(count)]),
        sensitivity.count_sensitivity(),
        accountant.share(fraction),
        stage,
        accountant,
        noise,
    )
    return float(noisy[0])


def release_basis_sums(
    sums: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    stage: str = "basis_sums",
) -> tuple[np.ndarray, float]:
    """R basis sums plus noise for ``budget`` (L1 sensitivity R, L2 sqrt(R)); returns (noisy,
    scale)."""
    size = int(np.size(sums))
    sens = sensitivity.basis_sums_l1(size) if accountant.pure else sensitivity.basis_sums_l2(size)
    return _release(sums, sens, budget, stage, accountant, noise)


def release_clipped_pairs(
    sums: np.ndarray,
    kappa: float,
    d: int,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> tuple[np.ndarray, float]:
    """The ``d (d - 1) / 2`` second moments of the rows clipped to L1 norm ``kappa`` plus Laplace
    noise for ``budget`` (L1 sensitivity ``(1 - 1/d) kappa^2 / 2`` and the rounding's slack,
    privacy.md
    3h); pure epsilon-DP only. Returns (noisy, scale)."""
    if not accountant.pure:
        raise ValueError("the norm-clipped pairs are released under pure epsilon-DP only")
    sens = sensitivity.clipped_pairs_l1(kappa, d)
    return _release(sums, sens, budget, "clipped_pairs", accountant, noise)


def select_top_k(
    scores: np.ndarray,
    k: int,
    sensitivity: float,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    stage: str,
) -> np.ndarray:
    """Indices of ``k`` of ``scores`` (each moving by at most ``sensitivity`` between
    neighbours, either way), picked by noisy top-k for ``budget``; records the charge."""
    scale = accountant.selection_scale(sensitivity, budget, k)
    chosen = noise.top_k(scores, k, scale, accountant.pure)
    accountant.charge_selection(stage, sensitivity, scale, k)
    return chosen


def select_partners(
    scores: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    stage: str,
) -> np.ndarray:
    """For each row ``i`` of the ``(m, m)`` ``scores`` (each moving by at most 1 between
    neighbours, either way), the column ``j != i`` that noisy top-1 picks: ``m`` picks for
    ``budget`` together, recorded as one charge of ``m`` selections (privacy.md 3i)."""
    m = int(scores.shape[0])
    scale = accountant.selection_scale(1.0, budget, m)
    out = np.empty(m, dtype=np.int64)
    for i in range(m):
        others = np.delete(np.arange(m), i)
        out[i] = others[noise.top_k(scores[i, others], 1, scale, accountant.pure)[0]]
    accountant.charge_selection(stage, 1.0, scale, m)
    return out


def histograms_sensitivity(columns: int, accountant: PrivacyAccountant) -> float:
    """The sensitivity of ``columns`` histograms (or tables) released together, a record in one
    cell of each: L1 ``columns`` under pure epsilon, L2 ``sqrt(columns)`` under zCDP."""
    if accountant.pure:
        return sensitivity.histograms_l1(columns)
    return sensitivity.histograms_l2(columns)


def release_histograms(
    counts: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    columns: int | None = None,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """One-way histogram counts plus noise for ``budget`` (L1 sensitivity d, L2 sqrt(d): a
    record is in one cell per column): ``(d, B)``, or the cells of ``columns`` histograms of any
    sizes laid end to end; returns (noisy counts, scale). ``weights`` (one per count, its
    column's: :func:`core.marginals.histogram_weights`, whose sum over the columns is ``d``
    under pure epsilon and whose sum of squares is ``d`` under zCDP) scale the counts before the
    noise and the noisy counts back after it: a column's noise is then the scale over its
    weight, and the sensitivity is unchanged (privacy.md 3c)."""
    d = int(counts.shape[0]) if columns is None else columns
    sens = histograms_sensitivity(d, accountant)
    if weights is None:
        return _release(counts, sens, budget, "histograms", accountant, noise)
    noisy, scale = _release(counts * weights, sens, budget, "histograms", accountant, noise)
    return noisy / weights, scale


def release_histograms_in_two_draws(
    counts: np.ndarray,
    weights: np.ndarray,
    then: Callable[[np.ndarray, float], tuple[np.ndarray, np.ndarray]],
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    columns: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`release_histograms` in two draws at its one scale: ``counts`` (weighted by
    ``weights``) first, then the counts and weights that ``then`` builds from the first draw's
    noisy counts and the scale. Every record moves the first draw's weighted counts and the
    second's by at most its columns' weights together (``then`` splits a column's weight
    between its two draws, and puts every record in one of its second-draw cells or in none),
    so the two draws cost what one draw of ``columns`` histograms costs: one ``histograms`` charge
    (privacy.md 3c). Returns (first noisy counts, second noisy counts, scale)."""
    sens = histograms_sensitivity(columns, accountant)
    scale = accountant.noise_scale(sens, budget)
    first = add_noise(np.asarray(counts * weights, dtype=np.float64), scale, accountant, noise)
    first = first / weights
    more, more_weights = then(first, scale)
    second = add_noise(np.asarray(more * more_weights, dtype=np.float64), scale, accountant, noise)
    accountant.charge("histograms", sens, scale)
    return first, second / more_weights, scale


def release_tables(
    counts: np.ndarray,
    tables: int,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> tuple[np.ndarray, float]:
    """The cells of ``tables`` contingency tables laid end to end plus noise for ``budget`` (L1
    sensitivity ``tables``, L2 ``sqrt(tables)``: a record is in one cell of each table);
    returns (noisy counts, scale)."""
    sens = histograms_sensitivity(tables, accountant)
    return _release(counts, sens, budget, "tables", accountant, noise)


def release_pooled_histogram(
    counts: np.ndarray,
    columns: int,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> tuple[np.ndarray, float]:
    """``(B,)`` pooled histogram counts of ``columns`` columns (every value of those columns in one
    histogram) plus Laplace noise for ``budget`` (L1 sensitivity ``columns``); pure epsilon-DP
    only (its L2 sensitivity is ``columns`` too, no better than the columns' own histograms);
    returns (noisy counts, scale)."""
    if not accountant.pure:
        raise ValueError(
            "pooled_histogram: on needs pure epsilon-DP (delta = 0); the pooled "
            "histogram is measured under pure epsilon-DP only"
        )
    return _release(
        counts,
        sensitivity.pooled_histogram_l1(columns),
        budget,
        "pooled_histogram",
        accountant,
        noise,
    )


def noise_std(scale: float, accountant: PrivacyAccountant) -> float:
    """Standard deviation of one noise draw of ``scale`` (Laplace: sqrt(2) b)."""
    return (np.sqrt(2.0) if accountant.pure else 1.0) * scale
