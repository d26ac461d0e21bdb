"""Utility metrics of a synthetic table against the real one (definitions in docs/evaluation.md).

All inputs are in scaled units ([-1, 1]^d with the release's public bounds). These metrics read
the real data: a report built from them is **not** differentially private.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import wasserstein_distance


def marginal_wasserstein(real: np.ndarray, synthetic: np.ndarray) -> np.ndarray:
    """Wasserstein-1 distance between each column's real and synthetic marginals (scaled units)."""
    return np.array(
        [wasserstein_distance(real[:, i], synthetic[:, i]) for i in range(real.shape[1])]
    )


def correlation_matrix(x: np.ndarray) -> np.ndarray:
    """Pearson correlations; a constant column correlates 0 with everything (1 with itself)."""
    std = x.std(axis=0)
    safe = np.where(std > 0, std, 1.0)
    z = (x - x.mean(axis=0)) / safe
    corr = (z.T @ z) / x.shape[0]
    corr[:, std == 0] = 0.0
    corr[std == 0, :] = 0.0
    np.fill_diagonal(corr, 1.0)
    return corr


def correlation_difference(real: np.ndarray, synthetic: np.ndarray) -> float:
    """Largest absolute difference between the two correlation matrices."""
    return float(np.abs(correlation_matrix(real) - correlation_matrix(synthetic)).max())


def distinct_rows(x: np.ndarray) -> int:
    """Number of distinct rows, counted by a 64-bit hash of each row's bytes (``-0.0`` read as
    ``0.0``; two different rows share a hash with probability about ``n^2 / 2^64``): sorting the
    rows themselves copied 10^5 x 1,000 values several times over."""
    rows = np.ascontiguousarray(x, dtype=np.float64)
    return len({hash((row + 0.0).tobytes()) for row in rows.reshape(rows.shape[0], -1)})


@dataclass(frozen=True)
class PairwiseKernelQueries:
    """A sharper smooth family: narrow Gaussian kernels on random pairs of columns.

    ``f(x) = exp(-((x_i - c_1)^2 + (x_j - c_2)^2) / (2 sigma^2))`` with a random pair ``i < j`` and
    ``c ~ U[-1, 1]^2``. With ``sigma = 0.3`` a query sees one region of one 2-D marginal, so a
    release that samples columns independently gets these wrong wherever columns correlate, while
    the paper's wide kernels in d = 30 barely notice.

    Attributes:
        pairs: ``(N, 2)`` column indices.
        centres: ``(N, 2)`` kernel centres.
        sigma: kernel width (scaled units).
    """

    pairs: np.ndarray
    centres: np.ndarray
    sigma: float

    @classmethod
    def draw(
        cls, d: int, count: int, rng: np.random.Generator, sigma: float = 0.3
    ) -> PairwiseKernelQueries:
        """``count`` random queries (needs d >= 2)."""
        if d < 2:
            raise ValueError("pairwise queries need at least two columns")
        pairs = np.array([rng.choice(d, size=2, replace=False) for _ in range(count)])
        return cls(np.sort(pairs, axis=1), rng.uniform(-1, 1, size=(count, 2)), sigma)

    def sums(self, points: np.ndarray, chunk: int = 2048) -> np.ndarray:
        """``sum_x f_q(x)`` for every query."""
        out = np.zeros(len(self.pairs))
        for start in range(0, points.shape[0], chunk):
            block = points[start : start + chunk]
            a = block[:, self.pairs[:, 0]] - self.centres[:, 0]
            b = block[:, self.pairs[:, 1]] - self.centres[:, 1]
            out += np.exp(-(a**2 + b**2) / (2 * self.sigma**2)).sum(axis=0)
        return out

    def answers(self, points: np.ndarray) -> np.ndarray:
        """Mean of every query over ``points``."""
        return self.sums(points) / max(points.shape[0], 1)


def absolute_errors(truth: np.ndarray, released: np.ndarray) -> dict[str, float]:
    """Worst-case and mean absolute error over a query set."""
    err = np.abs(np.asarray(truth) - np.asarray(released))
    return {"worst_abs": float(err.max()), "mean_abs": float(err.mean())}


def svm_auc(
    train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, seed: int = 0
) -> float:
    """AUC on the test rows of an RBF SVM trained on the training rows (NaN if a class is missing).

    ``train_y`` is rounded to {0, 1} first (a synthetic label is a real number in [0, 1]).
    """
    from sklearn.metrics import roc_auc_score
    from sklearn.svm import SVC

    labels = np.rint(np.clip(train_y, 0.0, 1.0)).astype(int)
    if len(np.unique(labels)) < 2 or len(np.unique(test_y)) < 2:
        return float("nan")
    model = SVC(kernel="rbf", C=1.0, gamma="scale", random_state=seed).fit(train_x, labels)
    return float(roc_auc_score(test_y, model.decision_function(test_x)))


def basis_residuals(
    summary: dict, synthetic: np.ndarray, real: np.ndarray | None = None
) -> dict[str, float] | None:
    """How far the synthetic table's answers to the released functions (the Chebyshev products
    and the pairs on spread factors of a ``summary.json``) are from the released noisy ones (what
    the fit and the sampling could not fit), and, given the real rows, how far the noisy answers
    are from the truth (the noise). ``None`` when the summary releases no such function."""
    from dpsmooth_spark.mechanisms.synthesizer.summary import NoisySummary

    released = NoisySummary.from_dict(summary)
    n = max(released.noisy_count, 1.0)
    functions: list[Any] = []
    noisy: list[np.ndarray] = []
    if released.basis.size:
        functions.append(released.basis)
        noisy.append(released.normalised)
    if released.factor_pairs is not None and released.factor_sums is not None:
        functions.append(released.factor_pairs)
        noisy.append(released.factor_sums / n)
    noisy_answers = np.concatenate(noisy) if noisy else np.zeros(0)
    if noisy_answers.size == 0:
        return None

    def answers(points: np.ndarray) -> np.ndarray:
        return np.concatenate([f.evaluate(points).mean(axis=1) for f in functions])

    synth_answers = answers(synthetic)
    out = {
        "functions": int(noisy_answers.size),
        "fit_max_abs": float(np.abs(synth_answers - noisy_answers).max()),
        "fit_mean_abs": float(np.abs(synth_answers - noisy_answers).mean()),
    }
    if real is not None:
        real_answers = answers(real)
        out["noise_max_abs"] = float(np.abs(real_answers - noisy_answers).max())
        out["noise_mean_abs"] = float(np.abs(real_answers - noisy_answers).mean())
        out["synthetic_vs_real_max_abs"] = float(np.abs(real_answers - synth_answers).max())
    return out
