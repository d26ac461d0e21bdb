"""Distance-query release (Huang and Roth, "Exploiting metric structure for efficient private
query release", Theorem 3.2 and Section 4).

Released: a data structure that answers the mean distance from any query point to the records,
without data access. For the l1 metric each coordinate's mean distance ``F_i(y) = mean |x_i - y|``
(convex, 1-Lipschitz on the normalised axis) is learned as a maximum of noisy tangents, driven by
the iterative-database-construction framework with the sparse vector technique (Lemma 3.1) over
the fixed query grid of Theorem 3.2. l2 distances go through random projections (Lemma 4.1),
other metrics through the 1-sensitive Bourgain embedding built from a public query set
(Figure 3); both are data-oblivious, so a neighbouring table maps to a neighbouring proxy table.

Budget (add/remove-one neighbours, sums rather than means; docs/privacy.md section 10):
``count_fraction`` for the noisy count ``n~``; of the rest, ``svt_fraction`` for the sparse
vector (queries ``|S_i(y) - n~ G_i(y)|`` with ``S_i(y) = sum_x |x_i - y|``: sensitivity 1) and
the remainder for the tangents (value ``S_i(y)`` and slope ``#{x < y} - #{x > y}``, each of
sensitivity 1, so L1 sensitivity 2 and L2 sqrt 2 per update), over at most ``c`` updates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.distances import (
    BourgainEmbedding,
    TangentLearner,
    distance_sums,
    gaussian_projection,
    grid_statistics,
    mistake_bound,
    named_metric,
    projection_bounds,
    slope_sums,
)
from dpsmooth_spark.mechanisms.stages import add_noise, release_count
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource
from dpsmooth_spark.privacy.sparse_vector import SparseVector

ALPHA_CHOICES = tuple(float(a) for a in np.geomspace(1e-4, 0.5, 40))
"""Per-coordinate accuracy targets that ``alpha: auto`` picks from."""


class DistanceParams(BaseModel):
    """Parameters of the distance-query release."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Literal["l1", "l2", "bourgain"] = Field(
        default="l1",
        description=(
            "l1, l2 (through random projections) or bourgain (any base_metric, through the "
            "Bourgain embedding)."
        ),
    )
    alpha: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description=(
            "Per-coordinate target error on the unit axis; null: the smallest the budget supports."
        ),
    )
    grid: int | None = Field(
        default=None,
        ge=2,
        le=100_000,
        description=(
            "Query-grid points per coordinate; null: a fine grid thinned to about alpha apart."
        ),
    )
    max_updates: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Tangent updates the sparse vector pays for; null: Lemma 3.2's mistake bound.",
    )
    passes: int = Field(default=3, ge=1, le=50, description="Sweeps over the grid.")
    count_fraction: float = Field(
        default=0.05, gt=0, lt=0.5, description="Share of the budget for the noisy count."
    )
    svt_fraction: float = Field(
        default=0.5, gt=0, lt=1, description="Share of the rest for the sparse vector."
    )
    projection_dim: int = Field(
        default=32, ge=1, le=4096, description="Target dimension of the l2 random projection."
    )
    base_metric: Literal["l1", "l2", "linf"] = Field(
        default="l2", description="Metric for bourgain: l1, l2 or linf (diameter 1 on the cube)."
    )
    bourgain_repeats: int = Field(default=4, ge=1, le=10_000, description="K of Figure 3.")
    queries: str | None = Field(
        default=None,
        description="bourgain only: Parquet / CSV file of query points (the config's columns).",
    )
    embedding_seed: int | None = Field(
        default=None,
        description=(
            "Seed of the embedding's public randomness; null: fresh (the embedding is part of the "
            "release)."
        ),
    )


@dataclass(frozen=True)
class Embedding:
    """The public map from records (original units) to the proxy coordinates in [0, 1].

    ``answer = sum_j widths[j] * G_j(coordinate j of the query)`` estimates the metric's mean
    distance, where ``G_j`` is the learned mean |.| distance on proxy axis ``j``.

    Attributes:
        kind: ``l1``, ``l2`` or ``bourgain``.
        bounds: the configured columns and bounds.
        projection: ``(m, d)`` for ``l2``.
        offset, widths: proxy axis ``j`` is ``(z_j - offset_j) / widths_j``.
        bourgain: the Bourgain embedding (queries in unit-scaled coordinates).
        base_metric: its metric.
    """

    kind: str
    bounds: PublicBounds
    offset: np.ndarray
    widths: np.ndarray
    projection: np.ndarray | None = None
    bourgain: BourgainEmbedding | None = None
    base_metric: str = "l2"

    @classmethod
    def build(
        cls,
        params: DistanceParams,
        bounds: PublicBounds,
        queries: np.ndarray | None,
        rng: np.random.Generator,
    ) -> Embedding:
        """Draw the embedding for ``params`` (public randomness only)."""
        if params.metric == "l1":
            return cls("l1", bounds, bounds.lower.copy(), bounds.upper - bounds.lower)
        if params.metric == "l2":
            p = gaussian_projection(bounds.d, params.projection_dim, rng)
            lo, hi = projection_bounds(p, bounds.lower, bounds.upper)
            return cls("l2", bounds, lo, np.maximum(hi - lo, 1e-300), projection=p)
        if queries is None or len(queries) == 0:
            raise ValueError("metric bourgain needs distance.queries (a file of query points)")
        unit = np.clip(
            (np.asarray(queries, dtype=np.float64) - bounds.lower) / (bounds.upper - bounds.lower),
            0,
            1,
        )
        emb = BourgainEmbedding.draw(unit, params.bourgain_repeats, rng)
        return cls(
            "bourgain",
            bounds,
            np.zeros(emb.dim),
            np.full(emb.dim, 1.0 / emb.dim),
            bourgain=emb,
            base_metric=params.base_metric,
        )

    @property
    def dim(self) -> int:
        """Number of proxy axes."""
        return int(self.widths.size)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Proxy coordinates in [0, 1] of records or queries ``x`` (original units, in bounds)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        if self.kind == "l1":
            z = x
        elif self.kind == "l2":
            assert self.projection is not None
            z = x @ self.projection.T
        else:
            assert self.bourgain is not None
            unit = np.clip((x - self.bounds.lower) / (self.bounds.upper - self.bounds.lower), 0, 1)
            z = self.bourgain(unit, named_metric(self.base_metric, self.bounds.d))
        return np.clip((z - self.offset) / self.widths, 0.0, 1.0)

    def to_dict(self) -> dict[str, Any]:
        """JSON form (the embedding is part of the release)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "offset": self.offset.tolist(),
            "widths": self.widths.tolist(),
        }
        if self.projection is not None:
            out["projection"] = self.projection.tolist()
        if self.bourgain is not None:
            out["bourgain"] = {
                "queries_unit": self.bourgain.queries.tolist(),
                "subsets": self.bourgain.subsets.astype(int).tolist(),
                "repeats": self.bourgain.repeats,
                "base_metric": self.base_metric,
            }
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], bounds: PublicBounds) -> Embedding:
        """Inverse of :meth:`to_dict`."""
        projection = np.asarray(data["projection"]) if "projection" in data else None
        bourgain, base = None, "l2"
        if "bourgain" in data:
            b = data["bourgain"]
            bourgain = BourgainEmbedding(
                np.asarray(b["queries_unit"], dtype=np.float64),
                np.asarray(b["subsets"], dtype=bool),
                int(b["repeats"]),
            )
            base = b["base_metric"]
        return cls(
            data["kind"],
            bounds,
            np.asarray(data["offset"]),
            np.asarray(data["widths"]),
            projection,
            bourgain,
            base,
        )


FINE_GRID_POINTS = 2049
"""Grid points per axis on which the data pass computes statistics when ``grid`` is not fixed;
the plan then uses every ``s``-th point, ``s`` from the chosen ``alpha``."""


def statistics_grid(params: DistanceParams) -> np.ndarray:
    """The grid the data pass evaluates (fixed before any data is read)."""
    return np.linspace(0.0, 1.0, params.grid or FINE_GRID_POINTS)


def plan_indices(alpha: float, params: DistanceParams) -> np.ndarray:
    """Theorem 3.2's grid (spacing about ``alpha``) as indices into :func:`statistics_grid`;
    a fixed ``grid`` is used whole."""
    points = params.grid or FINE_GRID_POINTS
    if params.grid is not None:
        return np.arange(points)
    step = max(1, int(alpha * (points - 1)))
    return np.unique(np.append(np.arange(0, points, step), points - 1))


@dataclass(frozen=True)
class Plan:
    """Accuracy target, grid and update budget of one release (public inputs only)."""

    alpha: float
    indices: np.ndarray
    max_updates: int
    svt_budget: float
    tangent_budget: float


def plan(
    params: DistanceParams, axes: int, noisy_count: float, accountant: PrivacyAccountant
) -> Plan:
    """Pick ``alpha`` (unless fixed): the smallest target at which the sparse vector's query-noise
    scale stays under ``alpha n~ / 2`` and the tangents' noise scale under ``alpha n~ / 4`` (the
    conditions of Lemmas 3.1 and 3.3 on typical rather than worst-case noise), with
    ``c = axes x mistake_bound(alpha / 2)`` updates. Requiring the union-bound maxima instead gave
    5x larger errors in our measurements (docs/mechanisms.md)."""
    rest = 1.0 - params.count_fraction
    svt_budget = accountant.share(rest * params.svt_fraction)
    tangent_budget = accountant.share(rest * (1.0 - params.svt_fraction))
    n = max(noisy_count, 1.0)

    def updates(alpha: float) -> int:
        return params.max_updates or axes * mistake_bound(alpha / 2.0)

    def feasible(alpha: float) -> bool:
        c = updates(alpha)
        query_noise = 2.0 * accountant.noise_scale(2.0, svt_budget, invocations=c)
        tangent_noise = accountant.noise_scale(
            _tangent_sensitivity(accountant), tangent_budget, invocations=c
        )
        return query_noise <= alpha * n / 2.0 and tangent_noise <= alpha * n / 4.0

    if params.alpha is not None:
        alpha = params.alpha
    else:
        alpha = next((a for a in ALPHA_CHOICES if feasible(a)), ALPHA_CHOICES[-1])
    return Plan(alpha, plan_indices(alpha, params), updates(alpha), svt_budget, tangent_budget)


def _tangent_sensitivity(accountant: PrivacyAccountant) -> float:
    """Value and slope sums change by at most 1 each: L1 2, L2 sqrt 2."""
    return 2.0 if accountant.pure else math.sqrt(2.0)


@dataclass
class DistanceRelease:
    """The released structure: embedding, per-axis tangent sets, and how they were obtained."""

    embedding: Embedding
    learners: list[TangentLearner]
    noisy_count: float
    alpha: float
    grid_points: int
    max_updates: int
    updates_used: int
    queries_asked: int

    @property
    def bounds(self) -> PublicBounds:
        """The configured columns and their public bounds."""
        return self.embedding.bounds

    def answer(self, points: np.ndarray) -> np.ndarray:
        """Mean distance from each query point (original units) to the records.

        Post-processing only: each learned axis function is clipped to its possible range
        ``[0, max(y, 1 - y)]`` (a mean distance on the unit axis).
        """
        z = self.embedding(points)
        total = np.zeros(z.shape[0])
        for j, (w, learner) in enumerate(zip(self.embedding.widths, self.learners, strict=False)):
            y = z[:, j]
            total += w * np.clip(learner(y), 0.0, np.maximum(y, 1.0 - y))
        return total

    def to_dict(self) -> dict[str, Any]:
        """JSON form, written as ``distances.json``."""
        return {
            "columns": list(self.bounds.columns),
            "lower": self.bounds.lower.tolist(),
            "upper": self.bounds.upper.tolist(),
            "embedding": self.embedding.to_dict(),
            "tangents": [{"slopes": g.slopes, "intercepts": g.intercepts} for g in self.learners],
            "noisy_count": self.noisy_count,
            "alpha": self.alpha,
            "grid_points": self.grid_points,
            "max_updates": self.max_updates,
            "updates_used": self.updates_used,
            "queries_asked": self.queries_asked,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DistanceRelease:
        """Inverse of :meth:`to_dict`."""
        bounds = PublicBounds.from_mapping(
            {
                c: (lo, hi)
                for c, lo, hi in zip(data["columns"], data["lower"], data["upper"], strict=False)
            }
        )
        learners = [
            TangentLearner(list(t["slopes"]), list(t["intercepts"])) for t in data["tangents"]
        ]
        return cls(
            Embedding.from_dict(data["embedding"], bounds),
            learners,
            data["noisy_count"],
            data["alpha"],
            data["grid_points"],
            data["max_updates"],
            data["updates_used"],
            data["queries_asked"],
        )

    @classmethod
    def load(cls, path: str | Path) -> DistanceRelease:
        """Read ``distances.json`` (or a release folder holding it)."""
        import json

        path = Path(path)
        if path.is_dir():
            path = path / "distances.json"
        return cls.from_dict(json.loads(path.read_text()))


def release_distances(
    stats: np.ndarray,
    count: int,
    embedding: Embedding,
    params: DistanceParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> DistanceRelease:
    """Run the offline mechanism on exact statistics (all DP noise is drawn here).

    Args:
        stats: ``(axes, t, 4)`` :func:`grid_statistics` of the proxy records on
            :func:`statistics_grid`.
        count: exact number of records.
        embedding: the proxy map.
        params: mechanism parameters.
        accountant: spends count, sparse vector and tangents.
        noise: the noise source.
    """
    grid = statistics_grid(params)
    if stats.shape[1] != grid.size:
        raise ValueError("the statistics were computed on a different grid")
    noisy_count = release_count(count, params.count_fraction, accountant, noise)
    chosen = plan(params, stats.shape[0], noisy_count, accountant)
    n = max(noisy_count, 1.0)
    values, slopes = distance_sums(stats, grid), slope_sums(stats)
    svt = SparseVector.start(
        chosen.alpha * n, 1.0, chosen.max_updates, chosen.svt_budget, accountant, noise
    )
    sens = _tangent_sensitivity(accountant)
    tangent_scale = accountant.noise_scale(
        sens, chosen.tangent_budget, invocations=chosen.max_updates
    )
    accountant.charge(
        "tangents",
        sens,
        tangent_scale,
        invocations=chosen.max_updates,
        mechanism="laplace" if accountant.pure else "gaussian",
    )
    learners = [TangentLearner() for _ in range(stats.shape[0])]
    for _ in range(params.passes):
        updated = False
        for axis, learner in enumerate(learners):
            for j in chosen.indices:
                if svt.exhausted:
                    break
                y = float(grid[j])
                if svt.above(abs(values[axis, j] - n * float(learner(y)))):
                    value, slope = (
                        add_noise(
                            np.array([values[axis, j], slopes[axis, j]]),
                            tangent_scale,
                            accountant,
                            noise,
                        )
                        / n
                    )
                    learner.update(y, float(value), float(slope))
                    updated = True
        if not updated or svt.exhausted:
            break
    return DistanceRelease(
        embedding,
        learners,
        noisy_count,
        chosen.alpha,
        int(chosen.indices.size),
        chosen.max_updates,
        svt.aboves,
        svt.queries,
    )


def release_from_records(
    records: np.ndarray,
    embedding: Embedding,
    params: DistanceParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> DistanceRelease:
    """The whole mechanism on in-memory records (original units, within the bounds): library use,
    tests and benchmarks. The Spark job computes the same statistics in a pass."""
    stats = grid_statistics(embedding(records), statistics_grid(params))
    return release_distances(stats, records.shape[0], embedding, params, accountant, noise)
