"""The Bernstein mechanism (Alda and Rubinstein, "The Bernstein Mechanism: Function Release under
Differential Privacy", AAAI 2017, Algorithm 1).

Releases a function ``F_D: Y -> R`` of the data, ``Y`` the box of the chosen columns: noisy
evaluations on the lattice ``{0, 1/k, ..., 1}^l`` (scaled to the box), evaluated anywhere through
the iterated Bernstein polynomial of order ``h`` (:mod:`dpsmooth_spark.core.bernstein_basis`). The
order ``h`` only enters evaluation, so one release serves every ``h``.

Functions (``F_D`` and its sensitivity ``S(F)`` per lattice point, add/remove-one neighbours;
derivations in docs/privacy.md section 9):

* ``kde``: the Gaussian kernel density ``(1/n) sum_x K_H(y - x)``, released as noisy sums
  ``sum_x K_H(y - x)`` (``S = sup K_H = 1 / ((2 pi)^{l/2} prod h_i)``) divided by a noisy count.
  The sums are one Spark pass.
* ``svm`` / ``logistic``: the decision function ``f_w(y)`` of a kernel SVM (hinge loss) or kernel
  logistic regression trained on the driver by regularised ERM
  ``min (C / N) sum L(l_i f_w(x_i)) + ||w||^2 / 2`` with the Gaussian RBF kernel plus a constant
  1 (a regularised bias), ``N`` public (the noisy count times the sampling rate).
  ``S = C M sup_y K(y, y) / N = 2 C / N`` (Section 6, M = 1 for both losses).

Noise: ``Lap(lambda)`` per lattice point with ``lambda = S (k + 1)^l / epsilon`` (pure), or in the
(epsilon, delta) mode the Laplace scale that the zCDP accountant allows over the ``(k + 1)^l``
points (``scale: zcdp``, smaller) or Theorem 7's ``2 S sqrt(2 (k + 1)^l log(1/delta)) / epsilon``
(``scale: theorem7``); both are charged in zCDP.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import minimize

from dpsmooth_spark.core import bernstein_basis as bernstein
from dpsmooth_spark.mechanisms.stages import release_count
from dpsmooth_spark.privacy.accountant import PrivacyAccountant, epsilon_for
from dpsmooth_spark.privacy.noise import NoiseSource

MAX_LATTICE = 250_000
"""Largest ``(k + 1)^l`` accepted (the pass evaluates the function at every lattice point)."""


class BernsteinParams(BaseModel):
    """Parameters of the Bernstein release."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    function: Literal["kde", "svm", "logistic"] = Field(
        default="kde", description="The released function: kde, svm or logistic."
    )
    columns: tuple[str, ...] = Field(
        default=(), description="The function's input axes; null: every column except label."
    )
    label: str | None = Field(
        default=None,
        description=(
            "svm / logistic: the label column (values at or above the middle of its bounds are "
            "positive)."
        ),
    )
    k: int = Field(
        default=20, ge=1, le=10_000, description="Lattice size per axis ((k + 1)^l noisy values)."
    )
    h: int = Field(
        default=3,
        ge=1,
        le=20,
        description="Default Bernstein order for evaluation (any order can be used later).",
    )
    bandwidth: float = Field(
        default=0.1,
        gt=0,
        le=10,
        description="kde: Gaussian bandwidth per axis, as a fraction of the column's range.",
    )
    regularization_c: float = Field(
        default=1.0, gt=0, description="svm / logistic: C of the ERM objective."
    )
    kernel_width: float = Field(
        default=1.0, gt=0, description="svm / logistic: RBF width on the unit-scaled axes."
    )
    oracle_max_rows: int = Field(
        default=3000,
        ge=10,
        le=20_000,
        description=(
            "svm / logistic: the driver trains on a Bernoulli sample of about this many rows."
        ),
    )
    count_fraction: float = Field(
        default=0.05, gt=0, lt=0.5, description="Share of the budget for the noisy count."
    )
    scale: Literal["zcdp", "theorem7"] = Field(
        default="zcdp", description="(epsilon, delta) mode only: zcdp or theorem7 calibration."
    )


def to_unit(x: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Original units -> [0, 1] per axis (clipped)."""
    return np.clip((np.asarray(x, dtype=np.float64) - lower) / (upper - lower), 0.0, 1.0)


def lattice_points(k: int, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The lattice cover in original units, ``((k + 1)^l, l)``."""
    size = (k + 1) ** lower.size
    if size > MAX_LATTICE:
        raise ValueError(
            f"the lattice has (k + 1)^l = {size:,} points (more than {MAX_LATTICE:,}); "
            "use a smaller bernstein.k or fewer columns"
        )
    return lower + bernstein.lattice(k, lower.size) * (upper - lower)


def kde_bandwidths(params: BernsteinParams, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Per-axis bandwidths in original units."""
    return params.bandwidth * (upper - lower)


def kde_sup(bandwidths: np.ndarray) -> float:
    """``sup K_H = 1 / ((2 pi)^{l/2} prod h_i)``: the sensitivity of each lattice sum."""
    return 1.0 / ((2.0 * math.pi) ** (bandwidths.size / 2.0) * float(np.prod(bandwidths)))


def kde_sums(
    x: np.ndarray, points: np.ndarray, bandwidths: np.ndarray, chunk: int = 4096
) -> np.ndarray:
    """``sum_x K_H(p - x)`` at every point ``p`` (original units), for one batch of records."""
    norm = kde_sup(bandwidths)
    out = np.zeros(points.shape[0])
    for start in range(0, x.shape[0], chunk):
        diff = (points[None, :, :] - x[start : start + chunk, None, :]) / bandwidths
        out += np.exp(-0.5 * (diff**2).sum(axis=2)).sum(axis=0) * norm
    return out


def rbf_kernel(a: np.ndarray, b: np.ndarray, width: float) -> np.ndarray:
    """``exp(-||a - b||^2 / (2 width^2)) + 1`` (RBF plus the regularised bias feature); sup = 2."""
    sq = (a**2).sum(1)[:, None] + (b**2).sum(1)[None, :] - 2.0 * a @ b.T
    return np.exp(-np.maximum(sq, 0.0) / (2.0 * width**2)) + 1.0


ERM_KERNEL_SUP = 2.0
"""``sup_y K(y, y)`` of :func:`rbf_kernel`."""


def erm_sensitivity(c: float, normalizer: float) -> float:
    """Section 6 (Hall et al.; Bousquet and Elisseeff) with add/remove neighbours and a public
    normalizer ``N``: ``|f_w(y) - f_w'(y)| <= C M sup K / N`` with ``M = 1``."""
    return c * ERM_KERNEL_SUP / normalizer


def train_erm(
    x: np.ndarray, labels: np.ndarray, loss: str, c_over_n: float, width: float
) -> np.ndarray:
    """Coefficients ``beta`` of ``f(y) = sum_i beta_i K(y, x_i)`` minimising
    ``c_over_n sum_i L(l_i f(x_i)) + ||f||^2 / 2`` (unit-scaled ``x``, labels +-1).

    Hinge: the box-constrained dual (no equality constraint, since the bias is a kernel feature),
    ``max sum a - a^T Q a / 2``, ``0 <= a <= c_over_n``, ``beta = a * l``. Logistic: the primal in
    ``beta`` (representer theorem), both by L-BFGS-B.
    """
    kern = rbf_kernel(x, x, width)
    if loss == "svm":
        q = kern * np.outer(labels, labels)

        def dual(a: np.ndarray) -> tuple[float, np.ndarray]:
            qa = q @ a
            return 0.5 * a @ qa - a.sum(), qa - 1.0

        res = minimize(
            dual,
            np.zeros(x.shape[0]),
            jac=True,
            method="L-BFGS-B",
            bounds=[(0.0, c_over_n)] * x.shape[0],
            options={"maxiter": 5000},
        )
        return res.x * labels

    def primal(beta: np.ndarray) -> tuple[float, np.ndarray]:
        f = kern @ beta
        margin = labels * f
        value = c_over_n * np.logaddexp(0.0, -margin).sum() + 0.5 * beta @ f
        grad_f = -c_over_n * labels * np.exp(-np.logaddexp(0.0, margin))
        return value, kern @ grad_f + f

    res = minimize(
        primal, np.zeros(x.shape[0]), jac=True, method="L-BFGS-B", options={"maxiter": 5000}
    )
    return res.x


@dataclass
class BernsteinRelease:
    """The released function: noisy lattice values and how to evaluate them.

    Attributes:
        function: ``kde``, ``svm`` or ``logistic``.
        columns, lower, upper: the axes and their public bounds.
        k: lattice size per axis.
        h: default evaluation order.
        values: ``((k + 1)^l,)`` noisy values of ``F_D`` at the lattice points.
        noise_scale: Laplace scale on ``values`` (in the function's units).
        sensitivity: ``S(F)`` in the function's units.
        details: function-specific public facts (bandwidths, C, N, noisy count).
    """

    function: str
    columns: list[str]
    lower: np.ndarray
    upper: np.ndarray
    k: int
    h: int
    values: np.ndarray
    noise_scale: float
    sensitivity: float
    details: dict[str, Any]

    def evaluate(self, points: np.ndarray, h: int | None = None) -> np.ndarray:
        """``F~(y)`` at points ``(m, l)`` in original units (clipped to the box). A density is
        clipped to its possible range ``[0, sup K_H]`` (post-processing)."""
        unit = to_unit(np.atleast_2d(points), self.lower, self.upper)
        return self._range(bernstein.evaluate(self.values, self.k, h or self.h, unit))

    def nearest(self, points: np.ndarray) -> np.ndarray:
        """The baseline of Section 4.2: the noisy value at the nearest lattice point."""
        return self._range(
            bernstein.nearest_lattice(
                self.values, self.k, to_unit(np.atleast_2d(points), self.lower, self.upper)
            )
        )

    def _range(self, values: np.ndarray) -> np.ndarray:
        if self.function != "kde":
            return values
        return np.clip(
            values, 0.0, kde_sup(np.asarray(self.details["bandwidths"], dtype=np.float64))
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form, written as ``bernstein.json``."""
        return {
            "function": self.function,
            "columns": self.columns,
            "lower": self.lower.tolist(),
            "upper": self.upper.tolist(),
            "k": self.k,
            "h": self.h,
            "values": self.values.tolist(),
            "noise_scale": self.noise_scale,
            "sensitivity": self.sensitivity,
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BernsteinRelease:
        """Inverse of :meth:`to_dict`."""
        return cls(
            data["function"],
            list(data["columns"]),
            np.asarray(data["lower"], dtype=np.float64),
            np.asarray(data["upper"], dtype=np.float64),
            int(data["k"]),
            int(data["h"]),
            np.asarray(data["values"], dtype=np.float64),
            float(data["noise_scale"]),
            float(data["sensitivity"]),
            dict(data["details"]),
        )

    @classmethod
    def load(cls, path: str | Path) -> BernsteinRelease:
        """Read ``bernstein.json`` (or a release folder holding it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "bernstein.json"
        return cls.from_dict(json.loads(path.read_text()))


def lattice_noise_scale(
    sensitivity: float,
    points: int,
    budget: float,
    params: BernsteinParams,
    accountant: PrivacyAccountant,
) -> float:
    """Laplace scale per lattice value for ``budget`` (epsilon, or rho in the (epsilon, delta)
    mode)."""
    if accountant.pure or params.scale == "zcdp":
        return accountant.noise_scale(sensitivity, budget, invocations=points)
    # Theorem 7 at the (epsilon, delta) this stage's rho converts to
    eps = epsilon_for(budget, accountant.delta)
    unit = sensitivity * accountant.unit_rows  # per record, times the rows of one unit
    return 2.0 * unit * math.sqrt(2.0 * points * math.log(1.0 / accountant.delta)) / eps


def release_lattice(
    values: np.ndarray,
    sensitivity: float,
    params: BernsteinParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> tuple[np.ndarray, float]:
    """Algorithm 1, lines 1-5: Laplace noise on every lattice value (the rest of the budget)."""
    budget = accountant.share(1.0 - params.count_fraction)
    scale = lattice_noise_scale(sensitivity, values.size, budget, params, accountant)
    noisy = noise.laplace(values, scale)
    accountant.charge(
        "lattice",
        sensitivity,
        scale,
        invocations=values.size,
        mechanism="laplace" if accountant.pure else "laplace_zcdp",
    )
    return noisy, scale


def release_kde(
    sums: np.ndarray,
    count: int,
    params: BernsteinParams,
    columns: list[str],
    lower: np.ndarray,
    upper: np.ndarray,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> BernsteinRelease:
    """KDE release from the exact lattice sums (:func:`kde_sums` over all records)."""
    widths = kde_bandwidths(params, lower, upper)
    noisy_count = release_count(count, params.count_fraction, accountant, noise)
    n = max(noisy_count, 1.0)
    noisy, scale = release_lattice(sums, kde_sup(widths), params, accountant, noise)
    return BernsteinRelease(
        "kde",
        columns,
        lower,
        upper,
        params.k,
        params.h,
        noisy / n,
        scale / n,
        kde_sup(widths) / n,
        {"bandwidths": widths.tolist(), "noisy_count": noisy_count},
    )


def sample_rate(params: BernsteinParams, noisy_count: float) -> float:
    """Bernoulli rate that keeps about ``oracle_max_rows`` rows (public: from the noisy count)."""
    return min(1.0, params.oracle_max_rows / max(noisy_count, 1.0))


def release_erm(
    x: np.ndarray,
    labels: np.ndarray,
    noisy_count: float,
    rate: float,
    params: BernsteinParams,
    columns: list[str],
    lower: np.ndarray,
    upper: np.ndarray,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> BernsteinRelease:
    """SVM / logistic release: train on the (sampled) rows, evaluate on the lattice, add noise.

    Args:
        x: ``(m, l)`` sampled rows in original units; labels: +-1.
        noisy_count: the released count; rate: the Bernoulli rate the sample was drawn with.
    """
    normalizer = max(noisy_count * rate, 1.0)
    unit_x = to_unit(x, lower, upper)
    beta = (
        train_erm(
            unit_x,
            labels,
            params.function,
            params.regularization_c / normalizer,
            params.kernel_width,
        )
        if x.shape[0]
        else np.zeros(0)
    )
    grid = bernstein.lattice(params.k, len(columns))
    values = (
        rbf_kernel(grid, unit_x, params.kernel_width) @ beta
        if x.shape[0]
        else np.zeros(grid.shape[0])
    )
    sens = erm_sensitivity(params.regularization_c, normalizer)
    noisy, scale = release_lattice(values, sens, params, accountant, noise)
    return BernsteinRelease(
        params.function,
        columns,
        lower,
        upper,
        params.k,
        params.h,
        noisy,
        scale,
        sens,
        {
            "C": params.regularization_c,
            "N": normalizer,
            "kernel_width": params.kernel_width,
            "noisy_count": noisy_count,
            "sample_rate": rate,
        },
    )
