"""Catalog tables: ``input: {table: ...}`` reads through ``spark.table`` and ``output: {table:
...}``
writes with ``saveAsTable`` (the session's catalog: the local spark-warehouse here)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dpsmooth_spark.config import ConfigError, parse_config
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.spark.io import InputError, OutputExistsError
from dpsmooth_spark.spark.locations import OverlapError

pytestmark = pytest.mark.spark


@pytest.fixture
def clinic(spark, tmp_path):
    """``clinic.patients`` (int age, bool smoker, float bmi) in a fresh database."""
    rng = np.random.default_rng(1)
    age = rng.integers(18, 90, 3000).astype(np.int32)
    table = pa.table(
        {
            "age": age,
            "smoker": rng.uniform(size=3000) < 0.3,
            "bmi": np.clip(20 + 0.1 * age + rng.normal(0, 3, 3000), 10, 60),
        }
    )
    spark.sql(f"CREATE DATABASE IF NOT EXISTS clinic LOCATION '{tmp_path / 'clinic.db'}'")
    spark.createDataFrame(table).write.mode("overwrite").saveAsTable("clinic.patients")
    yield table
    spark.sql("DROP DATABASE IF EXISTS clinic CASCADE")


def config(tmp_path, **extra) -> dict:
    return {
        "input": {"table": "clinic.patients"},
        "columns": [
            {"name": "age", "lower": 18, "upper": 90},
            {"name": "smoker"},
            {"name": "bmi", "lower": 10, "upper": 60},
        ],
        "privacy": {"epsilon": 1.0},
        "output": {"table": "clinic.patients_synth"},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 2,
        "test_mode": True,
        **extra,
    }


def test_catalog_table_in_and_out_keeps_the_schema(spark, clinic, tmp_path):
    report = run_synthesize(parse_config(config(tmp_path)), quiet=True)
    out = spark.table("clinic.patients_synth")
    assert out.schema == spark.table("clinic.patients").schema
    rows = out.toArrow()
    assert abs(rows.num_rows - 3000) < 300 and rows["age"].to_numpy().min() >= 18
    assert report.manifest["output"]["path"] == "clinic.patients_synth"
    assert (
        tmp_path
        / "_dpsmooth"
        / "clinic.patients_synth"
        / report.manifest["release_id"]
        / "manifest.json"
    ).exists()
    with pytest.raises(OutputExistsError, match="catalog table exists"):
        run_synthesize(parse_config(config(tmp_path)), quiet=True)
    again = config(tmp_path)
    again["output"]["mode"] = "overwrite"
    run_synthesize(parse_config(again), quiet=True)


def test_catalog_table_refusals(spark, clinic, tmp_path):
    same = config(tmp_path, output={"table": "CLINIC.patients", "mode": "overwrite"})
    with pytest.raises(OverlapError, match="overlaps the input catalog table"):
        run_synthesize(parse_config(same), quiet=True)
    assert spark.table("clinic.patients").count() == 3000
    with pytest.raises(InputError, match="cannot read catalog table 'clinic.nope'"):
        run_synthesize(parse_config(config(tmp_path, input={"table": "clinic.nope"})), quiet=True)
    with pytest.raises(ConfigError, match="ledger.path is required with output.table"):
        parse_config({**config(tmp_path), "ledger": {}})
    with pytest.raises(ConfigError, match="table .* or path, not both"):
        parse_config(config(tmp_path, input={"table": "clinic.patients", "path": "/x"}))
