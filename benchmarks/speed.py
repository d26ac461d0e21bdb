"""Speed of the release pipeline: data pass vs plain numpy, stage times, driver memory, LP.

    python -m benchmarks speed            # n = 10^5, 10^6 at d = 10 and 30 (a few minutes)
    python -m benchmarks speed --large    # adds n = 10^7
    python -m benchmarks speed --columns 10,30,100,300,1000 --rows 100000 --out columns.json
                                          # the column sweep (each width in at most --timeout s)

For each size a generated table (correlated Gaussian, clipped to the bounds) is written once as
Parquet under ``build/bench/``; then, each in a fresh process:
* ``numpy``: the same exact kernel (``partial_sums``) over the file's record batches, one process;
* ``spark``: the full ``synthesize`` job on ``local[2]`` (stage times from its manifest, with the
  default reader), then the data pass alone with each reader (``mapInArrow`` over a DataFrame,
  and pyarrow-read row groups scheduled by Spark), timed warm.
Driver peak RSS is the Python driver's (``peak_rss_mb``; the JVM is separate). The LP is timed on
random instances of (R, C). Writes ``benchmarks/speed.json`` (the LP timings only there).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "bench"


def peak_rss_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (Linux; unlike ``ru_maxrss`` it does not
    carry the parent's peak across ``exec``), else ``ru_maxrss``."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def correlated_batches(n: int, d: int, batch: int = 1_000_000) -> Iterator[np.ndarray]:
    """The generated table, ``n`` rows in batches: correlated Gaussian, clipped to [-1, 1]."""
    rng = np.random.default_rng(d)
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    for start in range(0, n, batch):
        yield np.clip(0.3 * rng.normal(size=(min(batch, n - start), d)) @ mix, -1, 1)


ROW_GROUP_BYTES = 128 << 20
"""Row groups of at most 128 MiB, as Spark writes them (``parquet.block.size``): Spark's reader
holds a whole row group's column chunks, so one of 800 MB at 1,000 columns exhausts its heap."""


def make_table(n: int, d: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = BUILD / f"table_n{n}_d{d}_rg128m.parquet"
    if path.exists():
        return path
    BUILD.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, pa.schema([(f"c{i}", pa.float64()) for i in range(d)])) as writer:
        for x in correlated_batches(n, d):
            writer.write_table(
                pa.table({f"c{i}": x[:, i] for i in range(d)}),
                row_group_size=min(250_000, ROW_GROUP_BYTES // (8 * d)),
            )
    return path


def run_numpy(path: str, d: int) -> dict:
    import pyarrow.parquet as pq

    from dpsmooth_spark.core.kernel import partial_sums
    from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams

    degree = SynthesizerParams().data_pass_degree(d)
    start = time.perf_counter()
    reader = pq.ParquetFile(path)
    batches = (
        np.column_stack([b.column(i).to_numpy() for i in range(d)])
        for b in reader.iter_batches(batch_size=65_536)
    )
    sums = partial_sums(batches, -np.ones(d), np.ones(d), degree)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": sums.rows_seen, "rows_per_s": sums.rows_seen / seconds}


def run_spark(path: str, d: int, out: str) -> dict:
    from dpsmooth_spark.config import parse_config
    from dpsmooth_spark.pipeline.synthesize import run_synthesize
    from dpsmooth_spark.spark import data_pass, io, session

    config = parse_config(
        {
            "input": {"path": path},
            "columns": [{"name": f"c{i}", "lower": -1, "upper": 1} for i in range(d)],
            "privacy": {"epsilon": 1.0},
            "output": {"path": out, "mode": "overwrite", "rows": 100_000},
            "ledger": {"path": out + ".ledger.sqlite"},
            "spark": {"master": "local[2]"},
        }
    )
    start = time.perf_counter()
    report = run_synthesize(config, quiet=True)
    total = time.perf_counter() - start
    bounds = config.public_bounds()
    spark = session.get_session()
    spec = config.mechanism.pass_spec(d)
    df = io.read_table(spark, path, "parquet", list(bounds.columns))
    timings = {}
    for reader in ("spark", "arrow", "spark", "arrow"):  # second round: warm
        start = time.perf_counter()
        if reader == "spark":
            sums = data_pass.exact_sums(df, bounds, spec)
        else:
            sums = data_pass.exact_sums_arrow(spark, path, bounds, spec)
        timings[reader] = time.perf_counter() - start
    return {
        "total_seconds": total,
        "stage_seconds": report.manifest["stage_seconds"],
        "warm_pass_seconds": timings["spark"],
        "rows_per_s": sums.rows_seen / timings["spark"],
        "arrow_warm_pass_seconds": timings["arrow"],
        "arrow_rows_per_s": sums.rows_seen / timings["arrow"],
        "driver_peak_rss_mb": peak_rss_mb(),
        "basis_functions": report.manifest["mechanism"]["basis"]["size"],
        "candidate_strategy": report.manifest["mechanism"]["candidate_strategy"],
    }


def lp_timings() -> list[dict]:
    from dpsmooth_spark.core.lp import solve_l1_fit

    rng = np.random.default_rng(0)
    out = []
    for r in (62, 124, 527):
        for c in (1000, 3000, 10_000):
            w = rng.uniform(-1, 1, size=(r, c))
            b = w[:, :50].mean(axis=1) + rng.normal(0, 0.05, r)
            start = time.perf_counter()
            solve_l1_fit(w, b)
            out.append({"R": r, "C": c, "seconds": time.perf_counter() - start})
    return out


def child(mode: str, path: str, d: int) -> None:
    result = (
        run_numpy(path, d)
        if mode == "numpy"
        else run_spark(path, d, str(BUILD / f"out_{Path(path).stem}"))
    )
    print("RESULT " + json.dumps(result))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--columns", default="10,30", help="widths d, comma-separated")
    ap.add_argument("--rows", type=int, help="one table size n instead of 10^5, 10^6 (10^7)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per width and mode")
    ap.add_argument("--out", default="speed.json")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    sizes = [args.rows] if args.rows else [10**5, 10**6] + ([10**7] if args.large else [])
    rows = []
    for d in map(int, args.columns.split(",")):
        for n in sizes:
            path = make_table(n, d)
            row: dict = {"n": n, "d": d}
            for mode in ("numpy", "spark"):
                command = [sys.executable, "-m", "benchmarks", "speed", "--child", mode]
                try:
                    proc = subprocess.run(
                        [*command, str(path), str(d)],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=ROOT,
                        timeout=args.timeout,
                    )
                except subprocess.TimeoutExpired:
                    row[mode] = {"timed_out_s": args.timeout}
                    continue
                except subprocess.CalledProcessError as exc:
                    row[mode] = {"failed": exc.stderr.strip().splitlines()[-1][:300]}
                    continue
                line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
                row[mode] = json.loads(line[7:])
            if "rows_per_s" not in row["spark"]:
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            row["spark_over_numpy_throughput"] = (
                row["spark"]["rows_per_s"] / row["numpy"]["rows_per_s"]
            )
            row["arrow_over_numpy_throughput"] = (
                row["spark"]["arrow_rows_per_s"] / row["numpy"]["rows_per_s"]
            )
            rows.append(row)
            print(
                json.dumps(
                    {
                        "n": n,
                        "d": d,
                        "numpy_rows_per_s": row["numpy"]["rows_per_s"],
                        "spark_rows_per_s": row["spark"]["rows_per_s"],
                        "ratio": row["spark_over_numpy_throughput"],
                        "arrow_rows_per_s": row["spark"]["arrow_rows_per_s"],
                        "arrow_ratio": row["arrow_over_numpy_throughput"],
                    }
                ),
                flush=True,
            )
    result: dict = {"machine": "2 cores, local[2]", "sizes": rows}
    if args.out == "speed.json":
        result["lp"] = lp_timings()
    (ROOT / "benchmarks" / args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
