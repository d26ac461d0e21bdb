"""Stage 4, sample: synthetic records from the fitted weights (post-processing only)."""

from __future__ import annotations

import numpy as np

from dpsmooth_spark.core.sampling import sample_records
from dpsmooth_spark.mechanisms.smooth_pca.fit import SynthesisResult


def sample_scaled(result: SynthesisResult, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` synthetic records in scaled units [-1, 1]^d."""
    return sample_records(result.candidates, result.weights, rows, result.jitter, rng)
