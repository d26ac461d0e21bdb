"""The release job on local Spark: exact data pass, end-to-end output, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.core.tables import table_pairs
from dpsmooth_spark.pipeline.synthesize import InvalidDataError, run_synthesize
from dpsmooth_spark.spark import data_pass
from dpsmooth_spark.spark.data_pass import exact_sums
from dpsmooth_spark.spark.io import InputError, OutputExistsError, read_table

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def small_config(tmp_path: Path, table: pa.Table | None, fmt: str = "parquet", **extra) -> dict:
    src = tmp_path / f"input.{fmt}"
    if table is not None and fmt == "parquet":
        pq.write_table(table, src)
    return {
        "input": {"path": str(src), "format": fmt},
        "columns": [
            {"name": "a", "lower": 0.0, "upper": 1.0},
            {"name": "b", "lower": -1.0, "upper": 1.0},
        ],
        "privacy": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "mechanism": {"candidates": 200},
        "seed": 1,
        "test_mode": True,
        **extra,
    }


def assert_nothing_written(tmp_path: Path) -> None:
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith((".release", "release"))]
    assert leftovers == []


def test_data_pass_is_exact_and_independent_of_partitioning(spark, wdbc_table, wdbc_bounds):
    columns = list(wdbc_bounds)
    lower = np.array([b[0] for b in wdbc_bounds.values()])
    upper = np.array([b[1] for b in wdbc_bounds.values()])
    local = np.column_stack([wdbc_table[c].to_numpy().astype(float) for c in columns])
    label = np.array([c == "malignant" for c in columns])
    tables = table_pairs(np.where(label, 2, 0), label)  # every column against the 0/1 label
    spec = PassSpec(2, histogram_cells=16, tables=tables)
    expected = partial_sums([local], lower, upper, spec)
    assert tables is not None and expected.tables is not None
    assert expected.tables.sum() == 569 * (len(columns) - 1)
    # the histograms against numpy's own count of the clamped, scaled values (top edge closed)
    scaled = np.clip(2 * (local - lower) / (upper - lower) - 1, -1, 1)
    numpy_counts = np.array(
        [np.histogram(scaled[:, i], bins=16, range=(-1, 1))[0] for i in range(len(columns))]
    )
    np.testing.assert_array_equal(expected.histograms, numpy_counts)
    df = read_table(spark, str(ROOT / "data" / "wdbc.parquet"), "parquet", columns)
    for parts in (1, 3, 8):
        got = exact_sums(df.repartition(parts), PublicBounds.from_mapping(wdbc_bounds), spec)
        assert (got.gram == expected.gram).all()
        np.testing.assert_array_equal(got.histograms, expected.histograms)
        np.testing.assert_array_equal(got.tables, expected.tables)
        assert got.rows_seen == 569 and got.rows_invalid == 0


def test_a_result_of_several_chunks_is_merged_exactly(spark, wdbc_table, wdbc_bounds):
    """Degree 9 on 31 columns: a Gram of 280 x 280 integers, two limbs each, is more than one
    chunk, so the chunks are merged a second time per chunk on the executors; the norm bands of
    the pair products (the clipped pairs' sums) travel with it."""
    columns = list(wdbc_bounds)
    bounds = PublicBounds.from_mapping(wdbc_bounds)
    local = np.column_stack([wdbc_table[c].to_numpy().astype(float) for c in columns])
    spec = PassSpec(9, histogram_cells=16, clip_levels=(4.0, 8.0, 16.0))
    assert 2 * (1 + len(columns) * 9) ** 2 > data_pass.CHUNK_VALUES
    expected = partial_sums([local], bounds.lower, bounds.upper, spec)
    df = read_table(spark, str(ROOT / "data" / "wdbc.parquet"), "parquet", columns)
    for parts in (1, 3):
        got = exact_sums(df.repartition(parts), bounds, spec)
        assert (got.gram == expected.gram).all()
        np.testing.assert_array_equal(got.histograms, expected.histograms)
        np.testing.assert_array_equal(got.atoms, expected.atoms)
        np.testing.assert_array_equal(got.clipped, expected.clipped)
        assert (got.rows_seen, got.count) == (569, 569)


def test_release_on_wdbc_end_to_end(tmp_path, wdbc_config_dict):
    data = dict(
        wdbc_config_dict, output={"path": str(tmp_path / "release")}, seed=11, test_mode=True
    )
    report = run_synthesize(parse_config(data), quiet=True)
    out = Path(report.output_path)
    assert sorted(p.name for p in out.iterdir()) == ["data", "manifest.json", "summary.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    table = pq.read_table(out / "data")
    assert table.num_rows == manifest["output"]["rows"]
    source = pq.read_schema(data["input"]["path"])
    assert (
        table.schema.names == source.names and table.schema.types == source.types
    )  # malignant: int32
    for col in data["columns"]:
        values = table[col["name"]].to_numpy()
        if "values" in col:
            assert set(values.tolist()) <= set(col["values"])
        else:
            assert values.min() >= col["lower"] and values.max() <= col["upper"]
    privacy = manifest["privacy"]
    assert privacy["neighbouring_relation"].startswith("add/remove one record")
    assert privacy["accounting"]["epsilon_spent"] == pytest.approx(1.0)
    assert privacy["test_mode"] is True and "TEST MODE" in privacy["noise_sampler"]
    assert manifest["output"]["distinct_rows"] > 100
    assert manifest["output"]["candidates_picked_by"] == "kernel herding"  # 569 rows
    assert set(manifest["content_sha256"]) == {"data/part-00000.parquet", "summary.json"}
    summary = json.loads((out / "summary.json").read_text())
    # every released statistic names the accountant stage that charged it
    charged = {stage["stage"] for stage in privacy["accounting"]["stages"]}
    assert "histograms" in {s["kind"] for s in summary["statistics"]}
    assert {s["stage"] for s in summary["statistics"]} <= charged
    # nothing raw: the exact count is not in the manifest or the summary
    assert '"569"' not in (out / "manifest.json").read_text()
    assert summary["noisy_count"] != 569


def test_cli_reports_bad_config_with_exit_code_2(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("input: {path: x}\ncolumns: []\nprivacy: {epsilon: -1}\noutput: {path: y}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "dpsmooth_spark", "synthesize", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "privacy.epsilon" in proc.stderr and "columns" in proc.stderr


@pytest.mark.parametrize(
    ("table", "error", "message"),
    [
        (pa.table({"a": [0.5, 0.2]}), InputError, "columns not found in input: ['b']"),
        (
            pa.table({"a": [0.5, 0.2], "b": ["x", "y"]}),
            InputError,
            "column 'b': the config declares a numeric column, but the table's type is string",
        ),
        (pa.table({"a": [0.5, None], "b": [0.1, 0.2]}), InvalidDataError, "some rows have a null"),
        (
            pa.table({"a": [0.5, float("nan")], "b": [0.1, 0.2]}),
            InvalidDataError,
            "some rows have a null",
        ),
        (
            pa.table({"a": [5.0, 7.0], "b": [0.1, 0.2]}),
            InvalidDataError,
            "outside the public bounds",
        ),
        (
            pa.table({"a": pa.array([], pa.float64()), "b": pa.array([], pa.float64())}),
            InvalidDataError,
            "no rows",
        ),
    ],
    ids=["missing-column", "string-column", "null", "nan", "all-out-of-bounds", "empty"],
)
def test_bad_input_gives_clear_error_and_no_output(spark, tmp_path, table, error, message):
    with pytest.raises(error) as err:
        run_synthesize(parse_config(small_config(tmp_path, table)), quiet=True)
    assert message in str(err.value)
    assert_nothing_written(tmp_path)


def test_invalid_rows_can_be_dropped(spark, tmp_path):
    table = pa.table({"a": [0.5, None, 0.1, 0.9] * 50, "b": [0.1, 0.2, float("nan"), -0.5] * 50})
    config = small_config(tmp_path, table)
    config["input"]["on_invalid"] = "drop"
    report = run_synthesize(parse_config(config), quiet=True)
    assert report.manifest["privacy"]["invalid_rows"] == "drop"


def test_missing_input_and_existing_output(spark, tmp_path):
    config = small_config(tmp_path, None)
    with pytest.raises(InputError, match="does not exist"):
        run_synthesize(parse_config(config), quiet=True)
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "keep.txt").write_text("previous")
    config = small_config(tmp_path, pa.table({"a": [0.5] * 20, "b": [0.0] * 20}))
    with pytest.raises(OutputExistsError):
        run_synthesize(parse_config(config), quiet=True)
    assert (tmp_path / "release" / "keep.txt").read_text() == "previous"
    config["output"]["mode"] = "overwrite"
    run_synthesize(parse_config(config), quiet=True)
    assert not (tmp_path / "release" / "keep.txt").exists()
    assert (tmp_path / "release" / "manifest.json").exists()


def test_csv_input_with_text_in_a_numeric_column(spark, tmp_path):
    (tmp_path / "input.csv").write_text("a,b,other\n0.5,0.1,x\n0.2,oops,y\n0.3,0.3,z\n")
    config = small_config(tmp_path, None, fmt="csv")
    with pytest.raises(InvalidDataError, match="some rows"):
        run_synthesize(parse_config(config), quiet=True)
    config["input"]["on_invalid"] = "drop"
    report = run_synthesize(parse_config(config), quiet=True)
    assert report.manifest["input"]["format"] == "csv"


def test_mixed_numeric_types_one_row_and_infinities(spark, tmp_path):
    from decimal import Decimal

    table = pa.table(
        {"a": pa.array([Decimal("0.25")], pa.decimal128(10, 4)), "b": pa.array([1], pa.int32())}
    )
    report = run_synthesize(parse_config(small_config(tmp_path, table)), quiet=True)  # one row
    assert report.manifest["output"]["rows"] >= 1
    other = tmp_path / "inf"
    other.mkdir()
    inf_table = pa.table({"a": [0.5, float("inf")], "b": [float("-inf"), 0.1]})
    with pytest.raises(InvalidDataError, match="some rows"):
        run_synthesize(parse_config(small_config(other, inf_table)), quiet=True)


def test_unreadable_input_is_a_clear_error(spark, tmp_path):
    (tmp_path / "input.parquet").write_bytes(b"this is not parquet")
    with pytest.raises(InputError, match="cannot read"):
        run_synthesize(parse_config(small_config(tmp_path, None)), quiet=True)
    assert_nothing_written(tmp_path)


def test_sampling_on_executors_is_seeded_and_bounded(spark, tmp_path):
    rng = np.random.default_rng(4)
    table = pa.table({"a": rng.uniform(0, 1, 400), "b": rng.uniform(-1, 1, 400)})
    outputs = []
    for name in ("one", "two"):
        folder = tmp_path / name
        folder.mkdir()
        config = small_config(folder, table)
        config["output"].update(rows=5000, sampling="executors", partitions=3)
        report = run_synthesize(parse_config(config), quiet=True)
        assert report.manifest["output"]["sampled_on"] == "executors"
        assert report.manifest["output"]["candidates_picked_by"] == "systematic resampling"
        data = pq.read_table(folder / "release" / "data")
        assert data.num_rows == 5000
        assert len(list((folder / "release" / "data").glob("part-*.parquet"))) == 3
        assert data["a"].to_numpy().min() >= 0 and data["a"].to_numpy().max() <= 1
        outputs.append(np.sort(data["a"].to_numpy()))
    np.testing.assert_array_equal(outputs[0], outputs[1])  # same seed, same release


def test_sampling_on_executors_gives_each_level_its_share(spark, tmp_path):
    """Each partition picks its rows by systematic resampling through the candidates sorted on
    their lattice columns (:func:`core.sampling.stratifying_order`), so a level gets its share
    of each partition's rows to within one row per sort key: over 3 partitions the 0/1 column
    (first key) within 3 rows of its share, the 4-level column within 6. In the candidates' own
    order a cell's count varies by about ``sqrt(rows p (1 - p))``, 27 rows here."""
    from dpsmooth_spark.config import ColumnConfig
    from dpsmooth_spark.core.chebyshev import lattice_level
    from dpsmooth_spark.spark.io import sample_on_executors, table_codec

    rng = np.random.default_rng(11)
    count, rows = 20_000, 3_000
    candidates = np.column_stack(
        [
            rng.integers(0, 4, count) * 2.0 / 3.0 - 1.0,
            rng.uniform(-1.0, 1.0, count),
            rng.integers(0, 2, count) * 2.0 - 1.0,
        ]
    )
    weights = rng.uniform(size=count) ** 2
    weights /= weights.sum()
    columns = [
        ColumnConfig.model_validate(c)
        for c in (
            {"name": "k", "lower": 0, "upper": 3},
            {"name": "x", "lower": -1.0, "upper": 1.0},
            {"name": "f", "values": [0, 1]},
        )
    ]
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("f", pa.int64())])
    write = sample_on_executors(
        spark, candidates, weights, np.zeros(3), table_codec(columns, schema), rows, 5, 3
    )
    write(tmp_path / "out")
    data = pq.read_table(tmp_path / "out")
    assert data.num_rows == rows
    for name, column, levels, slack in (("f", 2, 2, 3.0), ("k", 0, 4, 6.0)):
        share = rows * np.bincount(lattice_level(candidates[:, column], levels), weights=weights)
        found = np.bincount(data[name].to_numpy(), minlength=levels)
        assert np.all(np.abs(found - share) <= slack), (name, found - share)


def test_arrow_reader_pass_equals_the_spark_pass(spark, tmp_path, wdbc_bounds):
    from decimal import Decimal

    from dpsmooth_spark.spark.data_pass import arrow_readable, exact_sums_arrow

    bounds = PublicBounds.from_mapping(wdbc_bounds)
    path = str(ROOT / "data" / "wdbc.parquet")
    df = read_table(spark, path, "parquet", list(bounds.columns))
    assert arrow_readable(path, list(bounds.columns))
    assert (exact_sums_arrow(spark, path, bounds, 2).gram == exact_sums(df, bounds, 2).gram).all()
    # a folder of several files and row groups, with nulls, NaN, ints and decimals
    folder = tmp_path / "table"
    folder.mkdir()
    rng = np.random.default_rng(8)
    for i in range(3):
        a = rng.uniform(-1, 2, 1000).tolist()
        a[5] = None
        b = rng.uniform(0, 1, 1000)
        b[7] = np.nan
        pq.write_table(
            pa.table(
                {
                    "a": a,
                    "b": b,
                    "k": pa.array(rng.integers(0, 5, 1000), pa.int32()),
                    "m": pa.array([Decimal("0.5")] * 1000, pa.decimal128(6, 2)),
                }
            ),
            folder / f"part-{i}.parquet",
            row_group_size=300,
        )
    small = PublicBounds.from_mapping(
        {"a": (0.0, 1.0), "b": (0.0, 1.0), "k": (0.0, 4.0), "m": (0.0, 1.0)}
    )
    spec = PassSpec(2, histogram_cells=8)
    via_spark = exact_sums(
        read_table(spark, str(folder), "parquet", list(small.columns)), small, spec
    )
    via_arrow = exact_sums_arrow(spark, str(folder), small, spec)
    assert (via_arrow.gram == via_spark.gram).all()
    np.testing.assert_array_equal(via_arrow.histograms, via_spark.histograms)
    assert via_spark.histograms.sum(axis=1).tolist() == [3000 - 6] * 4
    assert (
        (via_arrow.rows_seen, via_arrow.rows_invalid, via_arrow.rows_clamped)
        == (via_spark.rows_seen, via_spark.rows_invalid, via_spark.rows_clamped)
        == (3000, 6, via_spark.rows_clamped)
    )
    assert not arrow_readable(str(folder), ["a", "missing"])


def test_a_wide_release_measures_quadrant_pairs_in_a_second_pass(spark, tmp_path):
    """50 columns in five blocks of ten (one factor each) at epsilon 10, pure: the job's second
    Spark pass sums the signs about the private medians (the same sums as in memory), each
    column picks its partner, the manifest states the quadrant stages, and the release keeps
    the blocks (in-block correlation above 0.3 on average, real 0.6; across blocks below 0.05)."""
    from dpsmooth_spark.core.quadrants import sign_gram

    rng = np.random.default_rng(9)
    rows, d = 3000, 50
    factors = rng.normal(size=(rows, d // 10)).repeat(10, axis=1)
    data = np.clip(0.8 * factors + 0.6 * rng.normal(size=(rows, d)), -3, 3)
    names = [f"x{i}" for i in range(d)]
    pq.write_table(pa.table({c: data[:, i] for i, c in enumerate(names)}), tmp_path / "w.parquet")
    config = small_config(tmp_path, None, privacy={"epsilon": 10.0})
    config["input"]["path"] = str(tmp_path / "w.parquet")
    config["columns"] = [{"name": c, "lower": -3.0, "upper": 3.0} for c in names]
    config["mechanism"] = {}
    config["output"]["rows"] = 25_000  # past the herding limit: reordered to the pairs' copula
    report = run_synthesize(parse_config(config), quiet=True)
    manifest = json.loads((Path(report.output_path) / "manifest.json").read_text())
    stages = {s["stage"] for s in manifest["privacy"]["accounting"]["stages"]}
    assert {"quadrant_selection", "quadrant_pairs"} <= stages
    stated = manifest["mechanism"]["fit"]["quadrant_pairs"]
    assert stated["measured"] >= d // 2 and stated["related"] >= d // 2
    summary = json.loads((Path(report.output_path) / "summary.json").read_text())
    (quadrants,) = [s for s in summary["statistics"] if s["kind"] == "quadrant_pairs"]
    t = np.array(quadrants["query"]["thresholds"])
    pairs = np.array(quadrants["query"]["pairs"])
    exact = sign_gram(data / 3.0, t).reshape(d, d)[pairs[:, 0], pairs[:, 1]]
    assert np.abs(np.array(quadrants["values"]) - exact).max() < 0.2 * rows  # noise, not error
    out = pq.read_table(Path(report.output_path) / "data").to_pandas()[names].to_numpy()
    corr = np.corrcoef(out, rowvar=False)
    block = np.arange(d)[:, None] // 10 == np.arange(d)[None, :] // 10
    off_diagonal = ~np.eye(d, dtype=bool)
    assert corr[block & off_diagonal].mean() > 0.3
    assert np.abs(corr[~block]).mean() < 0.05
