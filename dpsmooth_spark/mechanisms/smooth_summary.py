"""Algorithms 1 and 2 of Wang et al. (2016): a noisy summary that answers any smooth query.

Release (Algorithm 1): the noisy count and the noisy sums ``sum_x prod_i T_{r_i}(x_i)`` for every
``r`` in ``{0..t-1}^d`` except ``r = 0`` (that one is the count). Answering (Algorithm 2, public,
no data access): ``q_f(D) ~ sum_r c_r b~_r`` with ``b~_r = sums~_r / n~`` and ``c_r`` from
:mod:`dpsmooth_spark.core.approximation`.

The degree ``t`` is the paper's ``ceil(n^{1/(2d+K)})`` (pure DP, Theorem 3) or
``ceil(n^{2/(3d+2K)} log(1/delta)^{-1/(3d+2K)})`` (Section 5.1), with ``n`` the noisy count; or
``auto``, which minimises the predicted error ``B t^{-K} + noise(t)`` for a K-smooth query.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dpsmooth_spark.core.approximation import QueryFunction, query_coefficients
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.kernel import ExactSums
from dpsmooth_spark.mechanisms.stages import noise_std, release_basis_sums, release_count
from dpsmooth_spark.privacy import sensitivity
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

MAX_FUNCTIONS = 2_000_000
"""Largest t^d the job accepts (the summary and the data-pass kernel hold t^d numbers)."""


class SummaryParams(BaseModel):
    """Parameters of the summary release."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    smoothness: int = Field(
        default=2, ge=1, le=20, description="K, the smoothness order the guarantee is stated for."
    )
    degree: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="t, Chebyshev degrees 0..t-1 per axis; null: the paper's rule.",
    )
    degree_rule: Literal["paper", "auto"] = Field(
        default="paper",
        description="paper (Theorem 3 / Section 5.1) or auto (the least predicted error).",
    )
    max_rows: float = Field(
        default=1e8,
        ge=1,
        description=(
            "Public upper bound on n; the pass computes the degree it gives, the release the noisy"
            " count's."
        ),
    )
    count_fraction: float = Field(
        default=0.05, gt=0, lt=0.5, description="Share of the budget for the noisy count."
    )


def paper_degree(n: float, d: int, smoothness: int, delta: float = 0.0) -> int:
    """``t`` of Algorithm 1 (pure) or Section 5.1 (``delta > 0``), at least 2."""
    n = max(n, 1.0)
    if delta == 0.0:
        t = math.ceil(n ** (1.0 / (2 * d + smoothness)))
    else:
        exponent = 3 * d + 2 * smoothness
        t = math.ceil(n ** (2.0 / exponent) * math.log(1.0 / delta) ** (-1.0 / exponent))
    return max(t, 2)


def auto_degree(
    n: float, d: int, smoothness: int, accountant: PrivacyAccountant, budget: float, t_max: int
) -> int:
    """The ``t <= t_max`` minimising ``t^{-K} + sqrt(t^d) * noise_std(t)``.

    A K-smooth query has approximation error ``O(t^{-K})`` and coefficients of bounded size; with
    ``t^d`` independent noise terms the noise error grows like ``sqrt(t^d)`` times the per-answer
    noise, which itself grows with ``t^d`` (L1 sensitivity) or ``sqrt(t^d)`` (L2).
    """
    best, best_err = 2, math.inf
    for t in range(2, max(t_max, 2) + 1):
        size = t**d - 1
        if size + 1 > MAX_FUNCTIONS:
            break
        std = per_answer_noise_std(size, n, accountant, budget)
        err = t ** (-smoothness) + math.sqrt(size) * std
        if err < best_err:
            best, best_err = t, err
    return best


def per_answer_noise_std(
    size: int, n: float, accountant: PrivacyAccountant, budget: float
) -> float:
    """Std of one normalised noisy answer ``(sum + noise) / n``."""
    if accountant.pure:
        return (
            math.sqrt(2.0)
            * accountant.noise_scale(sensitivity.basis_sums_l1(size), budget)
            / max(n, 1.0)
        )
    return accountant.noise_scale(sensitivity.basis_sums_l2(size), budget) / max(n, 1.0)


def pass_degree(params: SummaryParams, d: int, delta: float) -> int:
    """The ``t`` the data pass computes: the configured one, or the paper's at ``max_rows``."""
    t = params.degree or paper_degree(params.max_rows, d, params.smoothness, delta)
    if t**d > MAX_FUNCTIONS:
        raise ValueError(
            f"the tensor basis has t^d = {t}^{d} = {t**d:,} functions, more than "
            f"{MAX_FUNCTIONS:,}: "
            "lower summary.degree or summary.max_rows, or use the synthesize job for this d"
        )
    return t


@dataclass
class SmoothSummary:
    """The released summary (all of it DP) and everything needed to answer queries from it.

    Attributes:
        bounds: columns and public bounds.
        degree: t.
        smoothness: K.
        noisy_count: n~.
        answers: ``(t,)*d`` normalised noisy answers ``b~_r``; ``answers[0, ..., 0] = 1``.
        noise_std: std of the noise on each normalised answer (for error bounds).
        noise: ``laplace`` or ``gaussian``.
        accounting: the accountant's record.
    """

    bounds: PublicBounds
    degree: int
    smoothness: int
    noisy_count: float
    answers: np.ndarray
    noise_std: float
    noise: str
    accounting: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``summary.json``)."""
        return {
            "kind": "smooth_summary",
            "columns": list(self.bounds.columns),
            "lower": self.bounds.lower.tolist(),
            "upper": self.bounds.upper.tolist(),
            "degree": self.degree,
            "smoothness": self.smoothness,
            "noisy_count": self.noisy_count,
            "noise": self.noise,
            "noise_std": self.noise_std,
            "basis_function": "prod_i T_{r_i}(x_scaled_i), r in {0..t-1}^d, C order",
            "answers": self.answers.ravel().tolist(),
            "accounting": self.accounting,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SmoothSummary:
        """Inverse of :meth:`to_dict`."""
        d = len(data["columns"])
        bounds = PublicBounds(
            tuple(data["columns"]), np.array(data["lower"], float), np.array(data["upper"], float)
        )
        answers = np.array(data["answers"], float).reshape((data["degree"],) * d)
        return cls(
            bounds,
            data["degree"],
            data["smoothness"],
            data["noisy_count"],
            answers,
            data["noise_std"],
            data["noise"],
            data["accounting"],
        )

    @classmethod
    def load(cls, path: str | Path) -> SmoothSummary:
        """Read a ``summary.json`` (a file or a release folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "summary.json"
        return cls.from_dict(json.loads(path.read_text()))


def release_tensor_summary(
    sums: ExactSums,
    bounds: PublicBounds,
    params: SummaryParams,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
) -> SmoothSummary:
    """Algorithm 1 under add/remove-one DP: noisy count, then noisy tensor-basis sums."""
    d = bounds.d
    noisy_count = release_count(sums.count, params.count_fraction, accountant, noise)
    budget = accountant.share(1.0 - params.count_fraction)
    if params.degree is not None:
        t = params.degree
    elif params.degree_rule == "auto":
        t = auto_degree(noisy_count, d, params.smoothness, accountant, budget, sums.tensor_degree)
    else:
        t = paper_degree(noisy_count, d, params.smoothness, accountant.delta)
    t = min(t, sums.tensor_degree)
    exact = sums.tensor_sums()[(slice(0, t),) * d].ravel()[1:]
    noisy, scale = release_basis_sums(exact, budget, accountant, noise, "tensor_basis_sums")
    answers = np.concatenate([[1.0], noisy / max(noisy_count, 1.0)]).reshape((t,) * d)
    std = noise_std(scale, accountant) / max(noisy_count, 1.0)
    return SmoothSummary(
        bounds,
        t,
        params.smoothness,
        noisy_count,
        answers,
        std,
        accountant.mechanism,
        accountant.to_dict(),
    )


@dataclass(frozen=True)
class Answer:
    """A query answer with its noise-error bounds.

    Attributes:
        value: ``sum_r c_r b~_r`` (the query's mean over the table).
        coefficient_l1: ``sum_{r != 0} |c_r|``.
        noise_error_scale: ``sum |c_r| * noise_std``: the expected-size bound on the noise error.
        noise_error_bound: a bound holding with probability ``1 - failure_probability``
            (Lemma 16 for Laplace noise; a Gaussian tail bound in the (epsilon, delta) mode).
        failure_probability: see above.
        operator: ``chebyshev`` or ``jackson``.
    """

    value: float
    coefficient_l1: float
    noise_error_scale: float
    noise_error_bound: float
    failure_probability: float
    operator: str


def answer(
    summary: SmoothSummary,
    f: QueryFunction,
    operator: str = "chebyshev",
    units: Literal["original", "scaled"] = "original",
) -> Answer:
    """Answer ``mean_x f(x)`` from the summary alone (Algorithm 2).

    Args:
        summary: a released summary.
        f: vectorised ``(n, d) -> (n,)``; in original units unless ``units="scaled"``.
        operator: ``chebyshev`` (default; measured more accurate) or ``jackson`` (the paper's).
        units: the space ``f`` is written in.
    """
    d = summary.bounds.d
    g = f if units == "scaled" else (lambda x: f(summary.bounds.unscale(x)))
    coef = query_coefficients(g, d, summary.degree, operator, summary.smoothness)
    value = float((coef * summary.answers).sum())
    flat = np.abs(coef.ravel()[1:])
    l1 = float(flat.sum())
    n_terms = flat.size
    if summary.noise == "laplace":
        # Lemma 16: sum_r |c_r| |X_r| <= max|c| * sum |X_r| <= max|c| * 2 N b with prob >= 1 - 10
        # e^{-N/5}
        b = summary.noise_std / math.sqrt(2.0)
        bound = float(flat.max(initial=0.0)) * 2 * n_terms * b
        failure = min(1.0, 10.0 * math.exp(-n_terms / 5.0))
    else:
        bound = 4.0 * summary.noise_std * float(np.sqrt((flat**2).sum()))
        failure = math.erfc(4.0 / math.sqrt(2.0))
    return Answer(value, l1, l1 * summary.noise_std, bound, failure, operator)


def parse_query(spec: str, d: int) -> QueryFunction:
    """A query from a small language; terms are added with ``+``:

    * ``gaussian(center=[...], sigma=s, weight=1)``: ``w exp(-||x - c||^2 / (2 s^2))``;
    * ``logistic(w=[...], b=0, weight=1)``: ``1 / (1 + exp(-(w . x + b)))``;
    * ``polynomial(terms=[[coef, [e_1, ..., e_d]], ...])``: ``sum coef prod x_i^{e_i}``.
    """
    terms = []
    for part in _split_terms(spec):
        name, kwargs = _parse_call(part)
        terms.append(_term(name, kwargs, d))

    def f(x: np.ndarray) -> np.ndarray:
        return np.sum([term(np.atleast_2d(x)) for term in terms], axis=0)

    return f


def _split_terms(spec: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in spec:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "+" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _parse_call(text: str) -> tuple[str, dict[str, Any]]:
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ValueError(f"cannot parse query term {text!r}: {exc.msg}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        raise ValueError(f"query term must look like name(key=value, ...): {text!r}")
    return node.func.id, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}


def _term(name: str, kw: dict[str, Any], d: int) -> QueryFunction:
    weight = float(kw.pop("weight", 1.0))
    if name == "gaussian":
        centre = _vector(kw.pop("center"), d, "center")
        sigma = float(kw.pop("sigma"))
        _no_extra(name, kw)
        return lambda x: weight * np.exp(-((x - centre) ** 2).sum(axis=1) / (2 * sigma**2))
    if name == "logistic":
        w = _vector(kw.pop("w"), d, "w")
        b = float(kw.pop("b", 0.0))
        _no_extra(name, kw)
        return lambda x: weight / (1.0 + np.exp(-(x @ w + b)))
    if name == "polynomial":
        monomials = [(float(c), _vector(e, d, "exponents")) for c, e in kw.pop("terms")]
        _no_extra(name, kw)
        return lambda x: weight * sum(c * np.prod(x**e, axis=1) for c, e in monomials)
    raise ValueError(f"unknown query {name!r} (gaussian, logistic, polynomial)")


def _vector(value: Any, d: int, what: str) -> np.ndarray:
    out = np.asarray(value, dtype=np.float64).ravel()
    if out.shape != (d,):
        raise ValueError(f"{what} must have {d} entries, got {out.size}")
    return out


def _no_extra(name: str, kw: dict[str, Any]) -> None:
    if kw:
        raise ValueError(f"unknown arguments for {name}: {sorted(kw)}")
