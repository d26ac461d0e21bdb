"""Stage 3, fit: weights on the candidates from the measurements (post-processing only).

First the paper's reduced LP ``min ||W u - b||_1, u >= 0, sum u = 1`` (OR-Tools): its optimum is
the closest the candidates can come to the noisy answers and certifies what is reachable. Then,
with ``fit: maxent``, the distribution closest (in KL) to the independent-columns prior among
those whose chi-square to the measurements is at most ``max(R, (1 + slack) chi2(u_LP))``: fit to
within the noise when the candidates allow it, else as close as the LP got. Relations the
measurements cannot tell from noise stay independent, and mass stays spread over the candidates.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from dpsmooth_spark.core.basis import HistogramBasis
from dpsmooth_spark.core.lp import solve_l1_fit
from dpsmooth_spark.core.maxent import fit_within_noise
from dpsmooth_spark.mechanisms.smooth_pca.candidates import Candidates, make_candidates
from dpsmooth_spark.mechanisms.smooth_pca.measure import Measurement, NoisySummary, measurements
from dpsmooth_spark.mechanisms.smooth_pca.params import SmoothPCAParams

JOINT_MARGINAL_TOLERANCE = 0.1
"""Chi-square per answer the joint fit may leave on a one-way marginal: it keeps the marginals
the candidates were drawn from (a target of 0 would make the dual ill-conditioned)."""


@dataclass
class SynthesisResult:
    """State of a fitted synthesizer (all of it DP).

    Attributes:
        summary: the noisy summary.
        candidates: ``(C, d)`` support points (scaled units).
        weights: ``(C,)`` the fitted distribution.
        lp_objective: ``||W u - b~||_1`` at the LP's solution (the LP weighs answers by noise).
        fit_objective: ``||W u - b~||_1`` of ``weights``.
        chi2: ``sum ((W u - b~) / sigma)^2`` of ``weights``; ``functions`` is its expectation
            for the true table.
        functions: number of measured functions R.
        kl: ``KL(weights || independent prior)`` in nats.
        jitter: per-column neighbourhood standard deviation (scaled units).
        timings: seconds per driver stage.
    """

    summary: NoisySummary
    candidates: np.ndarray
    weights: np.ndarray
    lp_objective: float
    fit_objective: float
    chi2: float
    functions: int
    kl: float
    jitter: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def support_size(self) -> int:
        """Effective number of candidates carrying mass, ``1 / sum u^2``."""
        return round(1.0 / float(np.sum(self.weights**2)))


def fit_weights(w: np.ndarray, b: np.ndarray, sigma: np.ndarray, groups: np.ndarray,
                tolerance: np.ndarray, support: Candidates,
                params: SmoothPCAParams) -> tuple[np.ndarray, float, float]:
    """``(weights, ||W u_LP - b||_1, KL to the prior)`` for basis values ``w`` at the candidates;
    the LP weighs each answer by its noise."""
    if params.fit == "maxent":
        projected, lp = fit_within_noise(w, b, sigma, groups, support.log_prior,
                                         params.fit_slack, params.lp_solver, tolerance)
        return projected.weights, float(np.abs(w @ lp.weights - b).sum()), projected.kl
    lp = solve_l1_fit(w / sigma[:, None], b / sigma, solver=params.lp_solver)
    prior = np.exp(support.log_prior - support.log_prior.max())
    prior /= prior.sum()
    positive = lp.weights > 0
    kl = float(np.sum(lp.weights[positive] * np.log(lp.weights[positive] / prior[positive])))
    return lp.weights, float(np.abs(w @ lp.weights - b).sum()), kl


def _keep_prior_marginals(found: list[Measurement], support: Candidates) -> list[Measurement]:
    """Let each histogram group leave at least the chi-square of the marginal the candidates were
    drawn from (a shrunk histogram is not pulled back to the noisy one)."""
    out = []
    for m in found:
        if isinstance(m.queries, HistogramBasis):
            d, bins = m.queries.d, m.queries.bins
            probs = support.marginals.probabilities
            prior = probs.reshape(d, bins, -1).sum(axis=2).ravel()
            chi2 = np.bincount(m.groups, weights=((prior - m.values) / m.std) ** 2, minlength=d)
            m = dataclasses.replace(m, tolerance=np.maximum(m.tolerance, chi2 / bins))
        out.append(m)
    return out


def fit_from_summary(summary: NoisySummary, params: SmoothPCAParams, rng: np.random.Generator,
                     lattice: np.ndarray | None = None) -> SynthesisResult:
    """Candidates, then the fit, then the sampling neighbourhood.

    ``lattice[j] = L > 0`` marks a column whose values are ``L`` equally spaced points from -1 to
    1 (integer, date, boolean and categorical columns, ``core/columns.py``): its candidates sit on
    those points, as the data do, and it gets no jitter.
    """
    timings: dict[str, float] = {}
    start = time.perf_counter()
    support = make_candidates(summary, params, rng, lattice)
    found = _keep_prior_marginals(
        measurements(summary, max(params.marginal_tolerance or 0.0, JOINT_MARGINAL_TOLERANCE)), support)
    w = np.vstack([m.queries.evaluate(support.points) for m in found])
    b = np.concatenate([m.values for m in found])
    sigma = np.concatenate([np.broadcast_to(m.std, m.values.shape) for m in found])
    offsets = np.cumsum([0] + [int(m.groups.max()) + 1 for m in found])
    groups = np.concatenate([m.groups + off for m, off in zip(found, offsets)])
    tolerance = np.concatenate([m.tolerance for m in found])
    timings["candidates"] = time.perf_counter() - start

    start = time.perf_counter()
    weights, lp_objective, kl = fit_weights(w, b, sigma, groups, tolerance, support, params)
    timings["fit"] = time.perf_counter() - start

    centres = support.marginals.centres(support.marginals.cells)
    probs = support.marginals.probabilities
    spread = np.sqrt(np.maximum(probs @ centres**2 - (probs @ centres) ** 2, 1e-8))
    jitter = params.jitter * spread
    if lattice is not None:
        jitter = np.where(np.asarray(lattice) > 0, 0.0, jitter)
    residual = w @ weights - b
    return SynthesisResult(summary, support.points, weights, lp_objective,
                           float(np.abs(residual).sum()), float(((residual / sigma) ** 2).sum()),
                           int(b.size), kl, jitter, timings)
