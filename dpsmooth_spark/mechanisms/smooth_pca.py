"""The practical synthetic-database mechanism of Wang et al. (2016), Section 5.2.

Stages, each a function of the previous stages' DP outputs and of the exact sums:

1. noisy count (sensitivity 1);
2. noisy basis sums ``sum_x prod_i T_{r_i}(x_i)`` over R multi-indices (L1 sensitivity R,
   L2 sensitivity sqrt(R)); the basis is picked from the noisy count when ``basis: auto``;
3. optionally Private Subspace Iteration (Algorithm 4) on the centred second moment;
4. post-processing: C candidates around a private centre, the L1 fit
   ``min ||W u - b||_1, u >= 0, sum u = 1`` (OR-Tools), sampling of records from ``u``.

Nothing here imports Spark: the exact sums come from :func:`dpsmooth_spark.core.basis.partial_sums`
run locally or in Spark executors.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsmooth_spark.core.basis import BasisSet, ExactSums, PassSpec, PublicBounds, partial_sums
from dpsmooth_spark.core.candidates import ellipsoid_candidates, gaussian_candidates, nearest_psd
from dpsmooth_spark.core.lp import solve_l1_fit
from dpsmooth_spark.core.sampling import sample_records
from dpsmooth_spark.core.subspace import SubspaceEstimate, private_subspace_iteration
from dpsmooth_spark.mechanisms.stages import add_noise, release_basis_sums, release_count
from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

VARIANCE_FLOOR = 1e-4
"""Smallest per-axis variance (scaled units) used for candidates: keeps the cloud non-degenerate."""


class SmoothPCAParams(BaseModel):
    """Mechanism parameters; defaults chosen from ``scripts/bench_wdbc.py`` measurements (docs/benchmarks.md).

    Attributes:
        basis: ``marginal`` (``T_r(x_i)``), ``pairwise`` (plus ``T_r(x_i) T_s(x_j)``) or ``auto``:
            the largest set in :data:`AUTO_BASES` whose per-function noise, predicted from the
            noisy count, stays below ``auto_noise_target``.
        degree: highest per-coordinate degree (with ``basis`` fixed); ``auto`` allows up to 4.
        candidates: number of candidate points C.
        candidate_strategy: ``moments`` (Gaussian with the private mean and covariance read off
            the basis sums: no extra budget), ``psi`` (the paper's private PCA ellipsoid) or
            ``auto``: ``moments`` when the basis has every pair term (the covariance then comes
            free with the basis sums), ``psi`` otherwise (anchor pairs alone are not enough).
        pca_dim: k of PSI (default ``min(2, d)``).
        pca_iterations: T of PSI.
        count_fraction: share of the budget for the count.
        psi_fraction: share of the budget for PSI when it runs.
        spread: multiplier of the private standard deviations for the candidate cloud.
        jitter: per-column standard deviation of the post-processing neighbourhood, as a fraction
            of the private per-column standard deviation (0 disables it).
        uniform_fraction: share of the C candidates drawn uniformly from the whole cube (wide
            support lets the LP reach noisy targets the private cloud cannot).
        auto_noise_target: per-function noise standard deviation (normalised) that ``auto`` allows.
        max_functions: largest basis (R, before anchor terms) that ``auto`` may pick; caps the
            driver LP, whose time grows about as R^2 C (measured in the 10^6-row, d = 30 job at
            C = 3000: R = 495 24 s, R = 1395 139 s; docs/benchmarks.md). ``None``: no cap.
        lp_solver: OR-Tools backend.
        pair_columns: anchor columns (e.g. a label) whose first-order interaction with every
            other column is added to the basis (``T_1(x_a) T_1(x_j)``): keeps their correlations
            for d - 1 extra functions each.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    basis: Literal["auto", "marginal", "pairwise"] = "auto"
    degree: int | None = Field(default=None, ge=1, le=8)
    candidates: int = Field(default=3000, ge=10, le=200_000)
    candidate_strategy: Literal["auto", "moments", "psi"] = "auto"
    pca_dim: int | None = Field(default=None, ge=1)
    pca_iterations: int = Field(default=5, ge=1, le=100)
    count_fraction: float = Field(default=0.05, gt=0, lt=0.5)
    psi_fraction: float = Field(default=0.1, gt=0, lt=0.9)
    spread: float = Field(default=1.2, gt=0, le=10)
    jitter: float = Field(default=0.3, ge=0, le=2)
    uniform_fraction: float = Field(default=0.0, ge=0, le=1)
    auto_noise_target: float = Field(default=0.02, gt=0)
    max_functions: int | None = Field(default=None, ge=1)
    lp_solver: Literal["glop", "pdlp", "clp"] = "glop"
    pair_columns: tuple[str, ...] = ()

    def data_pass_degree(self) -> int:
        """Chebyshev degree the data pass must compute for any basis this config may pick."""
        if self.degree is not None:
            return self.degree
        return max(spec[1] for spec in AUTO_BASES) if self.basis == "auto" else 2

    def pass_spec(self) -> PassSpec:
        """What the data pass computes for this mechanism (the Gram matrix only)."""
        return PassSpec(self.data_pass_degree())


AUTO_BASES: tuple[tuple[str, int], ...] = (
    ("marginal", 2),
    ("marginal", 3),
    ("marginal", 4),
    ("pairwise", 2),
    ("pairwise", 3),
)
"""Basis sets that ``basis: auto`` chooses from, smallest first."""


def build_basis(kind: str, d: int, degree: int) -> BasisSet:
    """The basis set named by ``kind`` at per-coordinate ``degree``."""
    if kind == "marginal":
        return BasisSet.marginal(d, degree)
    if kind == "pairwise":
        return BasisSet.pairwise(d, degree)
    raise ValueError(f"unknown basis {kind!r}")


def per_function_noise(size: int, noisy_count: float, accountant: PrivacyAccountant, budget: float) -> float:
    """Predicted std of one normalised basis answer ``(sum + noise) / n~`` (public inputs only)."""
    if accountant.pure:
        std = math.sqrt(2.0) * accountant.noise_scale(sensitivity.basis_sums_l1(size), budget)
    else:
        std = accountant.noise_scale(sensitivity.basis_sums_l2(size), budget)
    return std / max(noisy_count, 1.0)


def choose_basis(
    params: SmoothPCAParams, d: int, noisy_count: float, accountant: PrivacyAccountant, budget: float,
    anchors: tuple[int, ...] = (),
) -> BasisSet:
    """Pick the basis: fixed by ``params`` or, for ``auto``, the largest affordable one; every
    option includes the anchor columns' pair terms."""
    if params.basis != "auto":
        return build_basis(params.basis, d, params.degree or 2).with_anchor_pairs(anchors)
    options = [spec for spec in AUTO_BASES if params.degree is None or spec[1] <= params.degree]
    chosen = build_basis(options[0][0], d, options[0][1]).with_anchor_pairs(anchors)
    for kind, degree in options[1:]:
        base = build_basis(kind, d, degree)
        if params.max_functions is not None and base.size > params.max_functions:
            continue
        candidate = base.with_anchor_pairs(anchors)
        if per_function_noise(candidate.size, noisy_count, accountant, budget) <= params.auto_noise_target:
            chosen = candidate
    return chosen


@dataclass
class NoisySummary:
    """Everything the mechanism releases before post-processing; all of it is DP.

    Attributes:
        bounds: column names and public bounds.
        basis: the multi-indices.
        noisy_count: count plus noise.
        noisy_sums: basis sums plus noise, ``(R,)``.
        pca: PSI output when the ``psi`` strategy ran.
    """

    bounds: PublicBounds
    basis: BasisSet
    noisy_count: float
    noisy_sums: np.ndarray
    pca: SubspaceEstimate | None = None

    @property
    def normalised(self) -> np.ndarray:
        """Noisy basis answers ``b~_r = (sum_r + noise) / max(n~, 1)`` (the LP target)."""
        return self.noisy_sums / max(self.noisy_count, 1.0)

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Private mean and covariance (scaled units) read off the basis answers.

        Uses ``x = T_1(x)``, ``x^2 = (T_2(x) + 1) / 2`` and ``x_i x_j = T_1(x_i) T_1(x_j)``;
        entries without a matching basis function fall back to the uniform distribution's
        (variance 1/3, covariance 0).
        """
        d = self.basis.d
        b = self.normalised
        lookup = {tuple(idx): j for j, idx in enumerate(self.basis.indices)}

        def answer(*pairs: tuple[int, int]) -> float | None:
            idx = [0] * d
            for i, r in pairs:
                idx[i] = r
            j = lookup.get(tuple(idx))
            return None if j is None else float(b[j])

        mean = np.array([answer((i, 1)) or 0.0 for i in range(d)])
        mean = np.clip(mean, -1.0, 1.0)
        cov = np.zeros((d, d))
        for i in range(d):
            t2 = answer((i, 2))
            cov[i, i] = (t2 + 1.0) / 2.0 - mean[i] ** 2 if t2 is not None else 1.0 / 3.0
            for j in range(i + 1, d):
                t11 = answer((i, 1), (j, 1))
                if t11 is not None:
                    cov[i, j] = cov[j, i] = t11 - mean[i] * mean[j]
        np.fill_diagonal(cov, np.clip(np.diag(cov), VARIANCE_FLOOR, 1.0))
        return mean, nearest_psd(cov, VARIANCE_FLOOR)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoisySummary:
        """Inverse of :meth:`to_dict` (a retry reloads the persisted summary with it)."""
        indices = np.array(data["multi_indices"], dtype=np.int64)
        d = len(data["columns"])
        bounds = PublicBounds(tuple(data["columns"]), np.array(data["lower"], float),
                              np.array(data["upper"], float))
        basis = BasisSet(d, int(indices.max(initial=1)), indices.reshape(-1, d))
        pca = None
        if "pca" in data:
            pca = SubspaceEstimate(np.array(data["pca"]["vectors"], float),
                                   np.array(data["pca"]["eigenvalues"], float)
                                   * max(data["noisy_count"], 1.0))
        return cls(bounds, basis, float(data["noisy_count"]), np.array(data["noisy_sums"], float), pca)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form of the summary (the ``summary.json`` of a release)."""
        out: dict[str, Any] = {
            "columns": list(self.bounds.columns),
            "lower": self.bounds.lower.tolist(),
            "upper": self.bounds.upper.tolist(),
            "scaling": "x_scaled = 2 (x - lower) / (upper - lower) - 1, clamped to [-1, 1]",
            "basis_function": "prod_i T_{r_i}(x_scaled_i), T_r = Chebyshev polynomial = cos(r arccos x)",
            "noisy_count": self.noisy_count,
            "multi_indices": self.basis.indices.tolist(),
            "noisy_sums": self.noisy_sums.tolist(),
            "noisy_means": self.normalised.tolist(),
        }
        if self.pca is not None:
            out["pca"] = {
                "vectors": self.pca.vectors.tolist(),
                "eigenvalues": (self.pca.values / max(self.noisy_count, 1.0)).tolist(),
            }
        return out


def release_summary(
    sums: ExactSums,
    bounds: PublicBounds,
    params: SmoothPCAParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    rng: np.random.Generator,
) -> NoisySummary:
    """Spend the whole budget of ``accountant`` on the DP statistics of the mechanism."""
    d = sums.d
    noisy_count = release_count(sums.count, params.count_fraction, accountant, noise)

    rest = 1.0 - params.count_fraction
    psi_share = 0.0
    strategy = params.candidate_strategy
    basis_budget = accountant.share(rest)
    anchors = tuple(bounds.columns.index(c) for c in params.pair_columns)
    basis = choose_basis(params, d, noisy_count, accountant, basis_budget, anchors)
    if strategy == "auto":
        pair_terms = int(((basis.indices != 0).sum(axis=1) == 2).sum())
        full_covariance = pair_terms >= d * (d - 1) // 2  # anchor pairs alone are not enough
        strategy = "moments" if full_covariance or d < 2 else "psi"
    if strategy == "psi":
        psi_share = params.psi_fraction
        basis_budget = accountant.share(rest - psi_share)
        basis = choose_basis(params, d, noisy_count, accountant, basis_budget, anchors)

    noisy_sums, _ = release_basis_sums(sums.basis_sums(basis), basis_budget, accountant, noise)
    summary = NoisySummary(bounds, basis, noisy_count, noisy_sums)

    if strategy == "psi":
        summary.pca = _run_psi(sums, summary, params, accountant, noise, rng,
                               accountant.share(psi_share))
    return summary


def _run_psi(sums: ExactSums, summary: NoisySummary, params: SmoothPCAParams,
             accountant: PrivacyAccountant, noise: NoiseSource, rng: np.random.Generator,
             budget: float) -> SubspaceEstimate:
    """Algorithm 4 on the second moment, centred with the private mean (privacy.md section 4)."""
    d = sums.d
    k = min(params.pca_dim or 2, d)
    iterations = params.pca_iterations
    if accountant.pure:
        sens = sensitivity.psi_product_l1(d, k)
    else:
        sens = sensitivity.psi_product_l2(d)
    scale = accountant.noise_scale(sens, budget, invocations=iterations)
    second = sums.second_moments()
    mean, _ = summary.moments()
    offset = -max(summary.noisy_count, 1.0) * np.outer(mean, mean)
    estimate = private_subspace_iteration(
        data_product=lambda x: second @ x,
        public_product=lambda x: offset @ x,
        perturb=lambda m: add_noise(m, scale, accountant, noise),
        d=d, k=k, iterations=iterations, rng=rng,
    )
    accountant.charge("psi", sens, scale, invocations=iterations)
    return estimate


def make_candidates(summary: NoisySummary, params: SmoothPCAParams, rng: np.random.Generator) -> np.ndarray:
    """C candidate points (scaled units) from the summary's DP values only."""
    wide = round(params.uniform_fraction * params.candidates)
    cloud = _private_cloud(summary, params, params.candidates - wide, rng)
    return np.vstack([cloud, rng.uniform(-1.0, 1.0, size=(wide, summary.basis.d))])


def _private_cloud(summary: NoisySummary, params: SmoothPCAParams, count: int,
                   rng: np.random.Generator) -> np.ndarray:
    mean, cov = summary.moments()
    if summary.pca is not None:
        n = max(summary.noisy_count, 1.0)
        variances = np.clip(summary.pca.values / n, VARIANCE_FLOOR, 1.0)
        k = variances.shape[0]
        d = mean.shape[0]
        residual = max(np.trace(cov) - variances.sum(), 0.0) / max(d - k, 1)
        return ellipsoid_candidates(mean, summary.pca.vectors, variances,
                                    max(residual, VARIANCE_FLOOR), count, params.spread, rng)
    return gaussian_candidates(mean, cov, count, params.spread, rng)


@dataclass
class SynthesisResult:
    """State of a fitted synthesizer (all of it DP).

    Attributes:
        summary: the noisy summary.
        candidates: ``(C, d)`` support points (scaled units).
        weights: ``(C,)`` the LP's distribution.
        lp_objective: ``||W u - b~||_1``.
        jitter: per-column neighbourhood standard deviation (scaled units).
        timings: seconds per driver stage.
    """

    summary: NoisySummary
    candidates: np.ndarray
    weights: np.ndarray
    lp_objective: float
    jitter: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def support_size(self) -> int:
        """Candidates that carry mass."""
        return int((self.weights > 0).sum())


def fit_from_summary(summary: NoisySummary, params: SmoothPCAParams,
                     rng: np.random.Generator) -> SynthesisResult:
    """Post-processing only (no privacy cost): candidates, the L1 fit and the jitter scale."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    candidates = make_candidates(summary, params, rng)
    w = summary.basis.evaluate(candidates)
    timings["candidates"] = time.perf_counter() - start

    start = time.perf_counter()
    fit = solve_l1_fit(w, summary.normalised, solver=params.lp_solver)
    timings["lp"] = time.perf_counter() - start

    _, cov = summary.moments()
    jitter = params.jitter * np.sqrt(np.diag(cov))
    return SynthesisResult(summary, candidates, fit.weights, fit.objective, jitter, timings)


def fit_from_sums(
    sums: ExactSums,
    bounds: PublicBounds,
    params: SmoothPCAParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    rng: np.random.Generator,
) -> SynthesisResult:
    """Every driver stage: the DP statistics, then :func:`fit_from_summary`."""
    start = time.perf_counter()
    summary = release_summary(sums, bounds, params, accountant, noise, rng)
    elapsed = time.perf_counter() - start
    result = fit_from_summary(summary, params, rng)
    result.timings = {"noise_and_psi": elapsed, **result.timings}
    return result


def sample_scaled(result: SynthesisResult, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` synthetic records in scaled units [-1, 1]^d."""
    return sample_records(result.candidates, result.weights, rows, result.jitter, rng)


class SmoothSynthesizer:
    """Library entry point with scikit-learn conventions.

    ``SmoothSynthesizer(epsilon=1.0, bounds={"x": (0, 10)}).fit(df).sample(10_000)``

    Args:
        epsilon: privacy budget (> 0).
        bounds: public ``{column: (lower, upper)}``; never derived from the data.
        delta: 0 for pure epsilon-DP, > 0 for the Gaussian (epsilon, delta) mode.
        params: mechanism parameters.
        random_state: a seed selects TEST MODE (seeded, non-secure noise); ``None`` is secure.
    """

    def __init__(
        self,
        epsilon: float,
        bounds: dict[str, tuple[float, float]],
        delta: float = 0.0,
        params: SmoothPCAParams | None = None,
        random_state: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.bounds = bounds
        self.public_bounds = PublicBounds.from_mapping(bounds)
        self.delta = delta
        self.params = params or SmoothPCAParams()
        self.random_state = random_state

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng(self.random_state)

    def fit(self, table: Any) -> SmoothSynthesizer:
        """Fit on a pandas DataFrame, pyarrow Table or mapping of column arrays (in memory)."""
        domain = self.public_bounds
        data = np.column_stack([_column(table, c) for c in domain.columns])
        sums = partial_sums([data], domain.lower, domain.upper, self.params.data_pass_degree())
        return self.fit_sums(sums)

    def fit_sums(self, sums: ExactSums) -> SmoothSynthesizer:
        """Fit from exact sums computed elsewhere (e.g. the Spark data pass)."""
        rng = self._rng()
        noise = NoiseSource(rng if self.random_state is not None else None)
        self.accountant_ = PrivacyAccountant(self.epsilon, self.delta)
        self.result_ = fit_from_sums(sums, self.public_bounds, self.params, self.accountant_, noise, rng)
        self.noise_ = noise
        self.sampling_rng_ = rng
        return self

    def sample(self, rows: int | None = None) -> dict[str, np.ndarray]:
        """Synthetic records in original units, as ``{column: array}``; default rows = noisy count."""
        if rows is None:
            rows = max(1, round(self.result_.summary.noisy_count))
        values = self.public_bounds.unscale(sample_scaled(self.result_, rows, self.sampling_rng_))
        return {name: values[:, i] for i, name in enumerate(self.public_bounds.columns)}


def _column(table: Any, name: str) -> np.ndarray:
    col = table[name]
    if hasattr(col, "to_numpy"):
        try:
            return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        except TypeError:
            return np.asarray(col.to_numpy(), dtype=np.float64)
    return np.asarray(col, dtype=np.float64)


__all__ = [
    "NoisySummary",
    "SmoothPCAParams",
    "SmoothSynthesizer",
    "SynthesisResult",
    "fit_from_summary",
    "fit_from_sums",
    "release_summary",
    "sample_scaled",
]
