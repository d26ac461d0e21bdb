"""Stage 1, measure: every DP statistic of the mechanism, from the exact sums of the data pass.

1. the noisy count (sensitivity 1);
2. noisy basis sums ``sum_x prod_i T_{r_i}(x_i)`` over R multi-indices (L1 sensitivity R,
   L2 sqrt(R)); the basis is picked from the noisy count when ``basis: auto``;
3. with the ``psi`` strategy: Private Subspace Iteration (Algorithm 4) on the centred second
   moment, then the noisy sums of ``T_2`` along each of its k directions (L1 sensitivity k),
   which say how strongly the columns vary together along them.

The result is a :class:`NoisySummary`; :func:`measurements` turns it into plain measurements
(what each covers, its noisy answers, their noise) for the fit. Everything later is
post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsmooth_spark.core.basis import BasisSet, ExactSums, ProjectionBasis, PublicBounds
from dpsmooth_spark.core.candidates import nearest_psd
from dpsmooth_spark.core.subspace import SubspaceEstimate, private_subspace_iteration
from dpsmooth_spark.mechanisms.smooth_pca.params import SmoothPCAParams, choose_basis
from dpsmooth_spark.mechanisms.stages import add_noise, noise_std, release_basis_sums, release_count
from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

PSI_NOISE_TARGET = 0.05
"""``candidate_strategy: auto`` runs PSI only when the noise of one entry of its normalised matrix
product, predicted from the noisy count, is below this; else the budget goes to the basis."""
VARIANCE_FLOOR = 1e-4
"""Smallest per-axis variance (scaled units) of the private moments: keeps them non-degenerate."""


@dataclass(frozen=True)
class Measurement:
    """One group of released statistics, as plain data (Private-PGM's measurement tuple).

    Attributes:
        name: what it is (``basis``, ``directions``).
        queries: the functions (``evaluate(points) -> (R, C)``).
        values: ``(R,)`` noisy answers, normalised by the noisy count.
        std: noise standard deviation of each normalised answer.
        groups: ``(R,)`` labels ``0 .. G-1``: answers the fit must match to within their noise
            together (one column's marginal, one hub column's pairs).
    """

    name: str
    queries: BasisSet | ProjectionBasis
    values: np.ndarray
    std: float
    groups: np.ndarray


@dataclass
class NoisySummary:
    """Everything the mechanism releases before post-processing; all of it is DP.

    Attributes:
        bounds: column names and public bounds.
        basis: the multi-indices.
        noisy_count: count plus noise.
        noisy_sums: basis sums plus noise, ``(R,)``.
        basis_noise_std: standard deviation of the noise of each basis sum.
        pca: PSI output when the ``psi`` strategy ran.
        directions: the k private directions measured after PSI.
        direction_sums: ``T_2`` sums along them plus noise, ``(k,)``.
        direction_noise_std: standard deviation of the noise of each direction sum.
    """

    bounds: PublicBounds
    basis: BasisSet
    noisy_count: float
    noisy_sums: np.ndarray
    basis_noise_std: float
    pca: SubspaceEstimate | None = None
    directions: ProjectionBasis | None = None
    direction_sums: np.ndarray | None = None
    direction_noise_std: float = 0.0

    @property
    def normalised(self) -> np.ndarray:
        """Noisy basis answers ``b~_r = (sum_r + noise) / max(n~, 1)``."""
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

        mean = np.clip(np.array([answer((i, 1)) or 0.0 for i in range(d)]), -1.0, 1.0)
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

    @property
    def has_all_pairs(self) -> bool:
        """Whether the basis measures ``T_1(x_i) T_1(x_j)`` for every pair of columns."""
        d = self.basis.d
        first_pairs = ((self.basis.indices == 1).sum(axis=1) == 2) & (
            (self.basis.indices != 0).sum(axis=1) == 2)
        return d < 2 or int(first_pairs.sum()) >= d * (d - 1) // 2

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoisySummary:
        """Inverse of :meth:`to_dict` (a retry reloads the persisted summary with it)."""
        if "basis_noise_std" not in data:
            raise ValueError("the persisted statistics predate this version of the mechanism "
                             "(no noise scales); release under a new release id")
        indices = np.array(data["multi_indices"], dtype=np.int64)
        d = len(data["columns"])
        bounds = PublicBounds(tuple(data["columns"]), np.array(data["lower"], float),
                              np.array(data["upper"], float))
        basis = BasisSet(d, int(indices.max(initial=1)), indices.reshape(-1, d))
        noisy_count = float(data["noisy_count"])
        summary = cls(bounds, basis, noisy_count, np.array(data["noisy_sums"], float),
                      float(data["basis_noise_std"]))
        if "pca" in data:
            summary.pca = SubspaceEstimate(np.array(data["pca"]["vectors"], float),
                                           np.array(data["pca"]["eigenvalues"], float)
                                           * max(noisy_count, 1.0))
        if "directions" in data:
            summary.directions = ProjectionBasis(np.array(data["directions"]["vectors"], float))
            summary.direction_sums = np.array(data["directions"]["noisy_sums"], float)
            summary.direction_noise_std = float(data["directions"]["noise_std"])
        return summary

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
            "basis_noise_std": self.basis_noise_std,
        }
        if self.pca is not None:
            out["pca"] = {
                "vectors": self.pca.vectors.tolist(),
                "eigenvalues": (self.pca.values / max(self.noisy_count, 1.0)).tolist(),
            }
        if self.directions is not None and self.direction_sums is not None:
            out["directions"] = {
                "function": "T_2(v . x_scaled), ||v||_1 = 1",
                "vectors": self.directions.directions.tolist(),
                "noisy_sums": self.direction_sums.tolist(),
                "noise_std": self.direction_noise_std,
            }
        return out


def basis_groups(basis: BasisSet) -> np.ndarray:
    """Group of each basis function: ``T_r(x_i)`` by column ``i``; a pair term by its hub, the
    column of the two that is in more pair terms (an anchor such as a label), ties to the first."""
    nonzero = basis.indices != 0
    pairs = nonzero.sum(axis=1) == 2
    degree = nonzero[pairs].sum(axis=0)
    keys = []
    for row, mask in zip(basis.indices, nonzero):
        cols = np.flatnonzero(mask)
        if cols.size == 1:
            keys.append((0, int(cols[0])))
        else:
            hub = int(cols[0]) if degree[cols[0]] >= degree[cols[1]] else int(cols[1])
            keys.append((1, hub))
    _, labels = np.unique(np.array(keys).reshape(-1, 2), axis=0, return_inverse=True)
    return labels.reshape(-1).astype(np.int64)


def measurements(summary: NoisySummary) -> list[Measurement]:
    """The summary's statistics as measurements for the fit (normalised by the noisy count)."""
    n = max(summary.noisy_count, 1.0)
    out = [Measurement("basis", summary.basis, summary.normalised, summary.basis_noise_std / n,
                       basis_groups(summary.basis))]
    if summary.directions is not None and summary.direction_sums is not None:
        out.append(Measurement("directions", summary.directions, summary.direction_sums / n,
                               summary.direction_noise_std / n,
                               np.zeros(summary.directions.size, dtype=np.int64)))
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
    anchors = tuple(bounds.columns.index(c) for c in params.pair_columns)
    basis = choose_basis(params, d, noisy_count, accountant, accountant.share(rest), anchors)
    strategy = params.candidate_strategy
    if strategy == "auto":
        all_pairs = NoisySummary(bounds, basis, 0.0, np.zeros(basis.size), 0.0).has_all_pairs
        strategy = "psi" if not all_pairs and d >= 2 and _psi_affordable(
            params, d, noisy_count, accountant) else "moments"
    extra = params.psi_fraction + params.directions_fraction if strategy == "psi" else 0.0
    if extra >= rest:
        raise ValueError("count, PSI and direction fractions leave no budget for the basis sums")
    basis_budget = accountant.share(rest - extra)
    if strategy == "psi":
        basis = choose_basis(params, d, noisy_count, accountant, basis_budget, anchors)

    noisy_sums, scale = release_basis_sums(sums.basis_sums(basis), basis_budget, accountant, noise)
    summary = NoisySummary(bounds, basis, noisy_count, noisy_sums, noise_std(scale, accountant))

    if strategy == "psi":
        summary.pca = _run_psi(sums, summary, params, accountant, noise, rng,
                               accountant.share(params.psi_fraction))
        summary.directions = ProjectionBasis.from_vectors(summary.pca.vectors)
        exact = summary.directions.sums(sums.count, sums.second_moments())
        summary.direction_sums, dir_scale = release_basis_sums(
            exact, accountant.share(params.directions_fraction), accountant, noise, stage="directions")
        summary.direction_noise_std = noise_std(dir_scale, accountant)
    return summary


def _psi_sensitivity(params: SmoothPCAParams, d: int, accountant: PrivacyAccountant) -> float:
    k = min(params.pca_dim or 2, d)
    return sensitivity.psi_product_l1(d, k) if accountant.pure else sensitivity.psi_product_l2(d)


def _psi_affordable(params: SmoothPCAParams, d: int, noisy_count: float,
                    accountant: PrivacyAccountant) -> bool:
    """Whether PSI's per-entry noise, normalised by the noisy count, is below PSI_NOISE_TARGET."""
    scale = accountant.noise_scale(_psi_sensitivity(params, d, accountant),
                                   accountant.share(params.psi_fraction), params.pca_iterations)
    return scale / max(noisy_count, 1.0) <= PSI_NOISE_TARGET


def _run_psi(sums: ExactSums, summary: NoisySummary, params: SmoothPCAParams,
             accountant: PrivacyAccountant, noise: NoiseSource, rng: np.random.Generator,
             budget: float) -> SubspaceEstimate:
    """Algorithm 4 on the second moment, centred with the private mean (privacy.md section 4)."""
    d = sums.d
    k = min(params.pca_dim or 2, d)
    iterations = params.pca_iterations
    sens = _psi_sensitivity(params, d, accountant)
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
