"""Distance queries (Huang and Roth): the math of the l1 mechanism and the embeddings into l1.

A distance query ``y`` asks for the mean distance from ``y`` to the records. For the l1 metric on
``[0, 1]^l`` it splits over coordinates, ``F(y) = sum_i F_i(y_i)`` with
``F_i(y) = mean |x_i - y|``, each 1-Lipschitz and convex; :class:`TangentLearner` learns one of
them as a maximum of (noisy) tangent lines (the paper's Figure 1). Other metrics reach the l1
mechanism through an embedding that does not look at the data: random projections for l2
(Lemma 4.1) and the 1-sensitive Bourgain variant for any metric and a fixed query set (Figure 3).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

STAT_FIELDS = 4
"""Per coordinate and grid point: ``#{x < y}``, ``sum_{x < y} x``, ``#{x > y}``, ``sum_{x > y}
x``."""


def grid_statistics(u: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Sufficient statistics of the per-coordinate distance functions on ``grid``.

    Args:
        u: ``(rows, l)`` records in ``[0, 1]`` per coordinate.
        grid: ``(t,)`` query points per coordinate.

    Returns:
        ``(l, t, 4)``: counts and sums of the values below and above each grid point; sums of these
        over record batches give :func:`distance_sums` and :func:`slope_sums` exactly.
    """
    rows, dim = u.shape
    out = np.zeros((dim, grid.size, STAT_FIELDS))
    for i in range(dim):
        col = np.sort(u[:, i])
        prefix = np.concatenate(([0.0], np.cumsum(col)))
        below = np.searchsorted(col, grid, side="left")
        upto = np.searchsorted(col, grid, side="right")
        out[i, :, 0] = below
        out[i, :, 1] = prefix[below]
        out[i, :, 2] = rows - upto
        out[i, :, 3] = prefix[-1] - prefix[upto]
    return out


def distance_sums(stats: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """``sum_x |x_i - y|`` at every grid point, ``(l, t)`` (sensitivity 1 per entry on [0, 1])."""
    below, s_below, above, s_above = (stats[..., j] for j in range(STAT_FIELDS))
    return grid * below - s_below + s_above - grid * above


def slope_sums(stats: np.ndarray) -> np.ndarray:
    """``sum_x d|x_i - y|/dy = #{x < y} - #{x > y}``, ``(l, t)`` (sensitivity 1 per entry)."""
    return stats[..., 0] - stats[..., 2]


@dataclass
class TangentLearner:
    """A convex, 1-Lipschitz function on [0, 1] kept as ``max_k (a_k y + b_k)`` (Figure 1).

    Starts from the zero line (a valid lower bound of a mean distance); each update adds the
    tangent at the point where the hypothesis erred, from (noisy) value and slope answers.
    """

    slopes: list[float] = field(default_factory=lambda: [0.0])
    intercepts: list[float] = field(default_factory=lambda: [0.0])

    def __call__(self, y: float | np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        a, b = np.asarray(self.slopes), np.asarray(self.intercepts)
        return np.max(np.multiply.outer(y, a) + b, axis=-1)

    def update(self, point: float, value: float, slope: float) -> None:
        """Add the tangent through ``(point, value)`` with ``slope`` clipped to [-1, 1]."""
        slope = float(np.clip(slope, -1.0, 1.0))
        self.slopes.append(slope)
        self.intercepts.append(float(value) - slope * float(point))

    @property
    def updates(self) -> int:
        """Tangents added (the mistakes charged to the learner)."""
        return len(self.slopes) - 1


def mistake_bound(alpha: float) -> int:
    """Lemma 3.2: at most ``3 / sqrt(alpha)`` updates learn a convex 1-Lipschitz function on [0, 1]
    to error ``alpha`` from exact tangents."""
    return math.ceil(3.0 / math.sqrt(alpha))


def gaussian_projection(dim_in: int, dim_out: int, rng: np.random.Generator) -> np.ndarray:
    """``(dim_out, dim_in)`` map ``P`` with ``E ||P v||_1 = ||v||_2`` (Lemma 4.1's random
    projections:
    ``|g . v|`` has mean ``sqrt(2 / pi) ||v||_2`` for standard Gaussian ``g``)."""
    return rng.standard_normal((dim_out, dim_in)) * (math.sqrt(math.pi / 2.0) / dim_out)


def projection_bounds(
    p: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Public range of ``P v`` over the box ``lower <= v <= upper`` (no data involved)."""
    a, b = p * lower, p * upper
    return np.minimum(a, b).sum(axis=1), np.maximum(a, b).sum(axis=1)


Metric = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``metric(points (m, l), queries (k, l)) -> (m, k)`` distances, with diameter at most 1."""


def named_metric(name: str, dim: int) -> Metric:
    """A metric on ``[0, 1]^dim`` scaled to diameter 1: ``l1`` (/dim), ``l2`` (/sqrt(dim)),
    ``linf``."""
    if name == "l1":
        return lambda x, q: np.abs(x[:, None, :] - q[None, :, :]).sum(axis=2) / dim
    if name == "l2":
        return lambda x, q: np.sqrt(((x[:, None, :] - q[None, :, :]) ** 2).sum(axis=2) / dim)
    if name == "linf":
        return lambda x, q: np.abs(x[:, None, :] - q[None, :, :]).max(axis=2)
    raise ValueError(f"unknown metric {name!r} (l1, l2, linf)")


@dataclass(frozen=True)
class BourgainEmbedding:
    """Figure 3: ``pi_ij(x) = d(x, S_ij) / (K L)`` for random subsets ``S_ij`` of the query points,
    level ``i`` keeping each query with probability ``2^-(i-1)`` (level 1 keeps all of them).

    Oblivious to the data, hence 1-sensitive: a record's image depends on that record only.
    Expansion is at most 1 (triangle inequality); contraction ``O(log k)`` w.h.p. when
    ``K = 512 (log k + log n)`` (Theorem 4.4); a smaller ``K`` trades distortion for dimension.

    Attributes:
        queries: ``(k, l)`` the fixed query set, in the metric's units.
        subsets: boolean ``(L * K, k)`` membership of each query in each ``S_ij``.
        repeats: ``K``.
    """

    queries: np.ndarray
    subsets: np.ndarray
    repeats: int

    @classmethod
    def draw(cls, queries: np.ndarray, repeats: int, rng: np.random.Generator) -> BourgainEmbedding:
        """Draw the subsets (public randomness)."""
        k = queries.shape[0]
        levels = max(1, math.ceil(math.log2(k))) if k > 1 else 1
        probs = np.repeat(2.0 ** -np.arange(levels), repeats)
        subsets = rng.random((levels * repeats, k)) < probs[:, None]
        subsets[:repeats] = True
        return cls(np.asarray(queries, dtype=np.float64), subsets, repeats)

    @property
    def dim(self) -> int:
        """Target dimension ``L * K``."""
        return int(self.subsets.shape[0])

    def __call__(self, x: np.ndarray, metric: Metric) -> np.ndarray:
        """``(m, L * K)`` images of points ``x``; each coordinate lies in ``[0, 1 / (K L)]``
        (an empty subset gives the constant 1 / (K L), as far as the diameter allows)."""
        d = metric(np.atleast_2d(x), self.queries)  # (m, k)
        big = np.where(self.subsets[None, :, :], d[:, None, :], 1.0)
        return np.minimum(big.min(axis=2), 1.0) / self.dim
