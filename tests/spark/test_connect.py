"""Spark Connect: a real server started by the tests (``connect_server``), the same code path as
classic Spark (DataFrame APIs only), and the same release under the same test seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dpsmooth_spark.config import parse_config, resolve_paths
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.core.tables import table_pairs
from dpsmooth_spark.pipeline.evaluate import run_evaluate
from dpsmooth_spark.pipeline.summarize import run_summarize
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.spark import io
from dpsmooth_spark.spark.data_pass import exact_sums, exact_sums_arrow, unit_sums
from dpsmooth_spark.spark.session import default_parallelism, get_session, is_connect

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def remote(connect_server):
    session = get_session(remote=connect_server)
    assert is_connect(session)
    return session


def release_config(tmp_path: Path, wdbc_config_dict: dict, name: str, **extra) -> dict:
    """A seeded release of five WDBC features and the label: what these tests compare is the
    path through Connect (reader, pass, sampling, writer), not the driver's fit, which runs the
    same code in both sessions (on all 31 columns about 20 s a release)."""
    return dict(
        wdbc_config_dict,
        columns=wdbc_config_dict["columns"][:5] + wdbc_config_dict["columns"][-1:],
        output={"path": str(tmp_path / name), **extra.pop("output", {})},
        ledger={"path": str(tmp_path / f"{name}.ledger.sqlite")},
        seed=11,
        test_mode=True,
        **extra,
    )


def test_data_pass_through_connect_is_exact(spark, remote, wdbc_table, wdbc_bounds):
    """Both readers (DataFrame + mapInArrow, and pyarrow in the tasks) through Connect give the
    exact integer sums of a plain numpy pass."""
    bounds = PublicBounds.from_mapping(wdbc_bounds)
    label = np.array([c == "malignant" for c in bounds.columns])
    tables = table_pairs(np.where(label, 2, 0), label)  # every column against the 0/1 label
    spec = PassSpec(2, histogram_cells=64, tables=tables)
    x = np.column_stack([wdbc_table[c].to_numpy().astype(float) for c in bounds.columns])
    expected = partial_sums([x], bounds.lower, bounds.upper, spec)
    path = str(ROOT / "data" / "wdbc.parquet")
    df = io.read_table(remote, path, "parquet", list(bounds.columns)).repartition(5)
    for sums in (exact_sums(df, bounds, spec), exact_sums_arrow(remote, path, bounds, spec)):
        assert (sums.gram == expected.gram).all()
        assert (sums.histograms == expected.histograms).all()
        np.testing.assert_array_equal(sums.tables, expected.tables)
        assert (sums.rows_seen, sums.count) == (569, 569)
    wide = PassSpec(9)  # a Gram of several chunks: merged per chunk on the executors too
    assert (
        exact_sums(df, bounds, wide).gram
        == partial_sums([x], bounds.lower, bounds.upper, wide).gram
    ).all()
    assert default_parallelism(remote) == 2  # the server's local[2], counted through Connect


def test_release_through_connect_writes_the_classic_table(
    spark, connect_server, tmp_path, wdbc_config_dict
):
    """The CLI as a user runs it (``SPARK_REMOTE`` set, the config's master ignored), against
    the classic in-process run with the same seed: the same table, row for row."""
    variants = (
        {},
        {  # the Spark reader and the executors' sampling
            "input": {**wdbc_config_dict["input"], "reader": "spark"},
            "output": {"sampling": "executors", "partitions": 3},
        },
    )
    for i, variant in enumerate(variants):
        classic = release_config(
            tmp_path, wdbc_config_dict, f"classic{i}", **json.loads(json.dumps(variant))
        )
        run_synthesize(parse_config(classic), quiet=True)
        connect = release_config(
            tmp_path, wdbc_config_dict, f"connect{i}", **json.loads(json.dumps(variant))
        )
        config = tmp_path / f"connect{i}.yaml"
        config.write_text(yaml.safe_dump(connect))
        env = dict(os.environ, SPARK_REMOTE=connect_server)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "dpsmooth_spark",
                "synthesize",
                "--config",
                str(config),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        ours, theirs = (
            pq.read_table(tmp_path / f"{name}{i}" / "data") for name in ("connect", "classic")
        )
        assert ours.num_rows > 500 and ours.sort_by("mean_radius").equals(
            theirs.sort_by("mean_radius")
        )


def test_summary_and_evaluate_through_connect(spark, connect_server, tmp_path, wdbc_config_dict):
    """``spark.remote`` in the config selects Connect for the summary and for ``evaluate``."""
    example = ROOT / "conf" / "examples" / "wdbc_summary.yaml"
    summary_cfg = resolve_paths(yaml.safe_load(example.read_text()), example.parent)
    summary_cfg.update(
        output={"path": str(tmp_path / "summary")},
        ledger={"path": str(tmp_path / "s.sqlite")},
        seed=5,
        test_mode=True,
    )
    classic = run_summarize(parse_config(summary_cfg), quiet=True)
    summary_cfg.update(
        output={"path": str(tmp_path / "summary_connect")}, spark={"remote": connect_server}
    )
    remote = run_summarize(parse_config(summary_cfg), quiet=True)
    assert remote.manifest["privacy"] == classic.manifest["privacy"]
    values = [
        json.loads((Path(r.output_path) / "summary.json").read_text()) for r in (classic, remote)
    ]
    assert values[0] == values[1]

    release = release_config(
        tmp_path, wdbc_config_dict, "release", spark={"remote": connect_server}
    )
    config = parse_config(release)
    run_synthesize(config, quiet=True)
    metrics = run_evaluate(
        config,
        str(tmp_path / "release"),
        str(tmp_path / "report"),
        label="malignant",
        queries=300,
        quiet=True,
    )
    assert metrics["rows"]["real_sample"] == 569
    assert (tmp_path / "report" / "report.html").exists()


def test_contribution_bounding_through_connect(remote, tmp_path):
    """The privacy unit's bound (a window over the unit, SQL expressions only) runs through
    Connect: the pass counts min(rows, 5) rows of each unit."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 20, 200)
    unit = np.repeat(np.arange(sizes.size), sizes)
    path = tmp_path / "visits.parquet"
    pq.write_table(pa.table({"patient_id": unit, "x": rng.uniform(0, 1, unit.size)}), path)
    bounds = PublicBounds.from_mapping({"x": (0.0, 1.0)})
    df = io.read_table(remote, str(path), "parquet", ["x"], extra=("patient_id",))
    sums = exact_sums(io.bound_contributions(df, "patient_id", 5, seed=3), bounds, PassSpec(1))
    assert sums.count == int(np.minimum(sizes, 5).sum()) and sums.rows_seen == sums.count


def test_adaptive_release_through_connect_writes_the_classic_table(
    spark, connect_server, tmp_path, wdbc_config_dict
):
    """``mechanism.method: adaptive`` through Connect (the Spark reader, the candidates' counts
    in the pass, the rows drawn by the executors from the model) writes what the classic run with
    the same seed writes."""
    variant = {
        "input": {**wdbc_config_dict["input"], "reader": "spark"},
        "output": {"sampling": "executors", "partitions": 3},
        "mechanism": {"method": "adaptive"},
    }
    classic = release_config(
        tmp_path, wdbc_config_dict, "classic", **json.loads(json.dumps(variant))
    )
    run_synthesize(parse_config(classic), quiet=True)
    connect = release_config(
        tmp_path, wdbc_config_dict, "connect", **json.loads(json.dumps(variant))
    )
    config = tmp_path / "connect.yaml"
    config.write_text(yaml.safe_dump(connect))
    proc = subprocess.run(
        [sys.executable, "-m", "dpsmooth_spark", "synthesize", "--config", str(config), "--quiet"],
        capture_output=True,
        text=True,
        env=dict(os.environ, SPARK_REMOTE=connect_server),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours, theirs = (pq.read_table(tmp_path / name / "data") for name in ("connect", "classic"))
    assert ours.num_rows > 500
    assert ours.sort_by("mean_radius").equals(theirs.sort_by("mean_radius"))


def test_person_tables_through_connect(spark, remote, tmp_path):
    """A release of persons' pass (the bound's window keeping the unit and its rank, each task
    holding whole units) through Connect counts what the classic session counts."""
    from dpsmooth_spark.config import ColumnConfig
    from dpsmooth_spark.core.cell_marginals import CellCoding
    from dpsmooth_spark.core.columns import table_codec
    from dpsmooth_spark.mechanisms import adaptive, persons

    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 12, 300)
    unit = np.repeat(np.arange(sizes.size), sizes)
    path = tmp_path / "visits.parquet"
    table = pa.table(
        {
            "patient_id": unit,
            "age": rng.integers(20, 90, sizes.size)[unit],
            "ward": rng.choice(["A", "B", "C"], unit.size),
        }
    )
    pq.write_table(table, path)
    columns = [
        ColumnConfig(name="age", lower=20, upper=90, per_unit=True),
        ColumnConfig(name="ward", values=["A", "B", "C"]),
    ]
    codec = table_codec(columns, table.schema)
    coding = CellCoding(tuple(codec.lattice()), (False, False), tuple(codec.nominal()))
    spec = persons.unit_tables(coding, (True, False), 5, adaptive.LoopSettings())
    counted = []
    for session in (spark, remote):
        df = io.read_table(session, str(path), "parquet", codec, extra=("patient_id",))
        kept = io.bound_contributions(df, "patient_id", 5, seed=3, keep_unit=True)
        counted.append(unit_sums(kept, codec, spec, "patient_id", io.UNIT_RANK))
    np.testing.assert_array_equal(counted[0].values, counted[1].values)
    assert counted[1].rows_seen == int(np.minimum(sizes, 5).sum())

    # the units table Spark derives from rows the executors wrote (output.units_table) is the
    # driver's group-by, through Connect as well
    rows = table.set_column(0, "patient_id", pa.array([f"u-{u}" for u in unit]))
    (tmp_path / "rows").mkdir()
    pq.write_table(rows, tmp_path / "rows" / "part-0.parquet")
    io.units_on_executors(remote, rows.schema, "patient_id", ["age"], "rows")(
        tmp_path / "rows", tmp_path / "units"
    )
    found = pq.read_table(tmp_path / "units").to_pandas().sort_values("patient_id")
    expected = persons.unit_table(rows, "patient_id", ["age"], "rows").to_pandas()
    expected = expected.sort_values("patient_id")
    assert found.to_dict("list") == expected.to_dict("list")
