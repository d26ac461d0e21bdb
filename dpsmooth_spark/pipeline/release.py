"""What every release job shares: ledger and retry handling, the data pass, the manifest, the write.

A job (synthesize, summarize, ...) calls :meth:`ReleaseRun.start`, then either gets the exact sums
(:meth:`ReleaseRun.exact_sums`) and persists its DP statistics (:meth:`ReleaseRun.persist`) or,
on a retry, reloads them (:attr:`ReleaseRun.previous`); it finishes with :meth:`ReleaseRun.write`.
"""

from __future__ import annotations

import hashlib
import json
import platform
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpsmooth_spark import __version__
from dpsmooth_spark.config import ConfigError, ReleaseConfig
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.columns import ColumnTypeError, ColumnValueError, TableCodec
from dpsmooth_spark.core.kernel import ExactSums, PassSpec
from dpsmooth_spark.core.lp import LPError
from dpsmooth_spark.core.unit_tables import UnitTables
from dpsmooth_spark.mechanisms.public_domains import PublicDomains
from dpsmooth_spark.mechanisms.stages import PlanError
from dpsmooth_spark.pipeline import domains
from dpsmooth_spark.pipeline.progress import StageLog
from dpsmooth_spark.pipeline.row_checks import InvalidDataError, check_rows
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.ledger import (
    BudgetExceededError,
    BudgetLedger,
    LedgerConflictError,
    LedgerEntry,
    ReleaseRefusedError,
)
from dpsmooth_spark.privacy.noise import NoiseSource
from dpsmooth_spark.spark import data_pass, io, lake, locations, session
from dpsmooth_spark.spark.data_pass import StatisticSums

VERSIONED_PACKAGES = ("pyspark", "numpy", "scipy", "pyarrow", "ortools", "opendp")
STATED_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    ColumnTypeError,
    ColumnValueError,
    domains.UnresolvedBoundsError,
    InvalidDataError,
    io.InputError,
    lake.LakeError,
    LPError,
    PlanError,
    ReleaseRefusedError,
    BudgetExceededError,
    LedgerConflictError,
)
"""Errors whose message a refusal's ledger record keeps: the project's own, which name columns,
rules and public or noisy values only. Of any other error (Spark's, Python's) the record keeps
the type alone, since such a message may quote a record."""


@dataclass(frozen=True)
class ReleaseReport:
    """What a finished release wrote.

    Attributes:
        output_path: the release folder.
        manifest: the manifest as written.
    """

    output_path: str
    manifest: dict[str, Any]


@dataclass
class ReleaseRun:
    """State of one release job.

    Attributes:
        config: the validated config.
        mechanism: the mechanism's name (ledger key part).
        log: stage log.
        release_id: idempotency key.
        codec: the released columns: kinds, encoded bounds, output types (from the input's schema).
        bounds: the encoded public bounds the mechanism scales with.
        snapshot: the Delta/Iceberg input's file list, looked up once (``None`` for a path).
        ledger: the budget ledger.
        previous: the ledger entry of this release id when this run is a retry.
        rng: public randomness (seeded only in test mode).
        noise: the privacy noise source.
        unit_seed: the seed of the rows kept per privacy unit, drawn at the first pass (public).
        domains: the auto bounds and values found (or reused on a retry), if any column is auto.
        accountant: the release's account (:meth:`new_accountant`): the auto domains are charged
            to it first, and the statistics go on spending it.
        rows_checked: the row checks ran before any noise (with auto domains: against the
            declared ranges), so the passes after the noise make none.
        warnings: what the manifest's ``privacy.warnings`` says (the budget's, the found
            domains', the session's side channels).
        session_checked: the session's side channels were looked at (once a job).
    """

    config: ReleaseConfig
    mechanism: str
    log: StageLog
    release_id: str
    codec: TableCodec
    bounds: PublicBounds
    snapshot: Any
    ledger: BudgetLedger
    previous: LedgerEntry | None
    rng: np.random.Generator
    noise: NoiseSource
    unit_seed: int | None = None
    domains: PublicDomains | None = None
    accountant: PrivacyAccountant | None = None
    rows_checked: bool = False
    warnings: list[str] = field(default_factory=list)
    session_checked: bool = False

    @classmethod
    def start(
        cls,
        config: ReleaseConfig,
        mechanism: str,
        quiet: bool = False,
        check: Callable[[TableCodec], None] | None = None,
    ) -> ReleaseRun:
        """Refuse an output that overlaps the input, read the input's schema into the column
        codec, run the job's own config checks (``check``, on the codec with auto domains stood
        in), open the ledger, recognise a retry (and repeat a refused one's refusal), and check
        the output path, all before any noise; then find the auto domains, if any, inside
        :meth:`charged`."""
        locations.check_no_overlap(config)
        snapshot = io.input_snapshot(config.input)  # one Delta/Iceberg snapshot for the whole job
        schema = input_schema(config, snapshot)
        csv = config.input.format == "csv"
        # the schema checks (auto domains with a stand-in of their kind): a bad declaration
        # opens no ledger
        try:
            codec = domains.provisional_codec(config.columns, schema, csv)
        except ColumnTypeError as exc:
            raise io.InputError(f"{exc}; nothing was released") from None
        if check is not None:
            check(codec)
        release_id = config.release_id or uuid.uuid4().hex
        ledger = BudgetLedger(config.ledger_path)
        previous = ledger.find(release_id)
        _check_retry(config, mechanism, previous)
        if previous is not None and previous.refusal is not None:
            raise ReleaseRefusedError(
                f"release id {release_id!r} was refused after its noise was drawn "
                f"({previous.refusal}); its spend is in the ledger: use a new release id"
            )
        if config.output.format == "parquet":
            io.check_output_path(config.output.path, config.output.mode, release_id)
        elif config.output.format == "table":
            io.check_table_output(session.session_for(config.spark), config.output)
        else:
            io.check_lake_output(config.output, release_id)
        rng = np.random.default_rng(config.seed)
        noise = NoiseSource(rng if config.seed is not None else None)
        run = cls(
            config,
            mechanism,
            StageLog(quiet=quiet),
            release_id,
            codec,
            codec.bounds(),
            snapshot,
            ledger,
            previous,
            rng,
            noise,
        )
        for warning in config.privacy.warnings:
            run.log.warning(warning)
            run.warnings.append(warning)
        if previous is not None:
            run.log.note(
                f"release id {release_id} is in the ledger: reusing its DP statistics, "
                "no new budget"
            )
        if domains.has_auto(config.columns):
            with run.charged():
                run._resolve_domains(schema)
        return run

    @contextmanager
    def charged(self) -> Iterator[ReleaseRun]:
        """A job's work from its first noise draw on: an error that leaves it after any draw is
        first recorded in the ledger as a refused release that spent the whole ``(epsilon,
        delta)`` (the stages drawn in its accounting), unless the release's statistics are
        already there; a retry with the same release id then repeats the refusal and draws
        nothing (docs/privacy.md section 2)."""
        try:
            yield self
        except BaseException as exc:
            if self.noise.draws and self.ledger.find(self.release_id) is None:
                self._record_refusal(exc)
            raise

    def _record_refusal(self, exc: BaseException) -> None:
        """Record a refused release's spend (see :meth:`charged`) and say so on the console."""
        reason = (
            f"{type(exc).__name__}: {exc}"
            if isinstance(exc, STATED_ERRORS)
            else f"{type(exc).__name__} (its message is not kept: it may quote a record)"
        )
        statistics: dict[str, Any] = {"columns": self.config.column_names, "refused": reason}
        self.persist(self.new_accountant(), statistics, refused=True)
        privacy = self.config.privacy
        self.log.warning(
            f"release {self.release_id} failed after its first noise draw: epsilon "
            f"{privacy.epsilon}, delta {privacy.delta} are recorded as spent in the ledger "
            f"{self.config.ledger_path}"
        )

    def _resolve_domains(self, schema: pa.Schema) -> None:
        """Find the auto bounds and values (or reuse a retry's), then type the columns with them;
        the found domains are public from here on, like declared ones. A new release first makes
        the row checks against the declared ranges (every value of an auto-values column
        valid), so no check on the exact rows follows the domains' noise."""
        config = self.config
        if self.previous is not None:
            stored = self.previous.statistics.get("public_domains")
            if stored is None:
                raise LedgerConflictError(
                    f"release id {self.release_id!r} was used for a release without auto domains; "
                    "use a new release id"
                )
            self.domains = PublicDomains.from_dict(stored)
        else:
            self.ledger.check_budget(
                config.table_id,
                config.privacy.epsilon,
                config.privacy.delta,
                config.lifetime_budget,
            )
            accountant = self.new_accountant()
            with self.log.stage("spark session"):
                spark = self.spark()
            with self.log.stage("row checks"):
                checking = domains.checking_codec(self.codec, config.columns)
                spec = PassSpec(1, null_cells=bool(checking.null_columns.any()))
                _check_rows(config, data_pass.exact_sums(self._input(spark), checking, spec))
                self.rows_checked = True
            with self.log.stage("public domains"):
                df = self._input(spark)
                self.domains = domains.find_domains(
                    lambda grids: data_pass.grid_counts(df, self.codec, grids),
                    lambda column: data_pass.value_counts(df, column),
                    config.columns,
                    self.codec,
                    accountant,
                    self.noise,
                    config.privacy.domain_fraction,
                )
        for warning in domains.domain_warnings(self.domains, config.privacy):
            self.log.warning(warning)
            self.warnings.append(warning)
        try:
            self.codec = domains.resolved_codec(
                config.columns, self.codec, self.domains, schema, config.input.format == "csv"
            )
        except ColumnTypeError as exc:  # charged by :meth:`charged`
            raise io.InputError(f"{exc}; nothing was released") from None
        self.bounds = self.codec.bounds()

    def new_accountant(self) -> PrivacyAccountant:
        """The accountant of this release's budget (sensitivities times the rows one privacy
        unit may contribute), made on first use: the auto domains are charged to it first. A
        part of delta is set aside for partition selection when a column has ``values: auto``."""
        if self.accountant is None:
            self.accountant = domains.release_accountant(self.config.privacy, self.config.columns)
        return self.accountant

    def reused_accountant(self) -> PrivacyAccountant:
        """The account of the persisted statistics (retries only)."""
        assert self.previous is not None
        return PrivacyAccountant.from_dict(self.previous.accounting)

    def exact_sums(self, spec: PassSpec) -> ExactSums:
        """Check the lifetime budget, run the Spark data pass and the operator-facing row checks."""
        config = self.config
        self.ledger.check_budget(
            config.table_id, config.privacy.epsilon, config.privacy.delta, config.lifetime_budget
        )
        sums = self.data_pass(spec)
        if not self.rows_checked:
            _check_rows(config, sums)
        return sums

    def unit_pass(self, spec: UnitTables) -> np.ndarray:
        """Check the lifetime budget, then one Spark pass counting a release of persons' tables
        over the kept rows grouped by unit (:func:`data_pass.unit_sums`), then the row checks."""
        config = self.config
        unit = config.privacy.unit
        assert unit is not None
        self.ledger.check_budget(
            config.table_id, config.privacy.epsilon, config.privacy.delta, config.lifetime_budget
        )
        with self.log.stage("spark session"):
            spark = self.spark()
        with self.log.stage("data pass"):
            df = io.read_input(spark, config.input, self.codec, self.snapshot, (unit,))
            if self.unit_seed is None:
                self.unit_seed = int(self.rng.integers(2**31))
            kept = io.bound_contributions(
                df, unit, config.privacy.unit_rows, self.unit_seed, keep_unit=True
            )
            sums = data_pass.unit_sums(kept, self.codec, spec, unit, io.UNIT_RANK)
        if not self.rows_checked:
            _check_rows(config, sums)
        return sums.values

    def spark(self) -> Any:
        """The Spark session (started on first use); the first use warns of the session's side
        channels (the UI, the event log: :func:`session.side_channel_warnings`)."""
        spark = session.session_for(self.config.spark)
        if not self.session_checked:
            self.session_checked = True
            for warning in session.side_channel_warnings(spark.conf.get):
                self.log.warning(warning)
                self.warnings.append(warning)
        return spark

    def data_pass(self, spec: PassSpec, name: str = "data pass") -> ExactSums:
        """One Spark pass over the input (a second pass of a job skips the checks)."""
        with self.log.stage("spark session"):
            spark = self.spark()
        with self.log.stage(name):
            source = self._arrow_source(self.codec.names, self.snapshot)
            if source is not None:
                return data_pass.exact_sums_arrow(spark, source, self.codec, spec)
            return data_pass.exact_sums(self._input(spark), self.codec, spec)

    def statistic_pass(
        self, sums_of: Callable[[np.ndarray], np.ndarray], name: str = "data pass"
    ) -> StatisticSums:
        """Check the lifetime budget, then one Spark pass summing ``sums_of`` over the valid rows
        (clamped, original units), then the operator-facing row checks."""
        config = self.config
        self.ledger.check_budget(
            config.table_id, config.privacy.epsilon, config.privacy.delta, config.lifetime_budget
        )
        sums = self._summed(sums_of, name, "original")
        if not self.rows_checked:
            _check_rows(config, sums)
        return sums

    def _summed(
        self, sums_of: Callable[[np.ndarray], np.ndarray], name: str, unit: str
    ) -> StatisticSums:
        """One Spark pass summing ``sums_of`` over the valid rows in ``unit`` (original or
        scaled), logged as stage ``name``."""
        with self.log.stage("spark session"):
            spark = self.spark()
        with self.log.stage(name):
            return data_pass.statistic_sums(self._input(spark), self.codec, sums_of, unit=unit)

    def rows_pass(self, sums_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """A second Spark pass over the rows the data pass summed (the same snapshot and, with a
        privacy unit, the same rows of each unit), summing ``sums_of`` over them scaled to
        [-1, 1] (the mechanism's ``RowsPass``), for statistics whose functions depend on
        released ones (the quadrant pairs' medians). The budget and the rows were checked before
        the first pass."""
        return self._summed(sums_of, "second pass", "scaled").values

    def sample_rows(self, rate: float) -> np.ndarray:
        """A Bernoulli sample of the valid rows (each kept independently with ``rate``), clamped
        to the bounds, on the driver: a per-record transformation, so neighbouring tables give
        neighbouring or equal samples. The seed is public randomness."""
        df = self._input(self.spark())
        seed = int(self.rng.integers(2**62))
        x = self.codec.encode((df.sample(fraction=rate, seed=seed) if rate < 1.0 else df).toArrow())
        x = x[np.isfinite(x).all(axis=1)]
        return np.clip(x, self.bounds.lower, self.bounds.upper)

    def _input(self, spark: Any) -> Any:
        """The input's configured columns as a DataFrame; with a privacy unit, at most
        ``max_rows_per_unit`` rows of each unit (:func:`io.bound_contributions`, its seed public
        randomness from the release's generator)."""
        privacy = self.config.privacy
        if privacy.unit is None:
            return io.read_input(spark, self.config.input, self.codec, self.snapshot)
        df = io.read_input(spark, self.config.input, self.codec, self.snapshot, (privacy.unit,))
        if self.unit_seed is None:  # one choice of rows for every pass of the release
            self.unit_seed = int(self.rng.integers(2**31))
        return io.bound_contributions(df, privacy.unit, privacy.unit_rows, self.unit_seed)

    def _arrow_source(self, columns: list[str], snapshot: Any) -> str | list[str] | None:
        """What the arrow reader reads (a Parquet path or a lake snapshot's files), or ``None`` for
        the DataFrame pass (CSV, ``reader: spark``, a privacy unit, whose bound needs the
        DataFrame, or files that lack a column, e.g. partition columns)."""
        source = self.config.input
        if source.reader == "spark" or source.format in ("csv", "table"):
            return None
        if self.config.privacy.unit is not None:
            return None
        target: str | list[str] = snapshot.files if snapshot is not None else source.path
        try:
            if source.reader == "arrow" or data_pass.arrow_readable(target, columns):
                return target
        except (OSError, pa.ArrowException):
            pass  # not readable as Parquet here: the DataFrame path reports it
        return None

    def persist(
        self, accountant: PrivacyAccountant, statistics: dict[str, Any], refused: bool = False
    ) -> None:
        """Record the DP statistics (with the found domains) in the ledger before anything
        downstream reads them. A ``refused`` release's record skips the lifetime check: its
        noise is drawn, so its spend goes on record even where the budget is now exceeded."""
        config = self.config
        if self.domains is not None:
            statistics = {**statistics, "public_domains": self.domains.to_dict()}
        self.ledger.record_statistics(
            self.release_id,
            config.table_id,
            self.mechanism,
            config.privacy.epsilon,
            config.privacy.delta,
            accountant.to_dict(),
            statistics,
            None if refused else config.lifetime_budget,
        )

    def manifest(
        self,
        accountant: PrivacyAccountant,
        mechanism: dict[str, Any],
        output: dict[str, Any],
        driver_timings: dict[str, float],
    ) -> dict[str, Any]:
        """The manifest: mechanism, privacy (relation, budget per stage), ledger, versions."""
        config = self.config
        spent_eps, spent_delta = self.ledger.spent(config.table_id)
        config_dump = config.model_dump(mode="json")
        return {
            "release_id": self.release_id,
            "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "mechanism": {"name": self.mechanism, **mechanism},
            "privacy": {
                "neighbouring_relation": config.privacy.neighbouring_relation,
                "privacy_unit": config.privacy.unit or "record",
                "max_rows_per_unit": config.privacy.unit_rows,
                "epsilon": config.privacy.epsilon,
                "delta": config.privacy.delta,
                "accounting": accountant.to_dict(),
                "noise_sampler": self.noise.description,
                "seed": config.seed,
                "test_mode": config.test_mode,
                "bounds_source": "config (public); values outside are clamped"
                if self.domains is None
                else "config (public) and, for auto columns, DP (public_domains); values "
                "outside are clamped, values outside a found domain are `other`",
                **({} if self.domains is None else {"public_domains": self.domains.to_dict()}),
                "invalid_rows": config.input.on_invalid,
                "statistics_reused_from_ledger": self.previous is not None,
                "warnings": self.warnings,
            },
            "ledger": {
                "path": config.ledger_path,
                "table_id": config.table_id,
                "table_epsilon_spent": spent_eps,
                "table_delta_spent": spent_delta,
                "lifetime_budget": config.lifetime_budget,
            },
            "input": {
                "path": config.input.path,
                "format": config.input.format,
                "columns": config.column_names,
            },
            "output": {"path": config.output.path, **output},
            "config_sha256": hashlib.sha256(
                json.dumps(config_dump, sort_keys=True).encode()
            ).hexdigest(),
            "stage_seconds": {
                **self.log.timings,
                **{f"driver.{k}": v for k, v in driver_timings.items()},
            },
            "versions": {
                "dpsmooth_spark": __version__,
                "python": platform.python_version(),
                **{pkg: version(pkg) for pkg in VERSIONED_PACKAGES},
            },
        }

    def write(
        self,
        table: pa.Table | io.DataWriter | None,
        documents: dict[str, dict[str, Any]],
        manifest: dict[str, Any],
        units: pa.Table | io.UnitsWriter | None = None,
    ) -> ReleaseReport:
        """Write the release folder atomically and mark the release complete in the ledger;
        ``units``: a release of persons' units table (``output.units_table``, parquet only)."""
        output = self.config.output
        with self.log.stage("write"):
            if output.format == "parquet":  # a writer from the executors partitions by itself
                hashes = io.write_release(
                    output.path,
                    table,
                    documents,
                    manifest,
                    output.mode,
                    output.partition_by,
                    units,
                )
            elif output.format == "table":
                side = Path(self.config.ledger_path).parent / "_dpsmooth" / output.path
                hashes = io.write_table_release(
                    self.spark(), output, side, self.release_id, table, documents, manifest
                )
            else:
                hashes = io.write_lake_release(output, self.release_id, table, documents, manifest)
            self.ledger.mark_complete(self.release_id, output.path, hashes)
        self.log.note(f"release {self.release_id} written to {self.config.output.path}")
        return ReleaseReport(self.config.output.path, {**manifest, "content_sha256": hashes})


def input_schema(config: ReleaseConfig, snapshot: Any = None) -> pa.Schema:
    """The input's schema (metadata only; Spark starts only where the files cannot tell, e.g.
    hive partition columns). ``snapshot``: the Delta/Iceberg input's files when already looked
    up."""
    return io.input_schema(
        config.input, config.column_names, lambda: session.session_for(config.spark), snapshot
    )


def input_codec(config: ReleaseConfig, snapshot: Any = None) -> TableCodec:
    """The released columns' kinds and types, from the input's schema (columns with auto domains
    need a release to find them: :meth:`ReleaseRun.start`)."""
    schema = input_schema(config, snapshot)
    return io.table_codec(config.columns, schema, csv=config.input.format == "csv")


def _check_retry(config: ReleaseConfig, mechanism: str, previous: LedgerEntry | None) -> None:
    """A reused release id must describe the same release of the same table."""
    if previous is None:
        return
    same = (
        previous.table_id == config.table_id
        and previous.mechanism == mechanism
        and previous.epsilon == config.privacy.epsilon
        and previous.delta == config.privacy.delta
        and previous.statistics.get("columns") == config.column_names
        and previous.accounting.get("max_rows_per_unit", 1) == config.privacy.unit_rows
    )
    if not same:
        raise LedgerConflictError(
            f"release id {previous.release_id!r} was used for a different release (table "
            f"{previous.table_id!r}, mechanism {previous.mechanism}, epsilon {previous.epsilon}, "
            f"delta {previous.delta}); use a new release id"
        )


def _check_rows(config: ReleaseConfig, sums: ExactSums | StatisticSums) -> None:
    """:func:`check_rows` with the config's rules."""
    check_rows(
        sums.rows_seen,
        sums.rows_invalid,
        sums.rows_clamped,
        config.input.on_invalid,
        config.input.max_clamped_fraction,
    )
