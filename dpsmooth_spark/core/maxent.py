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

with L-BFGS (SciPy; the group norms smoothed by :data:`SMOOTHING`). Each step costs two products
with ``W``
(O(RC)); nothing grows with the number of records. :func:`fit_within_noise` makes the targets
feasible first with :func:`closest_fit`, the distribution on the support closest to the
measurements in the same chi-square (accelerated projected gradient, O(RC) per step too).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import gammainc, logsumexp
from scipy.stats import chi2 as chi2_dist
from scipy.stats import norm
from threadpoolctl import threadpool_limits

from dpsmooth_spark.core.function_values import FunctionValues

Values = np.ndarray | FunctionValues
"""``W``: a dense ``(R, C)`` array or the structured operator of ``core.function_values``."""

ENOUGH_EXCESS = 5e-3
"""The closest fit stops once its groups' chi-squares are above their stopping targets by at most
this share of the targets' total. At R = 1785, C = 10^5 (the stages benchmark) that is 900
steps instead of 1340, the total excess 3 instead of 0.8 on targets of 1300."""

STEP_FACTOR = 2.2
"""The closest fit's step is ``1 / (STEP_FACTOR ||D A P||^2)``: the textbook ``1 / L`` with a
10% margin on the power-iteration estimate (docs/decisions/0001)."""

CLOSEST_STEPS = (800, 2000)
"""Fewest and most steps of the closest fit; between them, as many as :data:`CLOSEST_WORK`
allows (:func:`closest_steps`; docs/decisions/0001)."""

CLOSEST_WORK = 2e10
"""Budget of the closest fit in function values (steps x R x C; a step's two products cost about
that much): 2000 steps up to R x C = 10^7, 800 from 2.5 x 10^7 on."""


def closest_steps(r: int, c: int) -> int:
    """Step cap of the closest fit for ``R`` functions at ``C`` candidates."""
    fewest, most = CLOSEST_STEPS
    return int(np.clip(CLOSEST_WORK / max(r * c, 1), fewest, most))


DUAL_BLAS_THREADS = 1
"""BLAS threads of the dual's products: OpenBLAS's idle workers spin against single-threaded
L-BFGS on few cores (docs/decisions/0001). The closest fit keeps all threads."""


DUAL_ROUNDS = 5
"""Most rounds of ``max_iterations`` L-BFGS steps :func:`fit_within_noise` gives the dual where
the way back to the closest fit would concentrate the weights (:data:`RETREAT`)."""

RETREAT = 1.5
"""The dual gets another round when the fallback's KL exceeds ``RETREAT`` times its own plus
0.01 nats and the closest fit spreads over fewer candidates than the dual's weights: its
spurious correlations would otherwise pass to the release (docs/decisions/0001)."""

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
        dual: the dual point where the optimiser stopped (``None`` when the prior already fits):
            a later :func:`maxent_projection` may go on from it (``start_dual``).
    """

    weights: np.ndarray
    chi2: float
    kl: float
    iterations: int
    converged: bool
    dual: np.ndarray | None = None


@dataclass(frozen=True)
class ClosestFit:
    """Solution of :func:`closest_fit`.

    Attributes:
        weights: ``(C,)`` probabilities.
        chi2: ``sum ((W u - b) / sigma)^2`` at the solution.
        iterations: gradient steps taken.
    """

    weights: np.ndarray
    chi2: float
    iterations: int


def _times(w: Values, u: np.ndarray) -> np.ndarray:
    """``W u`` in ``W``'s precision (no float64 copy of a float32 ``W``), as float64."""
    return (w @ u.astype(w.dtype, copy=False)).astype(np.float64)


def _noise_units(w: Values, sigma: np.ndarray) -> Values:
    """``W / sigma`` row by row as float32; ``W`` itself when it is float32 and ``sigma = 1``."""
    if w.dtype == np.float32 and np.all(sigma == 1.0):
        return w
    if not isinstance(w, np.ndarray):
        raise TypeError("an operator W (core.function_values) must come in noise units (sigma = 1)")
    return np.multiply(w, (1.0 / sigma)[:, None], dtype=np.float32)


def chi_square(w: Values, u: np.ndarray, b: np.ndarray, sigma: np.ndarray | float) -> float:
    """``sum ((W u - b) / sigma)^2``."""
    z = (_times(w, u) - b) / sigma
    return float(z @ z)


def group_chi_square(
    w: Values, u: np.ndarray, b: np.ndarray, sigma: np.ndarray, groups: np.ndarray
) -> np.ndarray:
    """Chi-square of each group (``groups``: ``(R,)`` labels ``0 .. G-1``)."""
    z = (_times(w, u) - b) / sigma
    return np.bincount(groups, weights=z * z, minlength=int(groups.max(initial=-1)) + 1)


def maxent_projection(
    w: Values,
    b: np.ndarray,
    sigma: np.ndarray | float,
    targets: np.ndarray,
    groups: np.ndarray | None = None,
    log_prior: np.ndarray | None = None,
    max_iterations: int = 500,
    bounds: np.ndarray | None = None,
    start_dual: np.ndarray | None = None,
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
        bounds: ``(R,)`` largest ``|W u - b| / sigma`` each answer may keep (``inf``: none), or
            ``None``: the group targets alone (see :func:`fit_within_noise`).
        start_dual: where to start the optimiser: the ``dual`` of an earlier fit of the same
            problem that stopped at its cap; ``None``: near the origin.
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
    z_prior = (_times(w, u0) - b) / sigma
    chi0 = np.bincount(groups, weights=z_prior * z_prior, minlength=radius.size)
    box = None if bounds is None else np.broadcast_to(np.asarray(bounds, dtype=np.float64), (r,))
    if np.all(chi0 <= radius**2) and (box is None or np.all(np.abs(z_prior) <= box)):
        return MaxEntFit(u0, float(chi0.sum()), 0.0, 0, True)
    # The dual variable is scaled by sigma so that every coordinate has the units of a z-score.
    # The two products with W per step run in float32 (half the time and memory of float64);
    # their rounding, about 1e-7 of max |W / sigma|, stays far below one z-score unit.
    ws = _noise_units(w, sigma)
    bs = b / sigma
    size = radius.size

    def weights(z: np.ndarray) -> tuple[np.ndarray, float]:
        logits = log_u0 - (ws.T @ z.astype(np.float32)).astype(np.float64)
        top = float(logits.max())  # logsumexp without scipy's per-call overhead (1-D grids)
        shifted = np.exp(logits - top)
        total = float(shifted.sum())
        return shifted / total, top + float(np.log(total))

    # Balls and boxes together: the dual variable is split, y = z + v, with z paying the balls'
    # support function and v (on the bounded answers; none without bounds) the boxes'
    # (sum bound_r |v_r|, smoothed like the norms).
    boxed_rows = np.arange(0) if box is None else np.flatnonzero(np.isfinite(box))
    box_bound = np.zeros(r) if box is None else box  # read on the boxed rows alone

    def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        z, v = x[:r], x[r:]
        y = z.copy()
        y[boxed_rows] += v
        return z, v, y

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        z, v, y = split(x)
        u, log_z = weights(y)
        norms = np.sqrt(np.bincount(groups, weights=z * z, minlength=size) + SMOOTHING**2)
        common = bs - (ws @ u.astype(np.float32)).astype(np.float64)
        value = log_z + float(bs @ y) + float(radius @ norms)
        if not boxed_rows.size:
            return value, common + (radius / norms)[groups] * z
        lengths = np.sqrt(v * v + SMOOTHING**2)
        grad = np.concatenate(
            [
                common + (radius / norms)[groups] * z,
                common[boxed_rows] + box_bound[boxed_rows] * v / lengths,
            ]
        )
        return value + float(box_bound[boxed_rows] @ lengths), grad

    # Start along the direction that lowers the objective from the (non-smooth) origin.
    if start_dual is None:
        step = _times(ws, u0) - bs
        z0 = 1e-3 * step / max(float(np.linalg.norm(step)), 1e-300)
        start_dual = np.concatenate([z0, z0[boxed_rows]])
    with threadpool_limits(limits=DUAL_BLAS_THREADS, user_api="blas"):
        res = minimize(
            objective,
            start_dual,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": max_iterations, "gtol": 1e-7, "ftol": 1e-11},
        )
    u, _ = weights(split(res.x)[2])
    positive = u > 0
    kl = float(np.sum(u[positive] * (np.log(u[positive]) - log_u0[positive])))
    return MaxEntFit(u, chi_square(w, u, b, sigma), kl, int(res.nit), bool(res.success), res.x)


MATCH_RIDGE = 1e-3
"""Ridge of :func:`match_correlation`'s dual: keeps it bounded where the support cannot reach the
target; the weights then miss each target by about ``MATCH_RIDGE`` times its dual variable."""


def match_correlation(
    points: np.ndarray,
    weights: np.ndarray,
    target: np.ndarray,
    ridge: float = MATCH_RIDGE,
    max_iterations: int = 500,
) -> np.ndarray:
    """The weights closest in KL to ``weights`` under which the columns of ``points`` keep their
    weighted means and variances and have the correlation ``target`` (``(d, d)``; columns of
    zero variance are left out).

    They are ``u exp(a.z + b.z^2 + z^T L z) / Z`` for the points standardised under ``u``
    (``z``), an exponential family whose dual, ``log Z - a.0 - b.1 - <L, target>``, L-BFGS
    (SciPy) minimises with the ridge ``ridge / 2 ||theta||^2``, which keeps it bounded where
    the support cannot reach ``target`` (the weights then stop at about ``ridge`` times the dual
    variable from it). Each step costs ``O(C d^2)``; nothing of size ``C x d^2`` is held.
    """
    u = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
    x = np.asarray(points, dtype=np.float64)
    mean = u @ x
    sd = np.sqrt(u @ (x - mean) ** 2)
    live = np.flatnonzero(sd > 0)
    if live.size < 2:
        return u
    z = (x[:, live] - mean[live]) / sd[live]
    d = live.size
    upper = np.triu_indices(d, 1)
    want = np.asarray(target, dtype=np.float64)[np.ix_(live, live)][upper]
    with np.errstate(divide="ignore"):
        log_u = np.log(u)  # a point without weight keeps none

    def tilted(theta: np.ndarray) -> tuple[np.ndarray, float]:
        quadratic = np.zeros((d, d))
        quadratic[upper] = theta[2 * d :]
        exponent = (
            log_u
            + z @ theta[:d]
            + (z**2) @ theta[d : 2 * d]
            + np.einsum("ci,ij,cj->c", z, quadratic, z, optimize=True)
        )
        log_z = float(logsumexp(exponent))
        return np.exp(exponent - log_z), log_z

    def dual(theta: np.ndarray) -> tuple[float, np.ndarray]:
        v, log_z = tilted(theta)
        second = (z * v[:, None]).T @ z
        gradient = np.concatenate([v @ z, np.diag(second) - 1.0, second[upper] - want])
        value = log_z - theta[d : 2 * d].sum() - theta[2 * d :] @ want
        return value + 0.5 * ridge * theta @ theta, gradient + ridge * theta

    res = minimize(
        dual,
        np.zeros(2 * d + want.size),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iterations, "gtol": 1e-8},
    )
    return tilted(res.x)[0]


RAKE_ROUNDS = 50
""":func:`rake` stops after this many rounds over the margins at the latest."""

RAKE_WORK = 2 * 10**8
""":func:`rake` runs at most this many point-margin updates (about two seconds): a table of
1,000 lattice columns on 10^5 candidates gets two rounds."""

RAKE_TOLERANCE = 1e-4
""":func:`rake` stops once no margin is further than this (total variation) from its target:
a tenth of the noise of a marginal measured at epsilon 10 on 50,000 rows."""


def rake(weights: np.ndarray, cells: np.ndarray, targets: list[np.ndarray]) -> np.ndarray:
    """Iterative proportional fitting (raking) of the distribution ``weights`` (``(C,)``) over
    points that fall in the cells ``cells`` (``(C, k)``: each point's cell in each of ``k``
    margins) to the marginal distributions ``targets`` (``targets[j]``: ``(cells_j,)``): the
    distribution closest to ``weights`` in KL with those margins. A target's cells that no
    point with weight falls in cannot be reached; its mass goes to the others in proportion.
    Every ratio the weights hold within a margin's cell (the relations between margins) is
    kept."""
    u = weights / weights.sum()
    rounds = min(RAKE_ROUNDS, max(1, RAKE_WORK // max(cells.size, 1)))
    for _ in range(rounds):
        worst = 0.0
        for j, target in enumerate(targets):
            have = np.bincount(cells[:, j], weights=u, minlength=target.size)
            reached = np.where(have > 0, target, 0.0)
            if reached.sum() <= 0:
                continue
            reached = reached / reached.sum()
            worst = max(worst, 0.5 * float(np.abs(have - reached).sum()))
            u = u * np.where(have > 0, reached / np.maximum(have, 1e-300), 1.0)[cells[:, j]]
            u = u / u.sum()
        if worst <= RAKE_TOLERANCE:
            break
    return u


def kl_divergence(u: np.ndarray, v: np.ndarray) -> float:
    """``KL(u || v)`` in nats over the support of ``u`` (both distributions on the same points)."""
    held = u > 0
    return float(np.sum(u[held] * np.log(u[held] / v[held])))


def effective_support(u: np.ndarray) -> float:
    """``1 / sum u^2``: how many support points a distribution spreads over."""
    return 1.0 / float(np.sum(np.square(u)))


def project_to_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{u >= 0, sum u = 1}``: ``max(v - tau, 0)``.

    ``tau`` by Michelot's algorithm (1986; Condat 2016, "Fast projection onto the simplex"):
    from the mean, drop the entries at or below ``tau`` and recompute it from those left, until
    none drops. ``tau`` only grows, so it ends at the exact threshold; 3-11 passes over a
    shrinking array at C = 10^5, 4-8x faster than the sort this replaced.
    """
    if not np.all(np.isfinite(v)):
        raise ValueError("project_to_simplex: the vector has non-finite entries")
    active = v
    tau = (float(active.sum()) - 1.0) / active.size
    while True:
        active = active[active > tau]
        if active.size == 0:  # entries so far above 1 that rounding drops them all: the largest
            return (v == v.max()) / float(np.sum(v == v.max()))
        shifted = (float(active.sum()) - 1.0) / active.size
        if shifted <= tau:
            return np.maximum(v - tau, 0.0)
        tau = shifted


def closest_fit(
    w: Values,
    b: np.ndarray,
    sigma: np.ndarray | float,
    groups: np.ndarray | None = None,
    enough: np.ndarray | None = None,
    start: np.ndarray | None = None,
    max_iterations: int | None = None,
) -> ClosestFit:
    """The distribution on the columns of ``w`` that minimises ``sum ((W u - b) / sigma)^2``, each
    answer weighed by ``|G| / enough_G`` (its group's target per answer) when ``enough`` is given.

    FISTA (Beck and Teboulle 2009) on the simplex with the adaptive restart of O'Donoghue and
    Candes (2015), products in float32: each step costs two products with ``W`` and a
    projection onto the simplex. It stops once the groups' chi-squares exceed ``enough`` by at
    most ``ENOUGH_EXCESS`` of its total (little is gained below the targets it feeds), when 100
    steps lower the groups' total excess over ``enough`` (relative to it; without ``enough``,
    the chi-square) by less than 0.1%, or after ``max_iterations``. Any point it returns is a
    distribution, so the chi-squares it
    reports are always attainable; it returns the best of its checkpoints (every 20 steps).

    Args:
        w: ``(R, C)`` basis values at the support points.
        b: ``(R,)`` noisy answers.
        sigma: noise standard deviation of each answer (``(R,)`` or a scalar), > 0.
        groups: ``(R,)`` labels ``0 .. G-1`` for ``enough``; one group when ``None``.
        enough: ``(G,)`` chi-square per group at which to stop; ``None``: never early.
        start: ``(C,)`` starting distribution (uniform when ``None``).
        max_iterations: cap on gradient steps (``None``: :func:`closest_steps`).
    """
    r, c = w.shape
    if max_iterations is None:
        max_iterations = closest_steps(r, c)
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (r,))
    groups = np.zeros(r, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    a = _noise_units(w, sigma)
    target = (np.asarray(b, dtype=np.float64) / sigma).astype(np.float32)
    # Each answer is weighed by |G| / enough_G, one over its group's target per answer: a group
    # that cannot get near its target (a 64-cell histogram of a 0/1 column: chi-square in the
    # tens of thousands) would otherwise drown the small groups that can, and the stall rule
    # would stop with them far off. (Weighing by 1 / enough_G instead also weighed large groups
    # down against small ones, 30x at d = 30: at 10^7 x 30 rows, after 1000 steps, the fit's
    # chi-square per answer was 49 that way and 8.5 this way.)
    if enough is None:
        scale = None
        weight = np.ones(r)
    else:
        sizes = np.bincount(groups)
        scale = np.maximum(np.asarray(enough, dtype=np.float64), 1e-2 * sizes)
        weight = (sizes / scale)[groups]
        weight /= weight.max()
    weight32 = weight.astype(np.float32)
    enough_total = 0.0 if enough is None else float(np.sum(enough))
    # L = 2 ||D A P||_2^2 with D = diag(sqrt(weight)) and P the projection on {sum d = 0}, the
    # directions the weights move in (the rows' means would otherwise set L, and C times too
    # small a step), from a deterministic power iteration; the step is 2 / (STEP_FACTOR L).
    u = (
        np.full(c, 1.0 / c)
        if start is None
        else np.asarray(start, dtype=np.float64) / np.sum(start)
    )
    v = np.linspace(-1.0, 1.0, c, dtype=np.float32)
    for _ in range(30):
        v = a.T @ (weight32 * (a @ v))
        v -= v.mean()
        norm = float(np.linalg.norm(v))
        if not norm > 0.0:  # every support point answers alike: no weights fit better than u
            return ClosestFit(u, chi_square(w, u, b, sigma), 0)
        v /= norm
    lipschitz = STEP_FACTOR * float(weight32 @ (a @ v) ** 2)
    y, t = u.copy(), 1.0
    z = (a @ u.astype(np.float32) - target).astype(np.float64)
    best, best_value = u, float(weight @ (z * z))
    history = [np.inf]
    iterations = 0
    for iterations in range(1, max_iterations + 1):
        residual = weight32 * (a @ y.astype(np.float32) - target)
        step = project_to_simplex(y - 2.0 * (a.T @ residual).astype(np.float64) / lipschitz)
        t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        momentum = (t - 1.0) / t_next
        if float((y - step) @ (step - u)) > 0:  # gradient restart: the step went uphill
            momentum, t_next = 0.0, 1.0
        y = step + momentum * (step - u)
        u, t = step, t_next
        if iterations % 20 == 0 or iterations == max_iterations:
            z = (a @ u.astype(np.float32) - target).astype(np.float64)
            value = float(weight @ (z * z))
            if not value <= 10.0 * best_value:  # diverging: back to the best point, shorter steps
                lipschitz *= 1.5
                u, y, t, history = best, best.copy(), 1.0, [np.inf]
                continue
            if value < best_value:
                best, best_value = u, value
            if scale is None:
                history.append(float(z @ z))
            elif enough is not None:  # progress on what the targets need: each group's excess
                excess = np.maximum(np.bincount(groups, weights=z * z) - enough, 0.0)
                if excess.sum() <= ENOUGH_EXCESS * enough_total:
                    break
                history.append(float(np.sum(excess / scale)))
            if len(history) > 5 and history[-1] > (1.0 - 1e-3) * history[-6]:
                break
    return ClosestFit(best, chi_square(w, best, b, sigma), iterations)


def clipped_square_moments(c: np.ndarray, noise: str) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance of ``min(Z^2, c^2)`` for unit-variance noise ``Z``, ``laplace`` or
    ``gaussian``: what a clipped chi-square term is worth where there is no signal.

    Laplace (scale ``b = 1/sqrt(2)``): ``|Z|`` is exponential, so ``E[Z^2k; |Z| < c] =
    b^2k (2k)! P(2k + 1, c / b)`` (regularised lower gamma). Gaussian: ``Z^2`` is chi-square
    with 1 degree of freedom and ``x^k f_1(x) = (2k - 1)!! f_{2k+1}(x)``, so ``E[Z^2k; Z^2 <
    t] = (2k - 1)!! F_{2k+1}(t)``.
    """
    c = np.asarray(c, dtype=np.float64)
    if noise == "laplace":
        scale = 1.0 / np.sqrt(2.0)
        tail = np.exp(-c / scale)
        inner2 = 2.0 * scale**2 * gammainc(3, c / scale)
        inner4 = 24.0 * scale**4 * gammainc(5, c / scale)
    elif noise == "gaussian":
        tail = 2.0 * norm.sf(c)
        inner2 = chi2_dist.cdf(c * c, 3)
        inner4 = 3.0 * chi2_dist.cdf(c * c, 5)
    else:
        raise ValueError(f"unknown noise {noise!r}")
    mean = inner2 + c**2 * tail
    return mean, inner4 + c**4 * tail - mean**2


STRENGTH_SIGNAL = 1.5
""":func:`james_stein_tolerance` fits a clear group to its estimated strength where its
estimated signal is at least this many times its noise (James-Stein would keep at most 0.4 of
the distance; docs/decisions/0001)."""


SINGLE_NOISE_LEVEL = 1e-3
""":func:`largest_noise_draw`'s chance that the largest noise draw of a release's relation
answers reaches the level at which one answer alone reads as a relation (a union bound)."""


def largest_noise_draw(count: int, noise: str, level: float = SINGLE_NOISE_LEVEL) -> float:
    """The ``|z|`` (unit-variance noise) that the largest of ``count`` independent draws exceeds
    with chance at most ``level``: ``ln(count / level) / sqrt(2)`` for Laplace noise (``P(|Z| >
    t) = exp(-sqrt(2) t)``), the normal quantile of ``level / (2 count)`` for Gaussian noise.
    Among 130 relation answers under Laplace noise: 8.3 noise deviations."""
    count = max(int(count), 1)
    if noise == "laplace":
        return float(np.log(count / level) / np.sqrt(2.0))
    if noise == "gaussian":
        return float(norm.isf(level / (2.0 * count)))
    raise ValueError(f"unknown noise {noise!r}")


def signal_groups(
    z_prior: np.ndarray,
    groups: np.ndarray,
    noise: str,
    clip: float = 2.5,
    significance: float = 2.0,
    single: float = np.inf,
) -> tuple[np.ndarray, np.ndarray]:
    """Per group, ``(clear, lone)``: whether its residuals from the prior (noise units) hold a
    relation beyond the noise, and whether one answer alone makes it so. Clear: the clipped
    terms ``S = sum min(z^2, c^2)`` (``c = max(clip, 3 median |z|)``) pass ``|G| m +
    significance sqrt(|G| v)`` (:func:`clipped_square_moments`). Lone: a clear group of two
    answers or more whose others, without its largest term, stay within one standard deviation
    of the noise's ``(|G| - 1) m``, and whose largest ``|z|`` lies within ``single``
    (:func:`largest_noise_draw`). Seeded, Laplace noise: of groups of five with one answer at
    6.4 deviations, 35% are clear and 14% clear but not lone; groups of 30 whose every answer
    carries a signal of 0.5-1 noise deviation are never lone, groups of five 7% of the time.
    Laplace noise puts one answer in 8,000 six deviations out; a relation moves more than one of
    its group's answers, or one beyond what the noise's largest draw reaches (the table without
    relations at epsilon 1: a pair term 6.4 deviations off in a group of five, fitted as clear,
    came back as a relation at total-variation distance 0.16 from independence)."""
    z = np.asarray(z_prior, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    size, robust, mean, var, clear, terms = _clipped_test(z, groups, noise, clip, significance)
    largest = np.zeros(size.size)
    np.maximum.at(largest, groups, terms)
    top = np.zeros(size.size)
    np.maximum.at(top, groups, np.abs(z))
    rest = np.maximum(size - 1.0, 0.0)
    quiet_rest = robust - largest <= rest * mean + np.sqrt(rest * var)
    return clear, clear & (size >= 2) & quiet_rest & (top <= single)


def _clipped_test(
    z: np.ndarray, groups: np.ndarray, noise: str, clip: float, significance: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The clipped signal test that :func:`signal_groups` and :func:`james_stein_tolerance`
    share: per group ``(|G|, S, m, v, clear)``, and each answer's clipped term
    ``min(z^2, c^2)``."""
    size = np.bincount(groups).astype(np.float64)
    median = np.array(
        [np.median(np.abs(z[groups == g])) if size[g] else 0.0 for g in range(size.size)]
    )
    c = np.maximum(clip, 3.0 * median)
    terms = np.minimum(z * z, c[groups] ** 2)
    robust = np.bincount(groups, weights=terms, minlength=size.size)
    mean, var = clipped_square_moments(c, noise)
    clear = robust > size * mean + significance * np.sqrt(size * var)
    return size, robust, mean, var, clear, terms


def james_stein_tolerance(
    z_prior: np.ndarray,
    groups: np.ndarray,
    noise: str,
    clip: float = 2.5,
    significance: float = 2.0,
    strength_signal: float | None = None,
) -> np.ndarray:
    """Per group, the chi-square per answer left by positive-part James-Stein shrinkage of its
    answers toward the prior's, capped at 1 (within the noise).

    With ``z`` the prior's residuals in noise units (``chi2_0 = sum z^2``), the shrunk answers
    ``prior + s (measured - prior)`` leave ``(1 - s)^2 chi2_0``; James-Stein takes
    ``s = 1 - |G| / chi2_0``: a group the prior fits to within the noise stays at the prior, one
    measured far from it is fitted closely. A chi-square ball of ``|G|`` moves it only
    ``1 - sqrt(|G| / chi2_0)`` of the way, which weakens every clear relation. The signal is
    judged on clipped terms, ``S = sum min(z^2, c^2)`` with ``c = max(clip, 3 median |z|)``,
    against their mean ``m`` and variance ``v`` without signal (:func:`clipped_square_moments`):
    one Laplace draw of 5 noise units among 61 answers of no relation would otherwise read as
    signal and be fitted, while a clear group, whose terms are all large, is clipped at 3x its
    median and judged as it is. Only a group with ``S > |G| m + significance sqrt(|G| v)`` is
    shrunk, by ``s = 1 - |G| m / S``; the others keep 1: a weak group, whose James-Stein factor
    is mostly noise, is fitted as the ball fits it (digits at epsilon 1 gained invented
    correlations without this test).

    James-Stein's factor minimises the answers' squared error, but it also shrinks their norm,
    the relation's strength: the fitted answers carry ``s^2 S = (1 - |G| m / S) (S - |G| m)`` of
    chi-square where the signal's estimate is ``S - |G| m``, and what follows from the relation
    (two features' correlation through a label: ``r_iL r_jL``) comes back weaker by ``s^2``.
    Where the estimated signal is at least ``strength_signal`` times the noise's
    (:data:`STRENGTH_SIGNAL` when ``None``), the group is fitted to that estimate instead:
    ``s = sqrt(1 - |G| m / S)``, the factor whose fitted chi-square is the estimated signal's.
    Which groups are clear: :func:`signal_groups`.
    """
    z = np.asarray(z_prior, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    size, robust, mean, _, clear, _ = _clipped_test(z, groups, noise, clip, significance)
    chi2 = np.bincount(groups, weights=z * z, minlength=size.size)
    kept = np.minimum(size * mean / np.maximum(robust, 1e-300), 1.0)  # 1 - s
    ratio = STRENGTH_SIGNAL if strength_signal is None else strength_signal
    strong = kept * (1.0 + ratio) <= 1.0  # S - |G| m >= ratio |G| m
    kept = np.where(strong, 1.0 - np.sqrt(1.0 - kept), kept)
    return np.where(clear, np.minimum(kept**2 * chi2 / np.maximum(size, 1.0), 1.0), 1.0)


def fit_within_noise(
    w: Values,
    b: np.ndarray,
    sigma: np.ndarray | float,
    groups: np.ndarray | None = None,
    log_prior: np.ndarray | None = None,
    slack: float = 0.05,
    tolerance: float | np.ndarray = 1.0,
    max_iterations: int = 200,
    timings: dict[str, float] | None = None,
    answer_bound: float | np.ndarray | None = None,
    start: np.ndarray | None = None,
    closest_tolerance: float | np.ndarray | None = None,
) -> tuple[MaxEntFit, ClosestFit]:
    """:func:`closest_fit`, then :func:`maxent_projection` with targets it makes feasible.

    Each group's target is ``max(tolerance |G|, (1 + slack) chi2_G(u_closest))``: within the
    noise (``tolerance = 1``) where the support can get there, else as close as the closest fit
    (a distribution, so a point that meets every target at once) gets; ``tolerance = 0`` asks
    for the closest fit, and the maximum-entropy weights among those. ``tolerance`` is one
    number or one per group. The closest fit starts from ``start`` (the prior when ``None``)
    and stops once every group is within ``tolerance |G| / (1 + slack)`` (``closest_tolerance``
    instead of ``tolerance`` when given). The dual gets at most
    ``max_iterations`` L-BFGS steps per round: where it has not converged by then,
    :func:`within_targets` brings its weights back within the targets, and where that costs
    more than :data:`RETREAT` times the dual's own KL toward a closest fit on fewer candidates,
    the dual goes on from where it stopped, for at most :data:`DUAL_ROUNDS` rounds (the fallback
    with the least KL is returned). ``timings``, when given, receives the seconds of each step.

    ``answer_bound`` (one number, or one per answer with ``inf`` for none) adds a box to the
    balls: no answer may stay more than ``max(answer_bound, sqrt(1 + slack) |z_closest|)`` noise
    units from its measurement. With the
    balls alone the fit leaves a group's whole slack on the answers that need the largest tilt
    from the prior (the residual of each answer is proportional to its dual variable), so its
    strongest relation comes back weakened by up to ``sqrt(|G|)`` noise units.

    Returns:
        ``(maximum-entropy fit, closest fit)``.
    """
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), b.shape)
    groups = (
        np.zeros(b.size, dtype=np.int64) if groups is None else np.asarray(groups, dtype=np.int64)
    )
    sizes = np.bincount(groups).astype(np.float64)
    if start is None and log_prior is not None:
        start = np.exp(np.asarray(log_prior) - np.max(log_prior))
    clock = time.perf_counter()
    stop = tolerance if closest_tolerance is None else closest_tolerance
    closest = closest_fit(w, b, sigma, groups, stop * sizes / (1.0 + slack), start)
    z_closest = (_times(w, closest.weights) - b) / sigma
    targets = np.maximum(
        tolerance * sizes, (1.0 + slack) * np.bincount(groups, weights=z_closest * z_closest)
    )
    targets = np.maximum(targets, 1e-6 * sizes)  # keep every ball non-degenerate
    bounds = None
    if answer_bound is not None:
        bounds = np.maximum(answer_bound, np.sqrt(1.0 + slack) * np.abs(z_closest))
    middle = time.perf_counter()
    projected = maxent_projection(w, b, sigma, targets, groups, log_prior, max_iterations, bounds)
    fit = within_targets(
        projected, closest.weights, w, b, sigma, targets, groups, log_prior, bounds
    )
    steps = projected.iterations
    for _ in range(DUAL_ROUNDS - 1):
        if not needs_another_round(projected, fit, closest.weights):
            break
        projected = maxent_projection(
            w,
            b,
            sigma,
            targets,
            groups,
            log_prior,
            max_iterations,
            bounds,
            start_dual=projected.dual,
        )
        steps += projected.iterations
        if projected.iterations == 0:  # the line search cannot go on from where it stopped
            break
        again = within_targets(
            projected, closest.weights, w, b, sigma, targets, groups, log_prior, bounds
        )
        fit = again if again.kl < fit.kl else fit
    fit = dataclasses.replace(fit, iterations=steps)
    if timings is not None:
        timings["closest"] = middle - clock
        timings["maxent"] = time.perf_counter() - middle
    return fit, closest


def needs_another_round(projected: MaxEntFit, fallback: MaxEntFit, closest: np.ndarray) -> bool:
    """Whether a dual stopped at its cap (``projected``) should go on: its way back within the
    targets (``fallback``, by :func:`within_targets`) costs more than :data:`RETREAT` times its
    KL plus 0.01 nats, toward a ``closest`` fit that spreads over fewer candidates than the
    dual's weights (:func:`effective_support`)."""
    if projected.converged or projected.dual is None:
        return False
    return fallback.kl > RETREAT * projected.kl + 0.01 and effective_support(
        closest
    ) < effective_support(projected.weights)


def within_targets(
    fit: MaxEntFit,
    feasible: np.ndarray,
    w: Values,
    b: np.ndarray,
    sigma: np.ndarray,
    targets: np.ndarray,
    groups: np.ndarray,
    log_prior: np.ndarray | None,
    bounds: np.ndarray | None = None,
) -> MaxEntFit:
    """The point of the segment from ``feasible`` (a distribution within every target and
    ``bounds``) to ``fit.weights`` that is within every target and bound and closest to the prior.

    When the dual solver stops before it converges (its iteration cap at high precision), its
    weights may miss some targets by far; the targets are convex in ``u``, so the part of the
    segment within them is an interval ``[0, a]`` that contains the feasible end, and KL to the
    prior is convex along it. A converged fit is returned as it is.
    """
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), b.shape)
    z_end = (_times(w, fit.weights) - b) / sigma
    size = targets.size
    box = np.inf if bounds is None else np.asarray(bounds, dtype=np.float64)
    if np.all(
        np.bincount(groups, weights=z_end * z_end, minlength=size) <= targets * (1 + 1e-6)
    ) and np.all(np.abs(z_end) <= box * (1 + 1e-6)):
        return fit
    z0 = (_times(w, feasible) - b) / sigma
    dz = z_end - z0
    # chi2_G(t) = qa t^2 + 2 qb t + qc, convex in t; the largest t in [0, 1] with chi2_G(t) <=
    # target.
    qa = np.bincount(groups, weights=dz * dz, minlength=size)
    qb = np.bincount(groups, weights=z0 * dz, minlength=size)
    qc = np.bincount(groups, weights=z0 * z0, minlength=size)
    disc = np.maximum(qb * qb - qa * (qc - targets), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        roots = np.where(qa > 0, (-qb + np.sqrt(disc)) / qa, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):  # |z0 + t dz| <= bound, answer by answer
        edges = np.where(dz != 0, (np.sign(dz) * box - z0) / dz, np.inf)
    reach = float(np.clip(min(np.min(roots), np.min(edges, initial=np.inf)), 0.0, 1.0))
    log_u0 = (
        np.zeros(feasible.size) if log_prior is None else np.asarray(log_prior, dtype=np.float64)
    )
    log_u0 = log_u0 - logsumexp(log_u0)
    direction = fit.weights - feasible

    def kl(t: float) -> float:
        u = feasible + t * direction
        positive = u > 0
        return float(np.sum(u[positive] * (np.log(u[positive]) - log_u0[positive])))

    lo, hi = 0.0, reach  # golden-section search of the convex KL on [0, reach]
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(40):
        m1, m2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if kl(m1) <= kl(m2):
            hi = m2
        else:
            lo = m1
    t = 0.5 * (lo + hi)
    u = feasible + t * direction
    u = np.maximum(u, 0.0) / np.maximum(u, 0.0).sum()
    return MaxEntFit(u, chi_square(w, u, b, sigma), kl(t), fit.iterations, False)
