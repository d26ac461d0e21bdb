"""Public and generated tables for the benchmarks, with the bounds each release treats as public.

Every table is ``(data, bounds, label)``: an ``(n, d)`` float array in original units, the
``{column: (lower, upper)}`` bounds, and the name of a binary label column for the
train-on-synthetic AUC. For the scikit-learn tables the bounds are the documented feature ranges
(the data's min and max, as the paper does for WDBC), so they are public in that sense only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
Table = tuple[np.ndarray, dict[str, tuple[float, float]], str]


def wdbc() -> Table:
    """The bundled WDBC sample (569 x 31) with the example config's published bounds."""
    config = yaml.safe_load((ROOT / "conf" / "examples" / "wdbc.yaml").read_text())
    bounds = {
        c["name"]: (float(c.get("lower", 0)), float(c.get("upper", 1))) for c in config["columns"]
    }
    table = pq.read_table(ROOT / "data" / "wdbc.parquet")
    data = np.column_stack([table[c].to_numpy().astype(float) for c in bounds])
    return data, bounds, "malignant"


def _sklearn(loader: Callable, positive: Callable[[np.ndarray], np.ndarray]) -> Table:
    raw = loader()
    x = np.asarray(raw.data, dtype=float)
    keep = x.max(axis=0) > x.min(axis=0)  # constant columns carry no information
    x = x[:, keep]
    names = [f"x{i}" for i in range(x.shape[1])]
    label = positive(np.asarray(raw.target)).astype(float)
    data = np.column_stack([x, label])
    bounds = {
        n: (float(lo), float(hi)) for n, lo, hi in zip(names, x.min(0), x.max(0), strict=False)
    }
    bounds["label"] = (0.0, 1.0)
    return data, bounds, "label"


def wine() -> Table:
    """scikit-learn wine (178 x 13 + label: cultivar 0 or not)."""
    from sklearn.datasets import load_wine

    return _sklearn(load_wine, lambda y: y == 0)


def iris() -> Table:
    """scikit-learn iris (150 x 4 + label: versicolor or not)."""
    from sklearn.datasets import load_iris

    return _sklearn(load_iris, lambda y: y == 1)


def digits() -> Table:
    """scikit-learn digits (1797 x 61 non-constant pixels + label: digit below 5)."""
    from sklearn.datasets import load_digits

    return _sklearn(load_digits, lambda y: y < 5)


def _generated(rows: np.ndarray, rng: np.random.Generator) -> Table:
    d = rows.shape[1]
    w = rng.normal(size=d)
    score = (rows - rows.mean(0)) / rows.std(0) @ w
    label = (score + rng.normal(scale=np.std(score) * 0.5, size=len(score)) > 0).astype(float)
    lo, hi = np.quantile(rows, 0.001, axis=0), np.quantile(rows, 0.999, axis=0)
    pad = 0.1 * (hi - lo)
    bounds = {f"g{i}": (float(lo[i] - pad[i]), float(hi[i] + pad[i])) for i in range(d)}
    bounds["label"] = (0.0, 1.0)
    return np.column_stack([rows, label]), bounds, "label"


def correlated(n: int = 5000, d: int = 8, seed: int = 0) -> Table:
    """Gaussian with a known block correlation (0.8 within blocks of 4, 0 across)."""
    rng = np.random.default_rng(seed)
    cov = np.kron(np.eye(d // 4), np.full((4, 4), 0.8)) + 0.2 * np.eye(d)
    return _generated(rng.multivariate_normal(np.zeros(d), cov, size=n), rng)


def heavy_tails(n: int = 5000, d: int = 6, seed: int = 1) -> Table:
    """Student t (3 degrees of freedom) with correlation 0.5 between neighbours."""
    rng = np.random.default_rng(seed)
    cov = np.eye(d) + 0.5 * (np.eye(d, k=1) + np.eye(d, k=-1))
    z = rng.multivariate_normal(np.zeros(d), cov, size=n)
    return _generated(z / np.sqrt(rng.chisquare(3, size=(n, 1)) / 3), rng)


def skewed_mixed_scales(n: int = 5000, d: int = 6, seed: int = 2) -> Table:
    """Log-normal columns on scales 1 to 10^5, pairwise correlated through a common factor."""
    rng = np.random.default_rng(seed)
    common = rng.normal(size=(n, 1))
    z = 0.7 * common + 0.7 * rng.normal(size=(n, d))
    return _generated(np.exp(z) * 10.0 ** np.arange(d), rng)


TABLES: dict[str, Callable[[], Table]] = {
    "wdbc": wdbc,
    "wine": wine,
    "iris": iris,
    "digits": digits,
    "correlated": correlated,
    "heavy_tails": heavy_tails,
    "skewed_scales": skewed_mixed_scales,
}
