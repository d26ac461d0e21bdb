"""The released statistics of the synthesize mechanism, as data: the :class:`NoisySummary` that
stage 1 (:mod:`.measure`) produces, what it implies (private mean, covariance, pair correlations,
marginals), its JSON form, and :func:`measurements`, the plain measurements (what each covers,
its noisy answers, their noise) that the fit consumes. Everything here is post-processing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.chebyshev import (
    BasisSet,
    HistogramBasis,
    ProjectionBasis,
    coarsen_histograms,
)
from dpsmooth_spark.core.factors import (
    FactorPairs,
    copula_correlations,
    copula_correlations_and_noise,
)
from dpsmooth_spark.core.marginals import (
    clear_shape,
    histogram_density,
    lattice_density,
    max_entropy_correlation,
    nearest_psd,
    shared_shape,
)
from dpsmooth_spark.core.subspace import SubspaceEstimate
from dpsmooth_spark.mechanisms.synthesizer.params import first_pairs

JOINT_ROWS = 512
"""Histogram cells (all columns together) that the joint fit keeps in place: each column's
histogram is coarsened to the largest power of two with ``d * cells <= JOINT_ROWS``."""
VARIANCE_FLOOR = 1e-4
"""Smallest per-axis variance (scaled units) of the private moments: keeps them non-degenerate."""


@dataclass(frozen=True)
class Measurement:
    """One group of released statistics, as plain data (Private-PGM's measurement tuple).

    Attributes:
        name: what it is (``histograms``, ``basis``, ``directions``).
        queries: the functions (``evaluate(points) -> (R, C)``).
        values: ``(R,)`` noisy answers, normalised by the noisy count.
        std: noise standard deviation of each normalised answer.
        groups: ``(R,)`` labels ``0 .. G-1``: answers the fit must match to within their noise
            together (one column's marginal, one hub column's pairs).
        tolerance: ``(G,)`` chi-square per answer each group may leave (1: within the noise).
        group_space: measurements with the same ``group_space`` share their group labels and
            ``tolerance`` (a hub column's pair terms, Chebyshev products and pairs on spread
            factors alike); ``None``: groups of their own.
        relations: ``(G,)`` which groups hold relations between columns (pair terms,
            directions), whose targets the fit may tighten by James-Stein shrinkage
            (:func:`core.maxent.james_stein_tolerance`); ``None``: none.
    """

    name: str
    queries: BasisSet | ProjectionBasis | HistogramBasis | FactorPairs
    values: np.ndarray
    std: np.ndarray | float
    groups: np.ndarray
    tolerance: np.ndarray
    group_space: str | None = None
    relations: np.ndarray | None = None


@dataclass
class NoisySummary:
    """Everything the mechanism releases before post-processing; all of it is DP.

    Attributes:
        bounds: column names and public bounds.
        basis: the multi-indices.
        noisy_count: the count the release normalises by: the count plus noise, pooled with the
            histogram totals (and the pooled histogram's) when no column is nullable
            (:func:`pooled_count`).
        count_alone: the count plus noise before pooling (``None``: not pooled).
        noisy_sums: basis sums plus noise, ``(R,)``.
        basis_noise_std: ``(R,)`` standard deviation of the noise of each basis sum.
        histograms: ``(d, B)`` one-way histogram counts plus noise (cells of [-1, 1]).
        histogram_noise_std: standard deviation of the noise of each count.
        null_counts: ``(d,)`` noisy null counts (the histograms' null cells; ``NaN`` for a column
            not declared nullable), or ``None`` when no column is.
        pca: PSI output when the ``psi`` strategy ran.
        directions: the k private directions measured after PSI.
        direction_sums: ``T_2`` sums along them plus noise, ``(k,)``.
        direction_noise_std: standard deviation of the noise of each direction sum.
        factor_pairs: the pair terms measured on spread factors (``pair_factors: spread``).
        factor_sums: their sums plus noise, ``(R_f,)`` (released with the basis sums).
        factor_noise_std: standard deviation of the noise of each factor pair sum.
        noise: the noise's distribution, ``laplace`` (pure epsilon-DP) or ``gaussian``.
        levels: ``(d,)`` lattice points per column from the config (0: continuous), or ``None``:
            public; every later stage (marginals, spread factors, candidates, fit) reads them
            here, and summary.json keeps them for a retry.
        pooled_histogram: ``(B,)`` counts of every value of the continuous columns in one
            histogram (the histograms' cells) plus noise, where the budget pooled them
            (docs/privacy.md section 3f); ``None`` where not.
        pooled_noise_std: standard deviation of the noise of each pooled count.
        pooled_columns: the columns pooled, ``(m,)``.
    """

    bounds: PublicBounds
    basis: BasisSet
    noisy_count: float
    noisy_sums: np.ndarray
    basis_noise_std: np.ndarray
    histograms: np.ndarray | None = None
    histogram_noise_std: float = 0.0
    null_counts: np.ndarray | None = None
    pca: SubspaceEstimate | None = None
    directions: ProjectionBasis | None = None
    direction_sums: np.ndarray | None = None
    direction_noise_std: float = 0.0
    count_alone: float | None = None
    factor_pairs: FactorPairs | None = None
    factor_sums: np.ndarray | None = None
    factor_noise_std: float = 0.0
    noise: Literal["laplace", "gaussian"] = "laplace"
    levels: np.ndarray | None = None
    pooled_histogram: np.ndarray | None = None
    pooled_noise_std: float = 0.0
    pooled_columns: np.ndarray | None = None

    @property
    def normalised(self) -> np.ndarray:
        """Noisy basis answers ``b~_r = (sum_r + noise) / max(n~, 1)``."""
        return self.noisy_sums / max(self.noisy_count, 1.0)

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Private mean and covariance (scaled units) read off the basis answers.

        Uses ``x = T_1(x)``, ``x^2 = (T_2(x) + 1) / 2`` and ``x_i x_j = T_1(x_i) T_1(x_j)``;
        a pair measured on spread factors gets the correlation of the Gaussian copula (with the
        private marginals) under which its answer is expected
        (:func:`core.factors.copula_correlations`)
        times the two standard deviations; entries
        without a matching function come from the noisy histograms (mean and variance) or are 0
        (covariance).
        """
        mean = self.mean()
        variances = self.variances(mean)
        cov = np.diag(variances)
        sd = np.sqrt(variances)
        pairs, rho, _ = self.pair_correlations(noise=False)
        for (i, j), corr in zip(pairs, rho, strict=False):
            cov[i, j] = cov[j, i] = corr * sd[i] * sd[j]
        return mean, nearest_psd(cov, VARIANCE_FLOOR)

    def variances(self, mean: np.ndarray) -> np.ndarray:
        """Private variance of each column (scaled units) about ``mean``: from ``T_2(x_i)``'s
        answer where measured, else the noisy histogram's; in ``[VARIANCE_FLOOR, 1]``."""
        answer = self._answer_lookup()
        _, hist_var = self.histogram_moments()
        t2 = [answer((i, 2)) for i in range(self.basis.d)]
        var = [
            hist_var[i] if v is None else (v + 1.0) / 2.0 - mean[i] ** 2 for i, v in enumerate(t2)
        ]
        return np.clip(var, VARIANCE_FLOOR, 1.0)

    def pair_correlations(self, noise: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The measured pairs ``(m, 2)``, their private correlations ``(m,)`` and the noise
        standard deviation of each ``(m,)``: a ``T_1(x_i) T_1(x_j)`` answer as
        ``(b - mean_i mean_j) / (sd_i sd_j)`` (the private mean and :meth:`variances`), a pair on
        spread factors as the correlation of the Gaussian copula under which its answer is
        expected (its noise: :func:`core.factors.copula_correlations_and_noise`, near
        independence; with ``noise=False`` the spread-factor pairs' noise is not computed and
        is ``NaN``). Not clipped: where the noise is large a ``T_1 T_1`` answer may give one
        outside ``[-1, 1]``."""
        mean = self.mean()
        sd = np.sqrt(self.variances(mean))
        n = max(self.noisy_count, 1.0)
        b = self.normalised
        first = np.flatnonzero(first_pairs(self.basis.indices))
        pairs = [np.flatnonzero(self.basis.indices[r]) for r in first]
        rho = [
            (b[r] - mean[i] * mean[j]) / (sd[i] * sd[j])
            for r, (i, j) in zip(first, pairs, strict=False)
        ]
        std = [
            self.basis_noise_std[r] / n / (sd[i] * sd[j])
            for r, (i, j) in zip(first, pairs, strict=False)
        ]
        if (
            self.factor_pairs is not None
            and self.factor_sums is not None
            and self.histograms is not None
        ):
            probabilities = self.marginal_probabilities()
            answers = np.clip(self.factor_sums / n, -1.0, 1.0)
            pairs += list(self.factor_pairs.pairs)
            if noise:
                found, spread = copula_correlations_and_noise(
                    self.factor_pairs, probabilities, answers, self.factor_noise_std / n
                )
            else:
                found = copula_correlations(self.factor_pairs, probabilities, answers)
                spread = np.full(self.factor_pairs.size, np.nan)
            rho += list(found)
            std += list(spread)
        as_array = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        return as_array, np.array(rho, dtype=np.float64), np.abs(np.array(std, dtype=np.float64))

    def completed_correlation(self) -> np.ndarray | None:
        """The correlation of most entropy that holds the measured pairs' correlations, each
        shrunk by its noise near independence (``rho (1 - std^2 / rho^2)``, 0 within one
        deviation; :func:`core.marginals.max_entropy_correlation`): the pairs not measured get
        what the measured ones carry, e.g. ``r_iL r_jL`` through a label, as the maximum-entropy
        fit does. Unshrunk, a noisy label pair would carry its noise into every product
        ``r_iL r_jL``. ``None`` when no pair is measured."""
        pairs, rho, std = self.pair_correlations()
        if not pairs.size:
            return None
        shrink = np.clip(1.0 - std**2 / np.maximum(rho**2, 1e-12), 0.0, 1.0)
        return max_entropy_correlation(self.basis.d, pairs, rho * shrink)

    def mean(self) -> np.ndarray:
        """Private mean (scaled units): ``T_1(x_i)``'s answer where measured, else the noisy
        histogram's mean."""
        answer = self._answer_lookup()
        hist_mean, _ = self.histogram_moments()
        t1 = [answer((i, 1)) for i in range(self.basis.d)]
        return np.clip([hist_mean[i] if v is None else v for i, v in enumerate(t1)], -1.0, 1.0)

    def _answer_lookup(self) -> Callable[..., float | None]:
        """``answer((i, r), (j, s))``: the noisy answer of ``T_r(x_i) T_s(x_j)`` (any number of
        factors), ``None`` where the basis lacks it."""
        d = self.basis.d
        b = self.normalised
        lookup = {tuple(idx): j for j, idx in enumerate(self.basis.indices)}

        def answer(*pairs: tuple[int, int]) -> float | None:
            idx = [0] * d
            for i, r in pairs:
                idx[i] = r
            j = lookup.get(tuple(idx))
            return None if j is None else float(b[j])

        return answer

    @property
    def functions(self) -> int:
        """Basis functions measured: the basis's and the pairs on spread factors."""
        return self.basis.size + (0 if self.factor_pairs is None else self.factor_pairs.size)

    def marginal_probabilities(self) -> np.ndarray:
        """``(d, B)`` each column's private marginal on its histogram's cells
        (:meth:`marginal_density`)."""
        histograms = self._histograms()
        return np.array(
            [self.marginal_density(i, histograms.shape[1]) for i in range(self.bounds.d)]
        )

    def _histograms(self) -> np.ndarray:
        if self.histograms is None:
            raise ValueError("this summary has no one-way histograms")
        return self.histograms

    def marginal_density(self, column: int, cells: int) -> np.ndarray:
        """Column ``column``'s noisy histogram made a distribution on ``cells`` grid cells:
        :func:`core.marginals.lattice_density` on a column of declared levels, else
        :func:`core.marginals.histogram_density`, a histogram its noise swamps shrunk towards
        the shape the continuous columns share where it is clear: the pooled histogram where
        one was measured, else the other columns' mean (:func:`core.marginals.shared_shape`)."""
        n = max(self.noisy_count, 1.0)
        histograms = self._histograms()
        bins = histograms.shape[1]
        shares, std = histograms[column] / n, np.full(bins, self.histogram_noise_std / n)
        levels = 0 if self.levels is None else int(self.levels[column])
        if levels >= 2:
            return lattice_density(shares, std, cells, levels, laplace=self.noise == "laplace")
        if self.pooled_histogram is not None:
            total = max(float(self.pooled_histogram.sum()), 1.0)
            shape = clear_shape(self.pooled_histogram / total, self.pooled_noise_std / total)
        else:
            continuous = (
                np.arange(self.bounds.d) if self.levels is None else np.flatnonzero(self.levels < 2)
            )
            others = continuous[continuous != column]
            shape = shared_shape(histograms[others] / n, self.histogram_noise_std / n)
        return histogram_density(shares, std, cells, *(shape or ()))

    def measured_pairs(self) -> np.ndarray:
        """``(m, 2)`` the column pairs with a first-order pair term (``T_1 T_1`` or factors),
        each once, smaller index first."""
        rows = [np.flatnonzero(row) for row in self.basis.indices[first_pairs(self.basis.indices)]]
        if self.factor_pairs is not None:
            rows += list(np.sort(self.factor_pairs.pairs, axis=1))
        return np.unique(np.array(rows, dtype=np.int64).reshape(-1, 2), axis=0)

    def has_all_pairs(self) -> bool:
        """Whether every pair of columns has a first-order pair term (``T_1 T_1`` or factors)."""
        d = self.basis.d
        return d < 2 or len(self.measured_pairs()) >= d * (d - 1) // 2

    def covered_pairs(self) -> np.ndarray:
        """``(d, d)`` True where a measured function on two or more columns (a basis term, a
        pair on spread factors) covers both columns, and on the diagonal. PSI's subspace and
        directions cover every pair."""
        d = self.basis.d
        if self.pca is not None or self.directions is not None:
            return np.ones((d, d), dtype=bool)
        covered = np.eye(d, dtype=bool)
        rows = [np.flatnonzero(row) for row in self.basis.indices if np.count_nonzero(row) >= 2]
        if self.factor_pairs is not None and self.factor_sums is not None:
            rows += list(self.factor_pairs.pairs)
        for cols in rows:
            covered[np.ix_(cols, cols)] = True
        return covered

    def null_shares(self) -> np.ndarray:
        """Per column, the released share of nulls among the rows (0 where not nullable):
        noisy null count over noisy null count plus the histogram's total, negatives as 0."""
        if self.null_counts is None or self.histograms is None:
            return np.zeros(self.bounds.d)
        nulls = np.nan_to_num(np.maximum(self.null_counts, 0.0), nan=0.0)
        totals = nulls + np.maximum(self.histograms, 0.0).sum(axis=1)
        return np.where(totals > 0, nulls / np.maximum(totals, 1e-12), 0.0)

    def histogram_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of each column from its noisy histogram (negative counts as 0);
        the uniform distribution's (0, 1/3) without histograms."""
        d = self.basis.d
        if self.histograms is None:
            return np.zeros(d), np.full(d, 1.0 / 3.0)
        bins = self.histograms.shape[1]
        centres = -1.0 + (2.0 * np.arange(bins) + 1.0) / bins
        probs = np.maximum(self.histograms, 0.0) + 1e-12
        probs /= probs.sum(axis=1, keepdims=True)
        mean = probs @ centres
        # within-cell variance of a uniform cell: width^2 / 12
        return mean, probs @ centres**2 - mean**2 + (2.0 / bins) ** 2 / 12.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoisySummary:
        """Inverse of :meth:`to_dict` (a retry reloads the persisted summary with it)."""
        if "basis_noise_std" not in data:
            raise ValueError(
                "the persisted statistics predate this version of the mechanism "
                "(no noise scales); release under a new release id"
            )
        indices = np.array(data["multi_indices"], dtype=np.int64)
        d = len(data["columns"])
        bounds = PublicBounds(
            tuple(data["columns"]), np.array(data["lower"], float), np.array(data["upper"], float)
        )
        basis = BasisSet(d, int(indices.max(initial=1)), indices.reshape(-1, d))
        noisy_count = float(data["noisy_count"])
        summary = cls(
            bounds,
            basis,
            noisy_count,
            np.array(data["noisy_sums"], float),
            np.broadcast_to(np.array(data["basis_noise_std"], float), (basis.size,)).copy(),
        )
        summary.noise = "gaussian" if data.get("noise") == "gaussian" else "laplace"
        if "levels" in data:
            summary.levels = np.array(data["levels"], dtype=np.int64)
        if "histograms" in data:
            summary.histograms = np.array(data["histograms"]["noisy_counts"], float)
            summary.histogram_noise_std = float(data["histograms"]["noise_std"])
            if "count_alone" in data:
                summary.count_alone = float(data["count_alone"])
            if "noisy_null_counts" in data["histograms"]:
                summary.null_counts = np.array(data["histograms"]["noisy_null_counts"], float)
        if "pooled_histogram" in data:
            summary.pooled_histogram = np.array(data["pooled_histogram"]["noisy_counts"], float)
            summary.pooled_noise_std = float(data["pooled_histogram"]["noise_std"])
            summary.pooled_columns = np.array(data["pooled_histogram"]["columns"], dtype=np.int64)
        if "pca" in data:
            summary.pca = SubspaceEstimate(
                np.array(data["pca"]["vectors"], float),
                np.array(data["pca"]["eigenvalues"], float) * max(noisy_count, 1.0),
            )
        if "directions" in data:
            summary.directions = ProjectionBasis(np.array(data["directions"]["vectors"], float))
            summary.direction_sums = np.array(data["directions"]["noisy_sums"], float)
            summary.direction_noise_std = float(data["directions"]["noise_std"])
        if "factor_pairs" in data:
            summary.factor_pairs = FactorPairs(
                np.array(data["factor_pairs"]["coefficients"], float),
                np.array(data["factor_pairs"]["pairs"], dtype=np.int64).reshape(-1, 2),
            )
            summary.factor_sums = np.array(data["factor_pairs"]["noisy_sums"], float)
            summary.factor_noise_std = float(data["factor_pairs"]["noise_std"])
        return summary

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form of the summary (the ``summary.json`` of a release)."""
        out: dict[str, Any] = {
            "columns": list(self.bounds.columns),
            "lower": self.bounds.lower.tolist(),
            "upper": self.bounds.upper.tolist(),
            "scaling": "x_scaled = 2 (x - lower) / (upper - lower) - 1, clamped to [-1, 1]",
            "basis_function": "prod_i T_{r_i}(x_scaled_i), T_r = Chebyshev polynomial = cos(r "
            "arccos x)",
            "noisy_count": self.noisy_count,
            **(
                {}
                if self.count_alone is None
                else {
                    "count_alone": self.count_alone,
                    "count_pooling": "noisy_count = inverse-variance mean of count_alone, the d "
                    "histogram totals and the pooled histogram's total over its "
                    "columns where measured (post-processing)",
                }
            ),
            "noise": self.noise,
            **(
                {}
                if self.levels is None
                else {
                    "levels": [int(v) for v in self.levels],
                    "levels_meaning": "lattice points per column from the config (0: continuous); "
                    "public",
                }
            ),
            "multi_indices": self.basis.indices.tolist(),
            "noisy_sums": self.noisy_sums.tolist(),
            "noisy_means": self.normalised.tolist(),
            "basis_noise_std": self.basis_noise_std.tolist(),
        }
        if self.histograms is not None:
            out["histograms"] = {
                "cells": "equal cells of [-1, 1] in the scaled units, per column",
                "noisy_counts": self.histograms.tolist(),
                "noise_std": self.histogram_noise_std,
            }
            if self.null_counts is not None:
                out["histograms"]["noisy_null_counts"] = self.null_counts.tolist()
        if self.pooled_histogram is not None and self.pooled_columns is not None:
            out["pooled_histogram"] = {
                "cells": "the histograms' cells; every value of the pooled columns counted once",
                "columns": self.pooled_columns.tolist(),
                "noisy_counts": self.pooled_histogram.tolist(),
                "noise_std": self.pooled_noise_std,
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
        if self.factor_pairs is not None and self.factor_sums is not None:
            out["factor_pairs"] = {
                "function": "p_i(x_scaled_i) p_j(x_scaled_j), p_i = sum_r c_ir T_r, |p_i| <= 1 on "
                "[-1, 1]",
                "coefficients": self.factor_pairs.coefficients.tolist(),
                "pairs": self.factor_pairs.pairs.tolist(),
                "noisy_sums": self.factor_sums.tolist(),
                "noise_std": self.factor_noise_std,
            }
        return out


def basis_groups(basis: BasisSet) -> np.ndarray:
    """Group of each basis function: ``T_r(x_i)`` by column ``i``; a pair term by its hub, the
    column of the two that is in more pair terms (an anchor such as a label), ties to the first."""
    nonzero = basis.indices != 0
    pairs = nonzero.sum(axis=1) == 2
    degree = nonzero[pairs].sum(axis=0)
    keys = []
    for _row, mask in zip(basis.indices, nonzero, strict=False):
        cols = np.flatnonzero(mask)
        if cols.size == 1:
            keys.append((0, int(cols[0])))
        else:
            hub = int(cols[0]) if degree[cols[0]] >= degree[cols[1]] else int(cols[1])
            keys.append((1, hub))
    _, labels = np.unique(np.array(keys).reshape(-1, 2), axis=0, return_inverse=True)
    return labels.reshape(-1).astype(np.int64)


def measurements(
    summary: NoisySummary, marginal_tolerance: float = 0.0, joint_rows: int = JOINT_ROWS
) -> list[Measurement]:
    """The summary's statistics as measurements for the fit (normalised by the noisy count).

    One-way marginals (histograms, ``T_r(x_i)``) get ``marginal_tolerance``, relations 1.
    Histograms are coarsened to at most ``joint_rows`` cells in all; a coarse cell's noise is
    the sum of its cells' noise. Each answer is clipped to the range its function takes (a
    share to [0, 1], a Chebyshev product or direction term to [-1, 1]): the true answer lies in
    that range, so the clipped answer is never farther from it, and noise beyond the range
    cannot demand a relation that no table has.
    """
    n = max(summary.noisy_count, 1.0)
    out = []
    if summary.histograms is not None:
        d, bins = summary.histograms.shape
        keep = bins
        while keep > 1 and d * keep > joint_rows:
            keep //= 2
        merged = coarsen_histograms(summary.histograms, keep)
        std = summary.histogram_noise_std * np.sqrt(bins // keep) / n
        out.append(
            Measurement(
                "histograms",
                HistogramBasis(d, keep),
                np.clip(merged.ravel() / n, 0.0, 1.0),
                std,
                np.repeat(np.arange(d), keep),
                np.full(d, marginal_tolerance),
            )
        )
    # A hub column's pair terms form one group whether they are Chebyshev products or on spread
    # factors: the first-order pairs on spread factors group as T_1 T_1 did.
    factors = summary.factor_pairs if summary.factor_sums is not None else None
    pairs = np.zeros((0, summary.basis.d), dtype=np.int64)
    if factors is not None and factors.size:
        pairs = np.zeros((factors.size, factors.d), dtype=np.int64)
        pairs[np.arange(factors.size), factors.pairs[:, 0]] = 1
        pairs[np.arange(factors.size), factors.pairs[:, 1]] = 1
    joint = BasisSet(
        summary.basis.d, max(summary.basis.degree, 1), np.vstack([summary.basis.indices, pairs])
    )
    if joint.size:
        groups = basis_groups(joint)
        one_way = (joint.indices != 0).sum(axis=1) == 1
        tolerance = np.ones(int(groups.max()) + 1)
        tolerance[groups[one_way]] = marginal_tolerance
        relations = np.ones(tolerance.size, dtype=bool)
        relations[groups[one_way]] = False
        size = summary.basis.size
        if size:
            out.append(
                Measurement(
                    "basis",
                    summary.basis,
                    np.clip(summary.normalised, -1.0, 1.0),
                    summary.basis_noise_std / n,
                    groups[:size],
                    tolerance,
                    "basis",
                    relations,
                )
            )
        if pairs.size and factors is not None and summary.factor_sums is not None:
            out.append(
                Measurement(
                    "factor_pairs",
                    factors,
                    np.clip(summary.factor_sums / n, -1.0, 1.0),
                    summary.factor_noise_std / n,
                    groups[size:],
                    tolerance,
                    "basis",
                    relations,
                )
            )
    if summary.directions is not None and summary.direction_sums is not None:
        out.append(
            Measurement(
                "directions",
                summary.directions,
                np.clip(summary.direction_sums / n, -1.0, 1.0),
                summary.direction_noise_std / n,
                np.zeros(summary.directions.size, dtype=np.int64),
                np.ones(1),
                relations=np.ones(1, dtype=bool),
            )
        )
    return out
