"""``python -m benchmarks check``: the regression check to run before calling a change done.

Re-runs a small seeded set and compares it with ``benchmarks/check.json``:

* fidelity (``shared/tools/fidelity.py``): WDBC, wine and the heavy-tailed table at epsilon 1;
* mixed tables (``shared/tools/marginals.py``): Adult and the generated mixed table at epsilon 1,
  with the fixed plan and with ``mechanism.method: adaptive``;
* wide: the 100-column factor table, pure epsilon 1;
* persons: the visits table of ``benchmarks persons`` as a release of persons at epsilon 1
  (``k = 10``): the rows' TVDs and the misses of rows per unit, corr(birth year, rows) and the
  within-unit ward agreement;
* speed: the Spark job on 10^6 rows x 30 columns (a child process, as ``benchmarks speed``), and
  the adaptive mechanism's release of 300,000 x 30 generated rows in memory (its time is the
  loop's: select, measure, estimate).

Each quality row is :data:`RELEASES` seeded releases (seeds 0, 1, 2: test-mode noise, so an
unchanged mechanism repeats its numbers exactly). A metric regresses where its mean is worse
than the recorded mean by more than :data:`NOISE_UNITS` standard errors of a difference of two
such means, ``3 sd sqrt(2 / RELEASES)``, ``sd`` the recorded releases' spread (the release noise
of that row; at least :data:`FLOOR` of the recorded mean): a change that only reshuffles the noise
passes 99.7% of the time, per metric. A time regresses above :data:`SLOWER` times the recorded
one (the machine's own spread between runs is about 10%). ``--record`` re-records the file (after
a change that moves a row on purpose: say so in its commit). Not part of CI (about three minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks import mixed
from benchmarks.fidelity import DEFAULT_TOOL, fidelity_numbers, release
from benchmarks.scale import row_blocks
from benchmarks.speed import make_table
from benchmarks.tables import ROOT, TABLES
from benchmarks.wide import BOUND, factor_table
from dpsmooth_spark.core.bounds import PublicBounds

RELEASES = 3
NOISE_UNITS = 3.0
FLOOR = 0.01
SLOWER = 1.5
RECORD = ROOT / "benchmarks" / "check.json"
LOWER_IS_BETTER = {
    "w1_ratio",
    "corr_ratio",
    "tvd1",
    "tvd2",
    "tvd3",
    "seconds",
    "pass_seconds",
    "rows_per_unit_tvd",
    "corr_miss",
    "agreement_miss",
}
"""Every other metric (``auc``) is better higher."""


def fidelity_row(table: str, method: str = "fixed") -> Callable[[int], dict[str, float]]:
    """One seeded release of a numeric table at epsilon 1 (``mechanism.method``), scored by the
    fidelity tool."""

    def run(seed: int) -> dict[str, float]:
        data, mapping, label = TABLES[table]()
        bounds = PublicBounds.from_mapping(mapping)
        # the label as an anchor, as the example configs and the fidelity benchmark
        params = {"pair_columns": [label], **({"method": method} if method != "fixed" else {})}
        rng = np.random.default_rng(seed)
        syn = release("ours", data, bounds, 1.0, params, rng, label, seed=seed)
        numbers = fidelity_numbers(DEFAULT_TOOL, data, syn, bounds, 1.0)
        return {k: float(numbers[k]) for k in ("w1_ratio", "corr_ratio")}

    return run


def mixed_row(table: str, method: str = "fixed") -> Callable[[int], dict[str, float]]:
    """One seeded release of a mixed table at epsilon 1 (``mechanism.method``), scored by the
    marginals tool."""

    def run(seed: int) -> dict[str, float]:
        from dpsmooth_spark import Synthesizer

        real, columns, label = mixed.TABLES[table]()
        synth = Synthesizer(columns, 1.0, mechanism={"method": method}, random_state=seed)
        synthetic = synth.fit(real).sample(len(real))
        scores = mixed.marginal_scores(real, synthetic, columns, 1.0)
        out = {k: float(scores[k]) for k in ("tvd1", "tvd2", "tvd3")}
        return {**out, "auc": mixed.tstr_auc(real, synthetic, label)}

    return run


def wide_row(seed: int) -> dict[str, float]:
    """One seeded release of the 100-column factor table, pure epsilon 1."""
    data = factor_table(100)
    bounds = PublicBounds.from_mapping({f"x{i}": (-BOUND, BOUND) for i in range(100)})
    syn = release("ours", data, bounds, 1.0, {}, np.random.default_rng(seed), seed=seed)
    numbers = fidelity_numbers(DEFAULT_TOOL, data, syn, bounds, 1.0)
    return {k: float(numbers[k]) for k in ("w1_ratio", "corr_ratio")}


def persons_row(seed: int) -> dict[str, float]:
    """One seeded release of persons of the visits table at epsilon 1."""
    import pyarrow as pa

    from benchmarks import persons
    from dpsmooth_spark import Synthesizer

    kept = persons.truncated(persons.visits().to_pandas())
    names = [c["name"] for c in persons.COLUMNS]
    synth = Synthesizer(
        persons.COLUMNS,
        1.0,
        unit=persons.UNIT,
        max_rows_per_unit=persons.K,
        mechanism={"method": "adaptive"},
        random_state=seed,
    )
    synthetic = synth.fit(pa.Table.from_pandas(kept, preserve_index=False)).sample().to_pandas()
    scores = mixed.marginal_scores(kept[names], synthetic[names], persons.row_columns(), 1.0)
    real, ours = persons.unit_numbers(kept), persons.unit_numbers(synthetic)
    return {
        **{k: float(scores[k]) for k in ("tvd1", "tvd2", "tvd3")},
        "rows_per_unit_tvd": 0.5
        * float(np.abs(ours["rows_per_unit"] - real["rows_per_unit"]).sum()),
        "corr_miss": abs(ours["corr_birth_rows"] - real["corr_birth_rows"]),
        "agreement_miss": abs(ours["ward_agreement"] - real["ward_agreement"]),
    }


def speed_row(_: int) -> dict[str, float]:
    """The Spark job on 10^6 x 30 (``benchmarks speed``'s child): its time and its warm pass."""
    path = make_table(10**6, 30)
    command = [sys.executable, "-m", "benchmarks", "speed", "--child", "spark", str(path), "30"]
    proc = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    result = json.loads(line[7:])
    return {"seconds": result["total_seconds"], "pass_seconds": result["warm_pass_seconds"]}


def adaptive_speed_row(_: int) -> dict[str, float]:
    """The adaptive mechanism in memory at epsilon 1 on the first 300,000 rows of ``benchmarks
    scale``'s 30-column table (correlated Gaussian clipped to [-1, 1]): the release's seconds,
    nearly all of them the loop's."""
    import pandas as pd

    from dpsmooth_spark import Synthesizer

    d = 30
    x = next(row_blocks(300_000, d))
    frame = pd.DataFrame({f"c{i}": x[:, i] for i in range(d)})
    columns = [{"name": f"c{i}", "lower": -1, "upper": 1} for i in range(d)]
    synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=0)
    start = time.perf_counter()
    synth.fit(frame)
    return {"seconds": time.perf_counter() - start}


ROWS: dict[str, tuple[Callable[[int], dict[str, float]], int]] = {
    "fidelity wdbc 1": (fidelity_row("wdbc"), RELEASES),
    "fidelity wine 1": (fidelity_row("wine"), RELEASES),
    "fidelity heavy_tails 1": (fidelity_row("heavy_tails"), RELEASES),
    "fidelity wdbc 1 adaptive": (fidelity_row("wdbc", "adaptive"), RELEASES),
    "fidelity heavy_tails 1 adaptive": (fidelity_row("heavy_tails", "adaptive"), RELEASES),
    "mixed adult 1": (mixed_row("adult"), RELEASES),
    "mixed mixed 1": (mixed_row("mixed"), RELEASES),
    "mixed adult 1 adaptive": (mixed_row("adult", "adaptive"), RELEASES),
    "mixed mixed 1 adaptive": (mixed_row("mixed", "adaptive"), RELEASES),
    "wide factors100 1": (wide_row, RELEASES),
    "persons visits 1": (persons_row, RELEASES),
    "speed 1e6x30": (speed_row, 1),
    "speed adaptive 3e5x30": (adaptive_speed_row, 1),
}
"""Each row: its runner (a seed to its metrics) and how many seeds it runs."""


def measure(rows: list[str]) -> dict[str, dict[str, list[float]]]:
    """Every metric of each row, one value per seed."""
    out: dict[str, dict[str, list[float]]] = {}
    for name in rows:
        runner, seeds = ROWS[name]
        start = time.perf_counter()
        values: dict[str, list[float]] = {}
        for seed in range(seeds):
            for metric, value in runner(seed).items():
                values.setdefault(metric, []).append(round(value, 6))
        out[name] = values
        print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return out


def verdicts(recorded: dict[str, Any], now: dict[str, dict[str, list[float]]]) -> list[dict]:
    """One line per row and metric: recorded and current means, the tolerance, the verdict."""
    lines = []
    for name, metrics in now.items():
        for metric, values in metrics.items():
            before = recorded[name][metric]
            mean, ref = float(np.mean(values)), float(np.mean(before))
            if metric in ("seconds", "pass_seconds"):
                tolerance = (SLOWER - 1.0) * ref
            else:
                sd = max(float(np.std(before, ddof=1)) if len(before) > 1 else 0.0, FLOOR * ref)
                tolerance = NOISE_UNITS * sd * np.sqrt(2.0 / len(values))
            worse = mean - ref if metric in LOWER_IS_BETTER else ref - mean
            lines.append(
                {
                    "row": name,
                    "metric": metric,
                    "recorded": ref,
                    "now": mean,
                    "tolerance": tolerance,
                    "verdict": "REGRESSED" if worse > tolerance else "ok",
                }
            )
    return lines


def table(lines: list[dict]) -> str:
    out = [f"{'row':<24} {'metric':<13} {'recorded':>10} {'now':>10} {'tolerance':>10}  verdict"]
    for x in lines:
        out.append(
            f"{x['row']:<24} {x['metric']:<13} {x['recorded']:>10.4g} {x['now']:>10.4g} "
            f"{x['tolerance']:>10.3g}  {x['verdict']}"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks check", description=__doc__)
    ap.add_argument("--rows", default=",".join(ROWS), help="a subset of the rows, by name")
    ap.add_argument("--record", action="store_true", help="re-record benchmarks/check.json")
    args = ap.parse_args(argv)
    rows = [r.strip() for r in args.rows.split(",")]
    unknown = set(rows) - set(ROWS)
    if unknown:
        raise SystemExit(f"unknown rows {sorted(unknown)}; choose from {', '.join(ROWS)}")
    now = measure(rows)
    if args.record:
        kept = json.loads(RECORD.read_text())["rows"] if RECORD.exists() else {}
        RECORD.write_text(
            json.dumps(
                {"command": "python -m benchmarks check --record", "rows": {**kept, **now}},
                indent=1,
            )
            + "\n"
        )
        print(f"recorded {RECORD}")
        return
    if not RECORD.exists():
        raise SystemExit(f"no {RECORD}: run python -m benchmarks check --record first")
    lines = verdicts(json.loads(RECORD.read_text())["rows"], now)
    print(table(lines))
    regressed = [x for x in lines if x["verdict"] != "ok"]
    if regressed:
        print(f"{len(regressed)} metric(s) regressed beyond the release noise", file=sys.stderr)
        raise SystemExit(1)
    print("no regression beyond the release noise")
