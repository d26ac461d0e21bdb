"""Stage 4, sample: synthetic records from the fitted weights (post-processing only)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.core.sampling import sample_records, spread_levels
from dpsmooth_spark.mechanisms.synthesizer.fit import SynthesisResult
from dpsmooth_spark.mechanisms.synthesizer.summary import NoisySummary


def sample_scaled(
    result: SynthesisResult, rows: int, rng: np.random.Generator, herding_rows: int = 0
) -> np.ndarray:
    """``rows`` synthetic records in scaled units [-1, 1]^d; up to ``herding_rows`` rows by
    kernel herding, more by systematic resampling, column by column where no relation was
    measured (``core.sampling.sample_records``); the rare values of a large category spread
    back over their group (``core.sampling.spread_levels``); the point masses at the bounds are
    placed (``result.atoms``)."""
    out = sample_records(
        result.candidates,
        result.weights,
        rows,
        result.jitter,
        rng,
        herding_rows,
        independent=result.independent,
        levels=result.summary.levels,
        atoms=result.atoms,
        copula=result.copula,
    )
    for group in result.rare:
        out = spread_levels(
            out, group.column, group.levels, group.representative, group.group, group.shares, rng
        )
    return out


def default_rows(summary: NoisySummary) -> int:
    """The release's default row count: the noisy count, which counts the rows without a null,
    scaled up by the released null shares (nulls are drawn independently per column)."""
    return max(1, round(summary.noisy_count / np.prod(1.0 - summary.null_shares())))


def sample_table(
    result: SynthesisResult,
    rows: int,
    rng: np.random.Generator,
    herding_rows: int,
    codec: TableCodec,
) -> tuple[pa.Table, np.ndarray]:
    """``rows`` synthetic records decoded to the input's types (``codec``), nulls drawn at each
    nullable column's released share independently of the rest; returns the table and the
    scaled records."""
    scaled = sample_scaled(result, rows, rng, herding_rows)
    nullable = codec.null_columns
    shares = result.summary.null_shares()
    nulls = rng.uniform(size=scaled.shape) < shares if nullable.any() else None
    return codec.decode(codec.bounds().unscale(scaled), nulls), scaled
