"""Delta and Iceberg round trips: releases published as one commit with the release id, read
back as inputs from the snapshot (never the raw folder), partitioned output, retries, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.core.kernel import partial_sums
from dpsmooth_spark.pipeline.release import ReleaseRun
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.spark import io, lake
from dpsmooth_spark.spark.data_pass import exact_sums_arrow

pytestmark = pytest.mark.spark
COLUMNS = {"a": (0.0, 1.0), "b": (-1.0, 1.0), "label": (0.0, 1.0)}


def table(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0, 1, n)
    return pa.table(
        {
            "a": a,
            "b": np.clip(a - 0.5 + rng.normal(0, 0.2, n), -1, 1),
            "label": (a > 0.5).astype(float),
        }
    )


def config(tmp_path: Path, input_: dict, output: dict, **extra) -> dict:
    return {
        "input": input_,
        "columns": [{"name": k, "lower": lo, "upper": hi} for k, (lo, hi) in COLUMNS.items()],
        "privacy": {"epsilon": 1.0},
        "output": {"rows": 500, **output},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 3,
        "test_mode": True,
        "mechanism": {"candidates": 200},
        "spark": {"master": "local[2]"},
        **extra,
    }


def test_delta_input_reads_the_snapshot_not_the_folder(spark, tmp_path):
    path = str(tmp_path / "delta_in")
    write_deltalake(path, table(3000, 0))
    write_deltalake(
        path, table(1000, 1), mode="overwrite"
    )  # version 1: the 3000 old rows stay on disk
    assert spark.read.parquet(path).count() == 4000  # what a folder listing would count
    cfg = parse_config(
        config(tmp_path, {"format": "delta", "path": path}, {"path": str(tmp_path / "o")})
    )
    df = io.read_input(spark, cfg.input, list(COLUMNS))
    assert df.count() == 1000
    snapshot = io.input_snapshot(cfg.input)
    files = snapshot.files if snapshot is not None else None
    assert files is not None and len(files) == len(DeltaTable(path).file_uris())
    sums = exact_sums_arrow(spark, files, cfg.public_bounds(), 2)
    expected = partial_sums(
        [np.column_stack([table(1000, 1)[c].to_numpy() for c in COLUMNS])],
        cfg.public_bounds().lower,
        cfg.public_bounds().upper,
        2,
    )
    assert sums.count == 1000 and (sums.gram == expected.gram).all()


def test_synthesize_to_delta_partitioned_then_retry_and_refusals(spark, tmp_path):
    source = tmp_path / "in.parquet"
    pq.write_table(table(2000, 2), source)
    out = str(tmp_path / "delta_out")
    data = config(
        tmp_path,
        {"path": str(source)},
        {"path": out, "format": "delta", "partition_by": "date"},
        release_id="rel-1",
    )
    report = run_synthesize(parse_config(data), quiet=True)
    delta = DeltaTable(out)
    assert delta.metadata().partition_columns == ["release_date"]
    rows = delta.to_pyarrow_table()
    assert rows.num_rows == 500 and set(rows.column_names) == {*COLUMNS, "release_date"}
    assert [h[lake.RELEASE_KEY] for h in delta.history() if lake.RELEASE_KEY in h] == ["rel-1"]
    # the table's own history (DESCRIBE HISTORY) shows what the release cost
    commit = next(h for h in delta.history() if lake.RELEASE_KEY in h)
    spend = {"dpsmooth.epsilon": "1.0", "dpsmooth.delta": "0.0", "dpsmooth.privacy_unit": "record"}
    assert spend.items() <= commit.items()
    assert spend.items() <= json.loads(commit["userMetadata"]).items()
    assert float(commit["dpsmooth.epsilon_spent"]) == pytest.approx(1.0)
    side = Path(out) / "_dpsmooth" / "rel-1"
    manifest = json.loads((side / "manifest.json").read_text())
    assert manifest["output"]["format"] == "delta" and manifest["release_id"] == "rel-1"
    assert report.manifest["privacy"]["epsilon"] == 1.0

    # a retry of the same release id commits nothing new and spends nothing new
    run_synthesize(parse_config(data), quiet=True)
    assert DeltaTable(out).version() == delta.version()
    # another release into the existing table is refused before any work, unless overwrite
    with pytest.raises(io.OutputExistsError):
        ReleaseRun.start(parse_config({**data, "release_id": "rel-2"}), "smooth_pca", quiet=True)
    over = {**data, "release_id": "rel-2", "output": {**data["output"], "mode": "overwrite"}}
    run_synthesize(parse_config(over), quiet=True)
    assert DeltaTable(out).to_pyarrow_table().num_rows == 500
    assert DeltaTable(out).version() == delta.version() + 1
    # the evaluate job reads a Delta release: its snapshot's rows and the latest release's documents
    from dpsmooth_spark.pipeline.evaluate import run_evaluate

    metrics = run_evaluate(
        parse_config(data), out, str(tmp_path / "report"), None, 200, 2000, quiet=True
    )
    assert metrics["release"]["release_id"] == "rel-2"


def test_iceberg_round_trip(spark, tmp_path):
    catalog = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": str(tmp_path / "warehouse")}
    source = tmp_path / "in.parquet"
    pq.write_table(table(2000, 3), source)
    data = config(
        tmp_path,
        {"path": str(source)},
        {"path": "synth.rows", "format": "iceberg", "catalog": catalog, "partition_by": "label"},
        release_id="ice-1",
        mechanism={"candidates": 200, "jitter": 0.0},
    )
    run_synthesize(parse_config(data), quiet=True)
    ice = lake.catalog(parse_config(data).output.catalog).load_table("synth.rows")
    assert ice.scan().to_arrow().num_rows == 500
    assert [f.name for f in ice.spec().fields] == ["label"]
    assert lake.committed_release_ids(
        "iceberg", "synth.rows", parse_config(data).output.catalog
    ) == {"ice-1"}
    summary = ice.current_snapshot().summary.additional_properties  # the snapshot log's entry
    assert summary["dpsmooth.epsilon"] == "1.0" and summary["dpsmooth.delta"] == "0.0"
    assert summary["dpsmooth.privacy_unit"] == "record"
    assert summary["dpsmooth.mechanism"] == "smooth_pca"
    # the synthetic table is an input like any other (here: its current snapshot's files)
    again = config(
        tmp_path,
        {"format": "iceberg", "path": "synth.rows", "catalog": catalog},
        {"path": str(tmp_path / "second")},
        release_id="from-ice",
    )
    cfg = parse_config(again)
    assert io.read_input(spark, cfg.input, list(COLUMNS)).count() == 500
    report = run_synthesize(cfg, quiet=True)
    assert pq.read_table(Path(report.output_path) / "data").num_rows == 500


def test_missing_lake_tables_are_clear_errors(spark, tmp_path):
    cfg = parse_config(
        config(
            tmp_path,
            {"format": "delta", "path": str(tmp_path / "nothing")},
            {"path": str(tmp_path / "o")},
        )
    )
    with pytest.raises(io.InputError, match="no Delta table"):
        io.read_input(spark, cfg.input, list(COLUMNS))
    catalog = {"uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path / "w")}
    cfg = parse_config(
        config(
            tmp_path,
            {"format": "iceberg", "path": "x.y", "catalog": catalog},
            {"path": str(tmp_path / "o")},
        )
    )
    with pytest.raises(io.InputError, match="no Iceberg table"):
        io.read_input(spark, cfg.input, list(COLUMNS))


@pytest.mark.parametrize(("sampling", "partition_by"), [("driver", "date"), ("executors", "label")])
def test_partitioned_parquet_release(spark, tmp_path, sampling, partition_by):
    source = tmp_path / "in.parquet"
    pq.write_table(table(2000, 4), source)
    out = tmp_path / "release"
    data = config(
        tmp_path,
        {"path": str(source)},
        {"path": str(out), "partition_by": partition_by, "sampling": sampling, "partitions": 2},
        mechanism={"candidates": 200, "jitter": 0.0},
    )
    run_synthesize(parse_config(data), quiet=True)
    folders = sorted(p.name for p in (out / "data").iterdir() if p.is_dir())
    key = "release_date" if partition_by == "date" else "label"
    assert folders and all(name.startswith(f"{key}=") for name in folders)
    rows = pq.read_table(out / "data")  # hive partitions come back as a column
    assert rows.num_rows == 500 and key in rows.column_names
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(
        name.startswith("data/") for name in manifest["content_sha256"] if name != "summary.json"
    )
