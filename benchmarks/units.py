"""``python -m benchmarks units``: person-level releases of a generated visits table.

A visits table: units (persons) with 1 to 50 rows each; per unit an age, per row the visit
number, a cost that grows with age and visit number, and a length of stay that grows with the
cost. Two measurements:

* ``fidelity``: the per-row table's fidelity (``shared/tools/fidelity.py``: correlation and
  Wasserstein-1 ratios) of record-level releases and of unit-level releases (``unit``,
  ``max_rows_per_unit`` 5 and 20) at epsilon 1, in memory (the library), mean of the releases;
  a unit-level release protects a person, a record-level one a visit;
* ``pass``: the warm Spark data pass (``local[2]``, the DataFrame reader) over the table,
  unbounded and bounded to 5 rows per unit (a window over the unit: a shuffle of every row).

Writes ``benchmarks/units.json``; docs/results.md has the table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.fidelity import DEFAULT_TOOL, fidelity_numbers
from dpsmooth_spark.core.bounds import PublicBounds

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = [
    {"name": "age", "lower": 20, "upper": 90},
    {"name": "visit", "lower": 0, "upper": 49},
    {"name": "cost", "lower": 0.0, "upper": 400.0},
    {"name": "stay", "lower": 0.0, "upper": 30.0},
]


def visits(rows: int, seed: int = 0) -> pa.Table:
    """About ``rows`` rows of the visits table (units of 1 to 50 rows, 25.5 on average)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 51, max(1, round(rows / 25.5)))
    unit = np.repeat(np.arange(sizes.size), sizes)
    age = np.repeat(rng.integers(20, 91, sizes.size), sizes)
    visit = np.concatenate([np.arange(s) for s in sizes])
    cost = np.clip(20 + 1.5 * age + 3 * visit + rng.normal(0, 25, unit.size), 0, 400)
    stay = np.clip(cost / 20 + rng.normal(0, 2, unit.size), 0, 30)
    return pa.table(
        {
            "person": unit,
            "age": age.astype(np.int64),
            "visit": visit.astype(np.int64),
            "cost": cost,
            "stay": stay,
        }
    )


def fidelity(rows: int, releases: int, tool: Path) -> list[dict]:
    from dpsmooth_spark import Synthesizer

    table = visits(rows)
    names = [c["name"] for c in COLUMNS]
    real = np.column_stack([table[c].to_numpy().astype(float) for c in names])
    bounds = PublicBounds.from_mapping({c["name"]: (c["lower"], c["upper"]) for c in COLUMNS})
    out = []
    for label, unit in (("record", None), ("unit k=5", 5), ("unit k=20", 20)):
        scores = []
        for _ in range(releases):
            synth = Synthesizer(
                COLUMNS,
                1.0,
                unit="person" if unit else None,
                max_rows_per_unit=unit,
            ).fit(table)
            rows_out = synth.sample(table.num_rows)
            fake = np.column_stack([rows_out[c].to_numpy().astype(float) for c in names])
            scores.append(fidelity_numbers(tool, real, fake, bounds, 1.0))
        out.append(
            {
                "release": label,
                "rows": table.num_rows,
                "corr_ratio": float(np.mean([s["corr_ratio"] for s in scores])),
                "w1_ratio": float(np.mean([s["w1_ratio"] for s in scores])),
                "releases": releases,
            }
        )
        print(out[-1], flush=True)
    return out


def pass_cost(rows: int) -> dict:
    from dpsmooth_spark.config import ColumnConfig
    from dpsmooth_spark.core.columns import table_codec
    from dpsmooth_spark.core.kernel import PassSpec
    from dpsmooth_spark.spark import data_pass, session
    from dpsmooth_spark.spark.io import bound_contributions

    spark = session.get_session(master="local[2]")
    with tempfile.TemporaryDirectory() as tmp:
        table = visits(rows)
        path = Path(tmp) / "visits.parquet"
        pq.write_table(table, path, row_group_size=250_000)
        codec = table_codec([ColumnConfig.model_validate(c) for c in COLUMNS], table.schema)
        spec = PassSpec(3, histogram_cells=256)
        df = spark.read.parquet(str(path))
        timings = {}
        for name in ("unbounded", "bounded k=5", "unbounded", "bounded k=5"):  # second: warm
            source = bound_contributions(df, "person", 5, 1) if name != "unbounded" else df
            start = time.perf_counter()
            data_pass.exact_sums(source, codec, spec)
            timings[name] = time.perf_counter() - start
    return {
        "rows": table.num_rows,
        "unbounded_seconds": timings["unbounded"],
        "bounded_seconds": timings["bounded k=5"],
        "ratio": timings["bounded k=5"] / timings["unbounded"],
    }


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fidelity-rows", type=int, default=100_000)
    ap.add_argument("--releases", type=int, default=2)
    ap.add_argument("--pass-rows", type=int, nargs="*", default=[1_000_000, 10_000_000])
    ap.add_argument("--tool", type=Path, default=DEFAULT_TOOL)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "units.json")
    args = ap.parse_args(argv)
    result = {
        "command": "python -m benchmarks units " + " ".join(argv),
        "machine": "2 cores, local[2]",
        "fidelity": fidelity(args.fidelity_rows, args.releases, args.tool),
        "pass": [],
    }
    for rows in args.pass_rows:
        result["pass"].append(pass_cost(rows))
        print(result["pass"][-1], flush=True)
    args.out.write_text(json.dumps(result, indent=1))
