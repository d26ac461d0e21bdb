"""Accuracy at scale: how close the fitted distribution's correlations are to the table's.

    python -m benchmarks accuracy                          # 10^6 and 10^7 rows, auto and pairs:2
    python -m benchmarks accuracy --sizes 7 --bases auto --releases 3

On the generated tables of ``benchmarks scale`` (correlated Gaussian clipped to [-1, 1], d = 30,
written under ``build/scale/`` when missing), epsilon = 1, secure noise, default parameters
except the basis: the exact sums (numpy kernel, cached under ``build/scale/``), then every driver
stage, then the correlation matrix of the fitted distribution itself (the weights over the
candidates, so no sampling noise), against the table's. Per release: mean and max absolute
error over the column pairs, the fit's chi-square per measured function, and the driver seconds.
Writes ``benchmarks/accuracy.json``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.scale import BUILD, ROOT, make_table


def exact_sums(n: int, d: int):
    """The table's exact sums at the default data-pass degree (cached)."""
    import pyarrow.dataset as ds

    from dpsmooth_spark.core.kernel import partial_sums
    from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams

    spec = SynthesizerParams().pass_spec(d)
    cache = BUILD / f"sums_n{n}_d{d}_g{spec.degree}.pickle"
    if cache.exists():
        return pickle.loads(cache.read_bytes())
    dataset = ds.dataset(make_table(n, d), format="parquet")
    batches = (
        np.column_stack([b.column(i).to_numpy() for i in range(d)])
        for b in dataset.to_batches(batch_size=262_144)
    )
    sums = partial_sums(batches, -np.ones(d), np.ones(d), spec)
    cache.write_bytes(pickle.dumps(sums))
    return sums


def correlation(weights: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Correlation matrix of the distribution ``weights`` over ``points``."""
    from dpsmooth_spark.core.marginals import correlation_from_covariance

    mean = weights @ points
    return correlation_from_covariance(
        (points * weights[:, None]).T @ points - np.outer(mean, mean)
    )


def release_errors(sums, truth: np.ndarray, basis: str, seed: int) -> dict:
    """One release's correlation error against ``truth`` (the table's correlation matrix)."""
    from dpsmooth_spark.core.bounds import PublicBounds
    from dpsmooth_spark.mechanisms.synthesizer import (
        SynthesizerParams,
        fit_from_summary,
        release_summary,
    )
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant
    from dpsmooth_spark.privacy.noise import NoiseSource

    d = sums.d
    kw = (
        {}
        if basis == "auto"
        else {"basis": basis.split(":")[0], "degree": int(basis.split(":")[1])}
    )
    params = SynthesizerParams(**kw)
    bounds = PublicBounds.from_mapping({f"c{i}": (-1.0, 1.0) for i in range(d)})
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    summary = release_summary(sums, bounds, params, PrivacyAccountant(1.0), NoiseSource(), rng)
    result = fit_from_summary(summary, params, rng)
    seconds = time.perf_counter() - start
    pairs = np.triu_indices(d, 1)
    error = np.abs(correlation(result.weights, result.candidates) - truth)[pairs]
    return {
        "basis": basis,
        "basis_size": summary.functions,
        "release": seed,
        "corr_error_mean": round(float(error.mean()), 4),
        "corr_error_max": round(float(error.max()), 4),
        "mean_abs_corr": round(float(np.abs(truth[pairs]).mean()), 4),
        "chi2_per_function": round(result.chi2 / result.functions, 3),
        "fit_closest_s": round(result.timings.get("fit.closest", 0.0), 1),
        "driver_s": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> None:
    from dpsmooth_spark.core.marginals import correlation_from_covariance

    ap = argparse.ArgumentParser(
        prog="python -m benchmarks accuracy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--sizes", nargs="*", type=int, default=[6, 7], help="exponents of 10")
    ap.add_argument("--bases", default="auto,pairs:2")
    ap.add_argument("--releases", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "accuracy.json")
    args = ap.parse_args(argv)
    runs = []
    for exponent in args.sizes:
        n = 10**exponent
        sums = exact_sums(n, 30)
        mean = sums.first_moments() / sums.count
        truth = correlation_from_covariance(
            sums.second_moments() / sums.count - np.outer(mean, mean)
        )
        for basis in args.bases.split(","):
            for seed in range(args.releases):
                runs.append({"n": n, "d": 30, **release_errors(sums, truth, basis, seed)})
                print(json.dumps(runs[-1]), flush=True)
    args.out.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks accuracy " + " ".join(argv or sys.argv[2:]),
                "epsilon": 1.0,
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
