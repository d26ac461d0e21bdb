"""The persistent budget ledger: every release of a table, what it spent, and its DP statistics.

A SQLite file (path from the config). Each row is one release, keyed by its release id:

* ``statistics`` - written, in the same transaction as the lifetime-budget check, right after the
  noise is drawn and before anything downstream reads the noisy values. From then on the budget
  counts as spent, and a re-run with the same release id (a scheduler retry) loads these values
  instead of drawing fresh noise.
* ``complete`` - the release folder was written; the row records its path and content hashes.

A release that fails after its first noise draw is recorded as spent with ``status =
statistics`` and a ``refused`` reason among its statistics (:attr:`LedgerEntry.refusal`); a retry
with its release id repeats the refusal instead of drawing again.

Releases of one table compose by basic composition: the ledger sums epsilon and delta.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS releases (
    release_id TEXT PRIMARY KEY,
    table_id TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    accounting TEXT NOT NULL,
    statistics TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('statistics', 'complete')),
    created_utc TEXT NOT NULL,
    completed_utc TEXT,
    output_path TEXT,
    content_sha256 TEXT
)
"""


class BudgetExceededError(RuntimeError):
    """The release would push its table past the configured lifetime budget."""


class LedgerConflictError(RuntimeError):
    """A release id is reused for a different table or mechanism."""


class ReleaseRefusedError(RuntimeError):
    """A retry of a release that was refused after its noise was drawn (its spend is on
    record)."""


@dataclass(frozen=True)
class LedgerEntry:
    """One release as recorded.

    Attributes:
        release_id, table_id, mechanism: identity of the release.
        epsilon, delta: what it spent.
        accounting: the accountant's serialised stages.
        statistics: the DP statistics (for reuse by a retry).
        status: ``statistics`` or ``complete``.
        created_utc, completed_utc, output_path, content_sha256: bookkeeping.
    """

    release_id: str
    table_id: str
    mechanism: str
    epsilon: float
    delta: float
    accounting: dict[str, Any]
    statistics: dict[str, Any]
    status: str
    created_utc: str
    completed_utc: str | None
    output_path: str | None
    content_sha256: dict[str, str] | None

    @property
    def refusal(self) -> str | None:
        """Why the release was refused after its noise was drawn (``None``: it was not)."""
        reason = self.statistics.get("refused")
        return None if reason is None else str(reason)

    @property
    def shown_status(self) -> str:
        """The status the ledger's listing shows: ``refused`` for a refused release."""
        return "refused" if self.refusal is not None else self.status


class BudgetLedger:
    """Reads and appends releases; safe against concurrent jobs (SQLite write locks)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn, conn:
            conn.execute(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def find(self, release_id: str) -> LedgerEntry | None:
        """The entry of ``release_id``, if any."""
        with closing(self._connect()) as conn:
            row = conn.execute(
                "SELECT * FROM releases WHERE release_id = ?", (release_id,)
            ).fetchone()
        return _entry(row) if row else None

    def entries(self, table_id: str) -> list[LedgerEntry]:
        """Every release of ``table_id``, oldest first."""
        with closing(self._connect()) as conn:
            rows = conn.execute(
                "SELECT * FROM releases WHERE table_id = ? ORDER BY created_utc, rowid", (table_id,)
            ).fetchall()
        return [_entry(r) for r in rows]

    def spent(self, table_id: str) -> tuple[float, float]:
        """Total (epsilon, delta) spent on ``table_id`` (basic composition)."""
        entries = self.entries(table_id)
        return sum(e.epsilon for e in entries), sum(e.delta for e in entries)

    def check_budget(
        self, table_id: str, epsilon: float, delta: float, lifetime: tuple[float, float] | None
    ) -> None:
        """Raise :class:`BudgetExceededError` if a release of (epsilon, delta) would not fit."""
        if lifetime is None:
            return
        spent_eps, spent_delta = self.spent(table_id)
        if spent_eps + epsilon > lifetime[0] * (1 + 1e-12) or spent_delta + delta > lifetime[1] * (
            1 + 1e-12
        ):
            raise BudgetExceededError(
                f"a release of epsilon={epsilon}, delta={delta} would exceed the lifetime budget "
                f"of "
                f"table {table_id!r} (epsilon={lifetime[0]}, delta={lifetime[1]}); already spent "
                f"epsilon={spent_eps:.6g}, delta={spent_delta:.3g}.\n{self.format(table_id)}"
            )

    def record_statistics(
        self,
        release_id: str,
        table_id: str,
        mechanism: str,
        epsilon: float,
        delta: float,
        accounting: dict[str, Any],
        statistics: dict[str, Any],
        lifetime: tuple[float, float] | None,
    ) -> None:
        """Check the lifetime budget and persist the DP statistics in one transaction."""
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute(
                    "SELECT 1 FROM releases WHERE release_id = ?", (release_id,)
                ).fetchone():
                    raise LedgerConflictError(f"release id {release_id!r} is already in the ledger")
                self.check_budget(table_id, epsilon, delta, lifetime)
                conn.execute(
                    "INSERT INTO releases (release_id, table_id, mechanism, epsilon, delta, "
                    "accounting,"
                    " statistics, status, created_utc) VALUES (?, ?, ?, ?, ?, ?, ?, 'statistics', "
                    "?)",
                    (
                        release_id,
                        table_id,
                        mechanism,
                        epsilon,
                        delta,
                        json.dumps(accounting),
                        json.dumps(statistics),
                        _now(),
                    ),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def mark_complete(
        self, release_id: str, output_path: str, content_sha256: dict[str, str]
    ) -> None:
        """Record that the release folder of ``release_id`` was written."""
        with closing(self._connect()) as conn, conn:
            conn.execute(
                "UPDATE releases SET status = 'complete', completed_utc = ?, output_path = ?,"
                " content_sha256 = ? WHERE release_id = ?",
                (_now(), output_path, json.dumps(content_sha256), release_id),
            )

    def format(self, table_id: str) -> str:
        """The ledger of ``table_id`` as a text table (for error messages and the CLI)."""
        lines = [
            f"ledger {self.path} for table {table_id!r}:",
            f"  {'release_id':<34} {'mechanism':<12} {'epsilon':>9} {'delta':>9}  {'status':<10} "
            f"created",
        ]
        for e in self.entries(table_id):
            lines.append(
                f"  {e.release_id:<34} {e.mechanism:<12} {e.epsilon:>9.4g} {e.delta:>9.3g}  "
                f"{e.shown_status:<10} {e.created_utc}"
            )
        return "\n".join(lines)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _entry(row: tuple) -> LedgerEntry:
    (
        release_id,
        table_id,
        mechanism,
        epsilon,
        delta,
        accounting,
        statistics,
        status,
        created,
        completed,
        output_path,
        hashes,
    ) = row
    return LedgerEntry(
        release_id,
        table_id,
        mechanism,
        epsilon,
        delta,
        json.loads(accounting),
        json.loads(statistics),
        status,
        created,
        completed,
        output_path,
        json.loads(hashes) if hashes else None,
    )
