"""One validated schema for a release, loaded from YAML.

Unknown keys are errors (a typo must not silently fall back to a default), and every message
names the offending key, e.g. ``privacy.epsilon: Input should be greater than 0``.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.columns import MAX_CATEGORIES
from dpsmooth_spark.mechanisms.bernstein_release import BernsteinParams
from dpsmooth_spark.mechanisms.distance_release import DistanceParams
from dpsmooth_spark.mechanisms.smooth_grid import GridParams
from dpsmooth_spark.mechanisms.smooth_summary import SummaryParams
from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the bad key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CatalogConfig(_Strict):
    """An Iceberg SQL catalog (pyiceberg ``SqlCatalog``; SQLite needs no server)."""

    uri: str = Field(
        min_length=1,
        description="SQLAlchemy URI of the catalog database, e.g. sqlite:////lake/catalog.db.",
    )
    warehouse: str = Field(
        min_length=1, description="Where table data lives, e.g. /lake/warehouse."
    )
    name: str = Field(default="dpsmooth", description="The catalog's name.")


class _TableLocation(_Strict):
    """Input and output share this rule: an Iceberg table needs a catalog, other formats none.
    ``{table: db.name}`` names a table of the Spark session's catalog (``format: table``)."""

    _section: ClassVar[str] = ""
    format: str
    catalog: CatalogConfig | None = Field(
        default=None, description="The Iceberg catalog (iceberg only)."
    )

    @model_validator(mode="before")
    @classmethod
    def _catalog_table(cls, data: Any) -> Any:
        if isinstance(data, dict) and "table" in data:
            if "path" in data or data.get("format", "table") != "table":
                raise ValueError(
                    f"{cls._section}: give table (a Spark catalog table) or path, not both"
                )
            data = {
                **{k: v for k, v in data.items() if k != "table"},
                "path": data["table"],
                "format": "table",
            }
        return data

    @model_validator(mode="after")
    def _catalog_for_iceberg(self) -> _TableLocation:
        if (self.format == "iceberg") != (self.catalog is not None):
            raise ValueError(
                f"{self._section}.catalog is required with format iceberg, and only then"
            )
        return self


class InputConfig(_TableLocation):
    """Where the sensitive table is and what to do with unusable rows."""

    _section: ClassVar[str] = "input"
    path: str = Field(
        description=(
            "File or folder (Parquet, CSV), Delta table folder, or Iceberg identifier; `table: "
            "db.name` names a catalog table instead."
        )
    )
    format: Literal["parquet", "csv", "delta", "iceberg", "table"] = Field(
        default="parquet",
        description=(
            "parquet, csv (with a header row), delta or iceberg (the current snapshot's files), or"
            " table (a Spark catalog table)."
        ),
    )
    table_id: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "The table's identity in the budget ledger (default format:path); give a stable name "
            "when paths change."
        ),
    )
    reader: Literal["auto", "spark", "arrow"] = Field(
        default="auto",
        description=(
            "How the data pass reads Parquet: spark (mapInArrow), arrow (tasks read row groups "
            "with pyarrow) or auto."
        ),
    )
    on_invalid: Literal["error", "drop"] = Field(
        default="error",
        description=(
            "Rows with a null, NaN, infinite or non-numeric value: error stops before any noise; "
            "drop removes them (per record)."
        ),
    )
    max_clamped_fraction: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Stop when more than this share of rows lies outside the bounds (shown to the operator"
            " only, never released)."
        ),
    )


class ColumnConfig(_Strict):
    """A released column with its public domain (never taken from the data).

    The kind follows from the declaration and the column's type in the table
    (docs/mechanisms.md, "Column kinds"): ``lower``/``upper`` numbers for a float or integer
    column (an integer column is released on its lattice), dates or timestamps for a date or
    timestamp column, ``values`` for a categorical column (strings or integers, at most
    ``MAX_CATEGORIES``), neither for a boolean column. ``nullable: true`` allows nulls: their
    share is released (from the histograms' null cells, no extra budget) and reproduced; without
    it a null makes the row invalid (``input.on_invalid``).
    """

    name: str = Field(min_length=1, description="The column's name in the input table.")
    nullable: bool = Field(
        default=False,
        description=(
            "Allow nulls: their share is released (a null cell in the histogram) and reproduced."
        ),
    )
    per_unit: bool = Field(
        default=False,
        description=(
            "An attribute of the privacy unit (constant over its rows; a unit whose rows disagree "
            "takes its first kept row's value): a release of persons draws it once per unit."
        ),
    )
    lower: float | dt.datetime | dt.date | Literal["auto"] | None = Field(
        default=None,
        description=(
            "Public lower bound: a number (float or integer column), a date or a datetime; auto: "
            "found with DP inside range, charged to the budget."
        ),
    )
    upper: float | dt.datetime | dt.date | Literal["auto"] | None = Field(
        default=None,
        description="Public upper bound, of the same kind as lower; auto as for lower.",
    )
    range: (
        tuple[float, float] | tuple[dt.datetime, dt.datetime] | tuple[dt.date, dt.date] | None
    ) = Field(
        default=None,
        description=(
            "With auto bounds: the public coarse range [a, b] the DP bounds are found in (an "
            "integer, date or timestamp column may leave it out: its type's range)."
        ),
    )
    values: list[StrictBool | StrictInt | StrictStr] | Literal["auto"] | None = Field(
        default=None,
        description=(
            "The public values of a categorical column (strings, integers or booleans); auto: the "
            "values DP partition selection finds (needs privacy.delta > 0 and other)."
        ),
    )
    values_file: str | None = Field(
        default=None,
        description=(
            "A file of the public values of a categorical column, one per line (for long lists; "
            "read as strings, cast to the column's type); instead of values."
        ),
    )
    other: StrictInt | StrictStr | None = Field(
        default=None,
        description="With values: auto, the value that every value not found stands for.",
    )

    @model_validator(mode="before")
    @classmethod
    def _values_from_file(cls, data: Any) -> Any:
        """``values_file``: its lines (blank ones skipped) become ``values``; a value YAML read
        as null (an unquoted ``null``, ``Null``, ``~``) is refused with the quoted form."""
        if isinstance(data, dict) and isinstance(data.get("values"), list):
            if any(v is None for v in data["values"]):
                raise ValueError(
                    f"column {data.get('name')!r}: a value of values was read as null: YAML reads "
                    "an unquoted null, Null or ~ as no value; quote it (values: ['null', ...])"
                )
        if not isinstance(data, dict) or data.get("values_file") is None:
            return data
        name = data.get("name")
        if data.get("values") is not None:
            raise ValueError(f"column {name!r}: give values or values_file, not both")
        path = Path(str(data["values_file"]))
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ValueError(
                f"column {name!r}: cannot read values_file {path}: {exc.strerror}"
            ) from None
        except UnicodeDecodeError:
            raise ValueError(f"column {name!r}: values_file {path} is not UTF-8 text") from None
        values = [line.strip() for line in lines if line.strip()]
        if not values:
            raise ValueError(f"column {name!r}: values_file {path} holds no value")
        return {**data, "values": values}

    @model_validator(mode="after")
    def _domain(self) -> ColumnConfig:
        bounds = (self.lower is not None, self.upper is not None)
        if bounds[0] != bounds[1]:
            raise ValueError(f"column {self.name!r}: give both lower and upper, or neither")
        if self.range is not None and not self.auto_bounds:
            raise ValueError(f"column {self.name!r}: range goes with lower: auto or upper: auto")
        if self.range is not None and not _comparable(self.range[0]) < _comparable(self.range[1]):
            raise ValueError(f"column {self.name!r}: range must be [a, b] with a < b")
        if self.range is not None and not all(
            math.isfinite(v) for v in self.range if isinstance(v, float)
        ):
            raise ValueError(f"column {self.name!r}: range must be finite")
        if (self.other is not None) != (self.values == "auto"):
            raise ValueError(
                f"column {self.name!r}: values: auto and other go together (other names the value "
                "that stands for every value the selection does not release)"
            )
        if self.values == "auto":
            if bounds[0]:
                raise ValueError(
                    f"column {self.name!r}: give bounds (lower, upper) or values, not both"
                )
            return self
        if self.auto_bounds:
            return self._mixed_auto_bounds()
        if self.values is not None:
            if bounds[0]:
                raise ValueError(
                    f"column {self.name!r}: give bounds (lower, upper) or values, not both"
                )
            if not self.values or len(set(map(repr, self.values))) != len(self.values):
                raise ValueError(
                    f"column {self.name!r}: values must be a non-empty list without repeats"
                )
            if len(self.values) > MAX_CATEGORIES:
                raise ValueError(
                    f"column {self.name!r}: {len(self.values)} values; at most {MAX_CATEGORIES}"
                )
        if not bounds[0]:
            return self
        lo, hi = self.lower, self.upper
        if isinstance(lo, dt.date) != isinstance(hi, dt.date):
            raise ValueError(
                f"column {self.name!r}: lower and upper must both be numbers or both dates"
            )
        if (
            isinstance(lo, float)
            and isinstance(hi, float)
            and not (math.isfinite(lo) and math.isfinite(hi))
        ):
            raise ValueError(f"bounds of column {self.name!r} must be finite")
        try:
            ordered = _comparable(lo) < _comparable(hi)
        except TypeError:
            raise ValueError(
                f"column {self.name!r}: lower and upper must have the same type"
            ) from None
        if not ordered:
            raise ValueError(f"column {self.name!r}: lower ({lo}) must be < upper ({hi})")
        return self

    def _mixed_auto_bounds(self) -> ColumnConfig:
        """One bound auto, the other given: the given one must fit the range's kind."""
        if self.values is not None:
            raise ValueError(
                f"column {self.name!r}: give bounds (lower, upper) or values, not both"
            )
        fixed = [b for b in (self.lower, self.upper) if b != "auto"]
        if fixed and self.range is not None:
            if isinstance(fixed[0], dt.date) != isinstance(self.range[0], dt.date):
                raise ValueError(
                    f"column {self.name!r}: the bound {fixed[0]} and the range must both be "
                    "numbers or both dates"
                )
        return self

    @property
    def auto_bounds(self) -> bool:
        """Whether a bound is ``auto`` (found by a DP quantile)."""
        return self.lower == "auto" or self.upper == "auto"

    @property
    def auto_values(self) -> bool:
        """Whether the categorical domain is ``auto`` (found by DP partition selection)."""
        return self.values == "auto"

    @property
    def numeric_bounds(self) -> tuple[float, float] | None:
        """The bounds when they are numbers (``None`` for a date, boolean or categorical column)."""
        if isinstance(self.lower, float) and isinstance(self.upper, float):
            return self.lower, self.upper
        return None


def _comparable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
    return value


LARGE_EPSILON = 10.0
"""Above this epsilon a release carries a warning (log, manifest, report)."""
MAX_EPSILON = 100.0
"""Above this epsilon a release is refused unless ``privacy.allow_large_epsilon: true``."""
UNIT_ROWS_COLUMN = "rows"
"""The units table's column of each unit's row count (``output.units_table``)."""


class PrivacyConfig(_Strict):
    """The release's budget; ``delta > 0`` selects the Gaussian (epsilon, delta) mode."""

    epsilon: float = Field(
        gt=0,
        description=(
            "The release's epsilon; above 10 the release warns, above 100 it is refused without "
            "allow_large_epsilon."
        ),
    )
    delta: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description=(
            "The release's delta: 0 is pure epsilon-DP (Laplace); > 0 selects Gaussian noise with "
            "zCDP accounting."
        ),
    )
    allow_large_epsilon: bool = Field(
        default=False,
        description="Accept an epsilon above 100 (otherwise refused as a likely typo).",
    )
    unit: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "The column naming the privacy unit (a person): neighbouring tables differ in all "
            "rows of one unit. Never released. null: record-level."
        ),
    )
    max_rows_per_unit: int | None = Field(
        default=None,
        ge=1,
        description=(
            "With unit: the pass keeps at most this many rows of each unit (chosen by a seeded "
            "hash of each row, so a unit's choice depends on its own rows alone) and every "
            "sensitivity is multiplied by it."
        ),
    )

    domain_fraction: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description=(
            "Share of the budget that auto bounds and auto values spend (split evenly over them); "
            "unused when no column is auto."
        ),
    )
    unresolved_bounds: Literal["error", "range"] = Field(
        default="error",
        description=(
            "An auto bound that no noisy cell clears: error stops the release (its spend is "
            "recorded in the ledger); range uses the range's end, with a warning on the console "
            "and in the manifest."
        ),
    )

    @model_validator(mode="after")
    def _unit_and_bound(self) -> PrivacyConfig:
        if (self.unit is None) != (self.max_rows_per_unit is None):
            raise ValueError(
                "privacy.unit and privacy.max_rows_per_unit go together: name the unit column "
                "and the most rows of one unit the release may read"
            )
        return self

    @property
    def unit_rows(self) -> int:
        """Rows one privacy unit may contribute (1: record-level)."""
        return self.max_rows_per_unit or 1

    @property
    def neighbouring_relation(self) -> str:
        """What neighbouring tables mean for this release, as the manifest states it."""
        if self.unit is None:
            return (
                "add/remove one record (unbounded DP): neighbouring tables differ by the presence "
                "of one row; the row count is not public and is released with noise"
            )
        return (
            f"add/remove one unit (unbounded DP): neighbouring tables differ in all rows of one "
            f"{self.unit}; at most {self.max_rows_per_unit} rows of each {self.unit} are read, "
            "and every sensitivity is multiplied by that number"
        )

    @field_validator("epsilon")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("epsilon must be finite")
        return value

    @model_validator(mode="after")
    def _not_meaningless(self) -> PrivacyConfig:
        if self.epsilon > MAX_EPSILON and not self.allow_large_epsilon:
            raise ValueError(
                f"epsilon = {self.epsilon:g} is above {MAX_EPSILON:g}, where differential privacy "
                "no longer protects anyone; if this is really intended set "
                "privacy.allow_large_epsilon: true"
            )
        return self

    @property
    def warnings(self) -> list[str]:
        """What a release with this budget must say about it (empty for a usual budget)."""
        if self.epsilon <= LARGE_EPSILON:
            return []
        return [
            (
                f"epsilon = {self.epsilon:g} is above {LARGE_EPSILON:g}: a weak guarantee "
                f"(neighbouring "
                f"tables may differ in likelihood by a factor up to e^{self.epsilon:g}); do not "
                "release this table as protected data"
            )
        ]


class OutputConfig(_TableLocation):
    """Where the release goes."""

    _section: ClassVar[str] = "output"
    path: str = Field(
        description=(
            "Release folder, Delta table folder, or Iceberg identifier; `table: db.name` writes a "
            "catalog table instead."
        )
    )
    rows: int | None = Field(
        default=None,
        ge=1,
        le=10**12,
        description="Number of synthetic rows; null: the noisy count.",
    )
    units: int | None = Field(
        default=None,
        ge=1,
        le=10**11,
        description=(
            "A release of persons (privacy.unit with mechanism.method: adaptive) writes this "
            "many synthetic units, each with its rows and a fresh id in the unit column; null: "
            "the noisy unit count."
        ),
    )
    units_table: bool = Field(
        default=False,
        description=(
            "A release of persons also writes units/: one row per synthetic unit (its id, its "
            "per-unit columns, its row count `rows`), joinable with data/ on the unit column; "
            "parquet output only."
        ),
    )
    mode: Literal["error", "overwrite"] = Field(
        default="error",
        description="error if the output exists, or overwrite (replaced atomically).",
    )
    sampling: Literal["auto", "driver", "executors"] = Field(
        default="auto",
        description=(
            "Where rows are drawn: driver, executors (the driver never holds them) or auto "
            "(executors above 10^6 rows)."
        ),
    )
    partitions: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description="Output files when sampling on executors; null: one per million rows.",
    )
    format: Literal["parquet", "delta", "iceberg", "table"] = Field(
        default="parquet",
        description=(
            "parquet, delta (delta-rs) or iceberg (pyiceberg), each one atomic commit, or table "
            "(saveAsTable)."
        ),
    )
    partition_by: str | None = Field(
        default=None,
        min_length=1,
        description="Partition the rows by a released column, or by date (adds release_date).",
    )


class LedgerConfig(_Strict):
    """The persistent budget ledger (docs/privacy.md section 8)."""

    path: str | None = Field(
        default=None,
        description="SQLite file of the ledger; null: dpsmooth_ledger.sqlite beside the output.",
    )
    lifetime_epsilon: float | None = Field(
        default=None,
        gt=0,
        description="Total epsilon all releases of the table may spend; null: unlimited.",
    )
    lifetime_delta: float = Field(
        default=0.0, ge=0, lt=1, description="Total delta all releases of the table may spend."
    )


class SparkConfig(_Strict):
    """Spark session settings (ignored when the job runs under an existing session)."""

    master: str = Field(
        default="local[*]", description="Master of a classic session (spark-submit's master wins)."
    )
    remote: str | None = Field(
        default=None,
        pattern=r"^sc://",
        description=(
            "A Spark Connect server (sc://host:port); also read from SPARK_REMOTE. No master is "
            "set then."
        ),
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings (through Connect only runtime settings apply).",
    )


def check_synthesis(
    columns: list[ColumnConfig], privacy: PrivacyConfig, mechanism: SynthesizerParams
) -> None:
    """The rules that join the columns, the privacy section and the synthesize job's parameters;
    a release config and the in-memory ``Synthesizer`` both apply them.

    Raises:
        ValueError: a column declared twice, the privacy unit declared as a column, anchor
            columns that are not declared, or a pooled histogram forced under zCDP.
    """
    names = [c.name for c in columns]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate column names: {dupes}")
    if privacy.unit is not None and privacy.unit in names:
        raise ValueError(
            f"privacy.unit {privacy.unit!r} is also declared as a column; the unit column is "
            "never released: remove it from columns"
        )
    per_unit = [c.name for c in columns if c.per_unit]
    if per_unit and privacy.unit is None:
        raise ValueError(
            f"columns {per_unit} are declared per_unit, which needs privacy.unit (the unit whose "
            "attribute they are)"
        )
    if per_unit and mechanism.method != "adaptive":
        raise ValueError(
            f"columns {per_unit} are declared per_unit: a release of persons needs "
            "mechanism.method: adaptive"
        )
    auto_values = [c.name for c in columns if c.auto_values]
    if auto_values and privacy.delta == 0:
        raise ValueError(
            f"columns {auto_values} declare values: auto, which needs privacy.delta > 0: a value "
            "that only one person has could appear in the release, and only delta can pay for "
            "that (docs/privacy.md section 1c); list the values, or set a delta"
        )
    unknown = sorted(set(mechanism.pair_columns) - set(names))
    if unknown:
        raise ValueError(f"mechanism.pair_columns are not configured columns: {unknown}")
    if mechanism.pooled_histogram == "on" and privacy.delta > 0:
        raise ValueError(
            "mechanism.pooled_histogram: on needs pure epsilon-DP (privacy.delta: 0); "
            "under zCDP it gains nothing (docs/privacy.md section 3f)"
        )


class ReleaseConfig(_Strict):
    """A complete release: ``mechanism`` configures the synthesize job, ``summary`` the summarize
    job, ``grid`` the synthesize-grid job (Algorithm 3), ``bernstein`` the release-function job
    and ``distance`` the release-distances job."""

    input: InputConfig = Field(
        description="Where the sensitive table is and what to do with unusable rows."
    )
    columns: list[ColumnConfig] = Field(
        min_length=1,
        description="The released columns, each with its public domain (never read from the data).",
    )
    privacy: PrivacyConfig = Field(description="The release's budget and neighbouring relation.")
    output: OutputConfig = Field(description="Where the release goes and how many rows it has.")
    mechanism: SynthesizerParams = Field(
        default_factory=SynthesizerParams,
        description="Parameters of the synthesize job (measure, candidates, fit, sample).",
    )
    summary: SummaryParams = Field(
        default_factory=SummaryParams, description="Parameters of the summarize job (Algorithm 1)."
    )
    grid: GridParams = Field(
        default_factory=GridParams,
        description="Parameters of the synthesize-grid job (Algorithm 3, the exact grid LP).",
    )
    bernstein: BernsteinParams = Field(
        default_factory=BernsteinParams,
        description="Parameters of the release-function job (the Bernstein mechanism).",
    )
    distance: DistanceParams = Field(
        default_factory=DistanceParams,
        description="Parameters of the release-distances job (Huang-Roth distance queries).",
    )
    spark: SparkConfig = Field(
        default_factory=SparkConfig,
        description="Spark session settings (ignored under an existing session).",
    )
    ledger: LedgerConfig = Field(
        default_factory=LedgerConfig, description="The persistent budget ledger of the input table."
    )
    seed: int | None = Field(
        default=None,
        description="Noise seed; only with test_mode (a seeded release is not secure and says so).",
    )
    test_mode: bool = Field(
        default=False,
        description="Allow a seed: seeded, non-secure noise for tests and benchmarks.",
    )
    release_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_.:+-]{1,128}$",
        description=(
            "Idempotency key (e.g. a scheduler run id): a retry reuses the first attempt's noisy "
            "statistics."
        ),
    )

    @model_validator(mode="after")
    def _columns_privacy_and_mechanism_agree(self) -> ReleaseConfig:
        check_synthesis(self.columns, self.privacy, self.mechanism)
        return self

    @model_validator(mode="after")
    def _units_table(self) -> ReleaseConfig:
        if not self.output.units_table:
            return self
        if not self.persons:
            raise ValueError(
                "output.units_table needs a release of persons (privacy.unit with "
                "mechanism.method: adaptive)"
            )
        if self.output.format != "parquet":
            raise ValueError(
                "output.units_table needs output.format: parquet (the units table is written "
                "beside data/ in the release folder)"
            )
        taken = {self.privacy.unit, *(c.name for c in self.columns if c.per_unit)}
        if UNIT_ROWS_COLUMN in taken:
            raise ValueError(
                f"output.units_table names its row count {UNIT_ROWS_COLUMN!r}, which is the unit "
                "or a per-unit column here: rename that column"
            )
        return self

    @model_validator(mode="after")
    def _units_output(self) -> ReleaseConfig:
        if "units" not in self.output.model_fields_set:
            return self
        if self.privacy.unit is None:
            raise ValueError("output.units needs privacy.unit: a release of persons has units")
        if self.mechanism.method != "adaptive":
            raise ValueError("output.units: a release of persons needs mechanism.method: adaptive")
        if self.output.rows is not None:
            raise ValueError(
                "output.rows and output.units exclude each other: a release of persons writes "
                "units, and the rows they have"
            )
        return self

    @property
    def persons(self) -> bool:
        """Whether the release writes persons (a privacy unit and the adaptive mechanism)."""
        return self.privacy.unit is not None and self.mechanism.method == "adaptive"

    @model_validator(mode="after")
    def _catalog_table_output(self) -> ReleaseConfig:
        if self.output.format == "table" and not self.ledger.path:
            raise ValueError(
                "ledger.path is required with output.table (a catalog table has no "
                "folder to keep the ledger beside)"
            )
        if self.output.format == "table" and self.output.partition_by is not None:
            raise ValueError("output.partition_by is not supported with output.table")
        return self

    @model_validator(mode="after")
    def _partition_column_exists(self) -> ReleaseConfig:
        part = self.output.partition_by
        if part is not None and part != "date" and part not in {c.name for c in self.columns}:
            raise ValueError(
                f"output.partition_by must be a configured column or 'date', got {part!r}"
            )
        return self

    @model_validator(mode="after")
    def _bernstein_columns_exist(self) -> ReleaseConfig:
        names = {c.name for c in self.columns}
        unknown = sorted(set(self.bernstein.columns) - names)
        if unknown:
            raise ValueError(f"bernstein.columns are not configured columns: {unknown}")
        if self.bernstein.label is not None and self.bernstein.label not in names:
            raise ValueError(f"bernstein.label {self.bernstein.label!r} is not a configured column")
        if self.bernstein.label is not None and self.bernstein.label in self.bernstein.columns:
            raise ValueError("bernstein.label cannot also be one of bernstein.columns")
        if self.bernstein.function != "kde" and self.bernstein.label is None:
            raise ValueError(
                f"bernstein.label is required for function {self.bernstein.function!r}"
            )
        if self.distance.metric == "bourgain" and not self.distance.queries:
            raise ValueError(
                "distance.queries (a file of query points) is required for metric bourgain"
            )
        return self

    @model_validator(mode="after")
    def _seed_needs_test_mode(self) -> ReleaseConfig:
        if self.seed is not None and not self.test_mode:
            raise ValueError(
                "seed is only allowed with test_mode: true (seeded noise is not a secure release)"
            )
        return self

    @property
    def column_names(self) -> list[str]:
        """Selected columns, in config order."""
        return [c.name for c in self.columns]

    @property
    def table_id(self) -> str:
        """The input table's key in the budget ledger."""
        return self.input.table_id or f"{self.input.format}:{self.input.path}"

    @property
    def ledger_path(self) -> str:
        """Where the budget ledger lives (default: beside the output, or in the Iceberg
        warehouse)."""
        if self.ledger.path:
            return self.ledger.path
        if self.output.catalog is not None:
            return str(
                Path(self.output.catalog.warehouse.removeprefix("file://"))
                / "dpsmooth_ledger.sqlite"
            )
        return str(Path(self.output.path).parent / "dpsmooth_ledger.sqlite")

    @property
    def lifetime_budget(self) -> tuple[float, float] | None:
        """(epsilon, delta) all releases of the table may spend, if limited."""
        if self.ledger.lifetime_epsilon is None:
            return None
        return self.ledger.lifetime_epsilon, self.ledger.lifetime_delta

    def bernstein_axes(self) -> list[str]:
        """The Bernstein function's input columns (default: all but the label)."""
        return list(self.bernstein.columns) or [
            n for n in self.column_names if n != self.bernstein.label
        ]

    def public_bounds(self) -> PublicBounds:
        """The columns and their bounds as the mechanism takes them, for tables of float columns
        with numeric bounds (a release reads the column kinds from the table:
        :func:`dpsmooth_spark.spark.io.table_codec`)."""
        bounds = {c.name: c.numeric_bounds for c in self.columns}
        missing = [name for name, b in bounds.items() if b is None]
        if missing:
            raise ConfigError(
                f"columns {missing} have no numeric bounds; their kind comes from the table"
            )
        return PublicBounds.from_mapping({name: b for name, b in bounds.items() if b is not None})


def parse_config(data: Any, base_dir: Path | None = None) -> ReleaseConfig:
    """Validate a mapping; relative paths are resolved against ``base_dir`` (see
    :func:`resolve_paths`)."""
    if not isinstance(data, dict):
        raise ConfigError("config must be a mapping at the top level")
    if base_dir is not None:
        data = resolve_paths(data, base_dir)
    try:
        return ReleaseConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format(exc)) from None


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ReleaseConfig:
    """Read and validate a YAML config.

    Relative paths in the file resolve against the file's folder (as docker-compose, dbt and
    Airflow read theirs), so a config works from any working directory. ``overrides`` maps
    dotted keys (``privacy.epsilon``) to values applied before validation; relative paths among
    them (typed on a command line) resolve against the working directory.
    """
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping at the top level")
    data = resolve_paths(data, path.resolve().parent)
    for dotted, value in (overrides or {}).items():
        _set_dotted(data, dotted, value)
    return parse_config(data, base_dir=Path.cwd())


PATH_KEYS = (
    ("input", "path"),
    ("output", "path"),
    ("ledger", "path"),
    ("distance", "queries"),
    ("input", "catalog", "warehouse"),
    ("output", "catalog", "warehouse"),
    ("input", "catalog", "uri"),
    ("output", "catalog", "uri"),
)
"""The keys that hold file paths (an Iceberg ``path`` is a table identifier and is left alone)."""


def resolve_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of a raw config mapping with every relative local path made absolute against
    ``base_dir``: the keys of :data:`PATH_KEYS`, where a catalog ``uri`` counts only as
    ``sqlite:///relative.db``. URIs (``s3://...``) and absolute paths are kept."""
    data = copy.deepcopy(data)
    for column in data.get("columns") or ():
        if isinstance(column, dict) and isinstance(column.get("values_file"), str):
            column["values_file"] = _resolve(column["values_file"], base_dir)
    for keys in PATH_KEYS:
        node: Any = data
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(keys[-1]), str):
            continue
        value = node[keys[-1]]
        if keys[-1] == "path" and node.get("format") in ("iceberg", "table"):
            continue
        if keys[-1] == "uri":
            if value.startswith("sqlite:///") and not value.startswith("sqlite:////"):
                node["uri"] = "sqlite:///" + _resolve(value.removeprefix("sqlite:///"), base_dir)
            continue
        node[keys[-1]] = _resolve(value, base_dir)
    return data


def _set_dotted(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def _resolve(path: str, base_dir: Path) -> str:
    if "://" in path or Path(path).is_absolute() or path in ("", ":memory:"):
        return path
    return str((base_dir / path).resolve())


def _format(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{loc}: {msg}")
    return "invalid config:\n  " + "\n  ".join(lines)
