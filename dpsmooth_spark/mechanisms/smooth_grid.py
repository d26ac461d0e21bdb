"""Algorithm 3 of Wang et al. (2016): the exact synthetic database over a grid, via one LP.

Steps (with the noisy count ``n~`` in place of the paper's public ``n``):

1. parameters ``t, N, m, L`` of Theorem 17 (pure) or Section 5.1 (``delta > 0``);
2. every record snapped to the nearest of the ``N`` points ``a_k = (2k + 1 - N) / N`` per axis
   (done inside the data-pass kernel, so the sums are over the snapped table);
3. noisy sums of the full tensor basis ``{0..t-1}^d``, normalised, rounded to ``L = {i/L}``;
4. ``W`` = basis values at the ``N^d`` grid points, rounded to ``L``;
5. the LP ``min ||W u - b||_1, u >= 0, sum u = 1`` over all ``N^d`` grid points (OR-Tools);
6. ``m`` records sampled from ``u``.

Only small ``d`` is feasible: the LP has ``N^d`` columns and ``t^d`` rows, and the job refuses,
with the estimated size, when ``t^d N^d`` exceeds ``max_lp_entries``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import ExactSums, tensor_products
from dpsmooth_spark.core.lp import solve_l1_fit
from dpsmooth_spark.mechanisms.stages import PlanError, release_basis_sums
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


class GridParams(BaseModel):
    """Parameters of Algorithm 3; ``None`` means the value of Theorem 17 / Section 5.1."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    smoothness: int = Field(default=2, ge=1, le=20, description="K, the smoothness order.")
    degree: int | None = Field(
        default=None,
        ge=2,
        le=200,
        description="t, Chebyshev degrees per axis; null: Theorem 17's value at the noisy count.",
    )
    grid_points: int | None = Field(
        default=None,
        ge=2,
        le=10_000,
        description="N, grid points per axis; null: Theorem 17's value at the noisy count.",
    )
    levels: int | None = Field(
        default=None,
        ge=1,
        description=(
            "L of the rounding set {i/L : -L <= i <= L}; null: Theorem 17's value at the noisy "
            "count."
        ),
    )
    rows: int | None = Field(
        default=None,
        ge=1,
        le=10**9,
        description=(
            "m, synthetic rows (output.rows overrides it); null: Theorem 17's value at the noisy "
            "count."
        ),
    )
    count_fraction: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        description="Share of the budget for the noisy count (released first: it sets t, N, m, L).",
    )
    max_lp_entries: int = Field(
        default=20_000_000,
        ge=1,
        description="Refuse when the LP has more than this many entries (t^d N^d).",
    )
    lp_solver: Literal["glop", "pdlp", "clp"] = Field(
        default="glop", description="OR-Tools backend."
    )


@dataclass(frozen=True)
class GridPlan:
    """The sizes of one Algorithm 3 run (functions of the noisy count and public values)."""

    degree: int
    grid_points: int
    levels: int
    rows: int

    def lp_entries(self, d: int) -> int:
        """Dense size of ``W``: ``t^d`` rows times ``N^d`` columns."""
        return self.degree**d * self.grid_points**d


def theorem17_plan(n: float, d: int, smoothness: int, delta: float = 0.0) -> GridPlan:
    """``t, N, L, m`` of Theorem 17 (pure DP) or of Section 5.1 (``delta > 0``)."""
    n = max(n, 1.0)
    k = smoothness
    if delta == 0.0:
        e = 2 * d + k
        return GridPlan(
            max(2, math.ceil(n ** (1 / e))),
            max(2, math.ceil(n ** (k / e))),
            math.ceil(n ** ((d + k) / e)),
            math.ceil(n ** (1 + (k + 1) / e)),
        )
    e = 3 * d + 2 * k
    log = math.log(1.0 / delta)
    return GridPlan(
        max(2, math.ceil(n ** (2 / e) * log ** (-1 / e))),
        max(2, math.ceil(n ** (2 * k / e) * log ** (-k / e))),
        math.ceil(n ** ((2 * d + 2 * k) / e) * log ** (-(d + k) / e)),
        math.ceil(n ** ((4 * d + 4 * k + 2) / e) * log ** (-(2 * d + 2 * k + 1) / e)),
    )


def plan_grid(noisy_count: float, d: int, params: GridParams, delta: float) -> GridPlan:
    """The plan with configured overrides; refuses LPs larger than ``max_lp_entries``."""
    base = theorem17_plan(noisy_count, d, params.smoothness, delta)
    plan = GridPlan(
        params.degree or base.degree,
        params.grid_points or base.grid_points,
        params.levels or base.levels,
        params.rows or base.rows,
    )
    if plan.lp_entries(d) > params.max_lp_entries:
        raise PlanError(
            f"Algorithm 3 needs an LP with t^d = {plan.degree}^{d} rows and N^d = "
            f"{plan.grid_points}^{d} columns ({plan.lp_entries(d):,} entries > "
            f"grid.max_lp_entries = "
            f"{params.max_lp_entries:,}); use the synthesize job, or set grid.degree / "
            f"grid.grid_points"
        )
    return plan


def grid_axis(points: int) -> np.ndarray:
    """The paper's set A: ``a_k = (2k + 1 - N) / N``, ``k = 0..N-1``."""
    return (2.0 * np.arange(points) + 1.0 - points) / points


def grid(points: int, d: int) -> np.ndarray:
    """All ``N^d`` grid points, C order: ``(N^d, d)``."""
    axis = grid_axis(points)
    return np.stack(np.meshgrid(*([axis] * d), indexing="ij"), axis=-1).reshape(-1, d)


def round_to_levels(values: np.ndarray, levels: int) -> np.ndarray:
    """Nearest element of ``{i / L : -L <= i <= L}``."""
    return np.clip(np.rint(np.asarray(values) * levels), -levels, levels) / levels


@dataclass
class GridRelease:
    """The DP output of Algorithm 3 before sampling.

    Attributes:
        bounds: public bounds.
        plan: t, N, L, m.
        noisy_count: n~.
        targets: ``(t^d - 1,)`` normalised noisy basis answers rounded to L (r != 0, C order).
    """

    bounds: PublicBounds
    plan: GridPlan
    noisy_count: float
    targets: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``summary.json`` of a grid release)."""
        return {
            "kind": "smooth_grid",
            "columns": list(self.bounds.columns),
            "lower": self.bounds.lower.tolist(),
            "upper": self.bounds.upper.tolist(),
            "degree": self.plan.degree,
            "grid_points": self.plan.grid_points,
            "levels": self.plan.levels,
            "rows": self.plan.rows,
            "noisy_count": self.noisy_count,
            "targets": self.targets.tolist(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GridRelease:
        """Inverse of :meth:`to_dict`."""
        bounds = PublicBounds(
            tuple(data["columns"]), np.array(data["lower"], float), np.array(data["upper"], float)
        )
        plan = GridPlan(data["degree"], data["grid_points"], data["levels"], data["rows"])
        return cls(bounds, plan, data["noisy_count"], np.array(data["targets"], float))


def release_grid(
    sums: ExactSums,
    bounds: PublicBounds,
    plan: GridPlan,
    noisy_count: float,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> GridRelease:
    """Steps 7-11: noisy tensor sums of the snapped table, normalised and rounded to L."""
    if sums.tensor_degree != plan.degree:
        raise ValueError("the data pass must compute the tensor basis at the plan's degree")
    exact = sums.tensor_sums().ravel()[1:]
    noisy, _ = release_basis_sums(exact, budget, accountant, noise, "grid_basis_sums")
    targets = round_to_levels(noisy / max(noisy_count, 1.0), plan.levels)
    return GridRelease(bounds, plan, noisy_count, targets)


def fit_grid(release: GridRelease, solver: str = "glop") -> tuple[np.ndarray, np.ndarray, float]:
    """Steps 12-20: the LP over every grid point; returns (points, weights, objective)."""
    d = release.bounds.d
    points = grid(release.plan.grid_points, d)
    w = round_to_levels(tensor_products(points, release.plan.degree)[:, 1:].T, release.plan.levels)
    fit = solve_l1_fit(w, release.targets, solver=solver)
    return points, fit.weights, fit.objective


def sample_grid(
    points: np.ndarray, weights: np.ndarray, rows: int, rng: np.random.Generator
) -> np.ndarray:
    """Steps 21-24: ``rows`` records drawn from ``u`` over the grid points (scaled units)."""
    counts = rng.multinomial(rows, weights / weights.sum())
    out = np.repeat(points, counts, axis=0)
    rng.shuffle(out, axis=0)
    return out
