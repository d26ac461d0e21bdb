"""``python -m benchmarks persons``: synthetic persons from a generated visits table.

    python -m benchmarks persons [--releases 4] [--epsilon 1]

The visits table: 4,000 patients with 1 to 60 visits (older patients have more: rows per patient
truncated at 10 correlate about -0.72 with birth year); per patient ``sex`` and ``birth_year``;
per visit ``ward`` (a patient returns to a home ward with probability 0.68: two visits of one
patient share a ward 0.58 of the time, independent visits 0.21), ``cost`` (log-normal around a
patient level that rises with age) and ``visit_date``. Unit ``patient_id``, ``k = 10``.

Each release (secure noise, in memory) is scored on what a table of persons must keep: a unit
column with no real id, per-unit columns constant within units, the rows-per-unit distribution
(TVD against the real one truncated at ``k``), corr(birth year, rows per unit), the within-unit
ward agreement (over units with two rows or more, each unit's ordered pairs of distinct rows
weighted equally), and the rows' 1-/2-/3-way TVD (``shared/tools/marginals.py``) against the
real rows truncated at ``k``. Beside it, the unit-level releases of loose rows: the fixed plan
(``method: fixed``) and the adaptive loop on the rows alone (a record-level release at
``epsilon / k`` of the truncated rows, which is the same noise and selection). Writes
``benchmarks/persons.json``.

    python -m benchmarks persons --scale 10000000

times three Spark jobs (``local[2]``, the default session, after an untimed release of persons
of the same table) on a generated table of that many rows (units of 1 to 39 rows, 20 on
average): the release of persons, the same with ``output.units_table``, and the unit-level
release of loose rows (``method: fixed``), all at epsilon 1 with ``k = 10``, rows drawn by the
executors.
Writes ``benchmarks/persons_scale.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.mixed import marginal_scores

ROOT = Path(__file__).resolve().parents[1]
UNIT, K = "patient_id", 10
COLUMNS: list[dict[str, Any]] = [
    {"name": "sex", "values": ["F", "M"], "per_unit": True},
    {"name": "birth_year", "lower": 1930, "upper": 2005, "per_unit": True},
    {"name": "ward", "values": ["A", "B", "C", "D", "E"]},
    {"name": "cost", "lower": 0.0, "upper": 5000.0},
    {"name": "visit_date", "lower": dt.date(2020, 1, 1), "upper": dt.date(2024, 12, 31)},
]
WARDS = np.array([0.25, 0.22, 0.2, 0.18, 0.15])


def visits(patients: int = 4_000, seed: int = 0) -> pa.Table:
    """The visits table (module docstring); patient ids from 100,000."""
    rng = np.random.default_rng(seed)
    birth = rng.integers(1930, 2006, patients)
    age = (2005 - birth) / 75
    count = np.clip(np.round(np.exp(rng.normal(-0.3 + 3.3 * age, 0.85))), 1, 60).astype(int)
    sex = rng.choice(["F", "M"], patients)
    home = rng.choice(5, patients, p=WARDS)
    unit = np.repeat(np.arange(patients), count)
    rows = unit.size
    ward = np.where(rng.random(rows) < 0.68, home[unit], rng.choice(5, rows, p=WARDS))
    level = 5.5 + age + rng.normal(0, 0.5, patients)
    cost = np.clip(np.exp(level[unit] + rng.normal(0, 0.4, rows)), 0, 5000)
    first = dt.date(2020, 1, 1).toordinal()
    days = rng.integers(0, 1827, rows)
    return pa.table(
        {
            UNIT: (100_000 + unit).astype(np.int64),
            "sex": sex[unit],
            "birth_year": birth[unit].astype(np.int64),
            "ward": np.array(list("ABCDE"))[ward],
            "cost": cost,
            "visit_date": pa.array([dt.date.fromordinal(first + int(d)) for d in days]),
        }
    )


def truncated(real: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """At most ``K`` random rows of each patient (the rows a release reads)."""
    return real.sample(frac=1.0, random_state=seed).groupby(UNIT).head(K)


def unit_numbers(frame: pd.DataFrame) -> dict[str, Any]:
    """Rows per unit (1..K), corr(birth year, rows per unit), the within-unit ward agreement."""
    groups = frame.groupby(UNIT)
    rows = groups.size().clip(upper=K)
    birth = groups["birth_year"].first()
    codes = pd.factorize(frame["ward"])[0]
    unit = pd.factorize(frame[UNIT])[0]
    counts = np.zeros((unit.max() + 1, codes.max() + 1))
    np.add.at(counts, (unit, codes), 1)
    m = counts.sum(axis=1)
    two = m >= 2
    agree = ((counts[two] ** 2).sum(axis=1) - m[two]) / (m[two] * (m[two] - 1))
    shares = rows.value_counts(normalize=True).reindex(range(1, K + 1), fill_value=0.0)
    return {
        "rows_per_unit": shares.to_numpy(),
        "corr_birth_rows": float(np.corrcoef(birth, rows)[0, 1]),
        "ward_agreement": float(agree.mean()),
    }


def row_columns() -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "per_unit"} for c in COLUMNS]


def large_visits(rows: int, seed: int = 0) -> pa.Table:
    """About ``rows`` rows: units of 1 to 39 rows, the visits table's columns (no relations:
    this table times the jobs)."""
    rng = np.random.default_rng(seed)
    count = rng.integers(1, 40, max(1, rows // 20))
    unit = np.repeat(np.arange(count.size), count)
    n = unit.size
    return pa.table(
        {
            UNIT: unit.astype(np.int64),
            "sex": np.array(["F", "M"])[rng.integers(0, 2, count.size)][unit],
            "birth_year": rng.integers(1930, 2006, count.size)[unit],
            "ward": np.array(list("ABCDE"))[rng.integers(0, 5, n)],
            "cost": rng.uniform(0, 5000, n),
            "visit_date": pa.array(
                ((dt.date(2020, 1, 1) - dt.date(1970, 1, 1)).days + rng.integers(0, 1827, n))
                .astype(np.int32)
                .astype("datetime64[D]")
            ),
        }
    )


def scale(rows: int, out: Path) -> None:
    import tempfile

    import pyarrow.parquet as pq

    from dpsmooth_spark.config import parse_config
    from dpsmooth_spark.pipeline.synthesize import run_synthesize

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "visits.parquet"
        table = large_visits(rows)
        pq.write_table(table, path, row_group_size=1_000_000)
        for label, columns, method, extra in (
            ("warm-up", COLUMNS, "adaptive", {}),  # the session starts, the files are read
            ("persons", COLUMNS, "adaptive", {}),
            ("persons and units table", COLUMNS, "adaptive", {"units_table": True}),
            ("rows fixed", row_columns(), "fixed", {}),
        ):
            config = parse_config(
                {
                    "input": {"path": str(path)},
                    "columns": columns,
                    "privacy": {"epsilon": 1.0, "unit": UNIT, "max_rows_per_unit": K},
                    "mechanism": {"method": method},
                    "output": {"path": str(Path(tmp) / label.replace(" ", "_")), **extra},
                }
            )
            start = time.perf_counter()
            report = run_synthesize(config, quiet=True)
            seconds = time.perf_counter() - start
            manifest = json.loads((Path(report.output_path) / "manifest.json").read_text())
            if label == "warm-up":
                continue
            results.append(
                {
                    "method": label,
                    "seconds": seconds,
                    "rows_written": manifest["output"].get(
                        "rows", manifest["output"].get("rows_expected")
                    ),
                    "units_written": manifest["output"].get("units"),
                }
            )
            print(json.dumps(results[-1]), flush=True)
        out.write_text(
            json.dumps(
                {
                    "command": f"python -m benchmarks persons --scale {rows}",
                    "rows": table.num_rows,
                    "units": int(np.unique(table[UNIT].to_numpy()).size),
                    "max_rows_per_unit": K,
                    "runs": results,
                },
                indent=1,
            )
        )


def main(argv: list[str]) -> None:
    from dpsmooth_spark import Synthesizer

    ap = argparse.ArgumentParser(prog="python -m benchmarks persons", description=__doc__)
    ap.add_argument("--releases", type=int, default=4)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--scale", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.scale:
        scale(args.scale, args.out or ROOT / "benchmarks" / "persons_scale.json")
        return
    args.out = args.out or ROOT / "benchmarks" / "persons.json"
    real = visits().to_pandas()
    kept = truncated(real)  # every release reads these rows, and is scored against them
    table = pa.Table.from_pandas(kept, preserve_index=False)
    names = [c["name"] for c in COLUMNS]
    real_numbers = unit_numbers(kept)
    runs = []
    for method in ("persons", "rows fixed", "rows adaptive"):
        for release in range(args.releases):
            start = time.perf_counter()
            if method == "persons":
                synth = Synthesizer(
                    COLUMNS,
                    args.epsilon,
                    unit=UNIT,
                    max_rows_per_unit=K,
                    mechanism={"method": "adaptive"},
                ).fit(table)
                synthetic = synth.sample()
            elif method == "rows fixed":
                synth = Synthesizer(row_columns(), args.epsilon, unit=UNIT, max_rows_per_unit=K)
                synthetic = synth.fit(table).sample(len(kept))
            else:
                synth = Synthesizer(
                    row_columns(), args.epsilon / K, mechanism={"method": "adaptive"}
                )
                synthetic = synth.fit(kept[names]).sample(len(kept))
            seconds = time.perf_counter() - start
            synthetic = synthetic.to_pandas() if isinstance(synthetic, pa.Table) else synthetic
            row: dict[str, Any] = {"method": method, "release": release, "seconds": seconds}
            row.update(marginal_scores(kept[names], synthetic[names], row_columns(), args.epsilon))
            row.pop("independent", None)
            if method == "persons":
                numbers = unit_numbers(synthetic)
                row["rows_per_unit_tvd"] = 0.5 * float(
                    np.abs(numbers.pop("rows_per_unit") - real_numbers["rows_per_unit"]).sum()
                )
                row.update(numbers)
                row["units"] = int(synthetic[UNIT].nunique())
                row["real_ids"] = bool(
                    set(synthetic[UNIT].astype(str)) & set(real[UNIT].astype(str))
                )
                per_unit = synthetic.groupby(UNIT)[["sex", "birth_year"]].nunique()
                row["per_unit_constant"] = bool((per_unit.max() <= 1).all())
            runs.append(row)
            print(json.dumps(row), flush=True)
    out = {
        "command": "python -m benchmarks persons " + " ".join(argv),
        "secure_noise": True,
        "epsilon": args.epsilon,
        "max_rows_per_unit": K,
        "real": {
            "units": int(real[UNIT].nunique()),
            "rows_kept": len(kept),
            "rows_per_unit": real_numbers["rows_per_unit"].round(4).tolist(),
            "corr_birth_rows": real_numbers["corr_birth_rows"],
            "ward_agreement": real_numbers["ward_agreement"],
        },
        "runs": runs,
    }
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
