"""A release of persons as a Spark job: the grouped pass counts what the library counts, the
release writes units with fresh ids and their rows, a retry draws no noise, and bad input is
refused before any budget."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.core.columns import table_codec
from dpsmooth_spark.core.unit_tables import valid_codes_and_values
from dpsmooth_spark.mechanisms import adaptive, persons, records
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.spark.data_pass import unit_sums
from dpsmooth_spark.spark.io import UNIT_RANK, bound_contributions

pytestmark = pytest.mark.spark
K = 4
COLUMNS = [
    {"name": "sex", "values": ["F", "M"], "per_unit": True},
    {"name": "age", "lower": 20, "upper": 90, "per_unit": True},
    {"name": "ward", "values": ["A", "B", "C"]},
    {"name": "cost", "lower": 0.0, "upper": 100.0, "nullable": True},
]


def _visits(patients: int = 600, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    count = rng.integers(1, 9, patients)
    unit = np.repeat(np.arange(patients), count)
    home = rng.integers(0, 3, patients)
    ward = np.where(rng.random(unit.size) < 0.7, home[unit], rng.integers(0, 3, unit.size))
    cost = rng.uniform(0, 100, unit.size)
    return pa.table(
        {
            "patient": pa.array([f"p{u:05d}" for u in unit]),
            "sex": rng.choice(["F", "M"], patients)[unit],
            "age": rng.integers(20, 91, patients)[unit],
            "ward": np.array(list("ABC"))[ward],
            "cost": pa.array([None if rng.random() < 0.1 else float(c) for c in cost]),
        }
    )


def _config(tmp_path: Path, **extra) -> dict:
    src = tmp_path / "visits.parquet"
    if not src.exists():
        pq.write_table(_visits(), src)
    return {
        "input": {"path": str(src)},
        "columns": COLUMNS,
        "privacy": {"epsilon": 2.0, "unit": "patient", "max_rows_per_unit": K},
        "mechanism": {"method": "adaptive"},
        "output": {"path": str(tmp_path / "release")},
        "ledger": {"path": str(tmp_path / "ledger")},
        "seed": 4,
        "test_mode": True,
        **extra,
    }


def test_the_grouped_pass_counts_what_the_library_counts(spark, tmp_path: Path) -> None:
    """Spark's pass (the bound's window leaves each unit's kept rows in one task of five or more)
    against the same rows and ranks counted in one piece."""
    config = parse_config(_config(tmp_path))
    table = pq.read_table(tmp_path / "visits.parquet")
    codec = table_codec(config.columns, table.schema)
    spec = persons.unit_tables(
        records.cell_coding(codec), (True, True, False, False), K, adaptive.LoopSettings()
    )
    df = spark.read.parquet(str(tmp_path / "visits.parquet")).repartition(5)
    kept = bound_contributions(df, "patient", K, 11, keep_unit=True)
    sums = unit_sums(kept, codec, spec, "patient", UNIT_RANK)
    rows = kept.orderBy("patient", UNIT_RANK).toArrow()
    x, nulls = codec.encode_with_nulls(rows.select(codec.names))
    bounds = codec.bounds()
    codes, scaled, ok, invalid, _ = valid_codes_and_values(
        x, nulls, bounds.lower, bounds.upper, spec.coding
    )
    labels = np.asarray(rows.column("patient").combine_chunks().dictionary_encode().indices)
    np.testing.assert_array_equal(sums.values, spec.counts(codes, labels[ok], scaled))
    _, sizes = np.unique(table.column("patient").to_numpy(zero_copy_only=False), return_counts=True)
    assert sums.rows_seen == rows.num_rows == int(np.minimum(sizes, K).sum())
    assert invalid == sums.rows_invalid == 0


def test_a_release_of_persons_writes_units_and_a_retry_draws_nothing(tmp_path: Path) -> None:
    raw = _config(tmp_path, release_id="persons-1")
    raw["output"] = {**raw["output"], "units_table": True}
    report = run_synthesize(parse_config(raw), quiet=True)
    out = pq.read_table(Path(report.output_path) / "data").to_pandas()
    _assert_units_table(Path(report.output_path), out)
    assert list(out.columns) == ["patient", "sex", "age", "ward", "cost"]
    real_ids = set(pq.read_table(tmp_path / "visits.parquet").column("patient").to_pylist())
    assert not set(out["patient"]) & real_ids
    assert (out.groupby("patient")[["sex", "age"]].nunique() == 1).all().all()
    assert out.groupby("patient").size().max() <= K
    manifest = json.loads((Path(report.output_path) / "manifest.json").read_text())
    assert manifest["mechanism"]["per_unit_columns"] == ["sex", "age"]
    assert manifest["output"]["units"] == out["patient"].nunique()
    assert manifest["output"]["rows"] == len(out)
    stages = manifest["privacy"]["accounting"]["stages"]
    assert sum(s["epsilon"] for s in stages) == pytest.approx(2.0)
    assert manifest["privacy"]["privacy_unit"] == "patient"
    first = json.loads((Path(report.output_path) / "summary.json").read_text())

    shutil.rmtree(report.output_path)  # the retry finds the ledger's statistics, not new noise
    again = run_synthesize(parse_config(raw), quiet=True)
    assert json.loads((Path(again.output_path) / "summary.json").read_text()) == first


def test_executors_draw_the_units(tmp_path: Path) -> None:
    """output.sampling: executors: each task draws its share of the units, ids numbered on from
    the tasks before it, so they stay distinct."""
    raw = _config(tmp_path)
    raw["output"] = {
        **raw["output"],
        "units": 900,
        "sampling": "executors",
        "partitions": 3,
        "units_table": True,
        "partition_by": "sex",
    }
    report = run_synthesize(parse_config(raw), quiet=True)
    out = pq.read_table(Path(report.output_path) / "data").to_pandas()
    out["sex"] = out["sex"].astype(str)  # a hive partition reads back as a category
    assert out["patient"].nunique() == 900
    _assert_units_table(Path(report.output_path), out)
    assert (out.groupby("patient")[["sex", "age"]].nunique() == 1).all().all()
    manifest = json.loads((Path(report.output_path) / "manifest.json").read_text())
    assert manifest["output"]["sampled_on"] == "executors"


def _assert_units_table(release: Path, rows) -> None:
    """units/ holds every unit of data/ once, with its rows' per-unit values and row count, and
    the manifest states the relation."""
    units = pq.read_table(release / "units").to_pandas().set_index("patient")
    assert sorted(units.columns) == ["age", "rows", "sex"]
    assert units.index.is_unique and set(units.index) == set(rows["patient"])
    joined = rows.join(units, on="patient", rsuffix="_unit")
    assert (joined["sex"] == joined["sex_unit"]).all()
    assert (joined["age"] == joined["age_unit"]).all()
    counts = rows.groupby("patient").size()
    assert (units["rows"].loc[counts.index] == counts).all()
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["output"]["units_table"]["columns"] == ["patient", "sex", "age", "rows"]
    assert any(name.startswith("units/") for name in manifest["content_sha256"])


def test_a_per_unit_column_without_a_unit_is_refused_before_any_budget(tmp_path: Path) -> None:
    raw = _config(tmp_path)
    raw["privacy"] = {"epsilon": 1.0}
    with pytest.raises(ValueError, match="per_unit"):
        run_synthesize(parse_config(raw), quiet=True)
    assert not (tmp_path / "ledger").exists()
