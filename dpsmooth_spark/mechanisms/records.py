"""A table of records through the adaptive loop (``mechanisms/adaptive.py``): its cells, the
data pass that counts every candidate marginal, the loop on those counts, and the records drawn
from the model (on the driver, or by the executors through :func:`record_sampler`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals
from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.core.kernel import ExactSums, PassSpec
from dpsmooth_spark.mechanisms.adaptive import (
    LoopResult,
    LoopSettings,
    Tables,
    candidates,
    run_loop,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def cell_coding(codec: TableCodec) -> CellCoding:
    """The cells of a table's columns (``core.cell_marginals``), from its public domains."""
    return CellCoding(
        tuple(int(v) for v in codec.lattice()),
        tuple(bool(v) for v in codec.null_columns),
        tuple(bool(v) for v in codec.nominal()),
    )


def record_sampler(
    result: LoopResult, coding: CellCoding
) -> Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray | None]]:
    """``draw(count, rng) -> (scaled records, null mask or None)``: what an executor needs of the
    model (its clique tables and the coding), to draw its share of the rows."""
    model, nullable = result.model, any(coding.nullable)

    def draw(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        scaled, nulls = coding.decode(model.sample(count, rng), rng)
        return scaled, nulls if nullable else None

    return draw


def sample_table(
    result: LoopResult, codec: TableCodec, rows: int, rng: np.random.Generator
) -> pa.Table:
    """``rows`` records from the model, decoded to the input's types."""
    scaled, nulls = result.sample(cell_coding(codec), rows, rng)
    values = codec.bounds().unscale(np.where(nulls, 0.0, scaled))
    return codec.decode(values, nulls if nulls.any() else None)


def marginal_spec(coding: CellCoding, settings: LoopSettings | None = None) -> CellMarginals:
    """What the data pass counts: every candidate's cells."""
    max_way = (settings or LoopSettings()).max_way
    return CellMarginals(coding, tuple(c.scope for c in candidates(coding.sizes, max_way)))


def pass_spec(coding: CellCoding, settings: LoopSettings | None = None) -> PassSpec:
    """The data pass of a release: every candidate's counts, nulls in their own cells."""
    return PassSpec(1, null_cells=any(coding.nullable), marginals=marginal_spec(coding, settings))


def release(
    sums: ExactSums,
    spec: PassSpec,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    settings: LoopSettings | None = None,
) -> LoopResult:
    """The loop on the exact counts of a data pass that ran ``spec`` (:func:`pass_spec`)."""
    if sums.marginals is None or spec.marginals is None:
        raise ValueError("the data pass did not count the candidates' cells")
    answers = spec.marginals.split(sums.marginals.astype(np.float64))
    settings = settings or LoopSettings()
    tables = Tables(spec.marginals.coding.sizes, answers.__getitem__, settings.max_way)
    return run_loop(tables, accountant, noise, settings)
