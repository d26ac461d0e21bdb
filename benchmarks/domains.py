"""``python -m benchmarks domains``: DP bounds and DP categorical domains.

* ``bounds``: releases whose numeric bounds are ``auto`` inside a coarse public range 100 times
  wider than the documented bounds (centred on them), beside releases with the documented bounds
  and releases that use the coarse range itself as bounds, at one epsilon, pure DP. The auto
  bounds spend ``privacy.domain_fraction`` of the budget (the statistics get the rest, as in a
  release); every release is scored by ``shared/tools/fidelity.py`` in the documented bounds'
  units, its W1 baseline at the full epsilon. Tables: WDBC (569 rows, 30 features) and the
  generated ``correlated`` table at 5,000 and 50,000 rows and ``heavy_tails`` (5,000 rows).
  On WDBC also the documented bounds at the epsilon that the least budget any DP search needs
  would leave (:data:`PACKING_FLOOR`). In memory: the same grids, selection
  and synthesizer the Spark job runs (the pass's histograms are :meth:`QuantileGrid.counts`).
* ``values``: ``values: auto`` on a generated column of 5,000 levels (Zipf-like counts) through
  the partition selection; how many values above the 99.9%-detection count are found and the
  largest true count among the values not released, and the smallest among those released.

Writes ``benchmarks/domains.json``; docs/results.md has the tables.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from scipy.stats import norm

from benchmarks.fidelity import DEFAULT_TOOL, fidelity_numbers, release
from benchmarks.tables import TABLES, correlated
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.quantile_grid import QuantileGrid
from dpsmooth_spark.mechanisms.public_domains import (
    SELECTION_DELTA_SHARE,
    FoundBounds,
    dp_bounds,
    select_values,
    stage_budgets,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

ROOT = Path(__file__).resolve().parents[1]
WIDER = 100.0
PACKING_FLOOR = (0.12, 0.23)
"""Shares of epsilon 1 that any DP search of WDBC's 30 bounds needs (docs/results.md, "Auto
domains"): to place every column's data within one of 50 windows of a range 100 times wider
with probability 1/2 per column, and with probability 1/2 for all 30 together."""


def auto_bounds(
    data: np.ndarray,
    coarse: list[tuple[float, float]],
    fixed: set[int],
    accountant: PrivacyAccountant,
    fraction: float,
    noise: NoiseSource,
) -> tuple[list[tuple[float, float]], list[FoundBounds]]:
    """Each column's bounds by two DP quantiles in its coarse range (``fixed`` columns keep
    theirs), spending ``fraction`` of the accountant's budget; with the found bounds of the auto
    columns (their stated clamped share, ``FoundBounds.outside``)."""
    auto = [j for j in range(data.shape[1]) if j not in fixed]
    budget = stage_budgets(accountant, fraction, len(auto))
    found = list(coarse)
    details = []
    for j in auto:
        grid = QuantileGrid(*coarse[j])
        lin, log = grid.counts(data[:, j])
        b = dp_bounds(f"c{j}", grid, lin, log, budget, accountant, noise)
        found[j] = (b.lower, b.upper)
        details.append(b)
    accountant.available = 1.0 - fraction
    return found, details


def bounds_runs(tables: list[str], epsilon: float, fraction: float, releases: int) -> list[dict]:
    runs = []
    for name in tables:
        if name == "correlated_50k":
            data, mapping, label = correlated(n=50_000)
        else:
            data, mapping, label = TABLES[name]()
        bounds = PublicBounds.from_mapping(mapping)
        lab = bounds.columns.index(label)
        documented = list(zip(bounds.lower, bounds.upper, strict=True))
        coarse = [
            (lo - (WIDER - 1) / 2 * (hi - lo), hi + (WIDER - 1) / 2 * (hi - lo))
            for lo, hi in documented
        ]
        coarse[lab] = documented[lab]  # the 0/1 label keeps its values
        methods = ["documented", "auto", "coarse"]
        if name == "wdbc":  # the documented bounds at what the least DP search would leave
            methods += [f"documented_at_{1 - f:g}" for f in PACKING_FLOOR]
        for method in methods:
            for rep in range(releases):
                start = time.perf_counter()
                eps = epsilon
                used = coarse if method in ("auto", "coarse") else documented
                if method.startswith("documented_at_"):
                    eps = epsilon * float(method.removeprefix("documented_at_"))
                widths, clamped = [], {}
                if method == "auto":
                    acc = PrivacyAccountant(epsilon)
                    used, found = auto_bounds(data, coarse, {lab}, acc, fraction, NoiseSource())
                    eps = epsilon * acc.available
                    real = [
                        float(np.mean((data[:, j] < u[0]) | (data[:, j] > u[1])))
                        for j, u in enumerate(used)
                        if j != lab
                    ]
                    stated = [b.outside for b in found if b.outside is not None]
                    noise = [b.outside_std for b in found if b.outside_std is not None]
                    clamped = {
                        "unresolved": sum(not b.resolved for b in found),
                        "clamped_stated_mean": round(float(np.mean(stated)), 4) if stated else None,
                        "clamped_stated_std_mean": round(float(np.mean(noise)), 4)
                        if noise
                        else None,
                        "clamped_real_mean": round(float(np.mean(real)), 4),
                    }
                    widths = [
                        (u[1] - u[0]) / (d[1] - d[0])
                        for j, (u, d) in enumerate(zip(used, documented, strict=True))
                        if j != lab
                    ]
                mapping_used = dict(zip(bounds.columns, used, strict=True))
                clipped = np.clip(data, [u[0] for u in used], [u[1] for u in used])
                rel = PublicBounds.from_mapping(mapping_used)
                syn = release(
                    "ours",
                    clipped,
                    rel,
                    eps,
                    {"pair_columns": [label]},
                    np.random.default_rng(rep),
                    label,
                )
                numbers = fidelity_numbers(DEFAULT_TOOL, data, syn, bounds, epsilon)
                run = {
                    "table": name,
                    "rows": len(data),
                    "epsilon": epsilon,
                    "method": method,
                    "release": rep,
                    "seconds": round(time.perf_counter() - start, 2),
                    "w1_ratio": numbers["w1_ratio"],
                    "corr_ratio": numbers["corr_ratio"],
                    **(
                        {
                            "width_vs_documented_median": round(float(np.median(widths)), 3),
                            "width_vs_documented_max": round(float(np.max(widths)), 3),
                        }
                        if widths
                        else {}
                    ),
                    **clamped,
                }
                runs.append(run)
                print(json.dumps(run), flush=True)
    return runs


def zipf_column(rows: int, levels: int, seed: int = 0) -> np.ndarray:
    """``rows`` draws from ``levels`` values with probability proportional to ``1 / rank``."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, levels + 1)
    return rng.choice(levels, size=rows, p=p / p.sum())


def values_runs(
    rows: int, levels: int, epsilon: float, delta: float, fraction: float, releases: int
) -> list[dict]:
    column = zipf_column(rows, levels)
    counts = dict(zip(*np.unique(column, return_counts=True), strict=True))
    counts = {f"v{int(k)}": int(c) for k, c in counts.items()}
    runs = []
    for rep in range(releases):
        acc = PrivacyAccountant(epsilon, delta, selection_delta=delta * SELECTION_DELTA_SHARE)
        budget = stage_budgets(acc, fraction, 1)
        found = select_values(
            "code", counts, "other", budget, acc.selection_delta, acc, NoiseSource()
        )
        released = set(found.values) - {"other"}
        sure = found.threshold + found.noise_std * float(norm.isf(1e-3 / levels))
        above = {v for v, c in counts.items() if c >= sure}
        runs.append(
            {
                "rows": rows,
                "levels": levels,
                "levels_present": len(counts),
                "epsilon": epsilon,
                "delta": delta,
                "release": rep,
                "threshold": round(found.threshold, 1),
                "noise_std": round(found.noise_std, 2),
                "count_found_surely": round(sure, 1),
                "values_above_that": len(above),
                "of_them_found": len(above & released),
                "released": len(released),
                "smallest_count_released": min((counts[v] for v in released), default=None),
                "largest_count_not_released": max(
                    (c for v, c in counts.items() if v not in released), default=None
                ),
                "truncated": found.truncated,
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    return runs


def markdown(result: dict) -> str:
    """The two tables docs/results.md shows: per table and bounds, the mean ratios (and the auto
    bounds' width against the documented ones); per selection, what it found."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for run in result["bounds"]:
        groups.setdefault((run["table"], run["method"]), []).append(run)
    lines = [
        "| table | rows | bounds | releases | W1 ratio | corr ratio | width / documented "
        "| unresolved columns | clamped: stated (noise) / real |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (table, method), runs in groups.items():
        width = [r["width_vs_documented_median"] for r in runs if "width_vs_documented_median" in r]
        unresolved = [r["unresolved"] for r in runs if "unresolved" in r]
        stated = [
            r["clamped_stated_mean"] for r in runs if r.get("clamped_stated_mean") is not None
        ]
        noise = [r["clamped_stated_std_mean"] for r in runs if r.get("clamped_stated_std_mean")]
        real = [r["clamped_real_mean"] for r in runs if "clamped_real_mean" in r]
        clamp = (
            f"{np.mean(stated):.2%} (noise std {np.mean(noise):.2%}) / {np.mean(real):.2%}"
            if stated and noise
            else ""
        )
        lines.append(
            f"| {table} | {runs[0]['rows']:,} | {method} | {len(runs)} "
            f"| {np.mean([r['w1_ratio'] for r in runs]):.3g} "
            f"| {np.mean([r['corr_ratio'] for r in runs]):.3f} "
            f"| {f'{np.median(width):.2f}' if width else ''} "
            f"| {f'{np.mean(unresolved):.0f}' if unresolved else ''} | {clamp} |"
        )
    lines += [
        "",
        "| selection | threshold | values above the sure count | of them found | released "
        "| smallest count released | largest count not released |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in result["values"]:
        lines.append(
            f"| {v['release']} | {v['threshold']} | {v['values_above_that']} (count >= "
            f"{v['count_found_surely']}) | {v['of_them_found']} | {v['released']} "
            f"| {v['smallest_count_released']} | {v['largest_count_not_released']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks domains", description=__doc__)
    ap.add_argument("--tables", default="wdbc,correlated,correlated_50k,heavy_tails")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--fraction", type=float, default=0.1, help="privacy.domain_fraction")
    ap.add_argument("--releases", type=int, default=6)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "domains.json")
    ap.add_argument("--markdown", type=Path, help="only print the tables of a results file")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    result = {
        "command": "python -m benchmarks domains " + " ".join(argv or []),
        "bounds": bounds_runs(args.tables.split(","), args.epsilon, args.fraction, args.releases),
        "values": values_runs(100_000, 5_000, args.epsilon, 1e-6, args.fraction, args.releases),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
