"""Public bounds: each column's name and range, and the affine map onto ``[-1, 1]``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PublicBounds:
    """Column names with their public bounds (from the config, never from the data).

    Attributes:
        columns: names in table order.
        lower, upper: ``(d,)`` float arrays with ``lower < upper``.
    """

    columns: tuple[str, ...]
    lower: np.ndarray = field(repr=False)
    upper: np.ndarray = field(repr=False)

    @classmethod
    def from_mapping(cls, bounds: dict[str, tuple[float, float]]) -> PublicBounds:
        """From ``{column: (lower, upper)}`` in column order."""
        lower = np.array([float(lo) for lo, _ in bounds.values()])
        upper = np.array([float(hi) for _, hi in bounds.values()])
        if not np.all(lower < upper):
            raise ValueError("every lower bound must be below its upper bound")
        return cls(tuple(bounds), lower, upper)

    @property
    def d(self) -> int:
        """Number of columns."""
        return len(self.columns)

    def scale(self, values: np.ndarray) -> np.ndarray:
        """Original units to [-1, 1] (clamped)."""
        return np.clip(scale_to_unit(values, self.lower, self.upper), -1.0, 1.0)

    def unscale(self, values: np.ndarray) -> np.ndarray:
        """[-1, 1] to original units, clipped so rounding never leaves the bounds."""
        return np.clip(unscale_from_unit(values, self.lower, self.upper), self.lower, self.upper)


def scale_to_unit(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Affine map of ``[lower, upper]`` onto ``[-1, 1]`` per column (no clamping)."""
    return 2.0 * (values - lower) / (upper - lower) - 1.0


def unscale_from_unit(values: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Inverse of :func:`scale_to_unit`."""
    return lower + (np.asarray(values) + 1.0) * 0.5 * (upper - lower)
