"""Synthetic persons (mechanisms/persons.py) through the in-memory library: the table of persons,
its unit statistics, the spend, the retry, and the config's refusals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from dpsmooth_spark import Synthesizer
from dpsmooth_spark.config import parse_config
from dpsmooth_spark.core.cell_marginals import CellCoding
from dpsmooth_spark.mechanisms import adaptive, persons

K = 6
COLUMNS = [
    {"name": "sex", "values": ["F", "M"], "per_unit": True},
    {"name": "age", "lower": 20, "upper": 90, "per_unit": True},
    {"name": "ward", "values": ["A", "B", "C", "D"]},
    {"name": "cost", "lower": 0.0, "upper": 100.0},
]


def _visits(patients: int, seed: int) -> pa.Table:
    """Older patients have more visits; a patient returns to a home ward with probability 0.7;
    cost rises with age."""
    rng = np.random.default_rng(seed)
    age = rng.integers(20, 91, patients)
    count = np.clip(1 + rng.poisson((age - 20) / 10), 1, 30)
    home = rng.integers(0, 4, patients)
    unit = np.repeat(np.arange(patients), count)
    ward = np.where(rng.random(unit.size) < 0.7, home[unit], rng.integers(0, 4, unit.size))
    return pa.table(
        {
            "patient": (500_000 + unit).astype(np.int64),
            "sex": rng.choice(["F", "M"], patients)[unit],
            "age": age[unit].astype(np.int64),
            "ward": np.array(list("ABCD"))[ward],
            "cost": np.clip(age[unit] + rng.normal(0, 5, unit.size), 0, 100),
        }
    )


def _unit_numbers(frame: pd.DataFrame) -> tuple[np.ndarray, float, float]:
    """Rows per unit (1..K) shares, corr(age, rows per unit), the within-unit ward agreement."""
    groups = frame.groupby("patient")
    rows = groups.size().clip(upper=K)
    shares = rows.value_counts(normalize=True).reindex(range(1, K + 1), fill_value=0).to_numpy()
    agree = []
    for _, wards in groups["ward"]:
        m = len(wards)
        if m >= 2:
            counts = wards.value_counts().to_numpy()
            agree.append((np.sum(counts**2) - m) / (m * (m - 1)))
    return shares, float(np.corrcoef(groups["age"].first(), rows)[0, 1]), float(np.mean(agree))


def _persons(table: pa.Table, epsilon: float, seed: int) -> Synthesizer:
    """A release of persons of ``table`` (in memory, seeded)."""
    return Synthesizer(
        COLUMNS,
        epsilon,
        unit="patient",
        max_rows_per_unit=K,
        mechanism={"method": "adaptive"},
        random_state=seed,
    ).fit(table)


@pytest.fixture(scope="module")
def release():
    table = _visits(3_000, 0)
    synth = _persons(table, 20.0, 5)
    return table, synth, synth.sample().to_pandas()


def test_a_release_of_persons_keeps_the_units_statistics(release):
    """Seeded (deterministic). At epsilon 20 the noise moves these statistics by about 0.01-0.02;
    the limits are several times that, and independent rows of random units (lambda 0, no
    relation to the row count) would miss the agreement by 0.3 and the correlation by 0.78."""
    table, _, synthetic = release
    real = table.to_pandas().groupby("patient").head(K)
    real_shares, real_corr, real_agree = _unit_numbers(real)
    shares, corr, agree = _unit_numbers(synthetic)
    assert 0.5 * np.abs(shares - real_shares).sum() < 0.05
    assert abs(corr - real_corr) < 0.1 and real_corr > 0.7
    assert abs(agree - real_agree) < 0.06 and real_agree > 0.5


def test_a_release_of_persons_has_fresh_ids_and_constant_attributes(release):
    table, synth, synthetic = release
    assert list(synthetic.columns) == ["patient", "sex", "age", "ward", "cost"]
    assert not set(synthetic["patient"]) & set(table["patient"].to_pylist())
    assert not set(synthetic["patient"].astype(str)) & set(map(str, table["patient"].to_pylist()))
    assert (synthetic.groupby("patient")[["sex", "age"]].nunique() == 1).all().all()
    sizes = synthetic.groupby("patient").size()
    assert sizes.min() >= 1 and sizes.max() <= K
    assert abs(synthetic["patient"].nunique() - 3_000) < 100  # the noisy unit count
    fixed = synth.sample(units=50).to_pandas()
    assert fixed["patient"].nunique() == 50
    units = synth.units_table(synthetic)  # one row per unit, joinable on the unit column
    assert list(units.columns) == ["patient", "sex", "age", "rows"]
    assert units["patient"].is_unique and units["rows"].sum() == len(synthetic)
    assert (units.set_index("patient")["rows"] == sizes.loc[units["patient"]].values).all()


def test_a_release_of_persons_spends_its_budget_per_unit(release):
    """Every charge is recorded at its sensitivity per unit: k for a marginal of the rows, 1 for
    a unit or pair table; the whole budget is spent."""
    _, synth, _ = release
    accountant = synth.accountant_
    assert accountant.spent_epsilon() == pytest.approx(20.0, rel=1e-9)
    kinds = {m.kind for m in synth.result_.measurements}
    assert {"rows", "units", "agreement"} <= kinds
    for charge in accountant.charges:
        if ".units." in charge.stage or ".agreement." in charge.stage:
            assert charge.sensitivity == pytest.approx(1.0)
        elif ".marginal." in charge.stage:
            assert charge.sensitivity == pytest.approx(K)


def test_a_retry_refits_the_same_model(release):
    _, synth, _ = release
    spec = synth.persons_.spec
    again, _ = persons.replay(synth.result_.to_dict(), spec, synth.settings_)
    for a, b in zip(
        again.model.clique_marginals(), synth.result_.model.clique_marginals(), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-9)


def test_the_prototype_sets_the_within_unit_agreement():
    """lambda 1 copies the prototype's cells to every row of a unit; lambda 0 leaves a unit's rows
    independent draws given the unit (agreement about the model's own, 1/4 here)."""
    synth = _persons(_visits(1_500, 1), 5.0, 2)
    tables, result = synth.persons_, synth.result_
    rng = np.random.default_rng(0)
    for value in (0.0, 1.0):
        lambdas = np.where(np.asarray(tables.spec.per_unit), 0.0, value)
        unit, codes = persons.draw_persons(result, tables, lambdas, 2_000, rng)
        frame = pd.DataFrame({"patient": unit, "ward": codes[:, 2], "age": codes[:, 1]})
        _, _, agree = _unit_numbers(frame)
        if value == 1.0:
            assert agree == 1.0
        else:
            assert 0.2 < agree < 0.4, agree


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"privacy": {"epsilon": 1.0}}, "per_unit, which needs privacy.unit"),
        ({"mechanism": {"method": "fixed"}}, "needs mechanism.method: adaptive"),
        ({"output": {"path": "out", "units": 0}}, "greater than or equal to 1"),
        ({"output": {"path": "out", "units": 10, "rows": 5}}, "exclude each other"),
        (
            {"output": {"path": "out", "units_table": True}, "mechanism": {"method": "fixed"}},
            "needs mechanism.method: adaptive",
        ),
        (
            {"output": {"path": "out", "units_table": True, "format": "delta"}},
            "units_table needs output.format: parquet",
        ),
        (
            {
                "output": {"path": "out", "units_table": True},
                "columns": [*COLUMNS, {"name": "rows", "lower": 0, "upper": 9, "per_unit": True}],
            },
            "names its row count 'rows'",
        ),
    ],
)
def test_bad_person_configs_are_refused(change, message):
    config = {
        "input": {"path": "visits.parquet"},
        "columns": COLUMNS,
        "privacy": {"epsilon": 1.0, "unit": "patient", "max_rows_per_unit": K},
        "output": {"path": "out"},
        "mechanism": {"method": "adaptive"},
        **change,
    }
    with pytest.raises(ValueError, match=message):
        parse_config(config)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"units": 100}, "output.units needs privacy.unit"),
        ({"units_table": True}, "units_table needs a release of persons"),
    ],
)
def test_unit_outputs_without_a_unit_are_refused(output, message):
    config = {
        "input": {"path": "visits.parquet"},
        "columns": [c | {"per_unit": False} for c in COLUMNS],
        "privacy": {"epsilon": 1.0},
        "output": {"path": "out", **output},
        "mechanism": {"method": "adaptive"},
    }
    with pytest.raises(ValueError, match=message):
        parse_config(config)


def test_the_units_table_holds_each_unit_once_with_its_rows():
    """Keyed on the unit: its per-unit values as on its rows, and its row count."""
    rows = pa.table(
        {
            "patient": ["u-2", "u-2", "u-0", "u-1", "u-1", "u-1"],
            "sex": ["F", "F", None, "M", "M", "M"],
            "ward": ["A", "B", "A", "C", "C", "D"],
        }
    )
    units = persons.unit_table(rows, "patient", ["sex"], "rows")
    assert units.column_names == ["patient", "sex", "rows"]
    assert units.to_pylist() == [
        {"patient": "u-2", "sex": "F", "rows": 2},
        {"patient": "u-0", "sex": None, "rows": 1},
        {"patient": "u-1", "sex": "M", "rows": 3},
    ]


def test_too_many_per_unit_cells_are_refused_before_any_noise():
    coding = CellCoding((0,) * 5, (False,) * 5, (False,) * 5)
    with pytest.raises(ValueError, match="per-unit columns and the rows per unit"):
        persons.unit_tables(coding, (True,) * 4 + (False,), 10, adaptive.LoopSettings())


def test_a_release_of_persons_keeps_a_point_mass_and_a_shape():
    """20,000 patients of 1-4 visits; a visit's cost is 0 (its lower bound) on a fifth of them,
    else log-normal with median 30 on [0, 1,000] (a first cell of 62.5 holds nearly all of it).
    At epsilon 10 the release of persons, as a release of records, puts its rows on the bound
    (0.2002 real; 10 seeds gave 0.2001-0.2003) and within the cell by its shape (median 25.45;
    10 seeds gave 25.43-25.49), where the release without bound cells and shapes had no zero and
    spread the cell evenly. Seeded; false-failure rate far below 1 in 10."""
    rng = np.random.default_rng(12)
    count = rng.integers(1, 5, 20_000)
    unit = np.repeat(np.arange(20_000), count)
    positive = np.exp(rng.normal(np.log(30.0), 0.5, unit.size))
    cost = np.where(rng.random(unit.size) < 0.2, 0.0, positive).clip(0.0, 1_000.0)
    table = pa.table(
        {
            "patient": (1_000 + unit).astype(np.int64),
            "sex": rng.choice(["F", "M"], 20_000)[unit],
            "cost": cost,
        }
    )
    columns = [
        {"name": "sex", "values": ["F", "M"], "per_unit": True},
        {"name": "cost", "lower": 0.0, "upper": 1_000.0},
    ]
    synth = Synthesizer(
        columns,
        10.0,
        unit="patient",
        max_rows_per_unit=4,
        mechanism={"method": "adaptive"},
        random_state=0,
    ).fit(table)
    released = synth.sample().to_pandas()["cost"].to_numpy()
    assert abs(float((released == 0.0).mean()) - float((cost == 0.0).mean())) < 0.01
    assert abs(float(np.median(released)) - float(np.median(cost))) < 1.0
    kinds = [m.kind for m in synth.result_.measurements]
    assert kinds.count("points") == 1 and kinds.count("shape") == 1
