"""The sparse vector technique (Dwork and Roth 2014, Algorithm 2 "Sparse").

Answers a stream of sensitivity-``s`` queries with "below" or "above" a threshold and stops after
``c`` "above" answers. The threshold is perturbed with ``Lap(sigma)`` and redrawn after each
"above"; every query with ``Lap(2 sigma)``. Each of the ``c`` rounds is ``(2 s / sigma)``-DP
(AboveThreshold), so the whole run costs ``c 2 s / sigma`` in pure DP, or
``c (2 s / sigma)^2 / 2`` zCDP in the (epsilon, delta) mode (Proposition 1.4 of Bun and Steinke,
then composition): :meth:`PrivacyAccountant.charge` with ``sensitivity = 2 s`` records exactly
this. Queries answered "below" cost nothing, however many there are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

QUERY_NOISE_BATCH = 256
"""Query noise is drawn in batches (independent draws; unused ones are never released)."""


@dataclass
class SparseVector:
    """One run of Sparse: construct with :meth:`start`, then call :meth:`above` per query.

    Attributes:
        threshold: the public threshold ``T``.
        sigma: threshold noise scale (queries get ``2 sigma``).
        max_above: ``c``, the number of "above" answers the budget pays for.
        noise: the noise source.
        aboves: "above" answers given so far.
    """

    threshold: float
    sigma: float
    max_above: int
    noise: NoiseSource
    aboves: int = 0
    queries: int = 0
    _noisy_threshold: float = 0.0
    _pool: list[float] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        threshold: float,
        sensitivity: float,
        max_above: int,
        budget: float,
        accountant: PrivacyAccountant,
        noise: NoiseSource,
        stage: str = "sparse_vector",
    ) -> SparseVector:
        """Calibrate ``sigma`` for ``budget`` (epsilon or rho) over ``max_above`` rounds and charge
        it."""
        if max_above < 1:
            raise ValueError("the sparse vector needs max_above >= 1")
        sigma = accountant.noise_scale(2.0 * sensitivity, budget, invocations=max_above)
        accountant.charge(
            stage, 2.0 * sensitivity, sigma, invocations=max_above, mechanism="sparse_vector"
        )
        run = cls(threshold, sigma, max_above, noise)
        run._redraw_threshold()
        return run

    @property
    def exhausted(self) -> bool:
        """True once ``c`` "above" answers were given; further queries are refused."""
        return self.aboves >= self.max_above

    def above(self, value: float) -> bool:
        """Is the (sensitive) ``value`` above the threshold? Spends a round when it says yes."""
        if self.exhausted:
            raise RuntimeError("the sparse vector has given all its 'above' answers")
        if not self._pool:
            self._pool = list(self.noise.laplace(np.zeros(QUERY_NOISE_BATCH), 2.0 * self.sigma))
        self.queries += 1
        if value + self._pool.pop() >= self._noisy_threshold:
            self.aboves += 1
            if not self.exhausted:
                self._redraw_threshold()
            return True
        return False

    def _redraw_threshold(self) -> None:
        self._noisy_threshold = self.threshold + float(
            self.noise.laplace(np.zeros(1), self.sigma)[0]
        )
