"""Benchmarks of Algorithms 1-3: operator accuracy, answer accuracy vs the synthesizers, timings.

    python -m benchmarks summary [--queries 300] [--releases 5]

Writes ``benchmarks/summary.json``; docs/results.md summarises it.

1. Noise-free operators: sup error of the Chebyshev and Jackson (K = 2) coefficients on random
   points, and ``sum |c_r|``, for Gaussian kernels, a logistic and a polynomial, d = 1..4.
2. Accuracy at equal epsilon on WDBC-like low-d data (3 WDBC columns, n = 569, and a 3-D table
   of n = 10^5 drawn from a Gaussian fitted to them): mean absolute error over random normalised
   Gaussian-mixture queries (the paper's family, sigma in {0.5, 1, 2} for d = 3) of Algorithm 2
   (paper t and auto t, both operators), the practical synthesizer and Algorithm 3.
3. Timings: the summary kernel vs n, coefficients vs t and d (single process, this machine).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from dpsmooth_spark.core.approximation import evaluate_series, query_coefficients
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.evaluation.queries import GaussianMixtureQueries
from dpsmooth_spark.mechanisms.smooth_grid import (
    GridParams,
    fit_grid,
    plan_grid,
    release_grid,
    sample_grid,
)
from dpsmooth_spark.mechanisms.smooth_summary import (
    SummaryParams,
    answer,
    pass_degree,
    release_tensor_summary,
)
from dpsmooth_spark.mechanisms.stages import release_count
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, sample_scaled
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = {
    "mean_radius": (6.981, 28.11),
    "mean_texture": (9.71, 39.28),
    "mean_smoothness": (0.053, 0.163),
}
SIGMAS = (0.5, 1.0, 2.0)


def test_functions(d: int, rng: np.random.Generator) -> dict:
    centre = rng.uniform(-0.5, 0.5, d)
    w = rng.uniform(-2, 2, d)
    out = {
        f"gaussian-{s}": (lambda x, s=s: np.exp(-((x - centre) ** 2).sum(axis=1) / (2 * s * s)))
        for s in (0.3, 0.6, 1.2)
    }
    out["logistic"] = lambda x: 1 / (1 + np.exp(-(x @ w)))
    out["polynomial"] = lambda x: np.prod(x**2, axis=1) + x[:, 0] ** 5
    return out


def operators() -> list[dict]:
    rows = []
    rng = np.random.default_rng(0)
    for d in (1, 2, 3, 4):
        points = rng.uniform(-1, 1, size=(3000, d))
        degrees = (4, 8, 16, 32) if d <= 2 else (4, 8, 12)
        for name, f in test_functions(d, rng).items():
            for t in degrees:
                row = {"d": d, "query": name, "t": t}
                for op in ("chebyshev", "jackson"):
                    coef = query_coefficients(f, d, t, op, smoothness=2)
                    row[f"{op}_sup_error"] = float(
                        np.abs(evaluate_series(coef, points) - f(points)).max()
                    )
                    row[f"{op}_coef_l1"] = float(np.abs(coef).sum())
                rows.append(row)
    return rows


def mixture(queries: GaussianMixtureQueries, q: int, sigma: float):
    centres, weights = queries.centres[q], queries.weights[q]
    return lambda x: (
        weights * np.exp(-((x[:, None, :] - centres[None]) ** 2).sum(axis=2) / (2 * sigma**2))
    ).sum(axis=1)


def accuracy(table: np.ndarray, label: str, n_queries: int, releases: int) -> list[dict]:
    d = table.shape[1]
    bounds = PublicBounds.from_mapping({f"x{i}": (-1.0, 1.0) for i in range(d)})
    queries = GaussianMixtureQueries.draw(d, n_queries, np.random.default_rng(7))
    truth = queries.answers(table, SIGMAS)
    rows = []
    for eps in (0.1, 1.0, 10.0):
        errors: dict[str, list] = {}
        for rep in range(releases):
            seed = 100 + rep
            for rule in ("paper", "auto"):
                params = SummaryParams(degree_rule=rule, max_rows=1e6)
                sums = partial_sums(
                    [table], bounds.lower, bounds.upper, PassSpec(1, pass_degree(params, d, 0.0))
                )
                summary = release_tensor_summary(
                    sums,
                    bounds,
                    params,
                    PrivacyAccountant(eps),
                    NoiseSource(np.random.default_rng(seed)),
                )
                for op in ("chebyshev", "jackson"):
                    got = np.array(
                        [
                            [
                                answer(summary, mixture(queries, q, s), op, "scaled").value
                                for q in range(n_queries)
                            ]
                            for s in SIGMAS
                        ]
                    )
                    errors.setdefault(f"summary-{rule}-t-{op}", []).append(
                        np.abs(got - truth).mean(axis=1)
                    )
                errors.setdefault(f"summary-{rule}-t-degree", []).append(
                    np.full(len(SIGMAS), summary.degree)
                )
            synth = ArraySynthesizer(
                eps, {f"x{i}": (-1.0, 1.0) for i in range(d)}, random_state=seed
            )
            synth.fit({f"x{i}": table[:, i] for i in range(d)})
            fake = sample_scaled(
                synth.result_, max(len(table), 20_000), np.random.default_rng(seed)
            )
            errors.setdefault("synthesizer", []).append(
                np.abs(queries.answers(fake, SIGMAS) - truth).mean(axis=1)
            )
            grid_rows = _grid_release(table, bounds, eps, seed)
            if grid_rows is not None:
                errors.setdefault("grid (Algorithm 3)", []).append(
                    np.abs(queries.answers(grid_rows, SIGMAS) - truth).mean(axis=1)
                )
        for method, vals in errors.items():
            rows.append(
                {
                    "table": label,
                    "epsilon": eps,
                    "method": method,
                    "mean_abs_error": {
                        str(s): float(v)
                        for s, v in zip(SIGMAS, np.mean(vals, axis=0), strict=False)
                    },
                }
            )
            print(json.dumps(rows[-1]))
    return rows


def _grid_release(table, bounds, eps, seed):
    params = GridParams(rows=50_000)
    acc = PrivacyAccountant(eps)
    noise = NoiseSource(np.random.default_rng(seed))
    noisy = release_count(len(table), params.count_fraction, acc, noise)
    try:
        plan = plan_grid(noisy, bounds.d, params, 0.0)
    except ValueError:
        return None
    sums = partial_sums(
        [table], bounds.lower, bounds.upper, PassSpec(1, plan.degree, plan.grid_points)
    )
    release = release_grid(
        sums, bounds, plan, noisy, acc.share(1 - params.count_fraction), acc, noise
    )
    points, weights, _ = fit_grid(release)
    return sample_grid(points, weights, plan.rows, np.random.default_rng(seed))


def timings() -> dict:
    out: dict = {"summary_kernel_seconds": [], "coefficients_seconds": []}
    rng = np.random.default_rng(1)
    for n in (10**4, 10**5, 10**6):
        x = rng.uniform(-1, 1, size=(n, 3))
        start = time.perf_counter()
        partial_sums([x], -np.ones(3), np.ones(3), PassSpec(1, 6))
        out["summary_kernel_seconds"].append(
            {"n": n, "d": 3, "t": 6, "seconds": time.perf_counter() - start}
        )

    def f(x):
        return np.exp(-(x**2).sum(axis=1))

    for d, t in ((1, 64), (2, 16), (2, 64), (3, 8), (3, 16), (4, 8), (5, 6)):
        start = time.perf_counter()
        query_coefficients(f, d, t)
        out["coefficients_seconds"].append({"d": d, "t": t, "seconds": time.perf_counter() - start})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks summary",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--releases", type=int, default=5)
    args = ap.parse_args(argv)
    table = pq.read_table(ROOT / "data" / "wdbc.parquet")
    bounds = PublicBounds.from_mapping(COLUMNS)
    wdbc3 = bounds.scale(np.column_stack([table[c].to_numpy() for c in COLUMNS]))
    big = np.clip(
        np.random.default_rng(3).multivariate_normal(wdbc3.mean(axis=0), np.cov(wdbc3.T), 100_000),
        -1,
        1,
    )
    result = {
        "operators": operators(),
        "accuracy": accuracy(wdbc3, "wdbc-3 (n=569)", args.queries, args.releases)
        + accuracy(big, "wdbc-3-like (n=1e5)", args.queries, args.releases),
        "timings": timings(),
    }
    out = ROOT / "benchmarks" / "summary.json"
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
