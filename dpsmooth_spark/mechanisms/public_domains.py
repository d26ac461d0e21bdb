"""Public domains the user cannot state: bounds by noisy histograms, categorical values by DP
partition selection. Both run before the release's statistics, on ``privacy.domain_fraction`` of
its budget split evenly over the auto bounds and auto values (docs/privacy.md section 1c), and
their results are then public like a declared domain.

* Bounds (``lower: auto``, ``upper: auto``): a noisy histogram of the column on each of the two
  grids of :class:`~dpsmooth_spark.core.quantile_grid.QuantileGrid`; the cells that clear a
  threshold keep their noisy counts, and the bounds lie just beyond that mass's
  :data:`BOUND_QUANTILE` and ``1 - BOUND_QUANTILE`` points. An exponential-mechanism quantile,
  the textbook choice, needs ``q n epsilon`` of about ten to leave the empty part of a wide
  range, which tables of thousands of rows do not have at a tenth of the budget split over their
  columns.
* A domain (``values: auto``): Gaussian thresholding (the noisy count of every value that occurs,
  released when above a threshold that a value only one unit has clears with probability at most
  its delta); values not released map to the column's ``other`` value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np
from scipy.stats import norm

from dpsmooth_spark.core.columns import MAX_CATEGORIES
from dpsmooth_spark.core.quantile_grid import QuantileGrid
from dpsmooth_spark.mechanisms.stages import add_noise
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

BOUND_QUANTILE = 0.01
"""An auto bound sits where this share of the noisy histogram's surviving mass lies beyond it
(the lower one below, the upper one above), rounded outwards to a cell edge."""
FALSE_CELL_RATE = 1e-3
"""Chance that a cell holding no row survives the threshold, over one grid's cells; such a cell
moves a bound only if its noisy count exceeds ``BOUND_QUANTILE`` of the mass."""
PAD_CELLS = 0.5
"""How far beyond the quantile's cell a bound lies, in cells (where a tail too thin to clear the
threshold most likely lies): 0 clamped more, 1 widened more (docs/decisions/0006)."""
TAIL_LOSS = 0.03
"""A reading competes for the narrowest range only if its surviving cells keep the mass of the
reading that kept the most, less this share and twice that mass's noise (a fine reading whose
tail cells drown in noise would clamp them) ..."""
MAX_LOSS = 0.1
"""... and never less than this share of it (docs/decisions/0006)."""
MERGES = (1, 2, 4, 8, 16)
"""The resolutions a noisy histogram is read at: its cells, then 2 to 16 adjacent cells summed."""
SELECTION_DELTA_SHARE = 0.5
"""Share of ``privacy.delta`` that partition selection may fail with; the rest converts zCDP."""


@dataclass(frozen=True)
class FoundBounds:
    """The bounds a column's two noisy histograms gave (encoded units).

    Attributes:
        column: the column.
        lower, upper: the bounds (a declared bound is kept as given).
        grid: the reading that gave the range, e.g. ``log/64`` (the signed-log grid, its cells
            summed four by four), or ``none`` when no cell cleared its threshold (the bounds are
            then the public range).
        threshold: the noisy count a cell of that reading had to exceed.
        scale: each histogram's noise scale (Laplace b or Gaussian sigma).
        outside: the share of that grid's noisy mass (every cell, at its finest) in cells whose
            centre lies outside the bounds: about how much of the column the bounds clamp
            (``None`` where no cell was kept). Post-processing of the noisy histogram.
        outside_std: the noise standard deviation of ``outside`` (the noise of the cells beyond
            the bounds over the noisy mass): on a wide range with little budget the cells beyond
            are many and their noise can dwarf the share.
    """

    column: str
    lower: float
    upper: float
    grid: str
    threshold: float
    scale: float
    outside: float | None = None
    outside_std: float | None = None

    @property
    def resolved(self) -> bool:
        """Whether a noisy cell cleared the threshold (else the bounds are the range's ends)."""
        return self.grid != "none"


@dataclass(frozen=True)
class FoundValues:
    """A categorical domain partition selection released.

    Attributes:
        column: the column.
        values: the released values, most frequent first (noisy counts), then ``other``.
        other: the value that stands for every value not released.
        threshold: the noisy count a value had to exceed.
        noise_std: the Gaussian noise's standard deviation.
        delta: the chance that a value only the changed unit has was released.
        truncated: values above the threshold left out for the domain's size limit.
    """

    column: str
    values: tuple[Any, ...]
    other: Any
    threshold: float
    noise_std: float
    delta: float
    truncated: int


@dataclass(frozen=True)
class PublicDomains:
    """The domains found for one release, as the manifest and the ledger keep them."""

    bounds: tuple[FoundBounds, ...] = ()
    values: tuple[FoundValues, ...] = ()

    def range_of(self, column: str) -> FoundBounds | None:
        """The found bounds of ``column``, if any."""
        return next((b for b in self.bounds if b.column == column), None)

    def domain(self, column: str) -> FoundValues | None:
        """The found domain of ``column``, if any."""
        return next((v for v in self.values if v.column == column), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (manifest, ledger)."""
        return {
            "bounds": [asdict(b) for b in self.bounds],
            "values": [{**asdict(v), "values": list(v.values)} for v in self.values],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PublicDomains:
        """Inverse of :meth:`to_dict` (a retry reuses the domains its first attempt found)."""
        return cls(
            tuple(FoundBounds(**b) for b in data.get("bounds", [])),
            tuple(
                FoundValues(**{**v, "values": tuple(v["values"])}) for v in data.get("values", [])
            ),
        )


def stage_budgets(accountant: PrivacyAccountant, fraction: float, stages: int) -> float:
    """Each domain stage's budget (epsilon or rho): ``fraction`` of the whole, split evenly."""
    if stages < 1:
        raise ValueError("no domain stage to budget")
    return accountant.whole_share(fraction) / stages


def dp_bounds(
    column: str,
    grid: QuantileGrid,
    linear_counts: np.ndarray,
    log_counts: np.ndarray,
    budget: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    integer: bool = False,
    fixed: tuple[float | None, float | None] = (None, None),
) -> FoundBounds:
    """Bounds of ``column`` from a noisy histogram on each of its grid's two grids, each charged
    as ``bounds:<column>:<grid>`` with half of ``budget``.

    A row is in one cell of each grid, so each histogram has sensitivity 1 (docs/privacy.md
    section 1c). The rest is post-processing. Each noisy histogram is read at
    :data:`MERGES` resolutions (adjacent cells summed: their noise grows as the square root of the
    cells merged, their counts linearly, so sparse tails survive coarser). At each, the cells whose
    noisy count does not clear a threshold (an empty cell clears it with probability
    :data:`FALSE_CELL_RATE` per reading) are dropped, and the bounds are the
    :data:`BOUND_QUANTILE` and ``1 - BOUND_QUANTILE`` points of the remaining mass, widened by
    :data:`PAD_CELLS` of a cell on each side. The
    narrowest range among the readings that kept nearly the largest kept mass
    (:data:`TAIL_LOSS`, :data:`MAX_LOSS`) wins. ``fixed`` keeps a declared lower or upper bound.
    """
    scale = accountant.noise_scale(1.0, budget / 2.0)
    readings: list[_Reading] = []
    histograms: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # noisy cells and their centres
    for name, counts, edges in (
        ("linear", linear_counts, grid.linear_edges()),
        ("log", log_counts, grid.log_edges()),
    ):
        noisy = add_noise(np.asarray(counts, dtype=np.float64), scale, accountant, noise)
        accountant.charge(f"bounds:{column}:{name}", 1.0, scale)
        for merge in MERGES:
            cells = grid.cells // merge
            merged = noisy.reshape(cells, merge).sum(axis=1)
            threshold = _threshold(scale, merge, cells, accountant.pure)
            kept = np.where(merged > threshold, merged, 0.0)
            if kept.sum() <= 0:
                continue
            cdf = np.cumsum(kept) / kept.sum()
            # half a cell beyond the quantile's cell: where a dropped tail most likely lies
            first = int(np.searchsorted(cdf, BOUND_QUANTILE, side="right"))
            last = min(int(np.searchsorted(cdf, 1.0 - BOUND_QUANTILE, side="left")) + 1, cells)
            reading = edges[::merge]
            low = reading[first] - PAD_CELLS * (reading[first] - reading[max(first - 1, 0)])
            high = reading[last] + PAD_CELLS * (reading[min(last + 1, cells)] - reading[last])
            # the kept mass's noise: Laplace b has standard deviation b sqrt(2)
            spread = scale * math.sqrt((2.0 if accountant.pure else 1.0) * merge * (kept > 0).sum())
            readings.append(
                _Reading(
                    float(low), float(high), f"{name}/{cells}", float(kept.sum()), threshold, spread
                )
            )
        edges = np.asarray(edges, dtype=np.float64)
        histograms[name] = (noisy, 0.5 * (edges[:-1] + edges[1:]))
    lower, upper = fixed
    chosen = _Reading(grid.low, grid.high, "none", 0.0, math.inf, 0.0)
    if readings:
        most = max(readings, key=lambda r: r.kept)
        loss = min(MAX_LOSS, TAIL_LOSS + 2.0 * most.spread / most.kept)
        chosen = min(
            (r for r in readings if r.kept >= (1.0 - loss) * most.kept),
            key=lambda r: (
                (r.high if upper is None else upper) - (r.low if lower is None else lower)
            ),
        )
    lo, hi = ordered_bounds(
        chosen.low if lower is None else lower,
        chosen.high if upper is None else upper,
        grid,
        integer,
    )
    outside = outside_std = None
    if chosen.kept > 0:  # every noisy cell counts: the tails the threshold dropped are clamped
        noisy, centres = histograms[chosen.name.partition("/")[0]]
        total = noisy.sum()
        beyond = (centres < lo) | (centres > hi)
        if total > 0:
            cell_variance = (2.0 if accountant.pure else 1.0) * scale**2
            outside = float(np.clip(noisy[beyond].sum() / total, 0.0, 1.0))
            outside_std = float(math.sqrt(beyond.sum() * cell_variance) / total)
    return FoundBounds(
        column, lo, hi, chosen.name, chosen.threshold, float(scale), outside, outside_std
    )


class _Reading(NamedTuple):
    """One resolution of one noisy histogram: its range, name, kept mass, threshold, and the
    kept mass's noise standard deviation."""

    low: float
    high: float
    name: str
    kept: float
    threshold: float
    spread: float


def _threshold(scale: float, merge: int, cells: int, pure: bool) -> float:
    """The count a sum of ``merge`` cells' noise exceeds with probability at most
    ``FALSE_CELL_RATE / cells``: the Gaussian tail, the Laplace tail (one cell), or for a sum of
    ``m`` Laplace(b) the Chernoff bound ``min over l of exp(-l t) (1 - l^2 b^2)^-m``, whose
    minimiser is ``l = (sqrt(m^2 + t^2 / b^2) - m) / t`` (solved for ``t`` by bisection)."""
    p = FALSE_CELL_RATE / cells
    if not pure:
        return scale * math.sqrt(merge) * float(norm.isf(p))
    if merge == 1:
        return scale * math.log(1.0 / (2.0 * p))

    def log_tail(t: float) -> float:  # in units of b
        lam = (math.sqrt(merge**2 + t**2) - merge) / t
        return -lam * t - merge * math.log(1.0 - lam**2)

    low, high = 0.0, 2.0 * (math.log(1.0 / p) + merge)  # the tail at `high` is below p
    for _ in range(100):
        mid = (low + high) / 2.0
        low, high = (mid, high) if log_tail(mid) > math.log(p) else (low, mid)
    return scale * high


def ordered_bounds(
    lower: float, upper: float, grid: QuantileGrid, integer: bool
) -> tuple[float, float]:
    """The two bounds as a usable range (post-processing): rounded outwards to integers for an
    integer, date or timestamp column, and widened to the next grid cell (or integer) when a
    declared bound leaves them crossed or equal."""
    if integer:
        lower, upper = math.floor(lower), math.ceil(upper)
    if lower >= upper:
        step = 1.0 if integer else (grid.high - grid.low) / grid.cells
        if upper + step <= grid.high:
            upper = max(upper, lower) + step
        else:
            lower = min(lower, upper) - step
    return float(lower), float(upper)


def select_values(
    column: str,
    counts: Mapping[Any, int],
    other: Any,
    budget: float,
    delta: float,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> FoundValues:
    """The values of ``column`` whose noisy count clears the threshold, most frequent first,
    then ``other``; charged as ``values:<column>``.

    Gaussian thresholding: every value that occurs gets ``N(0, sigma^2)`` with ``sigma`` from
    ``budget`` (rho) for L2 sensitivity ``k`` (the rows one unit may contribute); the threshold
    ``k + sigma * Phi^-1(1 - delta / k)`` keeps the chance that any of the at most ``k`` values
    only the changed unit has is released below ``delta`` (docs/privacy.md section 1c). At most
    ``MAX_CATEGORIES - 1`` values are kept (the largest noisy counts).
    """
    if accountant.pure:
        raise ValueError(
            f"column {column!r}: values: auto needs privacy.delta > 0 (partition selection)"
        )
    k = accountant.unit_rows
    sigma = accountant.noise_scale(1.0, budget)
    threshold = k + sigma * float(norm.isf(delta / k))
    keys: Sequence[Any] = list(counts)
    exact = np.array([float(counts[v]) for v in keys], dtype=np.float64)
    noisy = noise.gaussian(exact, sigma) if exact.size else exact
    accountant.charge_threshold(f"values:{column}", 1.0, sigma, delta)
    above = [i for i in np.argsort(-noisy, kind="stable") if noisy[i] > threshold]
    kept = [keys[i] for i in above[: MAX_CATEGORIES - 1] if keys[i] != other]
    return FoundValues(
        column,
        (*kept, other),
        other,
        float(threshold),
        float(sigma),
        float(delta),
        max(0, len(above) - (MAX_CATEGORIES - 1)),
    )
