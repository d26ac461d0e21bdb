"""Statistical privacy audits: an empirical lower bound on epsilon from two output samples.

Given samples of a scalar score of a mechanism's output on neighbouring tables ``D`` and ``D'``,
every threshold event ``{score > t}`` (and its complement) gives, with Clopper-Pearson intervals,
a lower confidence bound ``ln(P_D(E)_low / P_D'(E)_high)`` on the privacy loss. If the mechanism
is epsilon-DP, the largest of these bounds exceeds epsilon with probability at most ``alpha``
(Bonferroni over all events tried). Scores that isolate the region where the density ratio is
largest (for Laplace noise: every coordinate beyond both tables' true values) make the bound tight.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Two-sided exact binomial confidence interval at level ``1 - alpha``."""
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = (
        1.0
        if successes == trials
        else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return low, high


def epsilon_lower_bound(
    scores_d: np.ndarray, scores_d_prime: np.ndarray, thresholds: np.ndarray, alpha: float = 1e-3
) -> float:
    """Largest epsilon certified by threshold tests on the two score samples (both directions).

    Args:
        scores_d, scores_d_prime: one scalar per run of the mechanism on D and on D'.
        thresholds: the ``t`` of the events ``{score > t}`` to try.
        alpha: total false-failure probability (split over the events and directions).
    """
    n_d, n_p = len(scores_d), len(scores_d_prime)
    tests = 4 * len(thresholds)
    per_test = alpha / tests
    best = 0.0
    for t in thresholds:
        k_d = int((scores_d > t).sum())
        k_p = int((scores_d_prime > t).sum())
        for a, n_a, b, n_b in (
            (k_d, n_d, k_p, n_p),
            (k_p, n_p, k_d, n_d),
            (n_d - k_d, n_d, n_p - k_p, n_p),
            (n_p - k_p, n_p, n_d - k_d, n_d),
        ):
            low_a, _ = clopper_pearson(a, n_a, per_test)
            _, high_b = clopper_pearson(b, n_b, per_test)
            if low_a > 0 and high_b > 0:
                best = max(best, math.log(low_a / high_b))
    return best


def beyond_both(
    outputs: np.ndarray, values_d: np.ndarray, values_d_prime: np.ndarray
) -> np.ndarray:
    """Score ``min_i s_i (y_i - far_i)``: positive iff every coordinate lies beyond both true
    values.

    ``s_i`` is the direction from ``D`` to ``D'`` in coordinate ``i`` (coordinates that do not move
    are ignored) and ``far_i`` the true value further along it. For Laplace noise the density ratio
    on ``{score > 0}`` is exactly ``exp(sum_i |shift_i| / b_i)``.
    """
    shift = np.asarray(values_d_prime, float) - np.asarray(values_d, float)
    moving = np.abs(shift) > 1e-12
    sign = np.sign(shift[moving])
    far = np.where(
        sign > 0,
        np.maximum(values_d, values_d_prime)[moving],
        np.minimum(values_d, values_d_prime)[moving],
    )
    return (sign * (outputs[:, moving] - far)).min(axis=1)
