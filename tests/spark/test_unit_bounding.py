"""Person-level releases on Spark: the pass keeps at most k rows of each privacy unit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.privacy.ledger import LedgerConflictError
from dpsmooth_spark.spark.io import InputError, bound_contributions

pytestmark = pytest.mark.spark
K = 5


def visits(n_units: int = 400, seed: int = 3) -> pa.Table:
    """A visits table: units with 1 to 50 rows each, a cost that grows with the visit number."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 51, n_units)
    unit = np.repeat(np.arange(n_units), sizes)
    visit = np.concatenate([np.arange(s) for s in sizes])
    cost = np.clip(10 + 2 * visit + rng.normal(0, 5, unit.size), 0, 200)
    return pa.table({"patient_id": unit, "visit": visit.astype(np.int64), "cost": cost})


def config(tmp_path: Path, table: pa.Table, **privacy) -> dict:
    source = tmp_path / "visits.parquet"
    pq.write_table(table, source)
    return {
        "input": {"path": str(source)},
        "columns": [
            {"name": "visit", "lower": 0, "upper": 49},
            {"name": "cost", "lower": 0, "upper": 200},
        ],
        "privacy": {"epsilon": 1.0, **privacy},
        "output": {"path": str(tmp_path / "release"), "rows": 500},
        "mechanism": {"candidates": 500},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 1,
        "test_mode": True,
    }


def test_bounding_keeps_at_most_k_rows_of_every_unit(spark):
    table = visits()
    df = spark.createDataFrame(table.to_pandas())
    kept = bound_contributions(df, "patient_id", K, seed=7)
    assert kept.columns == ["visit", "cost"]  # the unit is dropped
    sizes = np.bincount(table["patient_id"].to_numpy())
    counted = (
        bound_contributions(df.selectExpr("*", "patient_id AS unit_copy"), "patient_id", K, 7)
        .groupBy("unit_copy")
        .count()
        .toPandas()
    )
    got = dict(zip(counted["unit_copy"], counted["count"], strict=True))
    assert all(got[u] == min(s, K) for u, s in enumerate(sizes))  # small units keep every row


def test_adding_a_unit_leaves_every_other_units_rows(spark):
    """The rows a unit keeps depend on the seed and its own rows alone (docs/privacy.md 1b): a
    unit of 30 rows put before the others (so every row's position moves) leaves the rows kept
    of every other unit as they were, for three seeds."""
    table = visits(60).append_column("row", pa.array(np.arange(visits(60).num_rows)))
    extra = pa.table(
        {
            "patient_id": np.full(30, 999),
            "visit": np.arange(30),
            "cost": np.linspace(0, 200, 30),
            "row": -1 - np.arange(30),
        }
    )
    grown = pa.concat_tables([extra, table.select(extra.column_names)])

    def kept(t: pa.Table, seed: int) -> set[int]:
        df = spark.createDataFrame(t.to_pandas()).repartition(3)
        rows = bound_contributions(df, "patient_id", K, seed).select("row").toPandas()["row"]
        return {int(r) for r in rows if r >= 0}

    for seed in (1, 2, 3):
        assert kept(grown, seed) == kept(table, seed)


def test_a_unit_level_release_states_its_relation_and_charges_k_times(spark, tmp_path):
    report = run_synthesize(
        parse_config(config(tmp_path, visits(), unit="patient_id", max_rows_per_unit=K)),
        quiet=True,
    )
    privacy = report.manifest["privacy"]
    assert privacy["privacy_unit"] == "patient_id" and privacy["max_rows_per_unit"] == K
    assert "all rows of one patient_id" in privacy["neighbouring_relation"]
    accounting = privacy["accounting"]
    assert accounting["max_rows_per_unit"] == K
    assert accounting["epsilon_spent"] == pytest.approx(1.0)
    count = next(s for s in accounting["stages"] if s["stage"] == "count")
    assert count["sensitivity"] == K
    data = pq.read_table(Path(report.output_path) / "data")
    assert data.column_names == ["visit", "cost"] and data.num_rows == 500
    # the noisy count estimates the bounded rows (at most K per unit), not the raw ones
    summary = json.loads((Path(report.output_path) / "summary.json").read_text())
    bounded = np.minimum(np.bincount(visits()["patient_id"].to_numpy()), K).sum()
    assert abs(summary["noisy_count"] - bounded) < 0.2 * bounded


def test_a_retry_must_keep_the_bound(spark, tmp_path):
    """A release id reused with another max_rows_per_unit is another release: refused."""
    data = config(tmp_path, visits(60), unit="patient_id", max_rows_per_unit=K)
    data["release_id"] = "r1"
    run_synthesize(parse_config(data), quiet=True)
    data["privacy"] = {**data["privacy"], "max_rows_per_unit": K + 1}
    data["output"] = {**data["output"], "path": str(tmp_path / "other")}
    with pytest.raises(LedgerConflictError):
        run_synthesize(parse_config(data), quiet=True)


def test_bad_unit_input_is_refused_before_any_budget(spark, tmp_path):
    missing = config(tmp_path, visits(), unit="person", max_rows_per_unit=K)
    with pytest.raises(InputError, match="person"):
        run_synthesize(parse_config(missing), quiet=True)
    table = visits(50)
    units = table["patient_id"].to_pylist()
    units[3] = None
    nulls = config(
        tmp_path,
        table.set_column(0, "patient_id", pa.array(units)),
        unit="patient_id",
        max_rows_per_unit=K,
    )
    with pytest.raises(InputError, match="nulls"):
        run_synthesize(parse_config(nulls), quiet=True)
    assert not (tmp_path / "release").exists()
