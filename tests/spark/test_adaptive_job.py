"""The adaptive mechanism as a Spark job: one pass counts the candidates' cells, the release
states every round's charge, and a retry re-fits the persisted measurements without new noise."""

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
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.mechanisms import records
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.spark.data_pass import exact_sums

pytestmark = pytest.mark.spark


def _table(n: int = 3_000) -> pa.Table:
    rng = np.random.default_rng(0)
    kind = rng.integers(0, 3, n)
    return pa.table(
        {
            "kind": pa.array(np.array(["a", "b", "c"])[kind]),
            "age": pa.array(np.clip(20 + 15 * kind + rng.integers(0, 20, n), 18, 90)),
            "score": pa.array(
                [None if rng.random() < 0.1 else float(v) for v in rng.uniform(0, 10, n)]
            ),
        }
    )


def _config(tmp_path: Path, **extra) -> dict:
    src = tmp_path / "input.parquet"
    if not src.exists():
        pq.write_table(_table(), src)
    return {
        "input": {"path": str(src)},
        "columns": [
            {"name": "kind", "values": ["a", "b", "c"]},
            {"name": "age", "lower": 18, "upper": 90},
            {"name": "score", "lower": 0.0, "upper": 10.0, "nullable": True},
        ],
        "privacy": {"epsilon": 1.0},
        "mechanism": {"method": "adaptive"},
        "output": {"path": str(tmp_path / "release")},
        "ledger": {"path": str(tmp_path / "ledger")},
        "seed": 3,
        "test_mode": True,
        **extra,
    }


def test_the_pass_counts_what_the_kernel_counts(spark, tmp_path: Path) -> None:
    config = parse_config(_config(tmp_path))
    table = pq.read_table(tmp_path / "input.parquet")
    codec = table_codec(config.columns, table.schema)
    df = spark.read.parquet(str(tmp_path / "input.parquet"))
    marginals = records.marginal_spec(records.cell_coding(codec))
    spec = PassSpec(1, null_cells=True, marginals=marginals)
    sums = exact_sums(df.repartition(3), codec, spec)
    bounds = codec.bounds()
    local = partial_sums([codec.encode_with_nulls(table)], bounds.lower, bounds.upper, spec)
    assert sums.marginals is not None and local.marginals is not None
    np.testing.assert_array_equal(sums.marginals, local.marginals)
    assert int(local.marginals[: marginals.sizes[0]].sum()) == table.num_rows


def test_a_release_writes_typed_rows_states_its_rounds_and_a_retry_draws_nothing(
    tmp_path: Path,
) -> None:
    raw = _config(tmp_path, release_id="adaptive-1")
    report = run_synthesize(parse_config(raw), quiet=True)
    out = pq.read_table(Path(report.output_path) / "data")
    assert out.schema.field("kind").type == pa.string()
    assert set(out.column("kind").to_pylist()) <= {"a", "b", "c"}
    manifest = json.loads((Path(report.output_path) / "manifest.json").read_text())
    stages = manifest["privacy"]["accounting"]["stages"]
    assert sum(s["epsilon"] for s in stages) == pytest.approx(1.0)
    # the continuous column's first-round one-way has its bounds apart (kind points); on these
    # few rows the later rounds read it in coarser cells too (kind coarse)
    kinds = {s["stage"].split(".")[1] for s in stages}
    assert {"marginal", "points", "select"} <= kinds <= {"marginal", "points", "coarse", "select"}
    assert manifest["mechanism"]["measured"][0]["scope"] == ["kind"]
    first = json.loads((Path(report.output_path) / "summary.json").read_text())

    shutil.rmtree(report.output_path)  # the retry finds the ledger's statistics, not new noise
    again = run_synthesize(parse_config(raw), quiet=True)
    second = json.loads((Path(again.output_path) / "summary.json").read_text())
    assert first == second


def test_executors_draw_the_rows_from_the_model(tmp_path: Path) -> None:
    """output.sampling: executors ships the model to the tasks: the rows come back typed, as
    many as asked, with the nullable column's nulls at about its rate (0.1 +- 0.04 on 4,000 rows
    is over six standard deviations of the draws plus the release's noise: seeded)."""
    raw = _config(tmp_path)
    raw["output"] = {**raw["output"], "rows": 4_000, "sampling": "executors", "partitions": 3}
    report = run_synthesize(parse_config(raw), quiet=True)
    out = pq.read_table(Path(report.output_path) / "data")
    assert out.num_rows == 4_000
    assert out.schema.field("age").type == pa.int64()
    assert set(out.column("kind").to_pylist()) <= {"a", "b", "c"}
    assert 0.06 < out.column("score").null_count / out.num_rows < 0.14
    manifest = json.loads((Path(report.output_path) / "manifest.json").read_text())
    assert manifest["output"]["sampled_on"] == "executors"
