"""Additive noise for released statistics.

Secure mode draws from OpenDP's Laplace and Gaussian samplers, which are exact-sampling
constructions that avoid the floating-point attacks on textbook samplers (Mironov 2012).
A seeded :class:`numpy.random.Generator` is accepted only in test mode: it makes a release
reproducible and is *not* safe against those attacks; the manifest says when it was used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class NoiseSource:
    """Where privacy noise comes from.

    Attributes:
        rng: ``None`` for OpenDP's secure samplers; a seeded generator in test mode only.
    """

    rng: np.random.Generator | None = None
    _drawn: list[int] = field(default_factory=lambda: [0], init=False, compare=False, repr=False)

    @property
    def draws(self) -> int:
        """How many noisy releases it has made (additions and selections): from the first on,
        a job that fails records its spend before the error leaves it."""
        return self._drawn[0]

    @property
    def secure(self) -> bool:
        """True when noise comes from OpenDP."""
        return self.rng is None

    @property
    def description(self) -> str:
        """What the manifest records about the sampler."""
        if self.secure:
            from importlib.metadata import version

            return f"opendp {version('opendp')} (floating-point-safe exact samplers)"
        return "numpy.random.Generator, seeded (TEST MODE: not a secure release)"

    def laplace(self, values: np.ndarray, scale: float) -> np.ndarray:
        """``values + Lap(scale)`` elementwise."""
        return self._add(values, scale, "laplace")

    def gaussian(self, values: np.ndarray, scale: float) -> np.ndarray:
        """``values + N(0, scale**2)`` elementwise."""
        return self._add(values, scale, "gaussian")

    def top_k(self, scores: np.ndarray, k: int, scale: float, pure: bool) -> np.ndarray:
        """Indices of the ``k`` largest of ``scores`` after noise of ``scale``, picked ``k``
        times without replacement: permute-and-flip where ``pure`` (report-noisy-max with
        exponential noise, Ding et al. 2021), else the exponential mechanism (Gumbel noise,
        Durfee and Rogers 2019), its zCDP form. Secure: OpenDP's ``make_noisy_top_k``, which
        runs exactly these; seeded: the same distributions drawn with numpy."""
        scores = np.asarray(scores, dtype=np.float64)
        if not np.all(np.isfinite(scores)):
            raise ValueError("cannot select among non-finite scores")
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"selection noise scale must be finite and > 0, got {scale}")
        if not 0 <= k <= scores.size:
            raise ValueError(f"cannot select {k} of {scores.size} scores")
        if k == 0:
            return np.zeros(0, dtype=np.int64)
        self._drawn[0] += 1
        if self.rng is not None:
            if pure:
                noisy = scores + self.rng.exponential(scale, size=scores.shape)
            else:
                noisy = scores + self.rng.gumbel(0.0, scale, size=scores.shape)
            return np.argsort(-noisy, kind="stable")[:k].astype(np.int64)
        return _opendp_top_k(scores, k, scale, pure)

    def _add(self, values: np.ndarray, scale: float, kind: str) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        if not np.isfinite(scale) or scale < 0:
            raise ValueError(f"noise scale must be finite and >= 0, got {scale}")
        if not np.all(np.isfinite(values)):
            raise ValueError("cannot add noise to non-finite values")
        self._drawn[0] += 1
        if self.rng is not None:
            draw = self.rng.laplace if kind == "laplace" else self.rng.normal
            return values + draw(0.0, scale, size=values.shape)
        return _opendp_noise(values, scale, kind)


def _opendp_noise(values: np.ndarray, scale: float, kind: str) -> np.ndarray:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    if kind == "laplace":
        meas = dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=float(scale))
    else:
        meas = dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=float(scale))
    flat = values.ravel().tolist()
    return np.asarray(meas(flat), dtype=np.float64).reshape(values.shape)


def top_k_measurement(k: int, scale: float, pure: bool):
    """OpenDP's noisy top-k on a float score vector whose entries each move by at most the
    ``d_in`` of its privacy map between neighbours (not monotonic: scores may move either way)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    measure = dp.max_divergence() if pure else dp.zero_concentrated_divergence()
    return dp.m.make_noisy_top_k(
        domain, dp.linf_distance(T=float, monotonic=False), measure, k=int(k), scale=float(scale)
    )


def _opendp_top_k(scores: np.ndarray, k: int, scale: float, pure: bool) -> np.ndarray:
    return np.asarray(top_k_measurement(k, scale, pure)(scores.tolist()), dtype=np.int64)
