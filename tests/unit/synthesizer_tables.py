"""Generated tables the synthesizer's tests share, and their seeded measurements."""

from __future__ import annotations

import numpy as np

from dpsmooth_spark.core.bounds import scale_to_unit


def correlated_table(rng, n=20_000):
    cov = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, -0.5], [0.0, -0.5, 1.0]])
    data = rng.multivariate_normal([1.0, -1.0, 0.0], cov, size=n)
    return {"a": data[:, 0], "b": data[:, 1], "c": data[:, 2]}, {k: (-5.0, 5.0) for k in "abc"}


def wdbc_scaled(table, bounds):
    lower = np.array([b[0] for b in bounds.values()])
    upper = np.array([b[1] for b in bounds.values()])
    data = np.column_stack([table[c].to_numpy().astype(float) for c in bounds])
    return np.clip(scale_to_unit(data, lower, upper), -1, 1)


def worst_relative(truth, fake, queries, sigmas):
    """Worst relative error per sigma of ``fake``'s answers against ``truth``, the real table's
    ``queries.answers`` (computed once by the caller: it is most of the cost)."""
    got = queries.answers(fake, sigmas)
    return (np.abs(truth - got) / truth).max(axis=1)


def label_of_one_column(n: int, d: int, seed: int) -> tuple[dict, dict]:
    """``d`` independent uniform columns on [-1, 1] and a 0/1 label ``y = [x0 > 0]``
    (correlation 0.87 with ``x0``, none with the others)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, d))
    columns = {f"x{j}": x[:, j] for j in range(d)} | {"y": (x[:, 0] > 0).astype(float)}
    bounds = {f"x{j}": (-1.0, 1.0) for j in range(d)} | {"y": (0.0, 1.0)}
    return columns, bounds


def fitted_correlation(result) -> np.ndarray:
    """The correlation matrix of a fit's distribution (its weights on its candidates)."""
    u = result.weights / result.weights.sum()
    centred = result.candidates - u @ result.candidates
    cov = centred.T @ (centred * u[:, None])
    sd = np.sqrt(np.diag(cov))
    return cov / np.outer(sd, sd)


def pair_table(n: int, seed: int) -> tuple[dict, dict]:
    """Six columns on [-1, 1]: ``x1`` follows ``x0`` (correlation 0.98), the others are
    independent; a 0/1 label ``y`` follows ``x2``."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (n, 6))
    x[:, 1] = np.clip(x[:, 0] + rng.normal(0.0, 0.1, n), -1.0, 1.0)
    y = (x[:, 2] + rng.normal(0.0, 0.3, n) > 0).astype(float)
    columns = {f"x{j}": x[:, j] for j in range(6)} | {"y": y}
    bounds = {f"x{j}": (-1.0, 1.0) for j in range(6)} | {"y": (0.0, 1.0)}
    return columns, bounds


def measured_summaries(frame, columns, epsilon, seeds, monkeypatch, mechanism=None) -> list:
    """The noisy summary each seeded release of ``frame`` measures (the measurement alone: the
    fit is not run; ``monkeypatch`` replaces it for the test)."""
    from dpsmooth_spark import Synthesizer
    from dpsmooth_spark.mechanisms.synthesizer.measure import release_summary
    from dpsmooth_spark.pipeline import in_memory

    found = []

    def measure_only(
        sums, bounds, params, accountant, noise, rng, lattice, nullable, nominal, rows_pass
    ):
        found.append(
            release_summary(
                sums, bounds, params, accountant, noise, rng, nullable, lattice, nominal, rows_pass
            )
        )

    monkeypatch.setattr(in_memory, "fit_from_sums", measure_only)
    for seed in seeds:
        Synthesizer(columns, epsilon, mechanism=mechanism, random_state=seed).fit(frame)
    return found
