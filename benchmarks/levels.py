"""``python -m benchmarks levels``: a categorical column of 10,000 values on 10^6 rows.

The table: ``zip`` (10,000 five-digit codes, Zipf-distributed: 15% of rows on the first, most
codes on a few rows each, declared with ``values_file``), ``amount`` (a float), ``age`` (an
integer) and ``member`` (a category of 3 values that moves the amount); the same table without
``zip`` beside it. Each runs the full Spark job (``run_synthesize``, default config, epsilon 1,
``local[2]``) in a fresh process; recorded: seconds (total and per stage), the Python driver's
peak RSS and the JVM's (``benchmarks.scale``), and the release's ``zip`` marginal against the
real one (total-variation distance; beside it the independent baseline's: a sample of as many
rows from the real counts plus Laplace noise at epsilon / d, negatives cut).

Writes ``benchmarks/levels.json``; docs/results.md has the table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.scale import JvmPeak, run_child
from benchmarks.speed import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "levels"
LEVELS = 10_000


def make_table(n: int) -> Path:
    """The table under ``build/levels/`` (generated once) and its ``zip`` values file."""
    folder = BUILD / f"n{n}"
    if (folder / "part-0.parquet").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    weights = 1.0 / np.arange(1, LEVELS + 1) ** 1.1
    code = rng.choice(LEVELS, n, p=weights / weights.sum())
    member = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    codes = np.array([f"{c:05d}" for c in range(LEVELS)])
    table = pa.table(
        {
            "zip": pa.array(codes[code]),
            "amount": np.clip(rng.gamma(2.0, 40.0 * (1 + member)), 0.0, 1000.0),
            "age": rng.integers(18, 91, n),
            "member": pa.array(np.array(["basic", "plus", "gold"])[member]),
        }
    )
    pq.write_table(table, folder / "part-0.parquet", row_group_size=250_000)
    (BUILD / "zips.txt").write_text("\n".join(codes) + "\n")
    return folder


def run_job(folder: str, with_zip: bool, adaptive: bool = False) -> dict:
    from dpsmooth_spark.config import parse_config
    from dpsmooth_spark.pipeline.synthesize import run_synthesize

    out = str(BUILD / f"release_{'zip' if with_zip else 'nozip'}")
    columns = [
        {"name": "amount", "lower": 0.0, "upper": 1000.0},
        {"name": "age", "lower": 18, "upper": 90},
        {"name": "member", "values": ["basic", "plus", "gold"]},
    ]
    if with_zip:
        columns.insert(0, {"name": "zip", "values_file": str(BUILD / "zips.txt")})
    config = parse_config(
        {
            "input": {"path": folder},
            "columns": columns,
            "privacy": {"epsilon": 1.0},
            **({"mechanism": {"method": "adaptive"}} if adaptive else {}),
            "output": {"path": out, "mode": "overwrite"},
            "ledger": {"path": out + ".ledger.sqlite"},
            "spark": {"master": "local[2]"},
        }
    )
    jvm = JvmPeak()
    start = time.perf_counter()
    report = run_synthesize(config, quiet=True)
    total = time.perf_counter() - start
    result = {
        "total_seconds": round(total, 1),
        "stage_seconds": report.manifest["stage_seconds"],
        "driver_peak_rss_mb": peak_rss_mb(),
        "jvm_peak_rss_mb": jvm.stop(),
    }
    if not adaptive:
        result["histogram_cells"] = report.manifest["mechanism"]["budget_plan"]["histogram_cells"]
    if with_zip:
        real = pq.read_table(folder, columns=["zip"]).column(0).to_numpy(zero_copy_only=False)
        synthetic = (
            pq.read_table(Path(out) / "data", columns=["zip"])
            .column(0)
            .to_numpy(zero_copy_only=False)
        )
        result.update(zip_scores(real, synthetic, epsilon=1.0, d=len(columns)))
    return result


def zip_scores(real: np.ndarray, synthetic: np.ndarray, epsilon: float, d: int) -> dict:
    """TVD of the ``zip`` marginal, the release's and the independent baseline's (the real
    counts plus Laplace noise at ``epsilon / d``, negatives cut)."""
    codes = {f"{c:05d}": c for c in range(LEVELS)}
    p = np.bincount([codes[v] for v in real], minlength=LEVELS) / len(real)
    q = np.bincount([codes[v] for v in synthetic], minlength=LEVELS) / len(synthetic)
    rng = np.random.default_rng(1)
    noisy = np.maximum(p * len(real) + rng.laplace(0.0, d / epsilon, LEVELS), 0.0)
    baseline = rng.multinomial(len(real), noisy / noisy.sum()) / len(real)  # its sample
    return {
        "zip_tvd": round(0.5 * float(np.abs(p - q).sum()), 4),
        "zip_tvd_independent": round(0.5 * float(np.abs(p - baseline).sum()), 4),
        "zip_top3_real": p[:3].round(4).tolist(),
        "zip_top3_release": q[:3].round(4).tolist(),
        "zip_values_released": int((q > 0).sum()),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks levels", description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument(
        "--adaptive",
        action="store_true",
        help="run the table with zip through mechanism.method adaptive instead, recorded "
        "under adaptive_with_zip (the other runs are kept)",
    )
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        folder, with_zip, method = args.child
        result = run_job(folder, with_zip == "zip", method == "adaptive")
        print("RESULT " + json.dumps(result), flush=True)
        return
    folder = make_table(args.rows)
    path = ROOT / "benchmarks" / "levels.json"
    if args.adaptive:
        run = run_child(["levels", "--child", str(folder), "zip", "adaptive"], "the run failed")
        print("adaptive zip", json.dumps(run), flush=True)
        recorded = json.loads(path.read_text())
        recorded["adaptive_command"] = "python -m benchmarks levels " + " ".join(argv or [])
        recorded["adaptive_with_zip"] = run
        path.write_text(json.dumps(recorded, indent=1))
        return
    runs = {}
    for mode in ("zip", "nozip"):
        runs[mode] = run_child(
            ["levels", "--child", str(folder), mode, "fixed"], f"the {mode} run failed"
        )
        print(mode, json.dumps(runs[mode]), flush=True)
    path.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks levels " + " ".join(argv or []),
                "machine": "2 cores, local[2]",
                "rows": args.rows,
                "with_zip": runs["zip"],
                "without_zip": runs["nozip"],
            },
            indent=1,
        )
    )
