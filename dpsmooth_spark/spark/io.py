"""Lake I/O: reading the sensitive table with schema checks, writing a release atomically
(a Parquet folder here; Delta and Iceberg commits through :mod:`dpsmooth_spark.spark.lake`)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from dpsmooth_spark.core.columns import ColumnTypeError, TableCodec
from dpsmooth_spark.core.columns import table_codec as columns_table_codec
from dpsmooth_spark.spark import lake

NUMERIC_TYPES = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.DecimalType,
)
DATA_DIR = "data"
UNITS_DIR = "units"
ROWS_PER_FILE = 1_000_000


class InputError(ValueError):
    """The input table cannot be used as configured; nothing was released."""


class OutputExistsError(FileExistsError):
    """The output folder exists and the config does not allow overwriting it."""


def input_snapshot(source: Any) -> lake.SnapshotFiles | None:
    """The current snapshot's files of a Delta/Iceberg input (``None`` for a plain path)."""
    if source.format not in ("delta", "iceberg"):
        return None
    try:
        return lake.snapshot_files(source.format, source.path, source.catalog)
    except lake.LakeError as exc:
        raise InputError(str(exc)) from None


def read_input(
    spark: SparkSession,
    source: Any,
    codec: TableCodec | list[str],
    snapshot: lake.SnapshotFiles | None = None,
    extra: tuple[str, ...] = (),
) -> DataFrame:
    """The configured columns of the input (an :class:`~dpsmooth_spark.config.InputConfig`), in
    config order, ready for ``codec.encode``, then the ``extra`` columns as they are (the privacy
    unit). Delta and Iceberg tables are read from their current snapshot's file list (pass
    ``snapshot`` when it was already looked up)."""
    snapshot = snapshot or input_snapshot(source)
    if snapshot is None:
        return read_table(spark, source.path, source.format, codec, extra=extra)
    if not snapshot.files:
        raise InputError(
            f"the {source.format} table {source.path} has no data files; nothing was released"
        )
    return read_table(spark, snapshot.base, "parquet", codec, files=snapshot.files, extra=extra)


UNIT_RANK = "__dpsmooth_unit_rank"
UNIT_DRAW = "__dpsmooth_unit_draw"


def unit_draws(df: DataFrame, unit: str, seed: int) -> tuple[DataFrame, list[str]]:
    """``df`` with each row's seeded hash (``xxhash64(seed, unit, columns)``, as
    :data:`UNIT_DRAW`), and the order of a unit's rows: the hash, then the values for ties.

    Raises:
        InputError: a row has no unit (a null in the unit column).
    """
    if df.where(f"{quote(unit)} IS NULL").limit(1).count():
        raise InputError(
            f"privacy.unit column {unit!r} has nulls: every row must name its unit; nothing was "
            "released"
        )
    columns = [quote(c) for c in df.columns]  # the unit and the released columns
    drawn = df.selectExpr("*", f"xxhash64({int(seed)}, {', '.join(columns)}) AS {UNIT_DRAW}")
    return drawn, [UNIT_DRAW, *columns]


def bound_contributions(
    df: DataFrame, unit: str, rows: int, seed: int, keep_unit: bool = False
) -> DataFrame:
    """At most ``rows`` rows of each ``unit``: the rows of a unit ordered by a seeded hash of the
    row itself (:func:`unit_draws`), the first ``rows`` kept; the unit column dropped
    (``keep_unit``: kept, with each row's rank in its unit as :data:`UNIT_RANK`; the rows come
    out of the window partitioned by unit). Which rows a unit keeps is a function of the seed and
    that unit's rows alone, so adding or removing one unit leaves every other unit's choice as it
    was (docs/privacy.md section 1b); rows that tie are equal, so which of them is kept does not
    matter. Runs before every statistic; DataFrame and SQL expressions only, so classic and
    Connect sessions share it.

    Raises:
        InputError: a row has no unit (a null in the unit column).
    """
    drawn, order = unit_draws(df, unit, seed)
    ranked = drawn.selectExpr(
        "*",
        f"row_number() OVER (PARTITION BY {quote(unit)} ORDER BY {', '.join(order)}) "
        f"AS {UNIT_RANK}",
    )
    kept = ranked.where(f"{UNIT_RANK} <= {int(rows)}").drop(UNIT_DRAW)
    return kept if keep_unit else kept.drop(unit, UNIT_RANK)


def read_table(
    spark: SparkSession,
    path: str,
    fmt: str,
    codec: TableCodec | list[str],
    files: list[str] | None = None,
    extra: tuple[str, ...] = (),
) -> DataFrame:
    """The configured columns of the input table in config order, with their types (a list of
    names means float columns).

    CSV values are parsed with ``try_cast`` to the kind's type, so text that does not parse
    becomes null and is handled by the job's invalid-row rule. ``files`` restricts a Parquet read
    to those files under the table root ``path`` (partition values still come from the folder
    names).
    """
    df = _open(spark, path, fmt, files)
    columns = codec.names if isinstance(codec, TableCodec) else list(codec)
    available = {f.name: f.dataType for f in df.schema.fields}
    missing = [c for c in [*columns, *extra] if c not in available]
    if missing:
        raise InputError(
            f"columns not found in input: {missing}; the table has {sorted(available)}"
        )
    if fmt == "csv":
        types = (
            {c.name: c.arrow_type for c in codec.columns} if isinstance(codec, TableCodec) else {}
        )
        casts = [_csv_cast(c, types.get(c, pa.float64())) for c in columns]
        return df.selectExpr(*casts, *[quote(c) for c in extra])
    if not isinstance(codec, TableCodec):
        wrong = {
            c: available[c].simpleString()
            for c in columns
            if not isinstance(available[c], NUMERIC_TYPES)
        }
        if wrong:
            raise InputError(f"columns must be numeric, found {wrong}")
    return df.selectExpr(*[quote(c) for c in [*columns, *extra]])


CSV_TYPES = {
    pa.float64(): "DOUBLE",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
    pa.timestamp("us"): "TIMESTAMP",
}
"""The SQL type a CSV column is parsed as (see ``_declared_type``; text stays text)."""


def _csv_cast(name: str, arrow_type: pa.DataType) -> str:
    if arrow_type not in CSV_TYPES:
        return quote(name)
    return f"TRY_CAST({quote(name)} AS {CSV_TYPES[arrow_type]}) AS {quote(name)}"


def _open(spark: SparkSession, path: str, fmt: str, files: list[str] | None = None) -> DataFrame:
    if fmt == "table":
        try:
            return spark.table(path)
        except AnalysisException as exc:
            raise InputError(f"cannot read catalog table {path!r}: {_first_line(exc)}") from None
    if "://" not in path and not os.path.exists(path):
        raise InputError(f"input path does not exist: {path}")
    try:
        if fmt == "csv":
            return spark.read.option("header", "true").option("inferSchema", "false").csv(path)
        if files is not None:
            return spark.read.option("basePath", path).parquet(*files)
        return spark.read.parquet(path)
    except (AnalysisException, Py4JJavaError) as exc:
        raise InputError(f"cannot read {fmt} input at {path}: {_first_line(exc)}") from None


def quote(name: str) -> str:
    """A column name as a SQL identifier. Expressions are SQL strings, not Column objects, so
    the same code serves a classic and a Spark Connect session (even both in one process)."""
    return "`" + name.replace("`", "``") + "`"


def input_schema(
    source: Any,
    columns: list[str],
    spark: Callable[[], SparkSession],
    snapshot: lake.SnapshotFiles | None = None,
) -> pa.Schema:
    """The input table's schema (metadata, not data): from the first Parquet file's footer, or
    from Spark where the files do not hold every column (e.g. hive partition columns) or the
    path is remote. A CSV file's columns are all text here: :func:`table_codec` (``csv=True``)
    types them from the declarations."""
    from dpsmooth_spark.spark.data_pass import parquet_files

    snapshot = snapshot or input_snapshot(source)
    if snapshot is not None and not snapshot.files:
        raise InputError(
            f"the {source.format} table {source.path} has no data files; nothing was released"
        )
    target: str | list[str] = snapshot.files if snapshot is not None else source.path
    if source.format not in ("csv", "table") and not (isinstance(target, str) and "://" in target):
        if isinstance(target, str) and not os.path.exists(target):
            raise InputError(f"input path does not exist: {target}")
        try:
            files = parquet_files(target)
            schema = pq.read_schema(files[0]) if files else None
        except (OSError, pa.ArrowException) as exc:
            raise InputError(
                f"cannot read parquet input at {source.path}: {str(exc).splitlines()[0]}"
            ) from None
        if schema is not None and set(columns) <= set(schema.names):
            return schema
    base = snapshot.base if snapshot is not None else source.path
    df = _open(
        spark(),
        base,
        "parquet" if snapshot is not None else source.format,
        snapshot.files if snapshot is not None else None,
    )  # a catalog table: spark.table
    if source.format == "csv":
        return pa.schema([pa.field(f.name, pa.string()) for f in df.schema.fields])
    from pyspark.sql.pandas.types import to_arrow_type

    return pa.schema(
        [pa.field(f.name, to_arrow_type(f.dataType), f.nullable) for f in df.schema.fields]
    )


def _first_line(exc: Exception) -> str:
    if isinstance(exc, Py4JJavaError):
        return str(exc.java_exception.getMessage()).splitlines()[0]
    return str(exc).splitlines()[0]


def check_output_path(path: str, mode: str, release_id: str) -> None:
    """Fail before any work (and any budget) is spent if the release could not be written.

    An existing folder written by the same ``release_id`` (a retried run) may always be replaced.
    """
    target = Path(path)
    if target.exists() and mode != "overwrite" and _release_id_of(target) != release_id:
        raise OutputExistsError(
            f"output path exists: {path} (set output.mode: overwrite to replace it)"
        )
    if not target.parent.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
    if not os.access(target.parent, os.W_OK):
        raise PermissionError(f"cannot write to {target.parent}")


def _release_id_of(folder: Path) -> str | None:
    try:
        return json.loads((folder / "manifest.json").read_text()).get("release_id")
    except (OSError, ValueError):
        return None


DataWriter = Callable[[Path], None]
"""Writes the synthetic table into the given (staging) ``data/`` folder, e.g. from executors."""
UnitsWriter = Callable[[Path, Path], None]
"""Writes the units table into its folder (the second) from the rows' folder (the first)."""


DATE_COLUMN = "release_date"
"""The column that ``output.partition_by: date`` adds (the UTC date of the release)."""


def release_date() -> str:
    """The UTC date of a release (the value of :data:`DATE_COLUMN`)."""
    return datetime.now(UTC).date().isoformat()


def partition_column(partition_by: str | None) -> str | None:
    """The column an ``output.partition_by`` setting partitions by (``date``:
    :data:`DATE_COLUMN`)."""
    return DATE_COLUMN if partition_by == "date" else partition_by


def _write_rows(
    table: pa.Table | DataWriter, folder: Path, partition_by: str | None = None
) -> None:
    """The synthetic rows as Parquet files in ``folder``: a writer fills it, a table is written in
    files of :data:`ROWS_PER_FILE` rows, or as Hive partitions of ``partition_by`` (a column of
    the table, or ``date``, which adds :data:`DATE_COLUMN`)."""
    if callable(table):
        table(folder)
        return
    column = partition_column(partition_by)
    if partition_by == "date":
        table = table.append_column(
            DATE_COLUMN, pa.array([release_date()] * table.num_rows, pa.string())
        )
    if column is not None:
        pq.write_to_dataset(table, folder, partition_cols=[column], max_rows_per_file=1 << 20)
        return
    folder.mkdir()
    for i, start in enumerate(range(0, max(table.num_rows, 1), ROWS_PER_FILE)):
        pq.write_table(table.slice(start, ROWS_PER_FILE), folder / f"part-{i:05d}.parquet")


def write_release(
    path: str,
    table: pa.Table | DataWriter | None,
    documents: dict[str, dict[str, Any]],
    manifest: dict[str, Any],
    mode: str,
    partition_by: str | None = None,
    units: pa.Table | UnitsWriter | None = None,
) -> dict[str, str]:
    """Write ``data/`` (a table, or a writer that fills the folder), ``units/`` where given (a
    release of persons' units table, or a writer that derives it from ``data/``), the JSON
    ``documents`` and ``manifest.json`` as one unit.

    Everything goes to a hidden staging folder beside ``path``, which is renamed into place only
    when complete; with ``overwrite`` the old folder is moved aside first and deleted after.
    A crash leaves either the previous release or none at ``path``, never a partial one.

    Returns:
        The SHA-256 of every written file (relative path -> hex), also stored in the manifest.
    """
    target = Path(path)
    check_output_path(path, mode, manifest["release_id"])
    _remove_stale_staging(target)
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex}"
    try:
        staging.mkdir(parents=True)
        if table is not None:
            _write_rows(table, staging / DATA_DIR, partition_by)
        if callable(units):
            units(staging / DATA_DIR, staging / UNITS_DIR)
        elif units is not None:
            _write_rows(units, staging / UNITS_DIR)
        for name, doc in documents.items():
            (staging / name).write_text(json.dumps(doc, indent=1))
        hashes = {
            str(p.relative_to(staging)): _sha256(p)
            for p in sorted(staging.rglob("*"))
            if p.is_file()
        }
        manifest = {**manifest, "content_sha256": hashes}
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
        _fsync_tree(staging)
        _swap_into_place(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return hashes


def check_table_output(spark: SparkSession, output: Any) -> None:
    """Before any work: a catalog output table may exist only with ``overwrite``."""
    if output.mode != "overwrite" and spark.catalog.tableExists(output.path):
        raise OutputExistsError(
            f"output catalog table exists: {output.path} (set output.mode: overwrite to replace it)"
        )


def write_table_release(
    spark: SparkSession,
    output: Any,
    side: Path,
    release_id: str,
    table: pa.Table | DataWriter | None,
    documents: dict[str, dict[str, Any]],
    manifest: dict[str, Any],
) -> dict[str, str]:
    """Publish a release to a table of the Spark catalog (``saveAsTable``): the documents go
    atomically to ``side/<release id>/``; the rows are staged as Parquet beside them (with the
    input's types) and written to the table by Spark in one job."""
    manifest = {
        **manifest,
        "output": {
            **manifest.get("output", {}),
            "format": "table",
            "table": output.path,
            "documents": str(side / release_id),
        },
    }
    side.mkdir(parents=True, exist_ok=True)
    hashes = write_release(str(side / release_id), None, documents, manifest, "overwrite")
    if table is None:
        return hashes
    staged = side / f".staging-{uuid.uuid4().hex}"
    try:
        staged.mkdir(parents=True)
        _write_rows(table, staged / DATA_DIR)
        rows = spark.read.parquet(str(staged / DATA_DIR))
        rows.write.mode("overwrite" if output.mode == "overwrite" else "error").saveAsTable(
            output.path
        )
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return hashes


def check_lake_output(output: Any, release_id: str) -> None:
    """Before any work: a Delta/Iceberg output table may exist only with ``overwrite`` (or when
    this release id already committed to it: a retry)."""
    try:
        exists = lake.table_exists(output.format, output.path, output.catalog)
        if (
            exists
            and output.mode != "overwrite"
            and release_id
            not in lake.committed_release_ids(output.format, output.path, output.catalog)
        ):
            raise OutputExistsError(
                f"output {output.format} table exists: {output.path} "
                "(set output.mode: overwrite to replace its rows)"
            )
    except lake.LakeError as exc:
        raise InputError(str(exc)) from None


def write_lake_release(
    output: Any,
    release_id: str,
    table: pa.Table | DataWriter | None,
    documents: dict[str, dict[str, Any]],
    manifest: dict[str, Any],
) -> dict[str, str]:
    """Publish a release to a Delta or Iceberg table (see :mod:`dpsmooth_spark.spark.lake`).

    The synthetic rows are staged as Parquet, the documents are written atomically to the side
    folder, then one commit carrying the release id publishes the rows. A retry whose commit is
    already in the table rewrites the documents only. Returns the documents' SHA-256.
    """
    fmt, path, catalog_cfg = output.format, output.path, output.catalog
    side = lake.side_folder(fmt, path, catalog_cfg, release_id)
    side.parent.mkdir(parents=True, exist_ok=True)
    partition = partition_column(output.partition_by)
    manifest = {
        **manifest,
        "output": {
            **manifest.get("output", {}),
            "format": fmt,
            "table": path,
            "documents": str(side),
            "commit_properties": lake.spend_of(release_id, manifest),
            "partition_by": partition,
        },
    }
    hashes = write_release(str(side), None, documents, manifest, "overwrite")
    if table is None or release_id in lake.committed_release_ids(fmt, path, catalog_cfg):
        return hashes
    staged = lake.staging_folder(fmt, path, catalog_cfg)
    for leftover in staged.parent.glob("staging-*"):  # from a job killed before its commit
        lake.remove(leftover)
    try:
        staged.mkdir(parents=True)
        _write_rows(table, staged / DATA_DIR)  # unpartitioned: the commit partitions
        lake.commit(
            fmt,
            path,
            catalog_cfg,
            staged / DATA_DIR,
            output.mode,
            lake.spend_of(release_id, manifest),
            partition,
            {DATE_COLUMN: release_date()} if output.partition_by == "date" else {},
        )
    except lake.LakeError as exc:
        raise OutputExistsError(str(exc)) from None
    finally:
        lake.remove(staged)
    return hashes


def _remove_stale_staging(target: Path) -> None:
    """Clean up after a job killed mid-write: restore a moved-aside release, drop staging
    folders."""
    old = sorted(target.parent.glob(f".{target.name}.old-*"))
    if old and not target.exists():
        os.rename(old.pop(), target)
    for leftover in [*old, *target.parent.glob(f".{target.name}.staging-*")]:
        shutil.rmtree(leftover, ignore_errors=True)


def _swap_into_place(staging: Path, target: Path) -> None:
    if target.exists():
        trash = target.parent / f".{target.name}.old-{uuid.uuid4().hex}"
        os.rename(target, trash)
        os.rename(staging, target)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(staging, target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_tree(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            with p.open("rb") as fh:
                os.fsync(fh.fileno())


def sample_on_executors(
    spark: SparkSession,
    candidates: np.ndarray,
    weights: np.ndarray,
    jitter: np.ndarray,
    codec: TableCodec,
    rows: int,
    seed: int,
    partitions: int,
    null_shares: np.ndarray | None = None,
    partition_by: str | None = None,
    independent: bool = False,
    rare: tuple[tuple[int, int, int, np.ndarray, np.ndarray], ...] = (),
    atoms: tuple[tuple[int, float, float, float, float], ...] = (),
    copula: np.ndarray | None = None,
) -> DataWriter:
    """A writer that draws ``rows`` records inside the executors and writes them as Parquet with
    the input's column types (``codec``); ``independent``: column by column (no relation was
    measured; :func:`core.sampling.sample_records`); ``rare``: ``(column, levels,
    representative, group, shares)`` of each large category's rare values, spread back over
    their group (:func:`core.sampling.spread_levels`); ``atoms``: the point masses at the
    bounds to place; ``copula``: the correlation each partition's records are reordered to
    (:func:`core.sampling.sample_records`).

    The support (``C x d``), weights and jitter are broadcast with the task closure; partition
    ``p`` draws its share of the rows with ``numpy.random.default_rng([seed, p])``, so a release
    seed fixes the output whatever the cluster; ``null_shares`` per column are drawn independently.
    The driver never holds the rows. ``partition_by``
    (a column or ``date``) writes Hive-style partition folders. (Spark's Parquet writer marks
    every column nullable; the driver-side writer keeps the input's nullability.)
    """
    from dpsmooth_spark.core.sampling import sample_records, spread_levels, stratifying_order

    # once here, not in every partition; on the lattice columns first, as the driver sorts
    order = stratifying_order(candidates, codec.lattice())

    def draw(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        scaled = sample_records(
            candidates,
            weights,
            count,
            jitter,
            rng,
            independent=independent,
            atoms=atoms,
            copula=copula,
            order=order,
        )
        for column, levels, representative, group, spread in rare:
            scaled = spread_levels(scaled, column, levels, representative, group, spread, rng)
        nulls = None if null_shares is None else rng.uniform(size=scaled.shape) < null_shares
        return scaled, nulls

    return draw_on_executors(spark, draw, codec, rows, seed, partitions, partition_by)


def draw_on_executors(
    spark: SparkSession,
    draw: Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray | None]],
    codec: TableCodec,
    rows: int,
    seed: int,
    partitions: int,
    partition_by: str | None = None,
) -> DataWriter:
    """A writer whose executors call ``draw(count, rng)`` for their share of ``rows`` (scaled
    records and their null mask, or ``None``), decode them to the input's types and write them
    as Parquet; partition ``p`` draws with ``numpy.random.default_rng([seed, p])``, so a release
    seed fixes the output whatever the cluster, and the driver never holds the rows.
    ``partition_by`` as in :func:`sample_on_executors`."""
    shares = np.full(partitions, rows // partitions)
    shares[: rows % partitions] += 1
    bounds = codec.bounds()

    def records(p: int, rng: np.random.Generator) -> pa.Table:
        scaled, nulls = draw(int(shares[p]), rng)
        if nulls is not None:
            scaled = np.where(nulls, 0.0, scaled)
        return codec.decode(bounds.unscale(scaled), nulls)

    return tables_on_executors(spark, records, codec.schema(), seed, partitions, partition_by)


def tables_on_executors(
    spark: SparkSession,
    draw: Callable[[int, np.random.Generator], pa.Table],
    schema: pa.Schema,
    seed: int,
    partitions: int,
    partition_by: str | None = None,
) -> DataWriter:
    """A writer whose executors write ``draw(p, rng)`` (a table of ``schema``) for each partition
    ``p`` with ``numpy.random.default_rng([seed, p])``, as Parquet."""
    from pyspark.sql.pandas.types import from_arrow_schema

    def records(batches):
        for batch in batches:
            for p in batch.column(0).to_numpy():
                yield from draw(int(p), np.random.default_rng([seed, int(p)])).to_batches()

    def write(folder: Path) -> None:
        ids = spark.range(0, partitions, numPartitions=partitions)
        rows_df = ids.mapInArrow(records, from_arrow_schema(schema))
        if partition_by == "date":
            rows_df = rows_df.selectExpr("*", f"'{release_date()}' AS {DATE_COLUMN}")
        writer = rows_df.write.mode("error")
        column = partition_column(partition_by)
        (writer.partitionBy(column) if column is not None else writer).parquet(str(folder))

    return write


def units_on_executors(
    spark: SparkSession,
    schema: pa.Schema,
    unit: str,
    per_unit: list[str],
    count_column: str,
    partition_by: str | None = None,
) -> UnitsWriter:
    """A writer of the units table (``mechanisms.persons.unit_table``) that Spark derives from
    the rows the executors wrote (``schema``): grouped by ``unit``, each per-unit column's value
    (constant over a unit's rows) and the unit's row count."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if partition_by == "date":
        schema = schema.append(pa.field(DATE_COLUMN, pa.string()))

    def write(rows_folder: Path, folder: Path) -> None:
        # the rows' schema: a partition column keeps its type, not one read from folder names
        rows = spark.read.schema(from_arrow_schema(schema)).parquet(str(rows_folder))
        # one SQL string, so classic and Connect sessions share it
        view = f"dpsmooth_units_{uuid.uuid4().hex}"
        picked = [f"first({quote(name)}) AS {quote(name)}" for name in per_unit]
        picked.append(f"count(*) AS {quote(count_column)}")
        rows.createOrReplaceTempView(view)
        try:
            spark.sql(
                f"SELECT {quote(unit)}, {', '.join(picked)} FROM {view} GROUP BY {quote(unit)}"
            ).write.mode("error").parquet(str(folder))
        finally:
            spark.catalog.dropTempView(view)

    return write


def table_codec(columns: list[Any], schema: pa.Schema, csv: bool = False) -> TableCodec:
    """:func:`core.columns.table_codec`, its refusals as :class:`InputError`."""
    try:
        return columns_table_codec(columns, schema, csv)
    except ColumnTypeError as exc:
        raise InputError(f"{exc}; nothing was released") from None
