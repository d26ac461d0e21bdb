"""Delta and Iceberg tables without JVM jars: delta-rs (``deltalake``) and ``pyiceberg``.

Input: the current snapshot's data files, taken from the table's log or catalog (never a listing
of the folder, which still holds files that the log has removed), read by Spark as Parquet.

Output: the synthetic rows are first written as Parquet into a staging folder (by the driver or
by the executors), then published in **one** atomic commit that records the release id, streamed
from the staged files so the driver never holds the rows. The JSON documents (manifest, summary)
go first to ``_dpsmooth/<release id>/`` (Delta: inside the table folder, which Delta ignores;
Iceberg: in the warehouse), atomically; a crash before the commit leaves them without data, never
data without them. A retried release whose commit is already there is not committed twice.
"""

from __future__ import annotations

import functools
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

RELEASE_KEY = "dpsmooth.release_id"
SPEND_KEYS = ("mechanism", "epsilon", "delta", "epsilon_spent", "privacy_unit")
"""What a release's commit records beside its id, as ``dpsmooth.<key>`` (:func:`spend_of`)."""
SIDE_DIR = "_dpsmooth"


class LakeError(ValueError):
    """A lake table that cannot be read or written as configured."""


@dataclass(frozen=True)
class SnapshotFiles:
    """The data files of a table's current snapshot.

    Attributes:
        files: local paths of the Parquet data files.
        base: the table root (partition values are read from ``base``-relative folder names).
    """

    files: list[str]
    base: str


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


@functools.cache
def catalog(cfg: Any) -> Any:
    """The pyiceberg SQL catalog of a :class:`~dpsmooth_spark.config.CatalogConfig` (one per
    config: a release looks it up several times)."""
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = (
        cfg.warehouse if "://" in cfg.warehouse else f"file://{Path(cfg.warehouse).resolve()}"
    )
    Path(_local(warehouse)).mkdir(parents=True, exist_ok=True)
    return SqlCatalog(cfg.name, uri=cfg.uri, warehouse=warehouse)


def snapshot_files(fmt: str, path: str, catalog_cfg: Any = None) -> SnapshotFiles:
    """The current snapshot's data files of a Delta table folder or an Iceberg table."""
    if fmt == "delta":
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(path)
        except TableNotFoundError:
            raise LakeError(f"no Delta table at {path}") from None
        _check_delta_readable(table, path)
        return SnapshotFiles([_local(u) for u in table.file_uris()], path)
    if fmt == "iceberg":
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = catalog(catalog_cfg).load_table(path)
        except NoSuchTableError:
            raise LakeError(f"no Iceberg table {path!r} in catalog {catalog_cfg.uri}") from None
        tasks = list(table.scan().plan_files())
        if any(task.delete_files for task in tasks):
            raise LakeError(
                f"Iceberg table {path!r} has delete files; the data pass reads data files "
                "only and would count deleted rows: compact the table first"
            )
        return SnapshotFiles([_local(t.file.file_path) for t in tasks], _local(table.location()))
    raise ValueError(f"not a lake format: {fmt}")


def _check_delta_readable(table: Any, path: str) -> None:
    """Refuse a Delta table whose data files alone do not hold its rows, as the pass reads them:
    deletion vectors (rows deleted in place, e.g. to serve an erasure request, still lie in the
    files) or column mapping (the files name the columns by physical names)."""
    mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise LakeError(
            f"Delta table {path!r} uses column mapping (mode {mode!r}): its data files name the "
            "columns by physical names the data pass does not map; rewrite the table without "
            "column mapping (or release from a copy)"
        )
    features = table.protocol().reader_features or []
    if "deletionVectors" in features and _has_deletion_vectors(table):
        raise LakeError(
            f"Delta table {path!r} has deletion vectors: the data pass reads data files only and "
            "would count deleted rows; purge them first (REORG TABLE ... APPLY (PURGE))"
        )


def _has_deletion_vectors(table: Any) -> bool:
    """Whether any data file of the snapshot has a deletion vector (also where delta-rs cannot
    read one: a vector that is there but unreadable still deletes rows)."""
    try:
        return any(batch.num_rows for batch in table.deletion_vectors())
    except Exception:  # an unreadable vector: refuse rather than read deleted rows
        return True


def table_root(path: str, catalog_cfg: Any) -> str:
    """Where an Iceberg table's files live: its location if it exists, else where the catalog
    would create it."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    cat = catalog(catalog_cfg)
    try:
        return _local(cat.load_table(path).location())
    except NoSuchTableError:
        pass
    namespace, _, name = path.rpartition(".")
    try:
        return _local(cat._resolve_table_location(None, namespace, name))
    except (NoSuchNamespaceError, ValueError):
        return str(Path(_local(cat.properties["warehouse"])) / namespace / name)


def side_folder(fmt: str, path: str, catalog_cfg: Any, release_id: str) -> Path:
    """Where a lake release's JSON documents go."""
    if fmt == "delta":
        return Path(path) / SIDE_DIR / release_id
    root = Path(_local(catalog(catalog_cfg).properties["warehouse"]))
    return root / SIDE_DIR / path / release_id


def staging_folder(fmt: str, path: str, catalog_cfg: Any) -> Path:
    """A fresh folder for the staged Parquet files of a lake release."""
    parent = (
        Path(path) if fmt == "delta" else Path(_local(catalog(catalog_cfg).properties["warehouse"]))
    )
    return parent / SIDE_DIR / f"staging-{uuid.uuid4().hex}"


def spend_of(release_id: str, manifest: dict[str, Any]) -> dict[str, str]:
    """The commit properties of a release: its id and what it cost (mechanism, epsilon, delta,
    epsilon spent, privacy unit), from its manifest, so the table's own history (Delta's
    ``DESCRIBE HISTORY``, Iceberg's snapshot log) shows what the table cost."""
    privacy = manifest.get("privacy", {})
    unit = privacy.get("privacy_unit", "record")
    if unit != "record":
        unit = f"{unit} ({privacy['max_rows_per_unit']} rows)"
    values = {
        "mechanism": manifest.get("mechanism", {}).get("name", ""),
        "epsilon": privacy.get("epsilon", ""),
        "delta": privacy.get("delta", ""),
        "epsilon_spent": privacy.get("accounting", {}).get("epsilon_spent", ""),
        "privacy_unit": unit,
    }
    return {RELEASE_KEY: release_id, **{f"dpsmooth.{k}": str(values[k]) for k in SPEND_KEYS}}


def committed_release_ids(fmt: str, path: str, catalog_cfg: Any) -> set[str]:
    """Release ids recorded by earlier commits (empty when the table does not exist)."""
    if fmt == "delta":
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(path):
            return set()
        return {h[RELEASE_KEY] for h in DeltaTable(path).history() if RELEASE_KEY in h}
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = catalog(catalog_cfg).load_table(path)
    except NoSuchTableError:
        return set()
    return {
        s.summary.additional_properties[RELEASE_KEY]
        for s in table.snapshots()
        if s.summary is not None and RELEASE_KEY in s.summary.additional_properties
    }


def table_exists(fmt: str, path: str, catalog_cfg: Any) -> bool:
    """True when the output table already exists."""
    if fmt == "delta":
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(path))
    return bool(catalog(catalog_cfg).table_exists(path))


def _batches(staged: Path, extra: dict[str, str]) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    # imported here: pyarrow.dataset imports pandas (over a second), which every Spark worker
    # that imports the data pass (through spark.io) would otherwise pay
    import pyarrow.dataset as pads

    dataset = pads.dataset(str(staged), format="parquet")
    schema = dataset.schema
    for name in extra:
        schema = schema.append(pa.field(name, pa.string()))

    def gen() -> Iterator[pa.RecordBatch]:
        for batch in dataset.to_batches(batch_size=256_000):
            for name, value in extra.items():
                batch = batch.append_column(name, pa.array([value] * batch.num_rows, pa.string()))
            yield batch

    return schema, gen()


def commit(
    fmt: str,
    path: str,
    catalog_cfg: Any,
    staged: Path,
    mode: str,
    properties: dict[str, str],
    partition_by: str | None,
    extra_columns: dict[str, str],
) -> None:
    """Publish the staged Parquet rows as one commit that records ``properties`` (the release id
    and its spend, :func:`spend_of`): Delta commit metadata (and ``userMetadata``, as JSON, which
    ``DESCRIBE HISTORY`` shows), Iceberg snapshot summary properties.

    Args:
        staged: folder of Parquet files (the synthetic rows).
        mode: ``overwrite`` replaces the table's rows; ``error`` requires a new table.
        partition_by: column to partition by (``extra_columns`` may add it, e.g. the release date).
        extra_columns: constant string columns added to every row.
    """
    schema, batches = _batches(staged, extra_columns)
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    if fmt == "delta":
        from deltalake import CommitProperties, write_deltalake

        write_deltalake(
            path,
            reader,
            mode="overwrite" if mode == "overwrite" else "error",
            partition_by=[partition_by] if partition_by else None,
            schema_mode="overwrite" if mode == "overwrite" else None,
            commit_properties=CommitProperties(
                custom_metadata={**properties, "userMetadata": json.dumps(properties)}
            ),
        )
        return
    cat = catalog(catalog_cfg)
    namespace = path.rsplit(".", 1)[0] if "." in path else "default"
    cat.create_namespace_if_not_exists(namespace)
    if cat.table_exists(path):
        if mode != "overwrite":
            raise LakeError(
                f"Iceberg table {path!r} exists (set output.mode: overwrite to replace its rows)"
            )
        table = cat.load_table(path)
        if table.schema().as_arrow().names != schema.names:
            raise LakeError(
                f"Iceberg table {path!r} has columns {table.schema().as_arrow().names}, the "
                f"release has {schema.names}; write to a new table"
            )
        with table.transaction() as tx:  # one commit: the first batch replaces, the rest append
            for i, batch in enumerate(reader):
                rows = pa.Table.from_batches([batch], schema)
                if i == 0:
                    tx.overwrite(rows, snapshot_properties=properties)
                else:
                    tx.append(rows, snapshot_properties=properties)
        return
    with cat.create_table_transaction(path, schema=schema) as tx:  # table and rows in one commit
        if partition_by:
            with tx.update_spec() as spec:
                spec.add_identity(partition_by)
        for batch in reader:
            tx.append(pa.Table.from_batches([batch], schema), snapshot_properties=properties)


def read_delta_release(path: str, columns: list[str]) -> tuple[pa.Table, Path | None]:
    """The rows of a Delta release (current snapshot) and the side folder of its latest release."""
    from deltalake import DeltaTable

    table = DeltaTable(path)
    ids = [h[RELEASE_KEY] for h in table.history() if RELEASE_KEY in h]  # newest first
    return table.to_pyarrow_table(columns=columns), (
        Path(path) / SIDE_DIR / ids[0]
    ) if ids else None


def remove(folder: Path) -> None:
    """Delete a staging folder (best effort)."""
    shutil.rmtree(folder, ignore_errors=True)
