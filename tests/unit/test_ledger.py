"""The budget ledger: lifetime budget, persisted statistics, conflicts."""

from __future__ import annotations

import pytest

from dpsmooth_spark.privacy.ledger import BudgetExceededError, BudgetLedger, LedgerConflictError


def record(ledger, release_id, table="t", epsilon=1.0, delta=0.0, lifetime=None):
    ledger.record_statistics(
        release_id,
        table,
        "smooth_pca",
        epsilon,
        delta,
        {"stages": []},
        {"noisy_count": 10.0},
        lifetime,
    )


def test_spent_budget_composes_per_table(tmp_path):
    ledger = BudgetLedger(tmp_path / "l.sqlite")
    record(ledger, "r1", epsilon=0.5)
    record(ledger, "r2", epsilon=0.25, delta=1e-6)
    record(ledger, "other", table="u", epsilon=9.0)
    assert ledger.spent("t") == (0.75, 1e-6)
    assert [e.release_id for e in ledger.entries("t")] == ["r1", "r2"]
    assert ledger.find("r2").statistics == {"noisy_count": 10.0}
    assert ledger.find("r2").status == "statistics"
    ledger.mark_complete("r2", "/out", {"a": "h"})
    assert ledger.find("r2").status == "complete" and ledger.find("r2").content_sha256 == {"a": "h"}


def test_lifetime_budget_refuses_with_the_ledger_in_the_message(tmp_path):
    ledger = BudgetLedger(tmp_path / "l.sqlite")
    record(ledger, "first", epsilon=1.0, lifetime=(1.5, 0.0))
    with pytest.raises(BudgetExceededError) as err:
        record(ledger, "second", epsilon=1.0, lifetime=(1.5, 0.0))
    assert "first" in str(err.value) and "lifetime budget" in str(err.value)
    assert ledger.find("second") is None
    record(ledger, "small", epsilon=0.5, lifetime=(1.5, 0.0))  # exactly fills the budget


def test_release_id_is_unique(tmp_path):
    ledger = BudgetLedger(tmp_path / "l.sqlite")
    record(ledger, "r1")
    with pytest.raises(LedgerConflictError):
        record(ledger, "r1")
    assert ledger.spent("t") == (1.0, 0.0)


def test_ledger_survives_reopening(tmp_path):
    record(BudgetLedger(tmp_path / "l.sqlite"), "r1")
    assert BudgetLedger(tmp_path / "l.sqlite").spent("t") == (1.0, 0.0)
