"""The one pass over the sensitive table: exact partial sums per partition, reduced on the driver.

Each task runs :func:`dpsmooth_spark.core.kernel.partial_sums` over its Arrow batches and emits its
exact integers (the Gram matrix as limbs, histograms, row counters) in chunks of 1 MiB; the chunks
are summed in int64 on the executors, so the result is exact and does not depend on partitioning
or task retries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from dpsmooth_spark.core.bounds import PublicBounds, scale_to_unit
from dpsmooth_spark.core.columns import ColumnValueError, TableCodec, numeric_codec
from dpsmooth_spark.core.kernel import ExactSums, PassSpec, partial_sums, valid_rows
from dpsmooth_spark.core.quantile_grid import QuantileGrid
from dpsmooth_spark.core.unit_tables import UnitTables, valid_codes_and_values
from dpsmooth_spark.spark.io import quote
from dpsmooth_spark.spark.session import default_parallelism

RESULT_SCHEMA = "chunk int, values binary"
"""One (partial) result, cut into chunks: every exact integer of a task's sums as int64 values in
the order of :func:`_layout`, a Gram or tensor integer ``v`` as two limbs with
``v = hi * 2**LIMB_BITS + lo``. A task's limbs lie below 2**32 in magnitude, so adding the values
of up to 2**31 results in int64 is exact, in any order."""
LIMB_BITS = 32
MERGE_GROUPS = 64
"""The per-task results are merged in this many groups on the executors first."""
CHUNK_VALUES = 1 << 17
"""A result travels in chunks of at most this many int64 values (1 MiB), one row each. Where a
result has more than one chunk (a wide table's Gram: 144 MB at 1,000 columns), the chunks are
merged a second time on the executors, one group per chunk, so the driver receives one merged
copy (not one per group: 64 copies exhaust a 1 GiB driver heap at 1,000 columns)."""
_ROW_BATCH = 8
"""Chunks per Arrow batch a task yields (8 MiB)."""
_COUNTERS = ("rows_seen", "rows_invalid", "rows_clamped", "rows_null")


_VALUE_ERROR = re.compile(rf"{ColumnValueError.__name__}: (column '.*?'[^\n]*)")


def _run(action: Callable[[], Any]) -> Any:
    """A Spark action of the data pass; a task that failed to encode a column surfaces as the
    :class:`ColumnValueError` it raised (column, kind, error type), not as Spark's wrapper with
    the task's traceback."""
    try:
        return action()
    except Exception as exc:
        found = _VALUE_ERROR.search(str(exc))
        if found is None:
            raise
        raise ColumnValueError(found.group(1)) from None


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

        yield from _result_batches(partial_sums(arrays(), lower, upper, spec), spec)

    return run


def _zero(d: int, spec: PassSpec) -> ExactSums:
    return ExactSums.zero(
        d,
        spec.degree,
        spec.tensor_degree,
        spec.histogram_cells,
        spec.null_cells,
        0 if spec.tables is None else spec.tables.size,
        spec.clip_levels,
        0 if spec.marginals is None else int(spec.marginals.offsets[-1]),
    )


_LIMB_FIELDS = frozenset({"gram", "tensor", "clipped"})
"""Fields of exact integers that may exceed int64 summed over a table: sent as two limbs."""


def _layout(d: int, spec: PassSpec) -> list[tuple[str, int]]:
    """The fields of a flattened result (``ExactSums`` attributes, then the row counters) and
    their lengths, in order: a function of the pass's spec alone."""
    return [
        ("gram", (1 + d * spec.degree) ** 2),
        ("tensor", spec.tensor_degree**d if spec.tensor_degree else 0),
        ("histograms", d * spec.histogram_cells),
        ("nulls", d if spec.null_cells else 0),
        ("tables", 0 if spec.tables is None else spec.tables.size),
        ("atoms", 2 * d if spec.histogram_cells else 0),
        (
            "clipped",
            2 * (len(spec.clip_levels) + 1) * (d * (d - 1) // 2) if spec.clip_levels else 0,
        ),
        ("marginals", 0 if spec.marginals is None else int(spec.marginals.offsets[-1])),
        ("counters", len(_COUNTERS)),
    ]


def _flatten(sums: ExactSums, layout: list[tuple[str, int]]) -> np.ndarray:
    """One task's exact sums as int64 values in the order of ``layout``, each field of
    :data:`_LIMB_FIELDS` as its high limbs, then its low limbs."""
    parts = []
    for name, size in layout:
        if name == "counters":
            parts.append(np.array([getattr(sums, c) for c in _COUNTERS], dtype=np.int64))
            continue
        values = getattr(sums, name)
        flat = np.zeros(0, np.int64) if values is None else np.asarray(values, np.int64).ravel()
        if flat.size != size:
            raise RuntimeError(f"the kernel's {name} has {flat.size} values, expected {size}")
        parts += _limbs(flat) if name in _LIMB_FIELDS else [flat]
    return np.concatenate(parts)


def _limbs(values: np.ndarray) -> list[np.ndarray]:
    return [values >> LIMB_BITS, values & ((1 << LIMB_BITS) - 1)]


def _result_batches(sums: ExactSums, spec: PassSpec) -> Iterator[pa.RecordBatch]:
    """One task's exact sums as rows of :data:`RESULT_SCHEMA`, :data:`_ROW_BATCH` per batch."""
    yield from _vector_batches(_flatten(sums, _layout(sums.d, spec)))


def _sum_chunks(table: pa.Table) -> pa.Table:
    """Rows of :data:`RESULT_SCHEMA` summed chunk by chunk (int64, exact)."""
    chunks = np.asarray(table.column("chunk").to_numpy(zero_copy_only=False))
    values = table.column("values").to_pylist()
    out_chunks, out_values = [], []
    for chunk in np.unique(chunks):
        parts = [np.frombuffer(values[i], dtype=np.int64) for i in np.flatnonzero(chunks == chunk)]
        out_chunks.append(int(chunk))
        out_values.append(np.sum(parts, axis=0, dtype=np.int64).tobytes())
    chunk_column = pa.array(out_chunks, type=pa.int32())
    return pa.table({"chunk": chunk_column, "values": pa.array(out_values, type=pa.binary())})


def _exact(limbs: np.ndarray) -> np.ndarray:
    """The exact integers (object array of Python ints) of a field's high limbs then low limbs."""
    hi, lo = limbs[: limbs.size // 2], limbs[limbs.size // 2 :]
    if hi.size and int(np.abs(hi).max()) < 1 << (62 - LIMB_BITS):  # fits in int64
        return ((hi << LIMB_BITS) + lo).astype(object)
    return hi.astype(object) * (1 << LIMB_BITS) + lo.astype(object)


def _merge_results(results: DataFrame, d: int, spec: PassSpec) -> ExactSums:
    """Merge the per-task results exactly: in :data:`MERGE_GROUPS` groups per chunk on the
    executors (the driver receives a few results, not one per partition: tens of thousands on a
    large table, docs/scaling.md), then, where a result has several chunks, once more per chunk
    on the executors, else on the driver. DataFrame operations only, so the same code runs on
    classic Spark and on Spark Connect."""
    layout = _layout(d, spec)
    sizes = [(n, 2 * size if n in _LIMB_FIELDS else size) for n, size in layout]
    values = _merged_values(results, sum(size for _, size in sizes))
    if values is None:
        return _zero(d, spec)
    fields = dict(
        zip(
            [name for name, _ in sizes],
            np.split(values, np.cumsum([size for _, size in sizes])[:-1]),
            strict=True,
        )
    )
    size = 1 + d * spec.degree
    counters = dict(zip(_COUNTERS, (int(v) for v in fields["counters"]), strict=True))
    return ExactSums(
        spec.degree,
        d,
        _exact(fields["gram"]).reshape(size, size),
        counters["rows_seen"],
        counters["rows_invalid"],
        counters["rows_clamped"],
        spec.tensor_degree,
        _exact(fields["tensor"]) if spec.tensor_degree else None,
        fields["histograms"].reshape(d, spec.histogram_cells).copy()
        if spec.histogram_cells
        else None,
        fields["nulls"].copy() if spec.null_cells else None,
        counters["rows_null"],
        fields["tables"].copy() if spec.tables is not None else None,
        fields["atoms"].reshape(d, 2).copy() if spec.histogram_cells else None,
        tuple(spec.clip_levels),
        _clipped(fields["clipped"], d, spec),
        fields["marginals"].copy() if spec.marginals is not None else None,
    )


def _merged_values(results: DataFrame, total: int) -> np.ndarray | None:
    """The sum of the tasks' int64 vectors of ``total`` values (rows of :data:`RESULT_SCHEMA`),
    merged on the executors as :func:`_merge_results` says; ``None`` where no task had rows."""
    merged = (
        results.selectExpr("*", f"spark_partition_id() % {MERGE_GROUPS} AS _group")
        .groupBy("_group", "chunk")
        .applyInArrow(_sum_chunks, RESULT_SCHEMA)
    )
    if total > CHUNK_VALUES:
        merged = merged.groupBy("chunk").applyInArrow(_sum_chunks, RESULT_SCHEMA)
    rows = _sum_chunks(_run(merged.toArrow))
    if not rows.num_rows:
        return None
    values = np.concatenate(
        [np.frombuffer(v, dtype=np.int64) for v in rows.column("values").to_pylist()]
    )
    if values.size != total:
        raise RuntimeError(f"the data pass returned {values.size} values, expected {total}")
    return values


def _vector_batches(values: np.ndarray) -> Iterator[pa.RecordBatch]:
    """An int64 vector as rows of :data:`RESULT_SCHEMA`, :data:`_ROW_BATCH` per batch."""
    starts = range(0, values.size, CHUNK_VALUES)
    for first in range(0, len(starts), _ROW_BATCH):
        chunks = list(starts[first : first + _ROW_BATCH])
        yield pa.RecordBatch.from_pydict(
            {
                "chunk": pa.array([s // CHUNK_VALUES for s in chunks], type=pa.int32()),
                "values": [values[s : s + CHUNK_VALUES].tobytes() for s in chunks],
            }
        )


def unit_sums(
    df: DataFrame, codec: TableCodec, spec: UnitTables, unit: str, rank: str
) -> StatisticSums:
    """The counts of a release of persons (``core.unit_tables``) in one Spark job over the kept
    rows (``df``: the released columns, the ``unit`` and each row's ``rank`` in it, as
    :func:`io.bound_contributions` leaves them: its window partitions the rows by unit, so each
    task holds whole units); a task orders its units' rows by rank and counts their tables
    exactly (int64); the results merge as the data pass's do. DataFrame operations only (classic
    and Connect)."""
    bounds = codec.bounds()
    lower, upper = bounds.lower, bounds.upper
    size = spec.size

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b for b in batches if b.num_rows]
        counts = np.zeros(size + 3, dtype=np.int64)
        if parts:
            table = pa.Table.from_batches(parts)
            labels = table.column(unit).combine_chunks().dictionary_encode().indices
            units = np.asarray(labels.to_numpy(zero_copy_only=False))
            ranks = np.asarray(table.column(rank).to_numpy(zero_copy_only=False))
            order = np.lexsort((ranks, units))  # each unit's rows in the order of their rank
            table, units = table.take(pa.array(order)), units[order]
            encoded = codec.encode_with_nulls(table.select(codec.names))
            x, nulls = encoded if isinstance(encoded, tuple) else (encoded, None)
            codes, scaled, ok, invalid, clamped = valid_codes_and_values(
                x, nulls, lower, upper, spec.coding
            )
            counts[:size] = spec.counts(codes, units[ok], scaled)
            counts[size:] = (table.num_rows, invalid, clamped)
        yield from _vector_batches(counts)

    selected = df.selectExpr(*(quote(c) for c in (*codec.names, unit, rank)))
    values = _merged_values(selected.mapInArrow(run, RESULT_SCHEMA), size + 3)
    if values is None:
        return StatisticSums(np.zeros(size, dtype=np.int64), 0, 0, 0)
    seen, invalid, clamped = (int(v) for v in values[size:])
    return StatisticSums(values[:size], seen, invalid, clamped)


def _clipped(limbs: np.ndarray, d: int, spec: PassSpec) -> np.ndarray | None:
    """The norm-clipped bands (``ExactSums.clipped``) from their high then low limbs, int64: a
    band's sum of products below ``2**32`` fits for up to ``2**31`` rows."""
    if not spec.clip_levels:
        return None
    values = (limbs[: limbs.size // 2] << LIMB_BITS) + limbs[limbs.size // 2 :]
    return values.reshape(2, len(spec.clip_levels) + 1, d * (d - 1) // 2)


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
    result = _run(df.selectExpr(*[quote(c) for c in codec.names]).mapInArrow(run, schema).collect)
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

        yield from _result_batches(partial_sums(arrays(), lower, upper, spec), spec)

    if not units:
        return _zero(bounds.d, spec)
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
    rows = _run(selected.mapInArrow(run, "counts binary").collect)
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
