"""Stage 4, sample: synthetic records from the fitted weights (post-processing only)."""

from __future__ import annotations

import numpy as np

from dpsmooth_spark.core.sampling import sample_records
from dpsmooth_spark.mechanisms.synthesizer.fit import SynthesisResult


def sample_scaled(
    result: SynthesisResult, rows: int, rng: np.random.Generator, herding_rows: int = 0
) -> np.ndarray:
    """``rows`` synthetic records in scaled units [-1, 1]^d; up to ``herding_rows`` rows by
    kernel herding (``core.sampling.sample_records``)."""
    return sample_records(result.candidates, result.weights, rows, result.jitter, rng, herding_rows)
