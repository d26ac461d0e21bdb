"""The library API: ``from dpsmooth_spark import Synthesizer`` on pandas and Arrow tables."""

import datetime as dt
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpsmooth_spark import ColumnConfig, Synthesizer
from dpsmooth_spark.core.columns import ColumnTypeError
from dpsmooth_spark.pipeline.row_checks import InvalidDataError

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_example_runs_as_written_and_keeps_the_types():
    """The example's noise is secure (unseeded); bmi's released null share is near 0.1 and the
    chance that 1000 rows hold no null is below 1e-40."""
    section = README.read_text().split("### As a library", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    rows, table = scope["rows"], scope["table"]
    assert list(rows.columns) == list(table.columns) and len(rows) == 1000
    assert rows.dtypes.to_dict() == table.dtypes.to_dict()  # int64, object, object, float64
    assert set(rows["region"]) <= {"north", "south", "east", "west"}
    assert all(isinstance(v, dt.date) for v in rows["admitted"])
    assert rows["age"].between(18, 95).all() and rows["bmi"].isna().any()


def _arrow_table(n=2000, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, n)
    return pa.table(
        {
            "x": pa.array(x, pa.float32()),
            "flag": pa.array(x + rng.normal(0, 2, n) > 5),
            "code": pa.array(rng.integers(0, 3, n), pa.int16()),
        }
    )


COLUMNS = [
    ColumnConfig(name="x", lower=0, upper=10),
    {"name": "flag"},
    {"name": "code", "values": [0, 1, 2]},
]


def test_an_arrow_table_comes_back_as_arrow_with_its_schema():
    table = _arrow_table()
    rows = Synthesizer(COLUMNS, epsilon=2.0, random_state=0).fit(table).sample(500)
    assert isinstance(rows, pa.Table) and rows.schema == table.schema and rows.num_rows == 500


def test_a_seeded_release_is_reproducible_and_spends_its_budget():
    table = _arrow_table()
    first = Synthesizer(COLUMNS, epsilon=2.0, random_state=3).fit(table)
    again = Synthesizer(COLUMNS, epsilon=2.0, random_state=3).fit(table)
    assert first.sample(300).equals(again.sample(300))
    assert first.accountant_.to_dict()["epsilon_spent"] == pytest.approx(2.0)


def test_bad_input_is_refused_before_any_noise():
    table = _arrow_table()
    with pytest.raises(ColumnTypeError, match="not found"):
        Synthesizer([*COLUMNS, {"name": "missing", "lower": 0, "upper": 1}], 1.0).fit(table)
    nan = table.set_column(0, "x", pa.array([None] + [1.0] * (table.num_rows - 1), pa.float32()))
    synth = Synthesizer(COLUMNS, epsilon=1.0)
    with pytest.raises(InvalidDataError, match="some rows"):
        synth.fit(nan)
    assert not hasattr(synth, "accountant_")  # nothing was spent
    with pytest.raises(ValueError):
        Synthesizer(COLUMNS, epsilon=-1.0)
    with pytest.raises(ValueError, match="pair_columns"):
        Synthesizer(COLUMNS, epsilon=1.0, mechanism={"pair_columns": ["nope"]})
    assert Synthesizer(COLUMNS, 1.0, on_invalid="drop").fit(nan).sample(10).num_rows == 10
    with pytest.raises(InvalidDataError, match="no rows"):
        Synthesizer(COLUMNS, epsilon=1.0).fit(table.slice(0, 0))
