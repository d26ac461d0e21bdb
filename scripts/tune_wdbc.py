"""Measure the smooth-query error of WDBC releases for candidate mechanism settings.

Runs the mechanism in memory (the same code the Spark job runs on the driver, fed by the same
kernel), scores each setting with the paper's protocol (Section 5.2.1) on the 30 features, and
writes ``benchmarks/tune_wdbc.json``. The defaults in ``SmoothPCAParams`` come from this table.

    python scripts/tune_wdbc.py [--queries 2000] [--releases 5] [--epsilons 0.1 1 10]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

from dpsmooth_spark.core.basis import scale_to_unit
from dpsmooth_spark.evaluation.queries import PAPER_SIGMAS, GaussianMixtureQueries, query_errors
from dpsmooth_spark.mechanisms.smooth_pca import SmoothPCAParams, SmoothSynthesizer, sample_scaled

ROOT = Path(__file__).resolve().parents[1]
FEATURES = 30

GRID = {
    "basis": [("marginal", 2), ("marginal", 3), ("pairwise", 2), ("auto", None)],
    "spread": [1.0, 1.2, 1.5],
    "jitter": [0.0, 0.3],
    "strategy": ["moments", "psi"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--releases", type=int, default=5)
    ap.add_argument("--epsilons", type=float, nargs="+", default=[1.0])
    ap.add_argument("--quick", action="store_true", help="only the default parameters")
    ap.add_argument("--grid", type=json.loads, default=None,
                    help='JSON list of parameter dicts to try instead of the built-in grid')
    ap.add_argument("--out", default="tune_wdbc.json")
    args = ap.parse_args()

    config = yaml.safe_load((ROOT / "conf/examples/wdbc.yaml").read_text())
    bounds = {c["name"]: (c["lower"], c["upper"]) for c in config["columns"]}
    table = pq.read_table(ROOT / "data/wdbc.parquet")
    lower = np.array([b[0] for b in bounds.values()])
    upper = np.array([b[1] for b in bounds.values()])
    data = np.column_stack([table[c].to_numpy().astype(float) for c in bounds])
    real = np.clip(scale_to_unit(data, lower, upper), -1, 1)[:, :FEATURES]
    queries = GaussianMixtureQueries.draw(FEATURES, args.queries, np.random.default_rng(2024))
    truth_cache = queries.answers(real, PAPER_SIGMAS)

    settings = [{}] if args.quick else args.grid or [
        {"basis": b[0], "degree": b[1], "spread": s, "jitter": j, "candidate_strategy": st}
        for b, s, j, st in itertools.product(GRID["basis"], GRID["spread"], GRID["jitter"], GRID["strategy"])
    ]
    rows = []
    for eps in args.epsilons:
        for setting in settings:
            params = SmoothPCAParams(**setting)
            worst = {s: [] for s in PAPER_SIGMAS}
            t0 = time.perf_counter()
            for rep in range(args.releases):
                synth = SmoothSynthesizer(eps, bounds, params=params, random_state=1000 + rep).fit(table)
                scaled = sample_scaled(synth.result_, real.shape[0] * 4, synth.sampling_rng_)[:, :FEATURES]
                answers = queries.answers(scaled, PAPER_SIGMAS)
                for s, sigma in enumerate(PAPER_SIGMAS):
                    rel = np.abs(truth_cache[s] - answers[s]) / truth_cache[s]
                    worst[sigma].append(float(rel.max()))
            row = {"epsilon": eps, **setting,
                   "worst_rel_mean": {str(k): float(np.mean(v)) for k, v in worst.items()},
                   "basis_chosen": f"{synth.result_.summary.basis.size} functions",
                   "support": synth.result_.support_size,
                   "seconds_per_release": (time.perf_counter() - t0) / args.releases}
            rows.append(row)
            print(json.dumps(row))
    out = ROOT / "benchmarks" / args.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"queries": args.queries, "releases": args.releases, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
