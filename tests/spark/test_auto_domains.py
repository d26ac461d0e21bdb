"""Auto bounds and auto values through the Spark job: found with DP before the statistics, stated
in the manifest, charged to the release's budget, reused on a retry; bad declarations refused
before any budget."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsmooth_spark.config import ConfigError, parse_config
from dpsmooth_spark.pipeline.evaluate import run_evaluate
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.privacy.ledger import BudgetLedger
from dpsmooth_spark.spark.io import InputError

pytestmark = pytest.mark.spark
ROWS = 20_000


def claims(seed: int = 0) -> pa.Table:
    """Claims: an amount (log-normal, about 20-2,000), an int32 age, a date in 2023, and a
    diagnosis code among 2,000 with Zipf-like frequencies (a few hundred common codes)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 2001)
    codes = rng.choice(2000, ROWS, p=p / p.sum())
    return pa.table(
        {
            "amount": np.exp(rng.normal(5.0, 0.8, ROWS)),
            "age": pa.array(rng.integers(18, 91, ROWS), pa.int32()),
            "day": pa.array(
                [
                    dt.date(2023, 1, 1) + dt.timedelta(days=int(d))
                    for d in rng.integers(0, 365, ROWS)
                ]
            ),
            "code": [f"D{c:04d}" for c in codes],
        }
    )


def config(tmp_path: Path, table: pa.Table, columns: list[dict], **privacy) -> dict:
    source = tmp_path / "claims.parquet"
    pq.write_table(table, source)
    return {
        "input": {"path": str(source)},
        "columns": columns,
        "privacy": {"epsilon": 1.0, "delta": 1e-6, **privacy},
        "output": {"path": str(tmp_path / "release"), "rows": 2000},
        "mechanism": {"candidates": 500},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 3,
        "test_mode": True,
        "release_id": "claims-1",
    }


AUTO = [
    {"name": "amount", "lower": 0.0, "upper": "auto", "range": [0, 10_000_000]},
    {"name": "age", "lower": "auto", "upper": "auto"},  # int32: the type's range
    {"name": "day", "lower": "auto", "upper": "auto", "range": ["2000-01-01", "2030-12-31"]},
    {"name": "code", "values": "auto", "other": "OTHER"},
]


def test_auto_domains_are_found_charged_stated_and_reused(spark, tmp_path):
    table = claims()
    cfg = config(tmp_path, table, AUTO)
    report = run_synthesize(parse_config(cfg), quiet=True)
    privacy = report.manifest["privacy"]
    found = privacy["public_domains"]
    bounds = {b["column"]: b for b in found["bounds"]}
    amount = table["amount"].to_numpy()
    # the upper bound lands inside the data's upper tail, far below the 10^7 range
    assert np.quantile(amount, 0.9) < bounds["amount"]["upper"] < 4 * amount.max()
    assert bounds["amount"]["lower"] == 0.0  # declared, kept
    assert 0 <= bounds["age"]["lower"] <= 18 and 90 <= bounds["age"]["upper"] <= 200
    first, last = dt.date(2023, 1, 1), dt.date(2023, 12, 31)
    epoch = dt.date(1970, 1, 1)
    lo_day = epoch + dt.timedelta(days=bounds["day"]["lower"])
    hi_day = epoch + dt.timedelta(days=bounds["day"]["upper"])
    assert first - dt.timedelta(days=400) <= lo_day <= first + dt.timedelta(days=30)
    assert last - dt.timedelta(days=30) <= hi_day <= last + dt.timedelta(days=400)
    codes = found["values"][0]
    assert codes["values"][-1] == "OTHER" and 10 < len(codes["values"]) <= 256
    values, counts = np.unique(table["code"].to_numpy(zero_copy_only=False), return_counts=True)
    counts = dict(zip(values, counts, strict=True))
    # every code far above the threshold is found (a miss has probability < 1e-9 per code)
    sure = codes["threshold"] + 6 * codes["noise_std"]
    assert {c for c, n in counts.items() if n > sure} <= set(codes["values"])
    # each domain stage is charged; the release spends exactly its budget
    stages = {s["stage"] for s in privacy["accounting"]["stages"]}
    assert {"bounds:amount:linear", "bounds:age:log", "values:code"} <= stages
    assert privacy["accounting"]["epsilon_spent"] == pytest.approx(1.0)
    assert privacy["accounting"]["selection_delta"] == pytest.approx(5e-7)
    data = pq.read_table(Path(report.output_path) / "data")
    assert data.schema.field("age").type == pa.int32()
    assert set(data["code"].to_pylist()) <= set(codes["values"])
    assert data["code"].to_pylist().count("OTHER") > 0  # the tail's mass, as `other`
    # evaluation reads the columns as the release found them (its manifest)
    metrics = run_evaluate(
        parse_config(cfg), report.output_path, str(tmp_path / "report"), queries=100, quiet=True
    )
    assert metrics["rows"]["real_sample"] == ROWS and metrics["rows"]["synthetic"] == 2000
    # a retry reuses the domains (and every statistic): the same release, no new spend
    again = run_synthesize(parse_config({**cfg, "output": {**cfg["output"], "mode": "overwrite"}}))
    assert again.manifest["privacy"]["public_domains"] == found
    assert BudgetLedger(cfg["ledger"]["path"]).spent(report.manifest["ledger"]["table_id"])[0] == (
        pytest.approx(1.0)
    )


def test_bad_auto_declarations_are_refused_before_any_budget(spark, tmp_path):
    table = claims()
    ledger = tmp_path / "ledger.sqlite"
    float_without_range = [{"name": "amount", "lower": "auto", "upper": "auto"}]
    with pytest.raises(InputError, match="needs a public range"):
        run_synthesize(parse_config(config(tmp_path, table, float_without_range)), quiet=True)
    with pytest.raises(ConfigError, match="needs privacy.delta > 0"):
        parse_config(config(tmp_path, table, AUTO[3:], delta=0.0))
    with pytest.raises(ConfigError, match="values: auto and other go together"):
        parse_config(config(tmp_path, table, [{"name": "code", "values": "auto"}]))
    wrong_other = [{"name": "age", "values": "auto", "other": "none"}]
    with pytest.raises(InputError, match="age"):
        run_synthesize(parse_config(config(tmp_path, table, wrong_other)), quiet=True)
    assert not ledger.exists() or BudgetLedger(str(ledger)).spent("parquet:x") == (0.0, 0.0)


def test_wdbc_with_100x_auto_ranges_is_refused_unless_the_range_is_chosen(
    spark, tmp_path, wdbc_config_dict
):
    """WDBC (569 rows) with every feature's bounds auto inside a range 100 times its documented
    width, at epsilon 1: no noisy cell clears the threshold, so the release stops before any
    table is written, naming the columns and the spend (recorded as refused in the ledger); with
    ``unresolved_bounds: range`` it writes the table and says so on the manifest."""
    raw = {k: v for k, v in wdbc_config_dict.items() if k != "evaluation"}
    columns = []
    for c in raw["columns"]:
        if "lower" in c:
            middle, width = (c["lower"] + c["upper"]) / 2, c["upper"] - c["lower"]
            c = {
                "name": c["name"],
                "lower": "auto",
                "upper": "auto",
                "range": [middle - 50 * width, middle + 50 * width],
            }
        columns.append(c)
    raw = {
        **raw,
        "columns": columns,
        "output": {"path": str(tmp_path / "release")},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 2,
        "test_mode": True,
        "release_id": "wide-1",
    }
    config = parse_config(raw)
    with pytest.raises(ValueError, match="no cell of their auto bounds") as err:
        run_synthesize(config, quiet=True)
    assert "mean_area" in str(err.value) and "epsilon 1" in str(err.value)
    assert not (tmp_path / "release").exists()
    entry = BudgetLedger(config.ledger_path).find("wide-1")
    assert entry is not None and entry.refusal is not None and entry.epsilon == 1.0
    raw["privacy"] = {**raw["privacy"], "unresolved_bounds": "range"}
    report = run_synthesize(parse_config({**raw, "release_id": "wide-2"}), quiet=True)
    warnings = report.manifest["privacy"]["warnings"]
    assert any("mean_area" in w and "ends of the public range" in w for w in warnings)
    assert (tmp_path / "release" / "manifest.json").exists()
