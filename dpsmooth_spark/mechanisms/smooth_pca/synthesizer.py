"""The library entry point: ``SmoothSynthesizer(epsilon, bounds).fit(table).sample(rows)``.

It runs the same stages as the synthesize job (measure, candidates, fit, sample) on an in-memory
table; the job computes the exact sums with Spark instead.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dpsmooth_spark.core.basis import ExactSums, PublicBounds, partial_sums
from dpsmooth_spark.mechanisms.smooth_pca.fit import SynthesisResult, fit_from_summary
from dpsmooth_spark.mechanisms.smooth_pca.measure import release_summary
from dpsmooth_spark.mechanisms.smooth_pca.params import SmoothPCAParams
from dpsmooth_spark.mechanisms.smooth_pca.sample import sample_scaled
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


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
        sums = partial_sums([data], domain.lower, domain.upper, self.params.pass_spec())
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
        values = self.public_bounds.unscale(sample_scaled(
            self.result_, rows, self.sampling_rng_, self.params.herding_rows))
        return {name: values[:, i] for i, name in enumerate(self.public_bounds.columns)}


def _column(table: Any, name: str) -> np.ndarray:
    col = table[name]
    if hasattr(col, "to_numpy"):
        try:
            return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        except TypeError:
            return np.asarray(col.to_numpy(), dtype=np.float64)
    return np.asarray(col, dtype=np.float64)
