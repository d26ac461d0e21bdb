"""Lake-scale run: the full ``synthesize`` job at 10^6, 10^7 and 10^8 rows x d = 30 on local[2].

    python -m benchmarks scale                 # 10^6, 10^7, 10^8 (about 30 minutes, 29 GB disk)
    python -m benchmarks scale --sizes 6 7     # a subset (exponents of 10)
    python -m benchmarks scale --d 10 --sizes 6 7   # narrower tables (the kernel is cheaper)
    python -m benchmarks scale --rows 3000000       # any row counts
    python -m benchmarks scale --rows 3000000 --method adaptive   # the adaptive loop's job

Each table (correlated Gaussian, clipped to [-1, 1], float64, row groups of 250,000 rows, files of
10^7 rows) is generated once under ``build/scale/`` and reused. For each size, in a fresh process:

* ``numpy``: the same exact kernel (``partial_sums``) over the first min(n, 10^7) rows, one process
  (reading more would only repeat the same rate; the row says how many rows it read);
* ``job``: the full release (``run_synthesize``, default config, ``local[2]``, arrow reader), with
the
  stage times from its manifest; the Python driver's peak RSS (``benchmarks.speed.peak_rss_mb``)
  and the peak RSS of the
  JVM (which in local mode hosts the executors as well as the driver), sampled every 0.5 s; below
  10^8 rows also the data pass alone, run again in the same session (warm: no start-up costs).
  With ``--method adaptive`` the job runs ``mechanism: {method: adaptive}`` and the row records
  ``loop_share``: the loop's stage (select, measure, estimate) over the job's total.

Writes ``benchmarks/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from benchmarks.speed import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "scale"
D = 30
FILE_ROWS = 10_000_000
NUMPY_ROWS = 10_000_000
BLOCK_ROWS = 1_000_000


def row_blocks(n: int, d: int = D) -> Iterator[np.ndarray]:
    """The generated table's first ``n`` rows (correlated Gaussian clipped to [-1, 1], seeded by
    ``d``), in blocks of at most :data:`BLOCK_ROWS`."""
    rng = np.random.default_rng(d)
    mix = rng.normal(size=(d, d)) / np.sqrt(d)
    for start in range(0, n, BLOCK_ROWS):
        yield np.clip(0.3 * rng.normal(size=(min(BLOCK_ROWS, n - start), d)) @ mix, -1, 1)


def make_table(n: int, d: int = D) -> Path:
    """A folder of Parquet files holding ``n`` generated rows (written once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = BUILD / f"table_n{n}_d{d}"
    done = folder / "_SUCCESS"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    blocks = row_blocks(n, d)
    schema = pa.schema([(f"c{i}", pa.float64()) for i in range(d)])
    for part, first in enumerate(range(0, n, FILE_ROWS)):
        rows_in_file = min(FILE_ROWS, n - first)
        with pq.ParquetWriter(folder / f"part-{part:05d}.parquet", schema) as writer:
            for _ in range(0, rows_in_file, BLOCK_ROWS):
                x = next(blocks)
                writer.write_table(
                    pa.table({f"c{i}": x[:, i] for i in range(d)}), row_group_size=250_000
                )
        print(f"  wrote {first + rows_in_file:,} / {n:,} rows", flush=True)
    done.touch()
    return folder


def run_numpy(folder: str, n: int, d: int) -> dict:
    import pyarrow.parquet as pq

    from dpsmooth_spark.core.kernel import partial_sums
    from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams

    degree = SynthesizerParams().data_pass_degree(d)
    limit = min(n, NUMPY_ROWS)

    def batches():
        seen = 0
        for path in sorted(Path(folder).glob("*.parquet")):
            for b in pq.ParquetFile(path).iter_batches(batch_size=65_536):
                if seen >= limit:
                    return
                yield np.column_stack([b.column(i).to_numpy() for i in range(d)])
                seen += b.num_rows

    start = time.perf_counter()
    sums = partial_sums(batches(), -np.ones(d), np.ones(d), degree)
    seconds = time.perf_counter() - start
    return {"rows_read": sums.rows_seen, "seconds": seconds, "rows_per_s": sums.rows_seen / seconds}


class JvmPeak:
    """Samples the RSS of this process's JVM children (Spark's gateway) until stopped."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self) -> list[int]:
        pids, frontier = [], [os.getpid()]
        while frontier:
            pid = frontier.pop()
            try:
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            pids += [int(k) for k in kids]
            frontier += [int(k) for k in kids]
        return pids

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            for pid in self._children():
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    if "java" not in Path(f"/proc/{pid}/comm").read_text():
                        continue
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_mb = max(self.peak_mb, int(line.split()[1]) / 1024)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


LOOP_STAGE = "select, measure, estimate"


def run_job(folder: str, n: int, d: int, method: str = "fixed") -> dict:
    from dpsmooth_spark.config import parse_config
    from dpsmooth_spark.pipeline.synthesize import run_synthesize
    from dpsmooth_spark.spark import data_pass, session

    out = str(BUILD / f"release_n{n}_d{d}_{method}")
    config = parse_config(
        {
            "input": {"path": folder},
            "columns": [{"name": f"c{i}", "lower": -1, "upper": 1} for i in range(d)],
            "privacy": {"epsilon": 1.0},
            "mechanism": {"method": method},
            "output": {"path": out, "mode": "overwrite", "rows": 100_000},
            "ledger": {"path": out + ".ledger.sqlite"},
            "spark": {"master": "local[2]"},
        }
    )
    jvm = JvmPeak()
    start = time.perf_counter()
    report = run_synthesize(config, quiet=True)
    total = time.perf_counter() - start
    stages = report.manifest["stage_seconds"]
    pass_seconds = stages.get("data pass", float("nan"))
    warm = None
    if n < 10**8 and method == "fixed":
        start = time.perf_counter()
        data_pass.exact_sums_arrow(
            session.get_session(), folder, config.public_bounds(), config.mechanism.pass_spec(d)
        )
        warm = n / (time.perf_counter() - start)
    return {
        "total_seconds": total,
        "stage_seconds": stages,
        "pass_rows_per_s": n / pass_seconds,
        "warm_pass_rows_per_s": warm,
        **(
            {"basis_size": report.manifest["mechanism"]["basis"]["size"]}
            if method == "fixed"
            else {"loop_share": stages[LOOP_STAGE] / total}
        ),
        "driver_peak_rss_mb": peak_rss_mb(),
        "jvm_peak_rss_mb": jvm.stop(),
    }


def run_child(arguments: list[str], failure: str) -> dict:
    """``python -m benchmarks ARGUMENTS`` in a fresh process (its own JVM and peak RSS); the
    JSON it prints after ``RESULT ``. Exits with ``failure`` where it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *arguments],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(failure)
    return json.loads([x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1][7:])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--sizes", nargs="*", type=int, default=[6, 7, 8], help="exponents of 10")
    ap.add_argument(
        "--rows", nargs="*", type=int, default=[], help="row counts (instead of --sizes)"
    )
    ap.add_argument("--d", type=int, default=D, help="columns")
    ap.add_argument("--method", choices=["fixed", "adaptive"], default="fixed")
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        mode, folder, n, d, method = args.child
        result = (
            run_numpy(folder, int(n), int(d))
            if mode == "numpy"
            else run_job(folder, int(n), int(d), method)
        )
        print("RESULT " + json.dumps(result), flush=True)
        return
    out_path = ROOT / "benchmarks" / "scale.json"
    previous = json.loads(out_path.read_text())["sizes"] if out_path.exists() else []
    rows = {(r["n"], r["d"], r.get("method", "fixed")): r for r in previous}
    for n in args.rows or [10**exponent for exponent in args.sizes]:
        folder = make_table(n, args.d)
        if args.generate_only:
            continue
        row: dict = {"n": n, "d": args.d, "method": args.method}
        for mode in ("numpy", "job"):
            row[mode] = run_child(
                ["scale", "--child", mode, str(folder), str(n), str(args.d), args.method],
                f"{mode} run failed at n = {n}",
            )
        row["pass_over_numpy_1proc"] = row["job"]["pass_rows_per_s"] / row["numpy"]["rows_per_s"]
        row["pass_over_numpy_2cores"] = row["pass_over_numpy_1proc"] / 2
        if row["job"]["warm_pass_rows_per_s"]:
            row["warm_pass_over_numpy_2cores"] = (
                row["job"]["warm_pass_rows_per_s"] / row["numpy"]["rows_per_s"] / 2
            )
        rows[(n, args.d, args.method)] = row
        print(
            json.dumps(
                {
                    "n": n,
                    "total_s": row["job"]["total_seconds"],
                    "pass_rows_per_s": row["job"]["pass_rows_per_s"],
                    "numpy_rows_per_s": row["numpy"]["rows_per_s"],
                    "driver_rss_mb": row["job"]["driver_peak_rss_mb"],
                    "jvm_rss_mb": row["job"]["jvm_peak_rss_mb"],
                }
            ),
            flush=True,
        )
        out_path.write_text(
            json.dumps(
                {"machine": "2 cores, local[2]", "sizes": [rows[k] for k in sorted(rows)]}, indent=1
            )
        )


if __name__ == "__main__":
    main()
