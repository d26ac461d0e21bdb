"""How good is a release? Each headline metric for the release beside two baselines.

The baselines are tables any release should beat: ``independent`` (each column's marginal from
a DP histogram at the release's epsilon, columns drawn independently; without an epsilon, the
real marginals shuffled column by column) and ``uniform`` (uniform rows in the bounds). A metric
is marked ``better`` when the release beats both, ``worse`` when it loses to both, ``equal``
when all three tie (no value on a bound, say), ``between`` otherwise. The definitions follow
``shared/tools/fidelity.py`` where they overlap, and SDMetrics'
quality report gives the column-shape and column-pair-trend scores.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dpsmooth_spark.evaluation.baselines import independent_laplace, uniform_rows
from dpsmooth_spark.evaluation.metrics import correlation_matrix, marginal_wasserstein, svm_auc
from dpsmooth_spark.evaluation.queries import PAPER_SIGMAS, GaussianMixtureQueries, answer_errors
from dpsmooth_spark.privacy.noise import NoiseSource

HIGHER_IS_BETTER = {"sdmetrics_column_shapes", "sdmetrics_column_pair_trends", "svm_auc"}
LABELS = {
    "correlation_error": "correlation error (mean |corr difference| over column pairs)",
    "bound_excess_pp": "values on a bound beyond the real share (percentage points)",
    "marginal_w1": "marginal Wasserstein-1 (mean over columns, scaled units)",
    "smooth_query_error": "smooth-query error (worst relative, mean over sigma 2..10)",
    "sdmetrics_column_shapes": "SDMetrics column shapes (1 = identical marginals)",
    "sdmetrics_column_pair_trends": "SDMetrics column pair trends (1 = identical correlations)",
    "svm_auc": "train-on-synthetic SVM AUC on real rows",
}


def baselines(
    real: np.ndarray, epsilon: float | None, rows: int, seed: int
) -> dict[str, np.ndarray]:
    """The two baseline tables (scaled units)."""
    rng = np.random.default_rng(seed)
    if epsilon:
        independent = independent_laplace(real, epsilon, rows, rng, NoiseSource(rng))
    else:
        picks = rng.integers(0, real.shape[0], size=(rows, real.shape[1]))
        independent = real[picks, np.arange(real.shape[1])]
    return {"independent": independent, "uniform": uniform_rows(real.shape[1], rows, rng)}


def table_metrics(
    real: np.ndarray,
    table: np.ndarray,
    columns: list[str],
    queries: GaussianMixtureQueries,
    truth: np.ndarray,
    features: np.ndarray,
    label: int | None,
    seed: int,
) -> dict[str, float]:
    """The headline metrics of one table against the real rows (scaled units)."""
    iu = np.triu_indices(real.shape[1], 1)
    on_bound = float(np.mean(np.abs(table) >= 1.0 - 1e-9)) - float(
        np.mean(np.abs(real) >= 1.0 - 1e-9)
    )
    errors = answer_errors(truth, queries.answers(table[:, features], PAPER_SIGMAS))
    out = {
        "correlation_error": float(
            np.mean(np.abs(correlation_matrix(table)[iu] - correlation_matrix(real)[iu]))
        )
        if iu[0].size
        else 0.0,
        "bound_excess_pp": 100.0 * on_bound,
        "marginal_w1": float(marginal_wasserstein(real, table).mean()),
        "smooth_query_error": float(np.mean(errors["worst_rel"])),
        **sdmetrics_scores(real, table, columns, seed),
    }
    if label is not None:
        train = np.rint((table[:, label] + 1) / 2)
        test = np.rint((real[:, label] + 1) / 2)
        others = [i for i in range(real.shape[1]) if i != label]
        out["svm_auc"] = svm_auc(table[:, others], train, real[:, others], test, seed)
    return out


SDMETRICS_COLUMNS = 40
"""Most columns SDMetrics' quality report scores: its pair trends cost about 8 ms a pair (pandas
per pair), 28 s for 100 columns and about 50 minutes for 1,000, per table. A wider table is
scored on a seeded sample of this many columns, the same for the release and its baselines: the
means over its columns and over their pairs estimate the whole table's."""


def sdmetrics_scores(
    real: np.ndarray, table: np.ndarray, columns: list[str], seed: int = 0
) -> dict[str, float]:
    """SDMetrics' quality report: column shapes (KS) and column pair trends (correlation); NaN
    where it scores nothing (no real pair is correlated enough to count). A table of more than
    :data:`SDMETRICS_COLUMNS` columns is scored on a sample of them drawn with ``seed``."""
    import pandas as pd
    from sdmetrics.reports import QualityReport

    if len(columns) > SDMETRICS_COLUMNS:
        rng = np.random.default_rng(seed)
        keep = np.sort(rng.choice(len(columns), SDMETRICS_COLUMNS, replace=False))
        real, table, columns = real[:, keep], table[:, keep], [columns[i] for i in keep]
    metadata = {"tables": {"t": {"columns": {c: {"sdtype": "numerical"} for c in columns}}}}
    report = QualityReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report.generate(
            {"t": pd.DataFrame(real, columns=columns)},
            {"t": pd.DataFrame(table, columns=columns)},
            metadata,
            verbose=False,
        )
    scores = dict(
        zip(report.get_properties()["Property"], report.get_properties()["Score"], strict=False)
    )
    return {
        "sdmetrics_column_shapes": float(scores["Column Shapes"]),
        "sdmetrics_column_pair_trends": float(scores["Column Pair Trends"]),
    }


def verdict(
    real: np.ndarray,
    synthetic: np.ndarray,
    columns: list[str],
    epsilon: float | None,
    label: int | None = None,
    queries: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The verdict table: per metric the release, the baselines and
    ``better``/``between``/``worse``."""
    features = np.array([i for i in range(real.shape[1]) if i != label])
    query_set = GaussianMixtureQueries.draw(len(features), queries, np.random.default_rng(seed))
    truth = query_set.answers(real[:, features], PAPER_SIGMAS)
    tables = {"release": synthetic, **baselines(real, epsilon, synthetic.shape[0], seed)}
    found = {
        name: table_metrics(real, t, columns, query_set, truth, features, label, seed)
        for name, t in tables.items()
    }
    rows = []
    for metric, text in LABELS.items():
        if metric not in found["release"]:
            continue
        values = {name: found[name][metric] for name in tables}
        if metric.startswith("sdmetrics") and len(columns) > SDMETRICS_COLUMNS:
            text = f"{text}, on {SDMETRICS_COLUMNS} of the {len(columns)} columns (seeded sample)"
        rows.append(
            {"metric": metric, "description": text, **values, "verdict": _mark(metric, values)}
        )
    better = sum(r["verdict"] == "better" for r in rows)
    return {
        "baselines": {
            "independent": "DP one-way histograms at the release's epsilon, columns independent"
            if epsilon
            else "real marginals, columns independent",
            "uniform": "uniform rows within the bounds",
        },
        "rows": rows,
        "headline": f"better than both baselines on {better} of {len(rows)} metrics",
    }


def _mark(metric: str, values: dict[str, float]) -> str:
    sign = -1.0 if metric in HIGHER_IS_BETTER else 1.0
    mine = sign * values["release"]
    others = [sign * values[k] for k in ("independent", "uniform")]
    if np.isnan([mine, *others]).any():
        return "n/a"
    if metric == "bound_excess_pp":  # fewer values on a bound than the real table is no fault
        mine, others = max(mine, 0.0), [max(o, 0.0) for o in others]
    if mine < min(others):
        return "better"
    if mine > max(others):
        return "worse"
    return "equal" if mine == min(others) == max(others) else "between"


def verdict_text(table: dict[str, Any]) -> str:
    """The verdict as a plain-text table (for the terminal and the README)."""
    lines = [f"{'metric':<30}{'release':>10}{'independent':>13}{'uniform':>10}  verdict"]
    for row in table["rows"]:
        lines.append(
            f"{row['metric']:<30}{row['release']:>10.4g}{row['independent']:>13.4g}"
            f"{row['uniform']:>10.4g}  {row['verdict']}"
        )
    lines.append(table["headline"])
    return "\n".join(lines)
