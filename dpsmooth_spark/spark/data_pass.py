"""The one pass over the sensitive table: exact partial sums per partition, reduced on the driver.

Each task runs :func:`dpsmooth_spark.core.kernel.partial_sums` over its Arrow batches and emits one
row (the integer Gram matrix as bytes plus row counters). The driver adds the rows with Python
integers, so the result is exact and does not depend on partitioning or task retries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from dpsmooth_spark.core.bounds import PublicBounds, scale_to_unit
from dpsmooth_spark.core.columns import TableCodec, numeric_codec
from dpsmooth_spark.core.kernel import ExactSums, PassSpec, partial_sums, valid_rows
from dpsmooth_spark.core.quantile_grid import QuantileGrid
from dpsmooth_spark.spark.io import quote
from dpsmooth_spark.spark.session import default_parallelism

RESULT_SCHEMA = (
    "gram_hi binary, gram_lo binary, tensor_hi binary, tensor_lo binary, histograms binary, "
    "nulls binary, tables binary, atoms binary, rows_seen long, rows_invalid long, "
    "rows_clamped long, "
    "rows_null long"
)
"""One (partial) result: each exact integer ``v`` of the Gram matrix and the tensor sums travels as
two int64 limbs with ``v = hi * 2**LIMB_BITS + lo``. A task's limbs lie below 2**32 in magnitude,
so adding the limbs of up to 2**31 results in int64 is exact, in any order."""
LIMB_BITS = 32
MERGE_GROUPS = 64
"""The per-task results are merged in this many groups on the executors, then on the driver."""
_LIMB_COLUMNS = (
    "gram_hi",
    "gram_lo",
    "tensor_hi",
    "tensor_lo",
    "histograms",
    "nulls",
    "tables",
    "atoms",
)
_COUNTERS = ("rows_seen", "rows_invalid", "rows_clamped", "rows_null")


def as_codec(columns: PublicBounds | TableCodec) -> TableCodec:
    """A codec for ``columns``: bounds alone mean float columns on those bounds."""
    if isinstance(columns, TableCodec):
        return columns
    codecs = tuple(
        numeric_codec(n, lo, hi)
        for n, lo, hi in zip(columns.columns, columns.lower, columns.upper, strict=False)
    )
    return TableCodec(codecs, columns.columns)


def _encoder(codec: TableCodec, spec: PassSpec) -> Callable[[pa.RecordBatch | pa.Table], Any]:
    """What the kernel feeds :func:`partial_sums`: encoded values, with the null mask when the
    pass counts nulls."""
    return codec.encode_with_nulls if spec.null_cells else codec.encode


def _kernel(codec: TableCodec, spec: PassSpec):
    bounds = codec.bounds()
    lower, upper = bounds.lower, bounds.upper
    encode = _encoder(codec, spec)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def arrays() -> Iterator[np.ndarray]:
            for batch in batches:
                if batch.num_rows:
                    yield encode(batch)

        yield _result_batch(partial_sums(arrays(), lower, upper, spec))

    return run


def _limbs(values: np.ndarray | None) -> tuple[bytes, bytes]:
    if values is None:
        return b"", b""
    v = np.asarray(values, dtype=np.int64)
    return (v >> LIMB_BITS).tobytes(), (v & ((1 << LIMB_BITS) - 1)).tobytes()


def _from_limbs(hi: bytes, lo: bytes) -> np.ndarray:
    """The exact integers (object array of Python ints) of two limb buffers."""
    return np.frombuffer(hi, dtype=np.int64).astype(object) * (1 << LIMB_BITS) + np.frombuffer(
        lo, dtype=np.int64
    ).astype(object)


def _result_batch(sums: ExactSums) -> pa.RecordBatch:
    """One task's exact sums as a one-row Arrow batch of :data:`RESULT_SCHEMA`."""
    gram_hi, gram_lo = _limbs(sums.gram)
    tensor_hi, tensor_lo = _limbs(sums.tensor)
    histograms = b"" if sums.histograms is None else sums.histograms.astype(np.int64).tobytes()
    nulls = b"" if sums.nulls is None else sums.nulls.astype(np.int64).tobytes()
    tables = b"" if sums.tables is None else sums.tables.astype(np.int64).tobytes()
    atoms = b"" if sums.atoms is None else sums.atoms.astype(np.int64).tobytes()
    return pa.RecordBatch.from_pydict(
        {
            "gram_hi": [gram_hi],
            "gram_lo": [gram_lo],
            "tensor_hi": [tensor_hi],
            "tensor_lo": [tensor_lo],
            "histograms": [histograms],
            "nulls": [nulls],
            "tables": [tables],
            "atoms": [atoms],
            "rows_seen": [sums.rows_seen],
            "rows_invalid": [sums.rows_invalid],
            "rows_clamped": [sums.rows_clamped],
            "rows_null": [sums.rows_null],
        }
    )


def _merge_table(table: pa.Table) -> pa.Table:
    """Results of :data:`RESULT_SCHEMA` summed into one row (limb-wise, exact)."""
    out: dict[str, list] = {}
    for name in _LIMB_COLUMNS:
        parts = [np.frombuffer(b, dtype=np.int64) for b in table.column(name).to_pylist() if b]
        out[name] = [np.sum(parts, axis=0, dtype=np.int64).tobytes() if parts else b""]
    for name in _COUNTERS:
        out[name] = [sum(table.column(name).to_pylist())]
    return pa.table(
        out,
        schema=pa.schema(
            [(n, pa.binary()) for n in _LIMB_COLUMNS] + [(n, pa.int64()) for n in _COUNTERS]
        ),
    )


def _merge_results(results: DataFrame, d: int, spec: PassSpec) -> ExactSums:
    """Merge the per-task results exactly: in :data:`MERGE_GROUPS` groups on the executors (the
    driver receives a few results, not one per partition: tens of thousands on a large table,
    docs/scaling.md), then on the driver. DataFrame operations only, so the same code runs on
    classic Spark and on Spark Connect."""
    grouped = results.selectExpr("*", f"spark_partition_id() % {MERGE_GROUPS} AS _group").groupBy(
        "_group"
    )
    merged = _merge_table(grouped.applyInArrow(_merge_table, RESULT_SCHEMA).toArrow())
    if not merged.column("gram_hi")[0].as_py():
        return ExactSums.zero(
            d,
            spec.degree,
            spec.tensor_degree,
            spec.histogram_cells,
            spec.null_cells,
            0 if spec.tables is None else spec.tables.size,
        )
    size = 1 + d * spec.degree
    row = {name: merged.column(name)[0].as_py() for name in merged.column_names}
    tensor = _from_limbs(row["tensor_hi"], row["tensor_lo"]) if spec.tensor_degree else None
    histograms = (
        np.frombuffer(row["histograms"], dtype=np.int64).reshape(d, spec.histogram_cells).copy()
        if spec.histogram_cells
        else None
    )
    nulls = np.frombuffer(row["nulls"], dtype=np.int64).copy() if spec.null_cells else None
    tables = (
        np.frombuffer(row["tables"], dtype=np.int64).copy() if spec.tables is not None else None
    )
    atoms = (
        np.frombuffer(row["atoms"], dtype=np.int64).reshape(d, 2).copy()
        if spec.histogram_cells
        else None
    )
    return ExactSums(
        spec.degree,
        d,
        _from_limbs(row["gram_hi"], row["gram_lo"]).reshape(size, size),
        row["rows_seen"],
        row["rows_invalid"],
        row["rows_clamped"],
        spec.tensor_degree,
        tensor,
        histograms,
        nulls,
        row["rows_null"],
        tables,
        atoms,
    )


def exact_sums(
    df: DataFrame, columns: PublicBounds | TableCodec, spec: int | PassSpec
) -> ExactSums:
    """Exact sufficient statistics of the encoded, bounded columns of ``df`` in one Spark job."""
    spec = spec if isinstance(spec, PassSpec) else PassSpec(spec)
    codec = as_codec(columns)
    kernel = _kernel(codec, spec)
    selected = df.selectExpr(*[quote(c) for c in codec.names])
    return _merge_results(selected.mapInArrow(kernel, RESULT_SCHEMA), len(codec.columns), spec)


@dataclass(frozen=True)
class StatisticSums:
    """Sums of a per-batch statistic over the valid rows, with the row counters of the pass.

    Attributes:
        values: the summed statistic (float64).
        rows_seen: rows read.
        rows_invalid: rows with a null/NaN/infinite value (left out of ``values``).
        rows_clamped: valid rows with a value outside the bounds (clamped before ``values``).
    """

    values: np.ndarray
    rows_seen: int
    rows_invalid: int
    rows_clamped: int

    @property
    def count(self) -> int:
        """Rows that entered ``values``."""
        return self.rows_seen - self.rows_invalid


def statistic_sums(
    df: DataFrame,
    columns: PublicBounds | TableCodec,
    sums_of: Callable[[np.ndarray], np.ndarray],
    unit: str = "original",
) -> StatisticSums:
    """``sum over valid rows of sums_of(x)`` in one Spark job, ``x`` a batch ``(rows, d)`` clamped
    to
    the bounds in ``original`` units or scaled to ``[-1, 1]`` (``scaled``).

    Used by the Bernstein and distance mechanisms (their statistics are not basis sums) and by
    evaluation to answer query sets on a large real table. The sums are float64: exact up to
    rounding, which depends on the partitioning (retries reuse the ledger's noisy statistics).
    """
    codec = as_codec(columns)
    bounds = codec.bounds()
    lower, upper = bounds.lower, bounds.upper

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        total, seen, invalid, clamped = None, 0, 0, 0
        for batch in batches:
            x = codec.encode(batch)
            seen += x.shape[0]
            x, bad, outside = valid_rows(x, lower, upper)
            invalid += bad
            clamped += outside
            if x.shape[0] == 0:
                continue
            part = sums_of(x if unit == "original" else scale_to_unit(x, lower, upper))
            total = part if total is None else total + part
        payload = b"" if total is None else np.asarray(total, dtype=np.float64).tobytes()
        yield pa.RecordBatch.from_pydict(
            {"sums": [payload], "seen": [seen], "invalid": [invalid], "clamped": [clamped]}
        )

    schema = "sums binary, seen long, invalid long, clamped long"
    result = df.selectExpr(*[quote(c) for c in codec.names]).mapInArrow(run, schema).collect()
    parts = [np.frombuffer(r["sums"], dtype=np.float64) for r in result if r["sums"]]
    return StatisticSums(
        np.sum(parts, axis=0) if parts else np.zeros(0),
        sum(r["seen"] for r in result),
        sum(r["invalid"] for r in result),
        sum(r["clamped"] for r in result),
    )


def parquet_files(path: str | list[str]) -> list[str]:
    """The data files of a Parquet file, folder (hidden and ``_`` entries skipped) or file list
    (a lake snapshot), without opening them."""
    from pathlib import Path

    if isinstance(path, list):
        return list(path)
    root = Path(path)
    if root.is_file():
        return [str(root)]
    return [
        str(p)
        for p in sorted(root.rglob("*.parquet"))
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    ]


def parquet_units(path: str | list[str]) -> list[tuple[str, int]]:
    """Every (file, row group) of a Parquet file, folder or file list (a lake snapshot): the
    tasks of the arrow-reader pass."""
    import pyarrow.parquet as pq

    return [
        (f, rg)
        for f in parquet_files(path)
        for rg in range(pq.ParquetFile(f).metadata.num_row_groups)
    ]


def arrow_readable(path: str | list[str], columns: list[str]) -> bool:
    """True when the arrow-reader pass applies: a local Parquet path whose files hold the columns
    (not, e.g., hive partition columns that live in folder names)."""
    import pyarrow.parquet as pq

    if isinstance(path, str) and "://" in path:
        return False
    files = parquet_files(path)
    return bool(files) and set(columns) <= set(pq.read_schema(files[0]).names)


def exact_sums_arrow(
    spark: SparkSession,
    path: str | list[str],
    columns: PublicBounds | TableCodec,
    spec: int | PassSpec,
    task_hook: Callable[[], None] | None = None,
) -> ExactSums:
    """The same exact sums, with Spark scheduling Parquet row groups and tasks reading them with
    pyarrow directly (no JVM-to-Python row transfer). Local or mounted paths only.

    ``task_hook`` runs at the start of every task (fault injection in the reliability tests).
    """
    spec = spec if isinstance(spec, PassSpec) else PassSpec(spec)
    units = parquet_units(path)
    codec = as_codec(columns)
    names = codec.names
    bounds = codec.bounds()
    lower, upper = bounds.lower, bounds.upper
    encode = _encoder(codec, spec)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        if task_hook is not None:
            task_hook()

        def arrays() -> Iterator[np.ndarray]:
            for batch in batches:
                for file, group in zip(
                    batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=False
                ):
                    table = pq.ParquetFile(file).read_row_group(group, columns=names)
                    if table.num_rows:
                        yield encode(table)

        yield _result_batch(partial_sums(arrays(), lower, upper, spec))

    if not units:
        return ExactSums.zero(
            bounds.d,
            spec.degree,
            spec.tensor_degree,
            spec.histogram_cells,
            spec.null_cells,
            0 if spec.tables is None else spec.tables.size,
        )
    tasks = max(1, min(len(units), default_parallelism(spark) * 4))
    plan = spark.createDataFrame(units, "file string, row_group int").repartition(tasks)
    return _merge_results(plan.mapInArrow(run, RESULT_SCHEMA), bounds.d, spec)


def grid_counts(
    df: DataFrame, codec: TableCodec, grids: Mapping[str, QuantileGrid]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per column of ``grids``, its exact histograms on the two grids (:meth:`QuantileGrid.counts`
    of the encoded values; nulls and NaN left out) in one Spark job: what an auto bound is found
    from."""
    columns = [c for c in codec.columns if c.name in grids]
    cells = [grids[c.name].cells for c in columns]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        totals = [np.zeros((2, n), dtype=np.int64) for n in cells]
        for batch in batches:
            for total, column in zip(totals, columns, strict=True):
                linear, log = grids[column.name].counts(column.encode(batch.column(column.name)))
                total[0] += linear
                total[1] += log
        yield pa.RecordBatch.from_pydict({"counts": [np.concatenate(totals, axis=None).tobytes()]})

    selected = df.selectExpr(*[quote(c.name) for c in columns])
    rows = selected.mapInArrow(run, "counts binary").collect()
    summed = np.zeros(2 * sum(cells), dtype=np.int64)
    for r in rows:
        summed += np.frombuffer(r["counts"], dtype=np.int64)
    out, start = {}, 0
    for column, n in zip(columns, cells, strict=True):
        out[column.name] = (summed[start : start + n], summed[start + n : start + 2 * n])
        start += 2 * n
    return out


def value_counts(df: DataFrame, column: str) -> dict[Any, int]:
    """The exact count of every non-null value of ``column`` (one aggregation; the driver holds
    one entry per distinct value): what partition selection releases from."""
    rows = df.where(f"{quote(column)} IS NOT NULL").groupBy(column).count().collect()
    return {r[0]: int(r[1]) for r in rows}
