"""A Delta input is read as Delta: a table whose data files alone do not hold its rows (deletion
vectors, column mapping) is refused before any work, as Iceberg delete files are."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dpsmooth_spark.spark.lake import LakeError, snapshot_files

DV = {
    "storageType": "u",
    "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
    "offset": 1,
    "sizeInBytes": 36,
    "cardinality": 1,
}
"""A deletion vector in a file beside the table (delta-rs's loader does not open it)."""


def _table(path: Path) -> tuple[dict, dict]:
    """A one-file Delta table at ``path``; its first commit's add and metaData actions."""
    write_deltalake(str(path), pa.table({"a": [1.0, 2.0, 3.0], "b": [0.1, 0.2, 0.3]}))
    actions = [json.loads(line) for line in (path / "_delta_log" / f"{0:020d}.json").open()]
    add = next(a["add"] for a in actions if "add" in a)
    meta = next(a["metaData"] for a in actions if "metaData" in a)
    return add, meta


def _commit(path: Path, *actions: dict) -> None:
    log = path / "_delta_log" / f"{1:020d}.json"
    info = {"commitInfo": {"timestamp": 1, "operation": "TEST"}}
    log.write_text("\n".join(json.dumps(a) for a in (info, *actions)) + "\n")


def _protocol(feature: str) -> dict:
    return {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": [feature],
            "writerFeatures": [feature],
        }
    }


def test_a_delete_through_a_deletion_vector_refuses_the_table(tmp_path):
    add, meta = _table(tmp_path)
    assert len(snapshot_files("delta", str(tmp_path)).files) == 1
    config = {**meta["configuration"], "delta.enableDeletionVectors": "true"}
    _commit(
        tmp_path,
        _protocol("deletionVectors"),
        {"metaData": {**meta, "configuration": config}},
        {"remove": {"path": add["path"], "deletionTimestamp": 1, "dataChange": True}},
        {"add": {**add, "deletionVector": DV}},
    )
    with pytest.raises(LakeError, match="deletion vectors"):
        snapshot_files("delta", str(tmp_path))


def test_deletion_vectors_enabled_without_a_delete_read_as_before(tmp_path):
    _, meta = _table(tmp_path)
    config = {**meta["configuration"], "delta.enableDeletionVectors": "true"}
    _commit(tmp_path, _protocol("deletionVectors"), {"metaData": {**meta, "configuration": config}})
    assert len(snapshot_files("delta", str(tmp_path)).files) == 1


def test_column_mapping_refuses_the_table(tmp_path):
    _, meta = _table(tmp_path)
    fields = json.loads(meta["schemaString"])
    for i, field in enumerate(fields["fields"]):
        field["metadata"] = {
            "delta.columnMapping.id": i + 1,
            "delta.columnMapping.physicalName": f"col-{i}",
        }
    config = {
        **meta["configuration"],
        "delta.columnMapping.mode": "name",
        "delta.columnMapping.maxColumnId": "2",
    }
    mapped = {**meta, "schemaString": json.dumps(fields), "configuration": config}
    _commit(tmp_path, _protocol("columnMapping"), {"metaData": mapped})
    with pytest.raises(LakeError, match="column mapping"):
        snapshot_files("delta", str(tmp_path))
