"""Compute every evaluation metric of a synthetic table (pure numpy; the Spark job feeds it).

Inputs are scaled rows ([-1, 1]^d). The real-side query answers may be precomputed by a Spark
pass over the whole real table; the row-level metrics (marginals, correlations, SVM, basis fit)
use a sample of real rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsmooth_spark.evaluation.metrics import (
    PairwiseKernelQueries,
    absolute_errors,
    basis_residuals,
    correlation_difference,
    distinct_rows,
    marginal_wasserstein,
    svm_auc,
)
from dpsmooth_spark.evaluation.queries import PAPER_SIGMAS, GaussianMixtureQueries, errors_by_sigma


@dataclass(frozen=True)
class QuerySets:
    """The query sets of one evaluation (drawn from a public seed).

    Attributes:
        paper: Gaussian-kernel mixtures on the feature columns (Section 5.2.1).
        pairwise: narrow kernels on random column pairs (joint structure).
        features: column indices the paper's queries use (all but the label).
    """

    paper: GaussianMixtureQueries
    pairwise: PairwiseKernelQueries | None
    features: np.ndarray

    @classmethod
    def draw(cls, d: int, features: np.ndarray, count: int, seed: int) -> QuerySets:
        """``count`` queries of each family."""
        rng = np.random.default_rng(seed)
        paper = GaussianMixtureQueries.draw(len(features), count, rng)
        pairwise = PairwiseKernelQueries.draw(d, count, rng) if d >= 2 else None
        return cls(paper, pairwise, features)

    def sums(self, x: np.ndarray) -> np.ndarray:
        """Per-query sums over the rows ``x``: the paper's (5 sigmas x N) then the pairwise N."""
        paper = self.paper.answers(x[:, self.features], PAPER_SIGMAS).ravel() * x.shape[0]
        pairs = self.pairwise.sums(x) if self.pairwise is not None else np.zeros(0)
        return np.concatenate([paper, pairs])

    def split(self, means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Split :meth:`sums` / rows back into (paper ``(5, N)``, pairwise ``(N,)``)."""
        n = self.paper.weights.shape[0] * len(PAPER_SIGMAS)
        return means[:n].reshape(len(PAPER_SIGMAS), -1), means[n:]


def evaluate(
    real_sample: np.ndarray,
    synthetic: np.ndarray,
    columns: list[str],
    queries: QuerySets,
    real_means: np.ndarray | None = None,
    label: int | None = None,
    summary: dict[str, Any] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """All metrics of ``synthetic`` against the real rows (definitions in docs/evaluation.md).

    Args:
        real_sample: real rows (scaled), all of them or a sample.
        synthetic: synthetic rows (scaled).
        columns: names in order.
        queries: the query sets.
        real_means: per-query means over the whole real table (from a Spark pass); computed from
            ``real_sample`` when absent.
        label: index of a 0/1 label column for the SVM test, if any.
        summary: the release's ``summary.json`` (basis-fit residuals when it releases basis or
            spread-factor pair answers).
        seed: randomness for the SVM split.
    """
    if real_means is None:
        real_means = queries.sums(real_sample) / real_sample.shape[0]
    synth_means = queries.sums(synthetic) / synthetic.shape[0]
    real_paper, real_pairs = queries.split(real_means)
    synth_paper, synth_pairs = queries.split(synth_means)
    protocol = {
        str(sigma): errs
        for sigma, errs in errors_by_sigma(real_paper, synth_paper, PAPER_SIGMAS).items()
    }
    w1 = marginal_wasserstein(real_sample, synthetic)
    metrics: dict[str, Any] = {
        "rows": {
            "real_sample": int(real_sample.shape[0]),
            "synthetic": int(synthetic.shape[0]),
            "synthetic_distinct": distinct_rows(synthetic),
        },
        "paper_protocol": protocol,
        "marginal_wasserstein1": {
            "mean": float(w1.mean()),
            "max": float(w1.max()),
            "per_column": dict(zip(columns, w1.tolist(), strict=False)),
        },
        "correlation_max_abs_diff": correlation_difference(real_sample, synthetic),
    }
    if queries.pairwise is not None:
        metrics["pairwise_kernels"] = {
            "sigma": queries.pairwise.sigma,
            **absolute_errors(real_pairs, synth_pairs),
        }
    fit = None if summary is None else basis_residuals(summary, synthetic, real_sample)
    if fit is not None:
        metrics["basis_fit"] = fit
    if label is not None:
        metrics["svm"] = svm_metrics(real_sample, synthetic, label, seed)
    return metrics


def svm_metrics(real: np.ndarray, synthetic: np.ndarray, label: int, seed: int) -> dict[str, float]:
    """AUC on real rows of an RBF SVM trained on the synthetic rows, beside one trained on real
    rows.

    The real reference trains on a random half of the real rows and tests on the other half; the
    synthetic model is tested on that same half.
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(real.shape[0])
    train, test = order[: len(order) // 2], order[len(order) // 2 :]
    features = [i for i in range(real.shape[1]) if i != label]
    y_real = np.rint((real[:, label] + 1) / 2)  # scaled [-1, 1] back to {0, 1}
    y_synth = (synthetic[:, label] + 1) / 2
    return {
        "auc_synthetic_trained": svm_auc(
            synthetic[:, features], y_synth, real[test][:, features], y_real[test], seed
        ),
        "auc_real_trained": svm_auc(
            real[train][:, features], y_real[train], real[test][:, features], y_real[test], seed
        ),
    }
