"""The released statistics of the synthesize mechanism, as data: the :class:`NoisySummary` that
stage 1 (:mod:`.measure`) produces, what it implies (private mean, covariance, pair correlations,
marginals), its JSON form, and :func:`measurements`, the plain measurements (what each covers,
its noisy answers, their noise) that the fit consumes. Everything here is post-processing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Literal

import numpy as np

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.chebyshev import (
    BasisSet,
    HistogramBasis,
    LevelHistogram,
    LevelParts,
    ProjectionBasis,
    coarsen_histograms,
)
from dpsmooth_spark.core.factors import (
    FactorPairs,
    copula_correlations,
    copula_correlations_and_noise,
)
from dpsmooth_spark.core.low_rank import LowRankCovariance, low_rank_covariance
from dpsmooth_spark.core.marginals import (
    SHARED_SHAPE_WIDE,
    SPIKE_DEVIATIONS,
    GridMarginals,
    clear_shape,
    correlation_from_covariance,
    histogram_density,
    lattice_density,
    level_bins,
    max_entropy_correlation,
    nearest_psd,
    ordered_level_density,
    shared_shape,
    with_tail_mass,
)
from dpsmooth_spark.core.quadrants import QuadrantPairs, copula_rho, copula_rho_std
from dpsmooth_spark.core.sampling import snap_to_lattice
from dpsmooth_spark.core.subspace import SubspaceEstimate
from dpsmooth_spark.core.tables import ContingencyTables, pooled_with_margins
from dpsmooth_spark.mechanisms.synthesizer.params import (
    DENOISE_MIN_COLUMNS,
    SynthesizerParams,
    first_pairs,
    grid_cells,
)

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
    queries: Any  # BasisSet, ProjectionBasis, HistogramBasis, FactorPairs, or any .evaluate
    values: np.ndarray
    std: np.ndarray | float
    groups: np.ndarray
    tolerance: np.ndarray
    group_space: str | None = None
    relations: np.ndarray | None = None


@dataclass(frozen=True)
class NoisyStatistic:
    """One noisy statistic of a release, as plain data: what it measures, its noisy values, their
    noise, and the accountant stage that charged it. A release's statistics are a list of these;
    persistence and the fit read that list (:data:`QUERY_CODECS`, :data:`FIT_READERS`).

    Attributes:
        kind: what it is: ``histograms``, ``null_counts``, ``pooled_histogram``, ``basis``,
            ``factor_pairs``, ``pca``, ``directions``, or a kind registered in
            :data:`FIT_READERS`.
        stage: the accountant stage that charged it (``docs/privacy.md`` derives its
            sensitivity).
        query: the functions measured (``evaluate(points) -> (R, C)`` where the fit uses them),
            an object with a codec in :data:`QUERY_CODECS`; ``None`` where the kind says it all.
        values: the noisy values (sums or counts, not normalised).
        noise_std: standard deviation of the noise of each value: one number (every value's),
            or one per value (the weighted histograms', :func:`core.marginals
            .histogram_weights`).
        scope: the columns it covers.
    """

    kind: str
    stage: str
    query: Any
    values: np.ndarray
    noise_std: float | np.ndarray
    scope: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the query through its codec."""
        out: dict[str, Any] = {"kind": self.kind, "stage": self.stage, "scope": list(self.scope)}
        if self.query is not None:
            names = [k for k, (cls, _, _) in QUERY_CODECS.items() if type(self.query) is cls]
            if not names:
                raise ValueError(
                    f"no codec for a {type(self.query).__name__} query (statistic {self.kind!r}): "
                    "register one in QUERY_CODECS"
                )
            out["query"] = {"type": names[0], **QUERY_CODECS[names[0]][1](self.query)}
        out["values"] = np.asarray(self.values).tolist()
        out["noise_std"] = (
            np.asarray(self.noise_std).tolist()
            if np.ndim(self.noise_std)
            else float(self.noise_std)
        )
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoisyStatistic:
        """Inverse of :meth:`to_dict`."""
        query = None
        if data.get("query") is not None:
            spec = dict(data["query"])
            query = QUERY_CODECS[spec.pop("type")][2](spec)
        return cls(
            data["kind"],
            data["stage"],
            query,
            np.array(data["values"], dtype=np.float64),
            np.array(data["noise_std"], dtype=np.float64)
            if isinstance(data["noise_std"], list)
            else float(data["noise_std"]),
            tuple(int(c) for c in data.get("scope", ())),
        )


def _codec(
    cls: type, encode: Callable[[Any], dict[str, Any]], decode: Callable[[dict[str, Any]], Any]
) -> tuple[type, Callable[[Any], dict[str, Any]], Callable[[dict[str, Any]], Any]]:
    return cls, encode, decode


QUERY_CODECS: dict[str, tuple[type, Callable[[Any], dict[str, Any]], Callable[[Any], Any]]] = {
    "chebyshev_products": _codec(
        BasisSet,
        lambda q: {
            "function": "prod_i T_{r_i}(x_scaled_i), T_r(x) = cos(r arccos x)",
            "d": q.d,
            "degree": q.degree,
            "multi_indices": q.indices.tolist(),
        },
        lambda s: BasisSet(
            int(s["d"]),
            int(s["degree"]),
            np.array(s["multi_indices"], np.int64).reshape(-1, s["d"]),
        ),
    ),
    "histogram_cells": _codec(
        HistogramBasis,
        lambda q: {
            "cells": "equal cells of [-1, 1] per column",
            "d": q.d,
            "bins": q.bins,
            **({} if q.columns is None else {"columns": list(q.columns)}),
        },
        lambda s: HistogramBasis(
            int(s["d"]),
            int(s["bins"]),
            None if "columns" not in s else tuple(int(c) for c in s["columns"]),
        ),
    ),
    "level_cells": _codec(
        LevelHistogram,
        lambda q: {
            "cells": "one per level l of each lattice column: x_scaled = -1 + 2 l / (levels - 1)",
            "d": q.d,
            "columns": list(q.columns),
            "levels": list(q.levels),
            "ordered": list(q.ordered),
        },
        lambda s: LevelHistogram(
            int(s["d"]),
            tuple(int(c) for c in s["columns"]),
            tuple(int(k) for k in s["levels"]),
            tuple(bool(o) for o in s.get("ordered", ())),
        ),
    ),
    "level_parts": _codec(
        LevelParts,
        lambda q: {
            "cells": "parts of the levels l of each ordered lattice column (x_scaled = -1 + 2 l / "
            "(levels - 1)): level l is in part parts[l]",
            "d": q.d,
            "columns": list(q.columns),
            "parts": [list(p) for p in q.parts],
        },
        lambda s: LevelParts(
            int(s["d"]),
            tuple(int(c) for c in s["columns"]),
            tuple(tuple(int(k) for k in p) for p in s["parts"]),
        ),
    ),
    "contingency_tables": _codec(
        ContingencyTables,
        lambda q: {
            "cells": "joint cells of each pair: a column's levels (levels > 0) or equal cells of "
            "[-1, 1]; row-major, the pair's first column first",
            "d": q.d,
            "pairs": [list(p) for p in q.pairs],
            "column_cells": list(q.cells),
            "levels": list(q.levels),
        },
        lambda s: ContingencyTables(
            int(s["d"]),
            tuple((int(i), int(j)) for i, j in s["pairs"]),
            tuple(int(c) for c in s["column_cells"]),
            tuple(int(v) for v in s["levels"]),
        ),
    ),
    "spread_factor_pairs": _codec(
        FactorPairs,
        lambda q: {
            "function": "p_i(x_scaled_i) p_j(x_scaled_j), p_i = sum_r c_ir T_r, |p_i| <= 1",
            "coefficients": q.coefficients.tolist(),
            "pairs": q.pairs.tolist(),
        },
        lambda s: FactorPairs(
            np.array(s["coefficients"], np.float64), np.array(s["pairs"], np.int64).reshape(-1, 2)
        ),
    ),
    "quadrant_pairs": _codec(
        QuadrantPairs,
        lambda q: {
            "function": "s_i(x_scaled_i) s_j(x_scaled_j), s_i = +1 above threshold t_i, else -1",
            "thresholds": q.thresholds.tolist(),
            "pairs": q.pairs.tolist(),
        },
        lambda s: QuadrantPairs(
            np.array(s["thresholds"], np.float64), np.array(s["pairs"], np.int64).reshape(-1, 2)
        ),
    ),
    "directions": _codec(
        ProjectionBasis,
        lambda q: {"function": "T_2(v . x_scaled), ||v||_1 = 1", "vectors": q.directions.tolist()},
        lambda s: ProjectionBasis(np.array(s["vectors"], np.float64)),
    ),
    "subspace": _codec(
        SubspaceEstimate,
        lambda q: {"vectors": q.vectors.tolist(), "eigenvalues": q.values.tolist()},
        lambda s: SubspaceEstimate(
            np.array(s["vectors"], np.float64), np.array(s["eigenvalues"], np.float64)
        ),
    ),
}
"""How each kind of query object is written to and read from JSON: ``name -> (type, encode,
decode)``. A new kind of query registers its codec here."""


FitReader = Callable[["NoisySummary", NoisyStatistic], list[Measurement]]
FIT_READERS: dict[str, FitReader] = {}
"""Measurements for the fit of statistic kinds beyond the built-in ones (histograms, the
relations of the basis and the factor pairs, the directions), which :func:`measurements` reads
itself: ``kind -> reader(summary, statistic)``."""


QUADRANT_DEVIATIONS = 4.0
"""A quadrant pair enters the completed correlation only where its copula correlation exceeds
this many noise deviations, beyond the largest chance correlation of a column's partners
(:func:`quadrant_threshold`): each column picks a partner whatever the table holds, and on the
100-column table without relations at epsilon 1 a cut at 3 deviations kept 3 of 100 (Laplace
tails), a correlation ratio of 1.011; at 4, none (1.000)."""


def quadrant_threshold(
    std: np.ndarray, quadrants: NoisyStatistic, noisy_count: float
) -> np.ndarray:
    """The copula correlation a quadrant pair of noise ``std`` must exceed to count as a
    relation: :data:`QUADRANT_DEVIATIONS` noise deviations plus the largest chance quadrant
    correlation among a column's ``m - 1`` candidate partners (``m`` the columns in the pairs),
    ``sqrt(2 ln(m - 1) / n)`` (the pick takes the largest: on 10,000 rows of 60 independent
    columns it read 1.1 noise deviations by itself, and one pair in 55 cleared 4 deviations in
    three seeds of four)."""
    m = max(int(np.unique(quadrants.query.pairs).size), 3)
    chance = np.sqrt(2.0 * np.log(m - 1) / max(noisy_count, 1.0))
    return QUADRANT_DEVIATIONS * std + 0.5 * np.pi * chance


PAIRS_FLOOR = 1e-3
"""Smallest eigenvalue of :attr:`LowRankPairs.correlation` (keeps the copula density finite)."""

MOMENT_POINTS = 8
"""Points per histogram cell at which :func:`factor_moments` reads a factor."""


@dataclass(frozen=True)
class LowRankPairs:
    """The measured pairs on spread factors read through their low-rank model.

    Attributes:
        answers: ``(d, d)`` ``E[p_i p_j]`` the model expects for every pair (measured or not).
        model: the denoised covariance of the factors, its rank, the noise it leaves each
            pair and the measured pairs it keeps as measured.
        coefficients: the spread factors' coefficients (:class:`core.factors.FactorPairs`).
        probabilities: ``(d, B)`` the private marginals the answers are read under.
    """

    answers: np.ndarray
    model: LowRankCovariance
    coefficients: np.ndarray
    probabilities: np.ndarray

    @cached_property
    def correlation(self) -> np.ndarray:
        """``(d, d)`` the Gaussian-copula correlation under which the private marginals give
        :attr:`answers` (the candidates' copula), positive definite; read only where the fit
        uses the model (it inverts the copula for every pair)."""
        d = self.answers.shape[0]
        every = np.column_stack(np.triu_indices(d, 1))
        rho = copula_correlations(
            FactorPairs(self.coefficients, every),
            self.probabilities,
            self.answers[every[:, 0], every[:, 1]],
        )
        correlation = np.eye(d)
        correlation[every[:, 0], every[:, 1]] = correlation[every[:, 1], every[:, 0]] = rho
        return correlation_from_covariance(nearest_psd(correlation, PAIRS_FLOOR))


@dataclass(frozen=True)
class NoisySummary:
    """Everything the mechanism releases before post-processing; all of it is DP.

    The statistics are a list of :class:`NoisyStatistic`; the properties below are views of it
    (``None`` or empty where a kind was not measured), the ones that concatenate computed once.

    Attributes:
        bounds: column names and public bounds.
        noisy_count: the count the release normalises by: the count plus noise, pooled with the
            histogram totals (and the pooled histogram's) when no column is nullable
            (:func:`.measure.pooled_count`).
        statistics: every noisy statistic, in the order released.
        count_alone: the count plus noise (its two draws pooled, where it has two) before
            pooling with the histograms (``None``: not pooled).
        noise: the noise's distribution, ``laplace`` (pure epsilon-DP) or ``gaussian``.
        levels: ``(d,)`` lattice points per column from the config (0: continuous), or ``None``:
            public; every later stage reads them here, and summary.json keeps them for a retry.
        nominal: ``(d,)`` whether each column is a category (levels without order), from the
            config; ``None``: none is.
        plan: the budget plan the statistics were measured by (:mod:`.plan`), as printed.
    """

    bounds: PublicBounds
    noisy_count: float
    statistics: tuple[NoisyStatistic, ...] = ()
    count_alone: float | None = None
    noise: Literal["laplace", "gaussian"] = "laplace"
    levels: np.ndarray | None = None
    plan: dict[str, Any] | None = None
    nominal: np.ndarray | None = None

    def with_statistics(self, *added: NoisyStatistic) -> NoisySummary:
        """This summary with ``added`` appended."""
        return replace(self, statistics=(*self.statistics, *added))

    def of_kind(self, kind: str) -> list[NoisyStatistic]:
        """The statistics of ``kind``, in the order released."""
        return [s for s in self.statistics if s.kind == kind]

    def _one(self, kind: str) -> NoisyStatistic | None:
        found = self.of_kind(kind)
        return found[-1] if found else None

    @cached_property
    def basis(self) -> BasisSet:
        """The Chebyshev products measured (empty where none)."""
        parts = [s.query for s in self.of_kind("basis")]
        d = self.bounds.d
        if not parts:
            return BasisSet(d, 1, np.zeros((0, d), dtype=np.int64))
        return BasisSet(
            d, max(1, *(p.degree for p in parts)), np.vstack([p.indices for p in parts])
        )

    @cached_property
    def noisy_sums(self) -> np.ndarray:
        """The basis sums plus noise, ``(R,)``."""
        return np.concatenate([np.zeros(0), *(s.values for s in self.of_kind("basis"))])

    @cached_property
    def basis_noise_std(self) -> np.ndarray:
        """``(R,)`` standard deviation of the noise of each basis sum."""
        return np.concatenate(
            [np.zeros(0), *(np.full(s.values.size, s.noise_std) for s in self.of_kind("basis"))]
        )

    @cached_property
    def histograms(self) -> np.ndarray | None:
        """``(d, B)`` one-way histogram counts plus noise (cells of [-1, 1]); a column measured
        per level (:attr:`level_histograms`) shows its level counts summed into the cells that
        hold them (each such cell's noise is then that of its levels together)."""
        found = self._one("histograms")
        if found is None:
            return None
        bins = found.query.bins
        out = np.zeros((self.bounds.d, bins))
        out[found.query.measured] = found.values.reshape(-1, bins)
        for column, counts in self.level_histograms.items():
            np.add.at(out[column], level_bins(counts.size, bins), counts)
        if self.atoms is not None:  # the bounds' clear cells back in the end bins
            out[:, [0, -1]] += np.where(self.clear_atoms(), self.atoms, 0.0)
        return out

    @property
    def atoms(self) -> np.ndarray | None:
        """``(d, 2)`` noisy counts of the values exactly at each continuous column's lower and
        upper bound (``NaN`` for the other columns), or ``None``; :attr:`histograms` holds the
        clear ones in its end bins."""
        found = self._one("atoms")
        return None if found is None else found.values

    def atom_shares(self) -> np.ndarray:
        """``(d, 2)`` the share of each column's values at its lower and upper bound where its
        noisy count is clear (:meth:`clear_atoms`; else 0): post-processing of :attr:`atoms`."""
        if self.atoms is None:
            return np.zeros((self.bounds.d, 2))
        counts = np.where(self.clear_atoms(), self.atoms, 0.0)
        return np.minimum(counts / self.histogram_totals[:, None], 1.0)

    def clear_atoms(self) -> np.ndarray:
        """``(d, 2)`` where a bound's noisy count stands :data:`core.marginals.SPIKE_DEVIATIONS`
        noise deviations above 0. Elsewhere the bound's cell is read as empty: added to its end
        bin, its noise alone put mass at the far ends of the range (wine's W1 ratio at epsilon
        1: 0.78 without the bounds' cells, 0.89 with every one added)."""
        if self.atoms is None:
            return np.zeros((self.bounds.d, 2), dtype=bool)
        std = self.histogram_noise_stds[:, None]
        return np.nan_to_num(self.atoms, nan=0.0) > SPIKE_DEVIATIONS * std

    @cached_property
    def ordered_levels(self) -> frozenset[int]:
        """The columns measured per level whose levels are ordered values (integers, dates)."""
        found = self._one("level_histograms")
        if found is None:
            return frozenset()
        return frozenset(
            c for c, o in zip(found.query.columns, found.query.ordered, strict=True) if o
        )

    @property
    def tables(self) -> NoisyStatistic | None:
        """The contingency tables measured (query :class:`core.tables.ContingencyTables`, noisy
        cell counts), or ``None``."""
        return self._one("tables")

    def table_marginals(self, tables: ContingencyTables) -> list[np.ndarray]:
        """Per column, its private marginal on its cells in ``tables`` (empty where it is in
        none): its levels' masses, or its marginal on the grid summed into the table's equal
        cells."""
        grid = grid_cells(256, max(tables.levels))
        out = []
        for column, (cells, levels) in enumerate(zip(tables.cells, tables.levels, strict=True)):
            if not cells:
                out.append(np.zeros(0))
                continue
            density = self.marginal_density(column, grid)
            if levels:
                out.append(density[level_bins(levels, grid)])
            else:
                out.append(density.reshape(cells, -1).sum(axis=1))
        return out

    @cached_property
    def histogram_totals(self) -> np.ndarray:
        """``(d,)`` what each column's histogram is normalised by: the noisy count, or where
        null cells were measured, the rows of the table less the column's noisy null count. A
        column's histogram also counts the rows with a null in another column, which the noisy
        count (rows without a null) leaves out (a tenth of the rows null in one column made
        every other column's shares sum to 1.11). Every column's value cells and null cell
        together hold each row once: the rows are their inverse-variance mean over the columns
        (a column's cells that hold no value of it left out, :meth:`held_cells`); a column's own
        total had the noise of all its cells (a 0/1 column's 30 empty bins of 32 at epsilon
        0.1 moved its rate by 2 points)."""
        d = self.bounds.d
        if self.null_counts is None or self.histograms is None:
            return np.full(d, max(self.noisy_count, 1.0))
        nullable = ~np.isnan(self.null_counts)
        nulls = np.where(nullable, self.null_counts, 0.0)
        rows = (self.histograms * self.held_cells()).sum(axis=1) + nulls
        std = self.histogram_noise_stds  # each column's own where they are weighted
        variance = std**2 if np.ptp(std) > 0 else 1.0
        weights = 1.0 / ((self.histogram_cells() + nullable) * variance)
        everyone = float(weights @ rows / weights.sum())
        return np.maximum(everyone - nulls, 1.0)

    def held_cells(self) -> np.ndarray:
        """``(d, B)`` the histogram cells that can hold a column's values: a lattice column's
        the cells of its levels (the others' counts are noise alone), any other column's all."""
        found = self._one("histograms")
        if found is None:
            raise ValueError("this summary has no one-way histograms")
        d, bins = self.bounds.d, found.query.bins
        held = np.ones((d, bins), dtype=bool)
        for column, levels in enumerate(
            np.zeros(d, np.int64) if self.levels is None else self.levels
        ):
            if levels >= 2:
                held[column] = False
                held[column, level_bins(int(levels), bins)] = True
        return held

    def histogram_cells(self) -> np.ndarray:
        """``(d,)`` the noisy cells of each column's one-way histogram that can hold its values:
        its levels where it was measured per level, the bins of its levels for another lattice
        column (:meth:`held_cells`), else the histograms' ``B``; plus its bounds' cells."""
        found = self.level_histograms
        held = self.held_cells().sum(axis=1)
        cells = np.array([found[j].size if j in found else held[j] for j in range(self.bounds.d)])
        if self.atoms is not None:
            cells = cells + 2 * ~np.isnan(self.atoms[:, 0])
        return cells

    @cached_property
    def level_histograms(self) -> dict[int, np.ndarray]:
        """Column -> its per-level counts plus noise, for the lattice columns measured per level
        (:func:`core.marginals.measured_per_level`); their noise is the histograms'."""
        found = self._one("level_histograms")
        if found is None:
            return {}
        query = found.query
        parts = np.split(found.values, query.offsets[1:-1])
        return dict(zip(query.columns, parts, strict=True))

    @cached_property
    def level_parts(self) -> dict[int, tuple[np.ndarray, np.ndarray, float]]:
        """Column -> (each level's part, the parts' counts plus noise, their noise std), for the
        ordered columns measured in coarse parts after their levels
        (:func:`core.marginals.level_parts`)."""
        found = self._one("level_parts")
        if found is None:
            return {}
        query = found.query
        std = np.broadcast_to(np.asarray(found.noise_std, dtype=np.float64), found.values.shape)
        return {
            column: (np.asarray(part, dtype=np.int64), found.values[start:stop], float(std[start]))
            for column, part, start, stop in zip(
                query.columns, query.parts, query.offsets[:-1], query.offsets[1:], strict=True
            )
        }

    @cached_property
    def histogram_noise_stds(self) -> np.ndarray:
        """``(d,)`` the noise std of each count of each column's one-way histogram (its bins or
        its levels): the histograms' common one, over the column's weight where they are
        weighted (:func:`core.marginals.histogram_weights`); 0 without histograms."""
        out = np.zeros(self.bounds.d)
        found = self._one("histograms")
        if found is None:
            return out
        if not np.ndim(found.noise_std):  # unweighted: every column's, per level too
            out[:] = found.noise_std
            return out
        if found.scope:
            out[list(found.scope)] = np.reshape(found.noise_std, (len(found.scope), -1))[:, 0]
        levels = self._one("level_histograms")
        if levels is not None:
            std = np.asarray(levels.noise_std)
            for column, start in zip(levels.query.columns, levels.query.offsets[:-1], strict=True):
                out[column] = std[start]
        return out

    @property
    def null_counts(self) -> np.ndarray | None:
        """``(d,)`` noisy null counts (``NaN`` for a column not declared nullable), or ``None``."""
        found = self._one("null_counts")
        return None if found is None else found.values

    @property
    def pooled_histogram(self) -> np.ndarray | None:
        """``(B,)`` counts of every value of the continuous columns in one histogram plus noise,
        where the budget pooled them (docs/privacy.md section 3f)."""
        found = self._one("pooled_histogram")
        return None if found is None else found.values

    @property
    def pooled_noise_std(self) -> float:
        found = self._one("pooled_histogram")
        return 0.0 if found is None else float(found.noise_std)

    @property
    def pooled_columns(self) -> np.ndarray | None:
        found = self._one("pooled_histogram")
        return None if found is None else np.array(found.scope, dtype=np.int64)

    @cached_property
    def factor_pairs(self) -> FactorPairs | None:
        """The pair terms measured on spread factors, every round's together."""
        parts = self.of_kind("factor_pairs")
        if not parts:
            return None
        return FactorPairs(parts[0].query.coefficients, np.vstack([s.query.pairs for s in parts]))

    @cached_property
    def factor_sums(self) -> np.ndarray | None:
        parts = self.of_kind("factor_pairs")
        return np.concatenate([s.values for s in parts]) if parts else None

    @property
    def factor_noise_std(self) -> float:
        """The noise std of the last factor-pair measurement (every one is at the same noise)."""
        found = self._one("factor_pairs")
        return 0.0 if found is None else float(found.noise_std)

    @property
    def quadrant_pairs(self) -> NoisyStatistic | None:
        """The quadrant pairs measured (query :class:`core.quadrants.QuadrantPairs`, noisy sums
        of ``s_i s_j``), or ``None``."""
        return self._one("quadrant_pairs")

    @property
    def pca(self) -> SubspaceEstimate | None:
        """PSI's output (eigenvalues in count units) where the ``psi`` strategy ran."""
        found = self._one("pca")
        return None if found is None else found.query

    @property
    def directions(self) -> ProjectionBasis | None:
        found = self._one("directions")
        return None if found is None else found.query

    @property
    def direction_sums(self) -> np.ndarray | None:
        found = self._one("directions")
        return None if found is None else found.values

    @property
    def direction_noise_std(self) -> float:
        found = self._one("directions")
        return 0.0 if found is None else float(found.noise_std)

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

    def pair_correlations(
        self, noise: bool = True, probabilities: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The measured pairs ``(m, 2)``, their private correlations ``(m,)`` and the noise
        standard deviation of each ``(m,)``: a ``T_1(x_i) T_1(x_j)`` answer as
        ``(b - mean_i mean_j) / (sd_i sd_j)`` (the private mean and :meth:`variances`), a pair on
        spread factors as the correlation of the Gaussian copula under which its answer is
        expected (its noise: :func:`core.factors.copula_correlations_and_noise`, near
        independence; with ``noise=False`` the spread-factor pairs' noise is not computed and
        is ``NaN``). Not clipped: where the noise is large a ``T_1 T_1`` answer may give one
        outside ``[-1, 1]``. ``probabilities``: ``(d, cells)`` marginals to read the spread-factor
        pairs under (default :meth:`marginal_probabilities`)."""
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
            if probabilities is None:
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
        quadrants = self.quadrant_pairs
        if quadrants is not None:
            found, spread = self._quadrant_correlations(quadrants)
            pairs += list(quadrants.query.pairs)
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
        ``r_iL r_jL``. A quadrant pair counts only past :func:`quadrant_threshold`. ``None``
        when no pair is measured."""
        return self._completed

    @cached_property
    def _completed(self) -> np.ndarray | None:
        pairs, rho, _, shrink = self.shrunk_pair_correlations()
        if not pairs.size:
            return None
        return max_entropy_correlation(self.basis.d, pairs, rho * shrink)

    def shrunk_pair_correlations(
        self, probabilities: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`pair_correlations` and each pair's shrinkage by its noise, ``1 - std^2 /
        rho^2`` (0 within one deviation; a quadrant pair's 0 short of
        :func:`quadrant_threshold`)."""
        pairs, rho, std = self.pair_correlations(probabilities=probabilities)
        shrink = np.clip(1.0 - std**2 / np.maximum(rho**2, 1e-12), 0.0, 1.0)
        related = self.quadrant_relations()
        if related.size:  # pair_correlations appends the quadrant pairs last
            shrink[rho.size - related.size :][~related] = 0.0
        return pairs, rho, std, shrink

    def _quadrant_correlations(self, quadrants: NoisyStatistic) -> tuple[np.ndarray, np.ndarray]:
        """The quadrant pairs' copula correlations ``sin(pi q / 2)`` and their noise std."""
        n = max(self.noisy_count, 1.0)
        q = np.clip(quadrants.values / n, -1.0, 1.0)
        return copula_rho(q), copula_rho_std(q, float(np.max(quadrants.noise_std)) / n)

    def quadrant_relations(self) -> np.ndarray:
        """``(m,)`` which quadrant pairs count as relations: their copula correlation past
        :func:`quadrant_threshold` (empty where none was measured)."""
        quadrants = self.quadrant_pairs
        if quadrants is None:
            return np.zeros(0, dtype=bool)
        rho, std = self._quadrant_correlations(quadrants)
        return np.abs(rho) > quadrant_threshold(std, quadrants, self.noisy_count)

    @cached_property
    def low_rank_pairs(self) -> LowRankPairs | None:
        """The pairs on spread factors denoised jointly: their covariances ``E[p_i p_j] -
        E[p_i] E[p_j]`` (every pair's answer has the same noise) as a low-rank model
        (:func:`core.low_rank.low_rank_covariance`), each factor's mean and variance from the
        private marginals; ``None`` where no pair on spread factors is measured."""
        factors, sums = self.factor_pairs, self.factor_sums
        if factors is None or sums is None or not factors.size or self.histograms is None:
            return None
        probabilities = self.marginal_probabilities()
        mean, variance = factor_moments(factors, probabilities, self.levels)
        n = max(self.noisy_count, 1.0)
        i, j = factors.pairs[:, 0], factors.pairs[:, 1]
        model = low_rank_covariance(
            variance,
            factors.pairs,
            np.clip(sums / n, -1.0, 1.0) - mean[i] * mean[j],
            np.full(factors.size, self.factor_noise_std / n),
            noise_kind=self.noise,
        )
        return LowRankPairs(
            model.matrix + np.outer(mean, mean),
            model,
            factors.coefficients,
            probabilities,
        )

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

    def with_table_margins(
        self, column: int, counts: np.ndarray, std: float
    ) -> tuple[np.ndarray, float]:
        """A lattice column's noisy ``counts`` per level (noise std ``std``) pooled with the
        margins of the measured contingency tables that hold it on its levels
        (:func:`core.tables.pooled_with_margins`): the tables' noise is independent of the
        histograms', so each margin adds what it knows of the column's counts. Not where a
        column is nullable: a table counts only the rows without a null, a histogram every
        row."""
        found = self.tables
        levels = 0 if self.levels is None else int(self.levels[column])
        if (
            found is None
            or levels < 2
            or self.null_counts is not None
            or found.query.levels[column] != levels
        ):
            return counts, std
        margins = found.query.margins(found.values, column)
        if not margins:
            return counts, std
        return pooled_with_margins(counts, std, margins, float(np.max(found.noise_std)))

    def marginal_density(self, column: int, cells: int) -> np.ndarray:
        """Column ``column``'s noisy histogram made a distribution on ``cells`` grid cells:
        :func:`core.marginals.lattice_density` on a column of declared levels (on its
        per-level counts where it was measured per level, and pooled with the margins of the
        contingency tables that hold it, :meth:`with_table_margins`), else
        :func:`core.marginals.histogram_density`, a histogram its noise swamps shrunk towards
        the shape the continuous columns share where it is clear: the pooled histogram where
        one was measured, else the other columns' mean (:func:`core.marginals.shared_shape`);
        in a wide table (:attr:`shares_shape`), a clear one too where its noise cannot tell it
        from that shape."""
        n = self.histogram_totals[column]
        histograms = self._histograms()
        bins = histograms.shape[1]
        shares, std = histograms[column] / n, np.full(bins, self.histogram_noise_stds[column] / n)
        levels = 0 if self.levels is None else int(self.levels[column])
        if column in self.level_histograms:
            counts, level_std = self.with_table_margins(
                column, self.level_histograms[column], self.histogram_noise_stds[column]
            )
            shares, std = counts / n, np.full(counts.size, level_std / n)
            if column in self.ordered_levels and levels > 2:
                density = np.zeros(cells)
                parted = self.level_parts.get(column)
                found = ordered_level_density(
                    shares,
                    std[0],
                    bins,
                    self.noise == "laplace",
                    None if parted is None else (parted[0], parted[1] / n, parted[2] / n),
                )
                np.add.at(density, level_bins(levels, cells), found)
                return density / density.sum()
        if levels >= 2:
            if column not in self.level_histograms:  # its levels' cells of the histogram
                where = level_bins(levels, bins)
                counts, level_std = self.with_table_margins(
                    column, histograms[column, where], self.histogram_noise_stds[column]
                )
                shares, std = shares.copy(), np.full(bins, level_std / n)
                shares[where] = counts / n
            density = lattice_density(
                shares, std, cells, levels, self.noise == "laplace", self.is_nominal(column)
            )
            if column in self.level_histograms:  # a category measured per level
                where = level_bins(levels, cells)
                per_level = with_tail_mass(density[where], shares, float(std[0]))
                density = np.zeros(cells)
                density[where] = per_level
            return density
        if self.pooled_histogram is not None:
            total = max(float(self.pooled_histogram.sum()), 1.0)
            shape = clear_shape(self.pooled_histogram / total, self.pooled_noise_std / total)
        else:
            continuous = (
                np.arange(self.bounds.d) if self.levels is None else np.flatnonzero(self.levels < 2)
            )
            others = continuous[continuous != column]
            totals = self.histogram_totals[others, None]
            shape = shared_shape(histograms[others] / totals, self.histogram_noise_stds[column] / n)
        if shape is None:
            return histogram_density(shares, std, cells)
        return histogram_density(shares, std, cells, *shape, near_target=self.shares_shape)

    def is_nominal(self, column: int) -> bool:
        """Whether ``column`` is a category (:attr:`nominal`)."""
        return self.nominal is not None and bool(self.nominal[column])

    @property
    def shares_shape(self) -> bool:
        """Whether the table has :data:`core.marginals.SHARED_SHAPE_WIDE` continuous columns or
        more: a clear histogram is then shrunk towards the shape the others share where its
        noise cannot tell it from that shape, and the fit reads the marginals as shrunk."""
        levels = None if self.levels is None else np.asarray(self.levels)
        continuous = self.bounds.d if levels is None else int((levels < 2).sum())
        return continuous >= SHARED_SHAPE_WIDE

    def measured_pairs(self) -> np.ndarray:
        """``(m, 2)`` the column pairs with a first-order pair term (``T_1 T_1`` or factors),
        each once, smaller index first."""
        rows = [np.flatnonzero(row) for row in self.basis.indices[first_pairs(self.basis.indices)]]
        if self.factor_pairs is not None:
            rows += list(np.sort(self.factor_pairs.pairs, axis=1))
        if self.quadrant_pairs is not None:
            rows += list(np.sort(self.quadrant_pairs.query.pairs, axis=1))
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
        if self.tables is not None:
            rows += [np.array(pair) for pair in self.tables.query.pairs]
        if self.quadrant_pairs is not None:
            rows += list(self.quadrant_pairs.query.pairs)
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
        if "statistics" not in data:
            raise ValueError(
                "the persisted statistics predate this version of the mechanism "
                "(no statistics list); release under a new release id"
            )
        bounds = PublicBounds(
            tuple(data["columns"]), np.array(data["lower"], float), np.array(data["upper"], float)
        )
        return cls(
            bounds,
            float(data["noisy_count"]),
            tuple(NoisyStatistic.from_dict(s) for s in data["statistics"]),
            None if data.get("count_alone") is None else float(data["count_alone"]),
            "gaussian" if data.get("noise") == "gaussian" else "laplace",
            None if data.get("levels") is None else np.array(data["levels"], dtype=np.int64),
            data.get("budget_plan"),
            None if data.get("nominal") is None else np.array(data["nominal"], dtype=bool),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form of the summary (the ``summary.json`` of a release)."""
        return {
            "columns": list(self.bounds.columns),
            "lower": self.bounds.lower.tolist(),
            "upper": self.bounds.upper.tolist(),
            "scaling": "x_scaled = 2 (x - lower) / (upper - lower) - 1, clamped to [-1, 1]",
            "noisy_count": self.noisy_count,
            "count_alone": self.count_alone,
            "noise": self.noise,
            "levels": None if self.levels is None else [int(v) for v in self.levels],
            "budget_plan": self.plan,
            "nominal": None if self.nominal is None else [bool(v) for v in self.nominal],
            "statistics": [s.to_dict() for s in self.statistics],
        }


def factor_moments(
    factors: FactorPairs, probabilities: np.ndarray, levels: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(d,)`` means and variances of each column's spread factor under its private marginal
    (``probabilities``, ``(d, B)``; the factor read at :data:`MOMENT_POINTS` points per cell, on
    a column's lattice where ``levels`` give it one)."""
    d, cells = probabilities.shape
    points = np.repeat(GridMarginals.centres(cells * MOMENT_POINTS)[:, None], d, axis=1)
    if levels is not None:
        points = snap_to_lattice(points, levels)
    values = factors.factors(points)  # (cells * MOMENT_POINTS, d)
    weights = np.repeat(probabilities, MOMENT_POINTS, axis=1) / MOMENT_POINTS
    mean = np.einsum("dc,cd->d", weights, values)
    variance = np.einsum("dc,cd->d", weights, values**2) - mean**2
    return mean, np.maximum(variance, VARIANCE_FLOOR)


MAX_MISFIT = 0.25
"""``pair_denoise: auto`` uses the pairs' low-rank model only where what it misses of the
measured pairs is at most this share of their noise
(:attr:`core.low_rank.LowRankCovariance.misfit`): a table whose relations are not a few factors
keeps its pairs as measured (docs/decisions/0007)."""

MIN_PAIRS_PER_COLUMN = 8
"""``pair_denoise: auto`` uses the pairs' low-rank model only where at least this many pairs
per column are measured: a label's pairs alone (a star) fit any rank-1 model exactly."""


def modelled_pairs(summary: NoisySummary, params: SynthesizerParams) -> LowRankPairs | None:
    """The pairs' low-rank model where the candidates and the fit read the pairs through it:
    with ``pair_denoise: on``, or ``auto`` from :data:`params.DENOISE_MIN_COLUMNS` columns
    with :data:`MIN_PAIRS_PER_COLUMN` measured pairs per column, where its misfit is at most
    :data:`MAX_MISFIT`; ``None`` otherwise or where no pair on spread factors is measured.
    Post-processing: the choice reads public and DP values only."""
    mode = params.pair_denoise
    d = summary.basis.d
    if mode == "off":
        return None
    if mode == "auto":
        measured = 0 if summary.factor_pairs is None else summary.factor_pairs.size
        if d < DENOISE_MIN_COLUMNS or 2 * measured < MIN_PAIRS_PER_COLUMN * d:
            return None
    modelled = summary.low_rank_pairs
    if modelled is None or (mode == "auto" and modelled.model.misfit > MAX_MISFIT):
        return None
    return modelled


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
    summary: NoisySummary,
    marginal_tolerance: float = 0.0,
    joint_rows: int = JOINT_ROWS,
    modelled: LowRankPairs | None = None,
    rare: Sequence[Any] = (),
) -> list[Measurement]:
    """The summary's statistics as measurements for the fit (normalised by the noisy count).

    One-way marginals (histograms, per-level histograms, ``T_r(x_i)``) get
    ``marginal_tolerance``, relations 1. Histograms of equal cells are coarsened to at most
    ``joint_rows`` cells in all (a coarse cell's noise is the sum of its cells' noise); a
    per-level histogram keeps every level. Each answer is clipped to the range its function takes (a
    share to [0, 1], a Chebyshev product or direction term to [-1, 1]): the true answer lies in
    that range, so the clipped answer is never farther from it, and noise beyond the range
    cannot demand a relation that no table has. With ``modelled`` (:func:`modelled_pairs`), the
    pairs on spread factors are read through it: each answer is the model's, its noise the share
    the model leaves (a pair the model misses keeps its answer and noise). Quadrant pairs are
    the functions ``s_i s_j`` at their noise, one group. ``rare``: the rare
    values of large categories (``candidates.RareLevels``), whose per-level shares are summed
    into their representative's cell (its noise that of their sum).
    """
    n = max(summary.noisy_count, 1.0)
    out = []
    d, histograms = summary.bounds.d, summary.histograms
    measured = np.array([j for j in range(d) if j not in summary.level_histograms], np.int64)
    if histograms is not None and measured.size:
        bins = histograms.shape[1]
        keep = bins
        while keep > 1 and measured.size * keep > joint_rows:
            keep //= 2
        totals = np.repeat(summary.histogram_totals[measured], keep)
        merged = coarsen_histograms(histograms[measured], keep)
        variance = np.full((measured.size, keep), bins // keep, dtype=np.float64)
        if summary.atoms is not None:  # an end bin holds its bound's clear cell too
            variance[:, [0, -1]] += summary.clear_atoms()[measured]
        std = (
            np.repeat(summary.histogram_noise_stds[measured], keep)
            * np.sqrt(variance.ravel())
            / totals
        )
        out.append(
            Measurement(
                "histograms",
                HistogramBasis(d, keep, None if measured.size == d else tuple(measured.tolist())),
                np.clip(merged.ravel() / totals, 0.0, 1.0),
                std,
                np.repeat(np.arange(measured.size), keep),
                np.full(measured.size, marginal_tolerance),
            )
        )
    if summary.level_histograms:
        columns = tuple(summary.level_histograms)
        counts = list(summary.level_histograms.values())
        totals = np.repeat(summary.histogram_totals[list(columns)], [c.size for c in counts])
        shares = np.concatenate(counts) / totals
        std = (
            np.repeat(summary.histogram_noise_stds[list(columns)], [c.size for c in counts])
            / totals
        )
        offsets = np.cumsum([0, *(c.size for c in counts)])
        for group in rare:  # a rare group's counts in its representative's cell
            part = slice(offsets[columns.index(group.column)], None)
            shares[part][: group.levels] = group.merged(shares[part][: group.levels])
            std[part][group.representative] *= np.sqrt(group.group.size)
        out.append(
            Measurement(
                "level_histograms",
                LevelHistogram(summary.bounds.d, columns, tuple(c.size for c in counts)),
                np.clip(shares, 0.0, 1.0),
                std,
                np.repeat(np.arange(len(counts)), [c.size for c in counts]),
                np.full(len(counts), marginal_tolerance),
            )
        )
    found = summary._one("level_parts")
    if found is not None:  # an ordered column's coarse parts, after its levels
        query = found.query
        totals = np.repeat(summary.histogram_totals[list(query.columns)], query.counts)
        out.append(
            Measurement(
                "level_parts",
                query,
                np.clip(found.values / totals, 0.0, 1.0),
                np.broadcast_to(np.asarray(found.noise_std, dtype=np.float64), totals.shape)
                / totals,
                np.repeat(np.arange(len(query.columns)), query.counts),
                np.full(len(query.columns), marginal_tolerance),
            )
        )
    tables = summary.tables
    if tables is not None and tables.values.size:
        query = tables.query
        shares, std = tables.values / n, np.full(tables.values.size, tables.noise_std / n)
        for group in rare:  # a rare group's rows (or columns) in its representative's
            for k, pair in enumerate(query.pairs):
                if group.column in pair:
                    axis = pair.index(group.column)
                    part = slice(query.offsets[k], query.offsets[k + 1])
                    cells = query.table(shares, k)
                    noise = query.table(std, k)
                    merged = np.apply_along_axis(group.merged, axis, cells)
                    scale = np.ones(group.levels)
                    scale[group.representative] = np.sqrt(group.group.size)
                    noise = noise * (scale[:, None] if axis == 0 else scale[None, :])
                    shares[part], std[part] = merged.ravel(), noise.ravel()
        out.append(
            Measurement(
                "tables",
                query,
                np.clip(shares, 0.0, 1.0),
                std,
                np.repeat(np.arange(len(query.pairs)), query.sizes),
                np.ones(len(query.pairs)),
                relations=np.ones(len(query.pairs), dtype=bool),
            )
        )
    # A hub column's pair terms form one group whether they are Chebyshev products or on spread
    # factors: the first-order pairs on spread factors group as T_1 T_1 did. A category whose
    # rare values share one representative level has none: a function of its level's index
    # would read the representative, not the values it stands for.
    grouped = [group.column for group in rare]
    basis, answered, basis_std = summary.basis, summary.normalised, summary.basis_noise_std
    if grouped and basis.size:
        keep = ~(basis.indices[:, grouped] != 0).any(axis=1)
        basis = BasisSet(basis.d, basis.degree, basis.indices[keep])
        answered, basis_std = answered[keep], basis_std[keep]
    factors = summary.factor_pairs if summary.factor_sums is not None else None
    factor_sums = summary.factor_sums
    if grouped and factors is not None and factor_sums is not None:
        keep = ~np.isin(factors.pairs, grouped).any(axis=1)
        factors, factor_sums = (
            FactorPairs(factors.coefficients, factors.pairs[keep]),
            factor_sums[keep],
        )
    pairs = np.zeros((0, summary.basis.d), dtype=np.int64)
    if factors is not None and factors.size:
        pairs = np.zeros((factors.size, factors.d), dtype=np.int64)
        pairs[np.arange(factors.size), factors.pairs[:, 0]] = 1
        pairs[np.arange(factors.size), factors.pairs[:, 1]] = 1
    joint = BasisSet(basis.d, max(basis.degree, 1), np.vstack([basis.indices, pairs]))
    if joint.size:
        groups = basis_groups(joint)
        one_way = (joint.indices != 0).sum(axis=1) == 1
        tolerance = np.ones(int(groups.max()) + 1)
        tolerance[groups[one_way]] = marginal_tolerance
        relations = np.ones(tolerance.size, dtype=bool)
        relations[groups[one_way]] = False
        size = basis.size
        if size:
            out.append(
                Measurement(
                    "basis",
                    basis,
                    np.clip(answered, -1.0, 1.0),
                    basis_std / n,
                    groups[:size],
                    tolerance,
                    "basis",
                    relations,
                )
            )
        if pairs.size and factors is not None and factor_sums is not None:
            answers, std = np.clip(factor_sums / n, -1.0, 1.0), summary.factor_noise_std / n
            if modelled is not None:
                i, j = factors.pairs[:, 0], factors.pairs[:, 1]
                kept = modelled.model.kept[i, j]
                answers = np.where(kept, answers, np.clip(modelled.answers[i, j], -1.0, 1.0))
                std = std * modelled.model.noise_ratio[i, j]
            out.append(
                Measurement(
                    "factor_pairs",
                    factors,
                    answers,
                    std,
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
    quadrants = summary.quadrant_pairs
    if quadrants is not None and quadrants.query.size:
        out.append(
            Measurement(
                "quadrant_pairs",
                quadrants.query,
                np.clip(quadrants.values / n, -1.0, 1.0),
                float(np.max(quadrants.noise_std)) / n,
                np.zeros(quadrants.query.size, dtype=np.int64),
                np.ones(1),
                relations=np.ones(1, dtype=bool),
            )
        )
    for statistic in summary.statistics:  # kinds registered beyond the built-in ones
        reader = FIT_READERS.get(statistic.kind)
        if reader is not None:
            out.extend(reader(summary, statistic))
    return out
