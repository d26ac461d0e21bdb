"""Maximum-entropy projection of noisy measurements onto weights over fixed support points.

Given basis values ``W`` (``(R, C)``) at C support points, noisy answers ``b`` with noise standard
deviations ``sigma``, a partition of the R answers into groups ``G`` (e.g. one column's marginal,
one anchor column's pairs) and prior weights ``u0``, find

    min_u KL(u || u0)   s.t.   sum_{r in G} ((W u - b)_r / sigma_r)^2 <= target_G  for every G,
                               u in the simplex,

the distribution closest to the prior among those that fit every group of measurements to within
its noise (the discrepancy principle: the true table scores about ``|G|`` per group). What the
measurements cannot tell from noise stays as the prior says (for a product prior: independence),
and every support point keeps some mass (``u = u0 exp(-W^T y) / Z``), as in PEP (Liu, Vietri,
Wu 2021) and maximum-entropy density estimation (Dudik, Phillips, Schapire 2004). Per-group
targets keep well-fitted groups (the marginals the prior was built from) from lending their
slack to a group the prior misses.

The problem is solved through its dual, a concave maximisation over ``y`` in R^R,

    max_y  -log sum_j u0_j exp(-(W^T y)_j) - b^T y - sum_G sqrt(target_G) ||(sigma y)_G||_2,

with L-BFGS (SciPy; the group norms smoothed by :data:`SMOOTHING`). Each step costs two products with ``W``
(O(RC)); nothing grows with the number of records. :func:`fit_within_noise` makes the targets
feasible with the L1 LP first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

from dpsmooth_spark.core.lp import L1Fit, solve_l1_fit

SMOOTHING = 1e-4
"""``||z_G||`` is computed as ``sqrt(||z_G||^2 + SMOOTHING^2)`` (z in z-score units): the dual is
then smooth at a group that the prior already fits, at a cost below 1e-4 in each group's norm."""


@dataclass(frozen=True)
class MaxEntFit:
    """Solution of :func:`maxent_projection`.

    Attributes:
        weights: ``(C,)`` probabilities.
        chi2: ``sum ((W u - b) / sigma)^2`` at the solution.
        kl: ``KL(u || u0)`` in nats: how much structure the fit adds to the prior.
        iterations: L-BFGS iterations (0 when the prior already fits).
        converged: whether the optimiser reported convergence.
    """

    weights: np.ndarray
    chi2: float
    kl: float
    iterations: int
    converged: bool


def chi_square(w: np.ndarray, u: np.ndarray, b: np.ndarray, sigma: np.ndarray | float) -> float:
    """``sum ((W u - b) / sigma)^2``."""
    z = ((w @ u) - b) / sigma
    return float(z @ z)


def group_chi_square(w: np.ndarray, u: np.ndarray, b: np.ndarray, sigma: np.ndarray,
                     groups: np.ndarray) -> np.ndarray:
    """Chi-square of each group (``groups``: ``(R,)`` labels ``0 .. G-1``)."""
    z = ((w @ u) - b) / sigma
    return np.bincount(groups, weights=z * z, minlength=int(groups.max(initial=-1)) + 1)


def maxent_projection(
    w: np.ndarray,
    b: np.ndarray,
    sigma: np.ndarray | float,
    targets: np.ndarray,
    groups: np.ndarray | None = None,
    log_prior: np.ndarray | None = None,
    max_iterations: int = 500,
) -> MaxEntFit:
    """The distribution on the columns of ``w`` closest to the prior within every group's target.

    Args:
        w: ``(R, C)`` basis values at the support points.
        b: ``(R,)`` noisy answers (normalised).
        sigma: noise standard deviation of each answer (``(R,)`` or a scalar), > 0.
        targets: ``(G,)`` allowed chi-square per group (``|G|``: "within the noise").
        groups: ``(R,)`` group label of each answer, ``0 .. G-1``; one group when ``None``.
        log_prior: ``(C,)`` log prior weights (normalised or not); uniform when ``None``.
        max_iterations: L-BFGS iteration cap.
    """
    r, c = w.shape
    b = np.asarray(b, dtype=np.float64)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (r,))
    if np.any(sigma <= 0):
        raise ValueError("noise standard deviations must be positive")
    groups = np.zeros(r, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    radius = np.sqrt(np.asarray(targets, dtype=np.float64))
    log_u0 = np.zeros(c) if log_prior is None else np.asarray(log_prior, dtype=np.float64)
    log_u0 = log_u0 - logsumexp(log_u0)
    u0 = np.exp(log_u0)
    chi0 = group_chi_square(w, u0, b, sigma, groups)
    if np.all(chi0 <= radius**2):
        return MaxEntFit(u0, float(chi0.sum()), 0.0, 0, True)
    # The dual variable is scaled by sigma so that every coordinate has the units of a z-score.
    ws = w / sigma[:, None]
    bs = b / sigma
    size = radius.size

    def weights(z: np.ndarray) -> tuple[np.ndarray, float]:
        logits = log_u0 - ws.T @ z
        log_z = float(logsumexp(logits))
        return np.exp(logits - log_z), log_z

    def objective(z: np.ndarray) -> tuple[float, np.ndarray]:
        u, log_z = weights(z)
        norms = np.sqrt(np.bincount(groups, weights=z * z, minlength=size) + SMOOTHING**2)
        grad = bs - ws @ u + (radius / norms)[groups] * z
        return log_z + float(bs @ z) + float(radius @ norms), grad

    # Start along the direction that lowers the objective from the (non-smooth) origin.
    step = ws @ u0 - bs
    z0 = 1e-3 * step / max(float(np.linalg.norm(step)), 1e-300)
    res = minimize(objective, z0, jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iterations, "gtol": 1e-7, "ftol": 1e-11})
    u, _ = weights(res.x)
    positive = u > 0
    kl = float(np.sum(u[positive] * (np.log(u[positive]) - log_u0[positive])))
    return MaxEntFit(u, chi_square(w, u, b, sigma), kl, int(res.nit), bool(res.success))


def fit_within_noise(
    w: np.ndarray,
    b: np.ndarray,
    sigma: np.ndarray | float,
    groups: np.ndarray | None = None,
    log_prior: np.ndarray | None = None,
    slack: float = 0.05,
    solver: str = "glop",
    tolerance: float | np.ndarray = 1.0,
) -> tuple[MaxEntFit, L1Fit]:
    """The reduced LP (OR-Tools, on the noise-scaled answers ``W u / sigma ~ b / sigma``), then
    :func:`maxent_projection` with targets it makes feasible.

    Each group's target is ``max(tolerance |G|, (1 + slack) chi2_G(u_LP))``: within the noise
    (``tolerance = 1``) where the support can get there, else as close as the LP's solution (the
    L1 optimum, a point that meets every target at once) gets; ``tolerance = 0`` asks for the
    closest fit the LP finds, and the maximum-entropy weights among those. ``tolerance`` is one
    number or one per group.

    Returns:
        ``(maximum-entropy fit, LP fit)``; the LP's objective is in noise units.
    """
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), b.shape)
    groups = np.zeros(b.size, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    # The LP weighs each answer by its noise (L1 in z-scores), like the targets it sets. The rows
    # are scaled by one constant (the noise's geometric mean), which leaves the optimum as it is:
    # in raw z-scores, entries reach 1e4-1e5 at 10^6 rows, and GLOP then stops ABNORMAL.
    scale = float(np.exp(np.mean(np.log(sigma))))
    lp = solve_l1_fit(w * (scale / sigma)[:, None], b * (scale / sigma), solver=solver)
    lp = replace(lp, objective=lp.objective / scale)
    sizes = np.bincount(groups).astype(np.float64)
    targets = np.maximum(tolerance * sizes,
                         (1.0 + slack) * group_chi_square(w, lp.weights, b, sigma, groups))
    targets = np.maximum(targets, 1e-6 * sizes)  # keep every ball non-degenerate
    return maxent_projection(w, b, sigma, targets, groups, log_prior), lp
