"""Release quality on WDBC against baselines, with the classifier test of the paper's Table 5.

    python -m benchmarks quality [--queries 10000] [--releases 5]

For each epsilon in {0.1, 1, 10} and each of ``--releases`` random 50/50 splits of WDBC: release
from the training half, then score against the training half (queries, marginals, correlations)
and train an RBF SVM on the released rows (label rounded) to classify the real test half.
Methods: ours (``synthesize`` defaults, in memory), ``uniform``, ``independent-laplace`` (same
epsilon) and the non-private floor (a random half of the training rows; its SVM trains on the
whole training half). Writes ``benchmarks/eval_wdbc.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.evaluation.baselines import independent_laplace, real_half, uniform_rows
from dpsmooth_spark.evaluation.metrics import (
    correlation_difference,
    distinct_rows,
    marginal_wasserstein,
    svm_auc,
)
from dpsmooth_spark.evaluation.queries import PAPER_SIGMAS, PAPER_WDBC_EPS1, answer_errors
from dpsmooth_spark.evaluation.release_metrics import QuerySets
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams, sample_scaled
from dpsmooth_spark.privacy.noise import NoiseSource

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("ours", "uniform", "independent-laplace", "real-half (non-private)")


PARAMS: dict = {}


def release(method: str, train: np.ndarray, eps: float, bounds: dict, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if method == "ours":
        unit = {name: (-1.0, 1.0) for name in bounds}
        params = SynthesizerParams(**PARAMS)
        synth = ArraySynthesizer(eps, unit, params=params, random_state=seed).fit(
            {name: train[:, i] for i, name in enumerate(bounds)}
        )
        return sample_scaled(
            synth.result_, max(1, round(synth.result_.summary.noisy_count)), synth.sampling_rng_
        )
    if method == "uniform":
        return uniform_rows(train.shape[1], train.shape[0], rng)
    if method == "independent-laplace":
        return independent_laplace(train, eps, train.shape[0], rng, NoiseSource(rng))
    return real_half(train, rng)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--releases", type=int, default=5)
    ap.add_argument(
        "--params", type=json.loads, default={}, help="SynthesizerParams overrides for ours"
    )
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--out", default="eval_wdbc.json")
    args = ap.parse_args(argv)
    PARAMS.update(args.params)
    config = yaml.safe_load((ROOT / "conf/examples/wdbc.yaml").read_text())
    bounds = {
        c["name"]: (c.get("lower", 0.0), c.get("upper", 1.0)) for c in config["columns"]
    }  # label: values [0, 1]
    public = PublicBounds.from_mapping(bounds)
    table = pq.read_table(ROOT / "data/wdbc.parquet")
    data = public.scale(np.column_stack([table[c].to_numpy() for c in bounds]))
    label = len(bounds) - 1
    features = np.arange(label)
    queries = QuerySets.draw(data.shape[1], features, args.queries, seed=2016)
    rows = []
    for eps in (0.1, 1.0, 10.0):
        for method in args.methods:
            acc: dict[str, list] = {
                "worst_rel": [],
                "mean_rel": [],
                "pairwise_mean_abs": [],
                "w1_mean": [],
                "corr_diff": [],
                "distinct": [],
                "auc": [],
            }
            for rep in range(args.releases):
                split = np.random.default_rng(rep).permutation(data.shape[0])
                train, test = data[split[: len(split) // 2]], data[split[len(split) // 2 :]]
                fake = release(method, train, eps, bounds, 1000 + rep)
                truth_paper, truth_pairs = queries.split(queries.sums(train) / train.shape[0])
                got_paper, got_pairs = queries.split(queries.sums(fake) / fake.shape[0])
                errs = answer_errors(truth_paper, got_paper)
                acc["worst_rel"].append(errs["worst_rel"])
                acc["mean_rel"].append(errs["mean_rel"])
                acc["pairwise_mean_abs"].append(np.abs(truth_pairs - got_pairs).mean())
                acc["w1_mean"].append(marginal_wasserstein(train, fake).mean())
                acc["corr_diff"].append(correlation_difference(train, fake))
                acc["distinct"].append(distinct_rows(fake))
                y_test = np.rint((test[:, label] + 1) / 2)
                trainer = train if method.startswith("real") else fake
                acc["auc"].append(
                    svm_auc(
                        trainer[:, features],
                        (trainer[:, label] + 1) / 2,
                        test[:, features],
                        y_test,
                        seed=rep,
                    )
                )
            auc = np.array(acc["auc"], dtype=float)
            row = {
                "epsilon": eps,
                "method": method,
                "worst_rel": {
                    str(s): float(v)
                    for s, v in zip(PAPER_SIGMAS, np.mean(acc["worst_rel"], axis=0), strict=False)
                },
                "mean_rel": {
                    str(s): float(v)
                    for s, v in zip(PAPER_SIGMAS, np.mean(acc["mean_rel"], axis=0), strict=False)
                },
                "pairwise_mean_abs": float(np.mean(acc["pairwise_mean_abs"])),
                "marginal_w1_mean": float(np.mean(acc["w1_mean"])),
                "correlation_max_abs_diff": float(np.mean(acc["corr_diff"])),
                "distinct_rows": float(np.mean(acc["distinct"])),
                "auc_mean": float(np.nanmean(auc)) if np.isfinite(auc).any() else None,
                "auc_std": float(np.nanstd(auc)) if np.isfinite(auc).any() else None,
                "auc_all": [None if np.isnan(a) else float(a) for a in auc],
            }
            rows.append(row)
            print(
                json.dumps(
                    {k: row[k] for k in ("epsilon", "method", "auc_mean", "pairwise_mean_abs")}
                    | {"worst_rel_4": row["worst_rel"]["4.0"]}
                )
            )
    out = ROOT / "benchmarks" / args.out
    out.write_text(
        json.dumps(
            {
                "queries": args.queries,
                "releases": args.releases,
                "params": PARAMS,
                "paper_wdbc": PAPER_WDBC_EPS1,
                "rows": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
