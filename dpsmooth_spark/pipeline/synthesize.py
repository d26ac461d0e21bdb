"""The release job: read, one exact data pass, DP statistics, LP, sampling, atomic write.

Order matters for retries: the budget is checked before Spark starts, and the noisy statistics
are written to the ledger before anything reads them, so a re-run with the same release id reuses
them (only post-processing is redone) instead of spending budget again.
"""

from __future__ import annotations

import hashlib
import json
import platform
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import numpy as np
import pyarrow as pa

from dpsmooth_spark import __version__
from dpsmooth_spark.config import ReleaseConfig
from dpsmooth_spark.mechanisms.smooth_pca import (
    NoisySummary,
    SynthesisResult,
    fit_from_summary,
    release_summary,
    sample_scaled,
)
from dpsmooth_spark.pipeline.progress import StageLog
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.ledger import BudgetLedger, LedgerConflictError, LedgerEntry
from dpsmooth_spark.privacy.noise import NoiseSource
from dpsmooth_spark.spark import data_pass, io, session

MECHANISM = "smooth_pca"
NEIGHBOURING_RELATION = (
    "add/remove one record (unbounded DP): neighbouring tables differ by the presence of one row; "
    "the row count is not public and is released with noise"
)
VERSIONED_PACKAGES = ("pyspark", "numpy", "scipy", "pyarrow", "ortools", "opendp")


class InvalidDataError(ValueError):
    """The data violates the configured rules (invalid rows, bounds); nothing was released."""


@dataclass(frozen=True)
class ReleaseReport:
    """What a finished release wrote.

    Attributes:
        output_path: the release folder.
        manifest: the manifest as written.
    """

    output_path: str
    manifest: dict[str, Any]


def run_synthesize(config: ReleaseConfig, quiet: bool = False) -> ReleaseReport:
    """Run a full release described by ``config``; see ``docs/privacy.md`` for the guarantee."""
    log = StageLog(quiet=quiet)
    release_id = config.release_id or uuid.uuid4().hex
    bounds = config.public_bounds()
    params = config.mechanism
    ledger = BudgetLedger(config.ledger_path)
    previous = ledger.find(release_id)
    _check_retry(config, previous)
    io.check_output_path(config.output.path, config.output.mode, release_id)
    rng = np.random.default_rng(config.seed)
    noise = NoiseSource(rng if config.seed is not None else None)

    if previous is None:
        ledger.check_budget(config.table_id, config.privacy.epsilon, config.privacy.delta,
                            config.lifetime_budget)
        with log.stage("spark session"):
            spark = session.get_session(config.spark.master, config.spark.conf)
        with log.stage("data pass"):
            df = io.read_table(spark, config.input.path, config.input.format, list(bounds.columns))
            sums = data_pass.exact_sums(df, bounds, params.data_pass_degree())
        _check_rows(config, sums.rows_seen, sums.rows_invalid, sums.rows_clamped, sums.count)
        accountant = PrivacyAccountant(config.privacy.epsilon, config.privacy.delta)
        with log.stage("noise and private PCA"):
            summary = release_summary(sums, bounds, params, accountant, noise, rng)
            ledger.record_statistics(release_id, config.table_id, MECHANISM, config.privacy.epsilon,
                                     config.privacy.delta, accountant.to_dict(), summary.to_dict(),
                                     config.lifetime_budget)
    else:
        log.note(f"release id {release_id} is in the ledger: reusing its DP statistics, no new budget")
        summary = NoisySummary.from_dict(previous.statistics)
        accountant = PrivacyAccountant.from_dict(previous.accounting)

    with log.stage("candidates and LP"):
        result = fit_from_summary(summary, params, rng)
    log.note(f"basis: {summary.basis.size} functions; candidates: {result.candidates.shape[0]}; "
             f"LP support: {result.support_size}; PSI: {'yes' if summary.pca else 'no'}")

    rows = config.output.rows or max(1, round(summary.noisy_count))
    with log.stage("sampling"):
        scaled = sample_scaled(result, rows, rng)
        values = bounds.unscale(scaled)
        table = pa.table({name: values[:, i] for i, name in enumerate(bounds.columns)})
        distinct = int(np.unique(scaled, axis=0).shape[0])

    manifest = _manifest(config, release_id, result, accountant, noise, rows, distinct, log.timings,
                         reused=previous is not None, ledger=ledger)
    with log.stage("write"):
        hashes = io.write_release(config.output.path, table, {"summary.json": summary.to_dict()},
                                  manifest, config.output.mode)
        ledger.mark_complete(release_id, config.output.path, hashes)
    log.note(f"release {release_id} written to {config.output.path} ({rows} rows, {distinct} distinct)")
    return ReleaseReport(config.output.path, {**manifest, "content_sha256": hashes})


def _check_retry(config: ReleaseConfig, previous: LedgerEntry | None) -> None:
    """A reused release id must describe the same release of the same table."""
    if previous is None:
        return
    same = (previous.table_id == config.table_id and previous.mechanism == MECHANISM
            and previous.epsilon == config.privacy.epsilon and previous.delta == config.privacy.delta
            and previous.statistics["columns"] == config.column_names)
    if not same:
        raise LedgerConflictError(
            f"release id {previous.release_id!r} was used for a different release (table "
            f"{previous.table_id!r}, epsilon {previous.epsilon}, delta {previous.delta}); "
            "use a new release id")


def _check_rows(config: ReleaseConfig, seen: int, invalid: int, clamped: int, kept: int) -> None:
    """Operator-facing checks on exact counts; a failure releases nothing (docs/privacy.md §2)."""
    if seen == 0:
        raise InvalidDataError("the input table has no rows; nothing was released")
    if invalid and config.input.on_invalid == "error":
        raise InvalidDataError(
            f"{invalid} row(s) have a null, NaN, infinite or non-numeric value in a selected column; "
            "fix the data or set input.on_invalid: drop. Nothing was released.")
    if kept == 0:
        raise InvalidDataError("no valid rows remain after dropping invalid ones; nothing was released")
    if clamped > config.input.max_clamped_fraction * kept:
        raise InvalidDataError(
            f"{clamped} of {kept} rows lie outside the public bounds (more than "
            f"input.max_clamped_fraction = {config.input.max_clamped_fraction}); the bounds are probably "
            "wrong. Nothing was released.")


def _manifest(config: ReleaseConfig, release_id: str, result: SynthesisResult,
              accountant: PrivacyAccountant, noise: NoiseSource, rows: int, distinct: int,
              timings: dict[str, float], reused: bool, ledger: BudgetLedger) -> dict[str, Any]:
    summary = result.summary
    config_dump = config.model_dump(mode="json")
    spent_eps, spent_delta = ledger.spent(config.table_id)
    return {
        "release_id": release_id,
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "mechanism": {
            "name": MECHANISM,
            "reference": "Wang et al., Differentially Private Data Releasing for Smooth Queries, "
                         "JMLR 2016, Section 5.2 (Algorithms 3 and 4)",
            "parameters": config.mechanism.model_dump(mode="json"),
            "basis": {"size": summary.basis.size, "max_degree": summary.basis.degree,
                      "pair_terms": bool(((summary.basis.indices != 0).sum(axis=1) == 2).any())},
            "candidate_strategy": "psi" if summary.pca is not None else "moments",
            "candidates": int(result.candidates.shape[0]),
            "lp_objective_l1": result.lp_objective,
            "lp_support": result.support_size,
        },
        "privacy": {
            "neighbouring_relation": NEIGHBOURING_RELATION,
            "epsilon": config.privacy.epsilon,
            "delta": config.privacy.delta,
            "accounting": accountant.to_dict(),
            "noise_sampler": noise.description,
            "seed": config.seed,
            "test_mode": config.test_mode,
            "bounds_source": "config (public); values outside are clamped",
            "invalid_rows": config.input.on_invalid,
            "statistics_reused_from_ledger": reused,
        },
        "ledger": {"path": config.ledger_path, "table_id": config.table_id,
                   "table_epsilon_spent": spent_eps, "table_delta_spent": spent_delta,
                   "lifetime_budget": config.lifetime_budget},
        "input": {"path": config.input.path, "format": config.input.format, "columns": config.column_names},
        "output": {"path": config.output.path, "rows": rows, "distinct_rows": distinct,
                   "files": "data/*.parquet, summary.json (DP noisy summary), manifest.json"},
        "config_sha256": hashlib.sha256(json.dumps(config_dump, sort_keys=True).encode()).hexdigest(),
        "stage_seconds": {**timings, **{f"driver.{k}": v for k, v in result.timings.items()}},
        "versions": {"dpsmooth_spark": __version__, "python": platform.python_version(),
                     **{pkg: version(pkg) for pkg in VERSIONED_PACKAGES}},
    }
