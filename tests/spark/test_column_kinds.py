"""Lake tables as they are: integer, boolean, categorical, date and float columns are released
with the input's schema, inside their domains, with their marginals and relations.

The release is seeded (test mode), so the statistical checks are deterministic; their tolerances
are issue 14's (measured at seeds 3, 4 and 5: region marginal within total variation 0.03;
smoking rate per region within 0.04; bmi's null share
0.146-0.150 for 0.15; corr(age, bmi) = 0.68
within 0.15: 0.57 / 0.64 / 0.58). The fit used to shrink that strong relation towards
independence (0.51 / 0.64 / 0.50 at seeds 3 / 4 / 5 with each group's chi-square target alone,
which let the group's whole slack sit on its strongest answer; 0.43-0.47 before fine histograms
were projected onto the simplex, 0.38-0.39 before the basis left out the terms that repeat lower
ones on the boolean and categorical lattices); the per-answer bound of the fit
(docs/mechanisms.md, "fit") brought it within the target.
The per-region smoking rates failed (0.49 for 0.69) while the fit's first step let a 64-cell
histogram of a 0/1 column drown the pair terms (docs/mechanisms.md, "fit").
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpsmooth_spark.config import parse_config
from dpsmooth_spark.pipeline.synthesize import run_synthesize
from dpsmooth_spark.spark.io import InputError

pytestmark = pytest.mark.spark
REGIONS = ["north", "south", "east", "west"]
COLUMNS = [
    {"name": "age", "lower": 18, "upper": 95},
    {"name": "smoker"},
    {"name": "region", "values": REGIONS},
    {"name": "admitted", "lower": dt.date(2020, 1, 1), "upper": dt.date(2024, 12, 31)},
    {"name": "bmi", "lower": 10, "upper": 60, "nullable": True},
    {"name": "label", "values": [0, 1]},
]


def patients(n: int, seed: int) -> pa.Table:
    """Age drives bmi (corr about 0.6); smoking depends on the region; the label on both."""
    rng = np.random.default_rng(seed)
    region = rng.choice(4, n, p=[0.4, 0.3, 0.2, 0.1])
    smoker = rng.uniform(size=n) < np.array([0.1, 0.3, 0.5, 0.7])[region]
    age = np.clip(rng.normal(50, 15, n), 18, 95).round()
    bmi = np.clip(25 + 0.25 * (age - 50) + rng.normal(0, 4, n), 10, 60)
    admitted = np.datetime64("2020-01-01") + rng.integers(0, 1826, n).astype("timedelta64[D]")
    label = (rng.uniform(size=n) < 0.2 + 0.4 * smoker).astype(np.int32)
    return pa.table(
        {
            "id": pa.array(np.arange(n), pa.int64()),  # not configured: not released
            "age": pa.array(age.astype(np.int16), pa.int16()),
            "smoker": pa.array(smoker, pa.bool_()),
            "region": pa.array([REGIONS[i] for i in region], pa.string()),
            "admitted": pa.array(admitted.astype("datetime64[D]"), pa.date32()),
            "bmi": pa.array(bmi.astype(np.float32), pa.float32(), mask=rng.uniform(size=n) < 0.15),
            "label": pa.array(label, pa.int32()),
        }
    )


def config(tmp_path: Path, source: Path, **extra) -> dict:
    return {
        "input": {"path": str(source)},
        "columns": COLUMNS,
        "privacy": {"epsilon": 1.0},
        "output": {"path": str(tmp_path / "release")},
        "ledger": {"path": str(tmp_path / "ledger.sqlite")},
        "seed": 3,
        "test_mode": True,
        **extra,
    }


@pytest.fixture(scope="module")
def released(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kinds")
    real = patients(20_000, 0)
    pq.write_table(real, tmp / "patients.parquet")
    report = run_synthesize(parse_config(config(tmp, tmp / "patients.parquet")), quiet=True)
    return real, pq.read_table(Path(report.output_path) / "data")


def test_output_schema_is_the_input_schema(released):
    real, synthetic = released
    expected = real.schema.remove(real.schema.get_field_index("id"))
    assert synthetic.schema.names == expected.names
    assert synthetic.schema.types == expected.types


def test_values_stay_in_their_domains_and_lattices(released):
    _, synthetic = released
    age = synthetic["age"].to_numpy()
    assert age.min() >= 18 and age.max() <= 95
    assert set(synthetic["region"].to_pylist()) <= set(REGIONS)
    assert set(synthetic["label"].to_pylist()) <= {0, 1}
    days = synthetic["admitted"].to_pylist()
    assert min(days) >= dt.date(2020, 1, 1) and max(days) <= dt.date(2024, 12, 31)
    bmi = synthetic["bmi"].drop_null().to_numpy()
    assert bmi.min() >= 10 and bmi.max() <= 60


def test_null_shares_are_released_and_reproduced(released):
    """bmi (declared nullable) has 15% nulls; the other columns none, and get none."""
    real, synthetic = released
    assert (
        abs(
            synthetic["bmi"].null_count / synthetic.num_rows
            - real["bmi"].null_count / real.num_rows
        )
        <= 0.03
    )
    assert all(synthetic[c].null_count == 0 for c in synthetic.column_names if c != "bmi")
    assert (
        abs(synthetic.num_rows - real.num_rows) <= 0.03 * real.num_rows
    )  # nulls do not shrink the table


def test_a_null_in_a_column_not_declared_nullable_is_an_invalid_row(spark, tmp_path):
    pq.write_table(pa.table({"x": [0.5, None, 0.2]}), tmp_path / "t.parquet")
    data = config(tmp_path, tmp_path / "t.parquet")
    data["columns"] = [{"name": "x", "lower": 0, "upper": 1}]
    with pytest.raises(ValueError, match="declared nullable: true"):
        run_synthesize(parse_config(data), quiet=True)


def test_marginals_and_relations_survive(released):
    real, synthetic = released

    def shares(table: pa.Table) -> np.ndarray:
        values = table["region"].to_pylist()
        return np.array([values.count(r) for r in REGIONS]) / len(values)

    assert 0.5 * np.abs(shares(real) - shares(synthetic)).sum() <= 0.05  # total variation
    for region in REGIONS:
        rates = []
        for table in (real, synthetic):
            mask = np.array(table["region"].to_pylist()) == region
            rates.append(table["smoker"].to_numpy(zero_copy_only=False)[mask].mean())
        assert abs(rates[0] - rates[1]) <= 0.1, (region, rates)

    def corr(table: pa.Table) -> float:
        bmi = table["bmi"].to_numpy(zero_copy_only=False).astype(float)
        seen = np.isfinite(bmi)
        return float(np.corrcoef(table["age"].to_numpy().astype(float)[seen], bmi[seen])[0, 1])

    # issue 14: within 0.15 of the real one, and never invented beyond it
    assert corr(real) - 0.15 <= corr(synthetic) <= corr(real) + 0.05, (corr(real), corr(synthetic))


@pytest.mark.parametrize(
    ("column", "table_type", "message"),
    [
        ({"name": "region", "values": REGIONS}, pa.int32(), "do not have the table's type"),
        ({"name": "admitted", "lower": 0, "upper": 10}, pa.date32(), "declares numeric bounds"),
        ({"name": "smoker", "lower": 0, "upper": 1}, pa.bool_(), "declares bounds"),
        ({"name": "bmi"}, pa.float32(), "needs bounds"),
        ({"name": "nope", "lower": 0, "upper": 1}, None, "columns not found in input: ['nope']"),
    ],
    ids=[
        "categorical-type",
        "date-bounds",
        "boolean-bounds",
        "float-without-bounds",
        "missing-column",
    ],
)
def test_declarations_that_do_not_fit_the_table_release_nothing(
    spark, tmp_path, column, table_type, message
):
    values = {
        pa.int32(): [1, 2],
        pa.date32(): [dt.date(2020, 1, 1)] * 2,
        pa.bool_(): [True, False],
        pa.float32(): [20.0, 30.0],
    }
    table = pa.table(
        {"x": [0.5, 0.5]}
        | ({column["name"]: pa.array(values[table_type], table_type)} if table_type else {})
    )
    pq.write_table(table, tmp_path / "t.parquet")
    data = config(tmp_path, tmp_path / "t.parquet")
    data["columns"] = [{"name": "x", "lower": 0, "upper": 1}, column]
    with pytest.raises(InputError, match=re.escape(message)) as err:
        run_synthesize(parse_config(data), quiet=True)
    assert "nothing was released" in str(err.value) or "not found" in str(err.value)
    assert not (tmp_path / "release").exists() and not (tmp_path / "ledger.sqlite").exists()


def test_a_value_outside_the_categorical_domain_is_an_invalid_row(spark, tmp_path):
    table = pa.table({"x": [0.5] * 3, "region": ["north", "mars", "east"]})
    pq.write_table(table, tmp_path / "t.parquet")
    data = config(tmp_path, tmp_path / "t.parquet")
    data["columns"] = [{"name": "x", "lower": 0, "upper": 1}, {"name": "region", "values": REGIONS}]
    with pytest.raises(ValueError, match="outside its declared domain"):
        run_synthesize(parse_config(data), quiet=True)
    assert not (tmp_path / "release").exists()
