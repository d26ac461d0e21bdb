"""The other papers' mechanisms beside the smooth-query ones, on the same tasks.

    python -m benchmarks mechanisms          # a few minutes on 2 cores

1. Kernel density (the Bernstein paper's Figure 1 setup): 5000 points from
   0.4 N(0.5, 0.02) + 0.6 N(0.75, 0.005) (variances), Gaussian KDE with bandwidth 0.1 (the paper
   does not state its bandwidth), k = 20. Sup error over 1001 points of [0, 1] vs epsilon for the
   Bernstein mechanism at several h, its nearest-lattice-point baseline, our smooth summary
   (Algorithms 1-2, d = 1, answering the KDE at each point as a Gaussian query; both clipped to
   the density's range [0, sup K]) and the KDE of
   our synthetic data (``synthesize``'s mechanism, 20,000 rows). Means over repeated releases.
2. Distance queries: mean l1 (and l2) distance from 500 random query points to a generated
   3-column table, max absolute error for the Huang-Roth release, the synthetic data, and the
   Laplace mechanism on the 500 queries themselves (count + sums, L1 sensitivity 500 x diameter).

Writes ``benchmarks/mechanisms.json`` and ``benchmarks/mechanisms_kde.png`` (sup error vs epsilon,
the shape of the paper's Figure 1); docs/mechanisms.md shows the tables. ``--plot-only`` redraws
the figure from the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from dpsmooth_spark.core.approximation import query_coefficients
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.mechanisms.bernstein_release import (
    BernsteinParams,
    kde_bandwidths,
    kde_sums,
    lattice_points,
    release_kde,
)
from dpsmooth_spark.mechanisms.distance_release import (
    DistanceParams,
    Embedding,
    release_from_records,
)
from dpsmooth_spark.mechanisms.smooth_summary import SummaryParams, release_tensor_summary
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

ROOT = Path(__file__).resolve().parents[1]
EPSILONS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
ORDERS = (1, 2, 3, 5, 10)


def figure1_data(seed: int, n: int = 5000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    first = rng.random(n) < 0.4
    x = np.where(first, rng.normal(0.5, math.sqrt(0.02), n), rng.normal(0.75, math.sqrt(0.005), n))
    return np.clip(x, 0, 1)[:, None]


def kde_comparison(repeats: int) -> list[dict]:
    x = figure1_data(0)
    n = x.shape[0]
    lower, upper = np.zeros(1), np.ones(1)
    params = BernsteinParams(k=20, bandwidth=0.1)
    widths = kde_bandwidths(params, lower, upper)
    lattice_sums = kde_sums(x, lattice_points(20, lower, upper), widths)
    y = np.linspace(0, 1, 1001)[:, None]
    truth = kde_sums(x, y, widths) / n
    bounds = PublicBounds.from_mapping({"x": (0.0, 1.0)})
    summary_params = SummaryParams()
    tensor = partial_sums([x], bounds.lower, bounds.upper, PassSpec(degree=1, tensor_degree=40))
    coefficient_cache: dict[int, np.ndarray] = {}

    def summary_coefficients(t: int) -> np.ndarray:
        if t not in coefficient_cache:
            rows = []
            for point in y[:, 0]:

                def f(s, point=point):
                    return np.exp(-0.5 * ((bounds.unscale(s)[:, 0] - point) / widths[0]) ** 2) / (
                        math.sqrt(2 * math.pi) * widths[0]
                    )

                rows.append(query_coefficients(f, 1, t, "chebyshev", summary_params.smoothness))
            coefficient_cache[t] = np.array(rows)
        return coefficient_cache[t]

    out = []
    for eps in EPSILONS:
        row: dict = {"epsilon": eps}
        errors: dict[str, list[float]] = {}
        for rep in range(repeats):
            noise = NoiseSource(np.random.default_rng(1000 * rep + 7))
            release = release_kde(
                lattice_sums, n, params, ["x"], lower, upper, PrivacyAccountant(eps), noise
            )
            for h in ORDERS:
                errors.setdefault(f"bernstein_h{h}", []).append(
                    float(np.abs(release.evaluate(y, h) - truth).max())
                )
            errors.setdefault("nearest_lattice", []).append(
                float(np.abs(release.nearest(y) - truth).max())
            )
            summary = release_tensor_summary(
                tensor, bounds, summary_params, PrivacyAccountant(eps), noise
            )
            answers = np.clip(
                summary_coefficients(summary.degree) @ summary.answers.ravel(),
                0.0,
                1.0 / (math.sqrt(2 * math.pi) * widths[0]),
            )  # as the Bernstein KDE
            errors.setdefault("smooth_summary", []).append(float(np.abs(answers - truth).max()))
            row["summary_degree"] = summary.degree
        for rep in range(max(1, repeats // 10)):
            synth = ArraySynthesizer(eps, {"x": (0.0, 1.0)}, random_state=rep).fit({"x": x[:, 0]})
            sample = synth.sample(20_000)["x"][:, None]
            errors.setdefault("synthetic_data", []).append(
                float(np.abs(kde_sums(sample, y, widths) / sample.shape[0] - truth).max())
            )
        row["sup_error"] = {key: float(np.mean(v)) for key, v in errors.items()}
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def distance_table(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.3], [0.0, 0.0, 1.0]])
    return np.clip(0.5 + 0.15 * z, 0, 1) * [10.0, 2.0, 100.0] + [0.0, -1.0, 50.0]


DIST_BOUNDS = {"a": (0.0, 10.0), "b": (-1.0, 1.0), "c": (50.0, 150.0)}


def distance_comparison(repeats: int) -> list[dict]:
    bounds = PublicBounds.from_mapping(DIST_BOUNDS)
    widths = bounds.upper - bounds.lower
    rng = np.random.default_rng(5)
    queries = bounds.lower + rng.uniform(size=(500, 3)) * widths
    out = []
    for n in (1000, 10_000, 100_000):
        x = distance_table(n, 1)
        truth = {
            "l1": np.abs(x[None] - queries[:, None]).sum(axis=2).mean(axis=1),
            "l2": np.linalg.norm(x[None] - queries[:, None], axis=2).mean(axis=1),
        }
        for eps in (0.1, 1.0, 10.0):
            row: dict = {
                "n": n,
                "epsilon": eps,
                "mean_true_l1": float(truth["l1"].mean()),
                "mean_true_l2": float(truth["l2"].mean()),
            }
            errors: dict[str, list[float]] = {}
            for rep in range(repeats):
                noise = NoiseSource(np.random.default_rng(100 * rep + 3))
                for metric, dim in (("l1", None), ("l2", 16), ("l2", 64)):
                    params = DistanceParams(metric=metric, projection_dim=dim or 32)
                    emb = Embedding.build(params, bounds, None, np.random.default_rng(rep))
                    release = release_from_records(x, emb, params, PrivacyAccountant(eps), noise)
                    key = f"huang_roth_{metric}" + (f"_m{dim}" if dim else "")
                    errors.setdefault(key, []).append(
                        float(np.abs(release.answer(queries) - truth[metric]).max())
                    )
                # the Laplace mechanism on these 500 queries: 5% count, 95% sums
                for metric in ("l1", "l2"):
                    diameter = widths.sum() if metric == "l1" else float(np.linalg.norm(widths))
                    accountant = PrivacyAccountant(eps)
                    count = float(noise.laplace(np.array([n]), 1 / (0.05 * eps))[0])
                    accountant.charge("count", 1.0, 1 / (0.05 * eps))
                    scale = 500 * diameter / (0.95 * eps)
                    sums = noise.laplace(truth[metric] * n, scale)
                    accountant.charge("sums", 500 * diameter, scale)
                    answers = np.clip(sums / max(count, 1.0), 0, diameter)
                    errors.setdefault(f"laplace_{metric}", []).append(
                        float(np.abs(answers - truth[metric]).max())
                    )
                synth = ArraySynthesizer(eps, DIST_BOUNDS, random_state=rep).fit(
                    {c: x[:, i] for i, c in enumerate(DIST_BOUNDS)}
                )
                sample = synth.sample(20_000)
                s = np.column_stack([sample[c] for c in DIST_BOUNDS])
                for metric in ("l1", "l2"):
                    d = (
                        np.abs(s[None] - queries[:, None]).sum(axis=2)
                        if metric == "l1"
                        else np.linalg.norm(s[None] - queries[:, None], axis=2)
                    )
                    errors.setdefault(f"synthetic_{metric}", []).append(
                        float(np.abs(d.mean(axis=1) - truth[metric]).max())
                    )
            row["max_abs_error"] = {key: float(np.mean(v)) for key, v in errors.items()}
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def plot(result: dict, path: Path) -> None:
    """Sup error of the KDE release vs epsilon (log-log), one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["kde_figure1"]
    eps = [r["epsilon"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for key, label, style in [
        *[(f"bernstein_h{h}", f"Bernstein h = {h}", "-o") for h in ORDERS],
        ("nearest_lattice", "nearest lattice point (baseline)", "--s"),
        ("smooth_summary", "smooth summary (Alg. 1-2)", "-.^"),
        ("synthetic_data", "synthetic data", ":v"),
    ]:
        ax.plot(eps, [r["sup_error"][key] for r in rows], style, label=label, markersize=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("sup error of the KDE (mean of releases)")
    ax.set_title("Private KDE, 5000 points, 0.4 N(0.5, 0.02) + 0.6 N(0.75, 0.005), k = 20")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks mechanisms",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--plot-only", action="store_true")
    args = ap.parse_args(argv)
    out = ROOT / "benchmarks" / "mechanisms.json"
    if not args.plot_only:
        start = time.perf_counter()
        result = {
            "kde_figure1": kde_comparison(repeats=30),
            "distances": distance_comparison(repeats=3),
        }
        result["seconds"] = time.perf_counter() - start
        out.write_text(json.dumps(result, indent=1))
    plot(json.loads(out.read_text()), ROOT / "benchmarks" / "mechanisms_kde.png")


if __name__ == "__main__":
    main()
