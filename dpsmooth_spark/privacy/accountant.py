"""The one place where privacy budgets are split and composed.

Pure epsilon-DP stages (Laplace) compose by summing epsilons. In the (epsilon, delta) mode every
stage is Gaussian and is accounted in zero-concentrated DP (Bun and Steinke 2016): a Gaussian
with L2 sensitivity ``s`` and scale ``sigma`` is ``rho = s**2 / (2 sigma**2)``-zCDP, zCDP
composes by summing rho, and rho-zCDP implies ``(rho + 2 sqrt(rho ln(1/delta)), delta)``-DP.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Literal


def rho_for(epsilon: float, delta: float) -> float:
    """Largest rho whose zCDP-to-DP conversion gives at most ``(epsilon, delta)``."""
    log_term = math.log(1.0 / delta)
    return (math.sqrt(epsilon + log_term) - math.sqrt(log_term)) ** 2


def epsilon_for(rho: float, delta: float) -> float:
    """``epsilon`` of rho-zCDP at ``delta`` (Bun and Steinke, Proposition 1.3)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


@dataclass(frozen=True)
class StageCharge:
    """One noisy release recorded by the accountant.

    Attributes:
        stage: name of the released statistic.
        mechanism: ``laplace`` or ``gaussian``; or a pure-DP stage that is not a plain Laplace
            release (``sparse_vector``, ``laplace_zcdp``: Laplace in the (epsilon, delta) mode;
            ``noisy_top_k``: a selection, :meth:`PrivacyAccountant.charge_selection`).
        sensitivity: L1 (Laplace) or L2 (Gaussian) sensitivity per invocation (a selection: the
            L-infinity sensitivity of its scores).
        scale: noise scale (Laplace b or Gaussian sigma).
        invocations: number of adaptive invocations with that scale (PSI iterations; a
            selection: the number of items it picked).
        epsilon: pure-DP cost (Laplace stages).
        rho: zCDP cost (Gaussian stages).
        delta: the probability the stage's guarantee may fail outright (partition selection:
            a value only the changed unit has is released), paid from the accountant's
            :attr:`PrivacyAccountant.selection_delta`.
    """

    stage: str
    mechanism: str
    sensitivity: float
    scale: float
    invocations: int
    epsilon: float = 0.0
    rho: float = 0.0
    delta: float = 0.0


@dataclass
class PrivacyAccountant:
    """Tracks a release's budget and refuses to overspend it.

    Attributes:
        epsilon: total epsilon of the release.
        delta: total delta; 0 selects pure epsilon-DP (Laplace everywhere).
        charges: the stages spent so far, in order.
        unit_rows: rows one privacy unit may contribute (``privacy.max_rows_per_unit``; 1:
            record-level). Every sensitivity a stage states is per record; the accountant
            multiplies it by ``unit_rows`` (docs/privacy.md section 1b), in the noise scales it
            hands out and in the charges it records, so no stage can forget it.
        selection_delta: the part of ``delta`` set aside for partition selection (declared
            before any charge); the zCDP budget converts at the rest (approximate zCDP composes
            by adding both, docs/privacy.md section 1c).
        available: the fraction of the budget that :meth:`share` splits: 1 less what the public
            domains (auto bounds and values) spent first, from :meth:`whole_share`.
    """

    epsilon: float
    delta: float = 0.0
    charges: list[StageCharge] = field(default_factory=list)
    unit_rows: int = 1
    selection_delta: float = 0.0
    available: float = 1.0

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError("epsilon must be a finite number > 0")
        if not (isinstance(self.unit_rows, int) and self.unit_rows >= 1):
            raise ValueError("unit_rows must be an integer >= 1")
        if not (0.0 <= self.delta < 1.0):
            raise ValueError("delta must be in [0, 1)")
        if not (0.0 <= self.selection_delta < max(self.delta, 1e-300)):
            raise ValueError(
                "selection_delta must be in [0, delta): partition selection needs delta"
            )
        if not (0.0 < self.available <= 1.0):
            raise ValueError("available must be in (0, 1]")

    @property
    def pure(self) -> bool:
        """True in pure epsilon-DP mode."""
        return self.delta == 0.0

    @property
    def total_rho(self) -> float:
        """The zCDP budget that the (epsilon, delta) target allows."""
        if self.pure:
            raise ValueError("rho is undefined in pure epsilon-DP mode")
        return rho_for(self.epsilon, self.delta - self.selection_delta)

    def share(self, fraction: float) -> float:
        """The budget of a stage that gets ``fraction`` of what the statistics split (epsilon or
        rho): the whole budget, less what the public domains spent (:attr:`available`)."""
        return self.whole_share(fraction * self.available)

    def whole_share(self, fraction: float) -> float:
        """``fraction`` of the whole budget (epsilon or rho), before the public domains' part."""
        return fraction * (self.epsilon if self.pure else self.total_rho)

    def noise_scale(self, sensitivity: float, budget: float, invocations: int = 1) -> float:
        """Scale that spends ``budget`` (epsilon or rho) over ``invocations`` adaptive releases
        (the inverse of :meth:`charge`)."""
        if budget <= 0:
            raise ValueError("a stage budget must be > 0")
        sensitivity = sensitivity * self.unit_rows
        if self.pure:
            return sensitivity * invocations / budget
        return sensitivity * math.sqrt(invocations / (2.0 * budget))

    def charge(
        self,
        stage: str,
        sensitivity: float,
        scale: float,
        invocations: int = 1,
        mechanism: str | None = None,
    ) -> StageCharge:
        """Record a stage that added noise of ``scale`` for ``sensitivity``, and check the total.

        The cost of one invocation is ``e = sensitivity / scale`` (pure, Laplace) or
        ``rho = sensitivity**2 / (2 scale**2)`` (Gaussian). A pure ``e``-DP stage used in the
        (epsilon, delta) mode (``mechanism`` given: Laplace, sparse vector) costs ``e**2 / 2`` zCDP
        (Bun and Steinke, Proposition 1.4), which is the same formula. ``sensitivity`` is per
        record; the charge records it times :attr:`unit_rows`.
        """
        sensitivity = sensitivity * self.unit_rows
        if self.pure:
            entry = StageCharge(
                stage,
                mechanism or "laplace",
                sensitivity,
                scale,
                invocations,
                epsilon=invocations * sensitivity / scale,
            )
        else:
            entry = StageCharge(
                stage,
                mechanism or "gaussian",
                sensitivity,
                scale,
                invocations,
                rho=invocations * sensitivity**2 / (2.0 * scale**2),
            )
        return self._record(entry)

    def _record(self, entry: StageCharge) -> StageCharge:
        self.charges.append(entry)
        if self.spent_epsilon() > self.epsilon * (1 + 1e-9):
            self.charges.pop()
            raise RuntimeError(f"stage {entry.stage!r} would exceed the privacy budget")
        return entry

    def selection_scale(self, sensitivity: float, budget: float, k: int) -> float:
        """Noise scale of a noisy top-``k`` selection (:meth:`NoiseSource.top_k`) among scores of
        L-infinity ``sensitivity`` that spends ``budget`` (the inverse of
        :meth:`charge_selection`)."""
        if k < 1:
            raise ValueError("a selection needs k >= 1")
        # k picks cost what k Laplace releases of sensitivity 2 s (pure) or k Gaussian releases
        # of sensitivity s (zCDP) cost at the same scale
        return self.noise_scale(
            2.0 * sensitivity if self.pure else sensitivity, budget, invocations=k
        )

    def charge_selection(self, stage: str, sensitivity: float, scale: float, k: int) -> StageCharge:
        """Record a noisy top-``k`` selection: ``k`` exponential mechanisms, each
        ``2 sensitivity / scale``-DP (McSherry and Talwar 2007) and, in the (epsilon, delta)
        mode, ``(2 sensitivity / scale)^2 / 8``-zCDP (Cesar and Rogers 2021), composed; the
        costs OpenDP's ``make_noisy_top_k`` states for scores that may move either way
        (docs/privacy.md section 3e). ``sensitivity`` is per record, as in :meth:`charge`."""
        sensitivity = sensitivity * self.unit_rows
        step = 2.0 * sensitivity / scale
        entry = StageCharge(
            stage,
            "noisy_top_k",
            sensitivity,
            scale,
            k,
            epsilon=float(k * step) if self.pure else 0.0,
            rho=0.0 if self.pure else float(k * step**2 / 8.0),
        )
        return self._record(entry)

    def charge_threshold(
        self, stage: str, sensitivity: float, scale: float, delta: float
    ) -> StageCharge:
        """Record a Gaussian partition selection: its counts cost what a Gaussian release of
        ``sensitivity`` (per record) at ``scale`` costs, and ``delta`` bounds the chance that a
        value only the changed unit has is released (paid from :attr:`selection_delta`)."""
        if self.pure:
            raise ValueError("partition selection needs the (epsilon, delta) mode")
        spent = sum(c.delta for c in self.charges) + delta
        if spent > self.selection_delta * (1 + 1e-9):
            raise RuntimeError(f"stage {stage!r} would exceed the delta set aside for selection")
        sensitivity = sensitivity * self.unit_rows
        entry = StageCharge(
            stage,
            "gaussian_threshold",
            sensitivity,
            scale,
            1,
            rho=sensitivity**2 / (2.0 * scale**2),
            delta=delta,
        )
        return self._record(entry)

    @property
    def mechanism(self) -> Literal["laplace", "gaussian"]:
        """The noise family of this mode."""
        return "laplace" if self.pure else "gaussian"

    def spent_epsilon(self) -> float:
        """Epsilon spent so far (at ``delta`` in the (epsilon, delta) mode)."""
        if self.pure:
            return sum(c.epsilon for c in self.charges)
        rho = sum(c.rho for c in self.charges)
        return epsilon_for(rho, self.delta - self.selection_delta) if rho > 0 else 0.0

    @classmethod
    def from_dict(cls, data: dict) -> PrivacyAccountant:
        """Inverse of :meth:`to_dict` (a retry restores the account of its persisted statistics)."""
        charges = [StageCharge(**stage) for stage in data["stages"]]
        return cls(
            data["epsilon_budget"],
            data["delta_budget"],
            charges,
            data.get("max_rows_per_unit", 1),
            data.get("selection_delta", 0.0),
            data.get("statistics_share", 1.0),
        )

    def to_dict(self) -> dict:
        """Serialisable account for the manifest."""
        out: dict = {
            "mode": "pure epsilon-DP" if self.pure else "(epsilon, delta)-DP via zCDP",
            "epsilon_budget": self.epsilon,
            "delta_budget": self.delta,
            "epsilon_spent": self.spent_epsilon(),
            "stages": [asdict(c) for c in self.charges],
        }
        if self.unit_rows > 1:  # record-level accounts stay as they were
            out["max_rows_per_unit"] = self.unit_rows
        if self.selection_delta > 0:
            out["selection_delta"] = self.selection_delta
        if self.available < 1.0:
            out["statistics_share"] = self.available
        if not self.pure:
            out["rho_budget"] = self.total_rho
            out["rho_spent"] = sum(c.rho for c in self.charges)
        return out
