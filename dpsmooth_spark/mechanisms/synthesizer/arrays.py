"""The library entry point: ``ArraySynthesizer(epsilon, bounds).fit(table).sample(rows)``.

It runs the same stages as the synthesize job (measure, candidates, fit, sample) on an in-memory
table; the job computes the exact sums with Spark instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dpsmooth_spark.core.bounds import PublicBounds, scale_to_unit
from dpsmooth_spark.core.cell_marginals import CellCoding
from dpsmooth_spark.core.kernel import ExactSums, partial_sums, valid_rows
from dpsmooth_spark.mechanisms import adaptive, records
from dpsmooth_spark.mechanisms.synthesizer.fit import SynthesisResult, fit_from_summary
from dpsmooth_spark.mechanisms.synthesizer.measure import RowsPass, release_summary
from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams
from dpsmooth_spark.mechanisms.synthesizer.sample import sample_scaled
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def fit_from_sums(
    sums: ExactSums,
    bounds: PublicBounds,
    params: SynthesizerParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    rng: np.random.Generator,
    lattice: np.ndarray | None = None,
    nullable: np.ndarray | None = None,
    nominal: np.ndarray | None = None,
    rows_pass: RowsPass | None = None,
) -> SynthesisResult:
    """Every driver stage: the DP statistics, then :func:`fit_from_summary` (``lattice``:
    levels per column, 0 continuous; the summary keeps them for the later stages; ``nullable``:
    the columns whose null counts are measured; ``nominal``: the categorical columns;
    ``rows_pass``: a second pass over the rows, :data:`.measure.RowsPass`)."""
    start = time.perf_counter()
    summary = release_summary(
        sums, bounds, params, accountant, noise, rng, nullable, lattice, nominal, rows_pass
    )
    elapsed = time.perf_counter() - start
    result = fit_from_summary(summary, params, rng)
    result.timings = {"noise_and_psi": elapsed, **result.timings}
    return result


class ArraySynthesizer:
    """The mechanism on numeric arrays, with scikit-learn conventions (the typed library entry
    point is :class:`dpsmooth_spark.Synthesizer`).

    ``ArraySynthesizer(epsilon=1.0, bounds={"x": (0, 10)}).fit(df).sample(10_000)``

    Args:
        epsilon: privacy budget (> 0).
        bounds: public ``{column: (lower, upper)}``; never derived from the data.
        delta: 0 for pure epsilon-DP, > 0 for the Gaussian (epsilon, delta) mode.
        params: mechanism parameters.
        random_state: a seed selects TEST MODE (seeded, non-secure noise); ``None`` is secure.
        levels: ``{column: L}`` for columns whose values are ``L >= 2`` equally spaced points
            from the lower to the upper bound (a 0/1 label: 2; an integer column: upper - lower
            + 1): public, like the bounds. Their synthetic values lie on those points, and the
            basis leaves out what repeats on them (``BasisSet.on_lattice``).
    """

    def __init__(
        self,
        epsilon: float,
        bounds: dict[str, tuple[float, float]],
        delta: float = 0.0,
        params: SynthesizerParams | None = None,
        random_state: int | None = None,
        levels: dict[str, int] | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.bounds = bounds
        self.public_bounds = PublicBounds.from_mapping(bounds)
        self.delta = delta
        self.params = params or SynthesizerParams()
        self.random_state = random_state
        unknown = set(levels or {}) - set(self.public_bounds.columns)
        if unknown:
            raise ValueError(f"levels for columns without bounds: {sorted(unknown)}")
        if any(int(v) < 2 for v in (levels or {}).values()):
            raise ValueError("levels must be at least 2")
        self.lattice = np.array([int((levels or {}).get(c, 0)) for c in self.public_bounds.columns])

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng(self.random_state)

    def fit(self, table: Any) -> ArraySynthesizer:
        """Fit on a pandas DataFrame, pyarrow Table or mapping of column arrays (in memory)."""
        domain = self.public_bounds
        data = np.column_stack([_column(table, c) for c in domain.columns])
        if self.params.method == "adaptive":
            return self._fit_adaptive(data)
        sums = partial_sums([data], domain.lower, domain.upper, self.params.pass_spec(domain.d))
        return self.fit_sums(sums, rows_pass_over(data, domain))

    def _fit_adaptive(self, data: np.ndarray) -> ArraySynthesizer:
        """The adaptive loop (``mechanisms/adaptive.py``) on the columns' cells."""
        domain = self.public_bounds
        self.coding_ = CellCoding(
            tuple(int(v) for v in self.lattice), (False,) * domain.d, (False,) * domain.d
        )
        settings = adaptive.LoopSettings.named(
            self.params.rounds, domain.columns, self.params.pair_columns
        )
        spec = records.pass_spec(self.coding_, settings)
        sums = partial_sums([data], domain.lower, domain.upper, spec)
        rng = self._rng()
        noise = NoiseSource(rng if self.random_state is not None else None)
        self.accountant_ = PrivacyAccountant(self.epsilon, self.delta)
        self.adaptive_ = records.release(sums, spec, self.accountant_, noise, settings)
        self.noise_, self.sampling_rng_ = noise, rng
        return self

    def fit_sums(self, sums: ExactSums, rows_pass: RowsPass | None = None) -> ArraySynthesizer:
        """Fit from exact sums computed elsewhere (e.g. the Spark data pass), with a second pass
        over the rows where one is given (:data:`.measure.RowsPass`)."""
        rng = self._rng()
        noise = NoiseSource(rng if self.random_state is not None else None)
        self.accountant_ = PrivacyAccountant(self.epsilon, self.delta)
        self.result_ = fit_from_sums(
            sums,
            self.public_bounds,
            self.params,
            self.accountant_,
            noise,
            rng,
            self.lattice if self.lattice.any() else None,
            rows_pass=rows_pass,
        )
        self.noise_ = noise
        self.sampling_rng_ = rng
        return self

    def sample(self, rows: int | None = None) -> dict[str, np.ndarray]:
        """Synthetic records in original units, as ``{column: array}``; default rows = noisy
        count."""
        if self.params.method == "adaptive":
            count = rows if rows is not None else max(1, round(self.adaptive_.total))
            scaled, _ = self.adaptive_.sample(self.coding_, count, self.sampling_rng_)
            out = self.public_bounds.unscale(scaled)
            return {name: out[:, i] for i, name in enumerate(self.public_bounds.columns)}
        if rows is None:
            rows = max(1, round(self.result_.summary.noisy_count))
        scaled = sample_scaled(self.result_, rows, self.sampling_rng_, self.params.herding_rows)
        values = self.public_bounds.unscale(scaled)
        bounds = self.public_bounds
        for j in np.flatnonzero(self.lattice >= 2):  # exactly the lattice points, no rounding error
            steps = self.lattice[j] - 1
            k = np.clip(np.rint((scaled[:, j] + 1.0) * steps / 2.0), 0, steps)
            values[:, j] = bounds.lower[j] + k * (bounds.upper[j] - bounds.lower[j]) / steps
        return {name: values[:, i] for i, name in enumerate(bounds.columns)}


def rows_pass_over(data: np.ndarray, bounds: PublicBounds) -> RowsPass:
    """The second pass over an in-memory table ``data`` (original units, NaN for nulls): the
    rows the data pass keeps, clamped and scaled."""

    def run(sums_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        kept, _, _ = valid_rows(data, bounds.lower, bounds.upper)
        return np.asarray(sums_of(scale_to_unit(kept, bounds.lower, bounds.upper)))

    return run


def _column(table: Any, name: str) -> np.ndarray:
    col = table[name]
    if hasattr(col, "to_numpy"):
        try:
            return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
        except TypeError:
            return np.asarray(col.to_numpy(), dtype=np.float64)
    return np.asarray(col, dtype=np.float64)
