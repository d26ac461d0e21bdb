"""Driver stage times and peak memory over a grid of basis sizes R and candidate counts C.

    python -m benchmarks stages                       # the full grid (about 15 minutes)
    python -m benchmarks stages --bases pairs:1 --candidates 3000

Everything the driver does after the data pass, on the exact sums of one generated table
(10^6 rows x 30 columns, correlated Gaussian clipped to [-1, 1], the same generator as
``benchmarks.speed``), at epsilon = 1, default parameters except the basis and C:

* ``measure``: noise on the count, histograms and basis sums (and PSI where it runs);
* ``candidates``: drawing the C candidates and evaluating the R measured functions at them
  (float32, divided by their noise);
* ``fit``: the closest fit and the maximum-entropy projection (``core/maxent.py``);
* ``sample``: 10^5 records from the weights.

Each grid point runs in a fresh process so that its peak RSS (``VmHWM`` of the Python process;
the numbers include the interpreter, numpy and scipy, about 170 MB) is its own. R counts every
measured function (basis terms plus the histogram cells the joint fit keeps). Writes
``benchmarks/stages.json``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.speed import peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "bench"
BASES = ("marginal:3", "pairs:2", "pairs:3", "pairs:4")
CANDIDATES = (3000, 10_000, 100_000)
DEGREE = 4
"""Chebyshev degree of the sums: enough for ``pairs:4`` (pair terms of total degree 4)."""


def exact_sums(n: int, d: int) -> Path:
    """The table's exact sums (numpy kernel), cached under ``build/bench``."""
    from benchmarks.speed import correlated_batches
    from dpsmooth_spark.core.kernel import partial_sums
    from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams

    spec = SynthesizerParams(degree=DEGREE).pass_spec(d)
    path = BUILD / f"sums_n{n}_d{d}_g{spec.degree}.pickle"
    if path.exists():
        return path
    BUILD.mkdir(parents=True, exist_ok=True)
    sums = partial_sums(correlated_batches(n, d), -np.ones(d), np.ones(d), spec)
    path.write_bytes(pickle.dumps(sums))
    return path


def run_point(sums_path: str, basis: str, candidates: int) -> dict:
    """Every driver stage for one (basis, C), timed."""
    from dpsmooth_spark.core.bounds import PublicBounds
    from dpsmooth_spark.mechanisms.synthesizer import (
        SynthesizerParams,
        fit_from_summary,
        release_summary,
        sample_scaled,
    )
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant
    from dpsmooth_spark.privacy.noise import NoiseSource

    sums = pickle.loads(Path(sums_path).read_bytes())
    d = sums.d
    kind, degree = basis.split(":")
    params = SynthesizerParams(basis=kind, degree=int(degree), candidates=candidates)
    bounds = PublicBounds.from_mapping({f"c{i}": (-1.0, 1.0) for i in range(d)})
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    summary = release_summary(
        sums, bounds, params, PrivacyAccountant(1.0, 0.0), NoiseSource(rng), rng
    )
    measure = time.perf_counter() - start
    result = fit_from_summary(summary, params, rng)
    start = time.perf_counter()
    sample_scaled(result, 100_000, rng)
    sample = time.perf_counter() - start
    seconds = {"measure": measure, **result.timings, "sample": sample}
    return {
        "basis": basis,
        "basis_size": summary.functions,
        "R": result.functions,
        "C": candidates,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "driver_seconds": round(sum(v for k, v in seconds.items() if "." not in k), 3),
        "fit_seconds_after_noise": round(seconds["candidates"] + seconds["fit"] + sample, 3),
        "chi2_per_function": round(result.chi2 / result.functions, 4),
        "effective_support": result.support_size,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def markdown(points: list[dict]) -> str:
    """The results as a Markdown table (``docs/results.md``)."""
    lines = [
        "| basis | R | C | candidates s | closest fit s | maxent s | fit after noise s | chi2 / R "
        "| effective support | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        if "error" in p:
            lines.append(
                f"| {p['basis']} | | {p['C']} | failed: {' '.join(p['error'])} | | | | | | |"
            )
            continue
        t = p["seconds"]
        lines.append(
            f"| {p['basis']} | {p['R']} | {p['C']:,} | {t['candidates']:.1f} | "
            f"{t.get('fit.closest', 0):.1f} | "
            f"{t.get('fit.maxent', 0):.1f} | {p['fit_seconds_after_noise']:.1f} | "
            f"{p['chi2_per_function']:.2f} | "
            f"{p['effective_support']:,} | {p['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--bases", default=",".join(BASES), help="kind:degree, comma separated")
    ap.add_argument("--candidates", default=",".join(map(str, CANDIDATES)))
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--columns", type=int, default=30)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "stages.json")
    ap.add_argument("--markdown", type=Path, help="only print the Markdown table of a results file")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())["points"]))
        return
    if args.child:
        print("RESULT " + json.dumps(run_point(args.child[0], args.child[1], int(args.child[2]))))
        return
    sums = exact_sums(args.rows, args.columns)
    points = []
    for basis in args.bases.split(","):
        for c in map(int, args.candidates.split(",")):
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks", "stages", "--child", str(sums), basis, str(c)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=False,
            )
            lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                points.append(
                    {"basis": basis, "C": c, "error": proc.stderr.strip().splitlines()[-1:]}
                )
            else:
                points.append(json.loads(lines[-1][7:]))
            print(json.dumps(points[-1]), flush=True)
    args.out.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks stages "
                + " ".join(argv if argv is not None else sys.argv[2:]),
                "machine": "2 cores",
                "rows": args.rows,
                "columns": args.columns,
                "epsilon": 1.0,
                "points": points,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
