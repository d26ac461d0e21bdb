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

from dpsmooth_spark.core.basis import PublicBounds
from dpsmooth_spark.core.columns import MAX_CATEGORIES
from dpsmooth_spark.mechanisms.bernstein import BernsteinParams
from dpsmooth_spark.mechanisms.distance_release import DistanceParams
from dpsmooth_spark.mechanisms.smooth_grid import GridParams
from dpsmooth_spark.mechanisms.smooth_pca import SmoothPCAParams
from dpsmooth_spark.mechanisms.smooth_summary import SummaryParams


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the bad key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CatalogConfig(_Strict):
    """An Iceberg SQL catalog (pyiceberg ``SqlCatalog``; SQLite needs no server).

    Attributes:
        uri: SQLAlchemy URI of the catalog database, e.g. ``sqlite:////lake/catalog.db``.
        warehouse: where table data lives, e.g. ``/lake/warehouse`` or ``file:///lake/warehouse``.
        name: the catalog's name.
    """

    uri: str = Field(min_length=1)
    warehouse: str = Field(min_length=1)
    name: str = "dpsmooth"


class _TableLocation(_Strict):
    """Input and output share this rule: an Iceberg table needs a catalog, other formats none.
    ``{table: db.name}`` names a table of the Spark session's catalog (``format: table``)."""

    _section: ClassVar[str] = ""
    format: str
    catalog: CatalogConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _catalog_table(cls, data: Any) -> Any:
        if isinstance(data, dict) and "table" in data:
            if "path" in data or data.get("format", "table") != "table":
                raise ValueError(f"{cls._section}: give table (a Spark catalog table) or path, not both")
            data = {**{k: v for k, v in data.items() if k != "table"}, "path": data["table"], "format": "table"}
        return data

    @model_validator(mode="after")
    def _catalog_for_iceberg(self) -> _TableLocation:
        if (self.format == "iceberg") != (self.catalog is not None):
            raise ValueError(f"{self._section}.catalog is required with format iceberg, and only then")
        return self


class InputConfig(_TableLocation):
    """Where the sensitive table is and what to do with unusable rows.

    Attributes:
        path: file or directory (Parquet), CSV file/directory, Delta table folder, or an Iceberg
            table identifier (``namespace.table``) in ``catalog``; ``table: db.name`` instead
            names a table of the Spark session's catalog (``format: table``).
        format: ``parquet``, ``csv`` (needs a header row), ``delta`` (the current snapshot's files
            only, from the Delta log; never the raw folder, which keeps removed files) or
            ``iceberg`` (the current snapshot's data files; tables with delete files are refused).
        catalog: the Iceberg catalog (``iceberg`` only).
        table_id: the table's identity in the budget ledger (default ``format:path``); give a
            stable name when the same table may be read from different paths.
        reader: how the data pass reads Parquet: ``spark`` (DataFrame + ``mapInArrow``), ``arrow``
            (Spark schedules the row groups, tasks read them with pyarrow: no JVM-to-Python row
            transfer) or ``auto`` (``arrow`` for local Parquet whose files hold every column).
        on_invalid: rows with a null, NaN, infinite or non-numeric value in a selected column:
            ``error`` stops the job before any noise is drawn; ``drop`` removes those rows (a
            per-record transformation, so the privacy guarantee is unchanged).
        max_clamped_fraction: the job stops if more than this fraction of rows lie outside the
            public bounds, since the bounds are then probably wrong. The check is shown to the
            operator only and never written to a release.
    """

    _section: ClassVar[str] = "input"
    path: str
    format: Literal["parquet", "csv", "delta", "iceberg", "table"] = "parquet"
    table_id: str | None = Field(default=None, min_length=1)
    reader: Literal["auto", "spark", "arrow"] = "auto"
    on_invalid: Literal["error", "drop"] = "error"
    max_clamped_fraction: float = Field(default=0.5, ge=0.0, le=1.0)


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

    name: str = Field(min_length=1)
    nullable: bool = False
    lower: float | dt.datetime | dt.date | None = None
    upper: float | dt.datetime | dt.date | None = None
    values: list[StrictBool | StrictInt | StrictStr] | None = None

    @model_validator(mode="after")
    def _domain(self) -> ColumnConfig:
        bounds = (self.lower is not None, self.upper is not None)
        if bounds[0] != bounds[1]:
            raise ValueError(f"column {self.name!r}: give both lower and upper, or neither")
        if self.values is not None:
            if bounds[0]:
                raise ValueError(f"column {self.name!r}: give bounds (lower, upper) or values, not both")
            if not self.values or len(set(map(repr, self.values))) != len(self.values):
                raise ValueError(f"column {self.name!r}: values must be a non-empty list without repeats")
            if len(self.values) > MAX_CATEGORIES:
                raise ValueError(f"column {self.name!r}: {len(self.values)} values; at most {MAX_CATEGORIES}")
        if not bounds[0]:
            return self
        lo, hi = self.lower, self.upper
        if isinstance(lo, dt.date) != isinstance(hi, dt.date):
            raise ValueError(f"column {self.name!r}: lower and upper must both be numbers or both dates")
        if isinstance(lo, float) and isinstance(hi, float) and not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(f"bounds of column {self.name!r} must be finite")
        try:
            ordered = _comparable(lo) < _comparable(hi)
        except TypeError:
            raise ValueError(f"column {self.name!r}: lower and upper must have the same type") from None
        if not ordered:
            raise ValueError(f"column {self.name!r}: lower ({lo}) must be < upper ({hi})")
        return self

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


class PrivacyConfig(_Strict):
    """The release's budget; ``delta > 0`` selects the Gaussian (epsilon, delta) mode.

    Attributes:
        epsilon: the release's epsilon. Above :data:`LARGE_EPSILON` the guarantee is weak (a
            likelihood ratio of e^10 > 22000 between neighbouring tables) and the release says so;
            above :data:`MAX_EPSILON` it is refused unless ``allow_large_epsilon`` is set.
        delta: the release's delta (0: pure epsilon-DP).
        allow_large_epsilon: accept an epsilon above :data:`MAX_EPSILON` (a typo such as
            ``1e9`` is otherwise caught).
    """

    epsilon: float = Field(gt=0)
    delta: float = Field(default=0.0, ge=0, lt=1)
    allow_large_epsilon: bool = False

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
                "privacy.allow_large_epsilon: true")
        return self

    @property
    def warnings(self) -> list[str]:
        """What a release with this budget must say about it (empty for a usual budget)."""
        if self.epsilon <= LARGE_EPSILON:
            return []
        return [(f"epsilon = {self.epsilon:g} is above {LARGE_EPSILON:g}: a weak guarantee (neighbouring "
                 f"tables may differ in likelihood by a factor up to e^{self.epsilon:g}); do not "
                 "release this table as protected data")]


class OutputConfig(_TableLocation):
    """Where the release goes.

    Attributes:
        path: release folder (``parquet``: ``data/``, ``summary.json``, ``manifest.json``), Delta
            table folder, or Iceberg table identifier (``namespace.table``) in ``catalog``;
            ``table: db.name`` instead writes a table of the Spark session's catalog with
            ``saveAsTable`` (``format: table``; the documents go beside the ledger).
        format: ``parquet``, ``delta`` (delta-rs; one atomic commit) or ``iceberg`` (pyiceberg; one
            atomic commit). For the lake formats the JSON documents go to a side folder
            ``_dpsmooth/<release id>/`` of the table (Delta) or the warehouse (Iceberg), and the
            commit records the release id.
        partition_by: partition the synthetic rows by a released column (e.g. a 0/1 label) or by
            ``date`` (adds a ``release_date`` column, the UTC date of the release).
        catalog: the Iceberg catalog (``iceberg`` only).
        rows: number of synthetic records; default is the noisy count.
        mode: ``error`` if the folder exists, or ``overwrite`` (replaced atomically).
        sampling: where the records are drawn: ``driver``, ``executors`` (Spark writes the
            Parquet; the driver never holds the rows) or ``auto`` (executors above 10^6 rows).
        partitions: output files when sampling on executors (default: one per million rows).
    """

    _section: ClassVar[str] = "output"
    path: str
    rows: int | None = Field(default=None, ge=1, le=10**12)
    mode: Literal["error", "overwrite"] = "error"
    sampling: Literal["auto", "driver", "executors"] = "auto"
    partitions: int | None = Field(default=None, ge=1, le=100_000)
    format: Literal["parquet", "delta", "iceberg", "table"] = "parquet"
    partition_by: str | None = Field(default=None, min_length=1)


class LedgerConfig(_Strict):
    """The persistent budget ledger (docs/privacy.md section 8).

    Attributes:
        path: SQLite file; default ``dpsmooth_ledger.sqlite`` beside the output folder.
        lifetime_epsilon: total epsilon all releases of the table may spend; none = unlimited.
        lifetime_delta: total delta all releases of the table may spend.
    """

    path: str | None = None
    lifetime_epsilon: float | None = Field(default=None, gt=0)
    lifetime_delta: float = Field(default=0.0, ge=0, lt=1)


class SparkConfig(_Strict):
    """Spark session settings (ignored when the job runs under an existing session).

    Attributes:
        master: the master of a classic session (``spark-submit``'s master wins).
        remote: a Spark Connect server, e.g. ``sc://host:15002`` (also read from ``conf``'s
            ``spark.remote`` or the ``SPARK_REMOTE`` environment variable); no master is set then.
        conf: Spark settings (through Connect only runtime settings apply).
    """

    master: str = "local[*]"
    remote: str | None = Field(default=None, pattern=r"^sc://")
    conf: dict[str, str] = Field(default_factory=dict)


class ReleaseConfig(_Strict):
    """A complete release: ``mechanism`` configures the synthesize job, ``summary`` the summarize
    job, ``grid`` the synthesize-grid job (Algorithm 3), ``bernstein`` the release-function job
    and ``distance`` the release-distances job."""

    input: InputConfig
    columns: list[ColumnConfig] = Field(min_length=1)
    privacy: PrivacyConfig
    output: OutputConfig
    mechanism: SmoothPCAParams = Field(default_factory=SmoothPCAParams)
    summary: SummaryParams = Field(default_factory=SummaryParams)
    grid: GridParams = Field(default_factory=GridParams)
    bernstein: BernsteinParams = Field(default_factory=BernsteinParams)
    distance: DistanceParams = Field(default_factory=DistanceParams)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    seed: int | None = None
    test_mode: bool = False
    release_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.:+-]{1,128}$")

    @field_validator("columns")
    @classmethod
    def _unique(cls, columns: list[ColumnConfig]) -> list[ColumnConfig]:
        names = [c.name for c in columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate column names: {dupes}")
        return columns

    @model_validator(mode="after")
    def _pair_columns_exist(self) -> ReleaseConfig:
        unknown = sorted(set(self.mechanism.pair_columns) - {c.name for c in self.columns})
        if unknown:
            raise ValueError(f"mechanism.pair_columns are not configured columns: {unknown}")
        return self

    @model_validator(mode="after")
    def _pooled_histogram_needs_pure_dp(self) -> ReleaseConfig:
        if self.mechanism.pooled_histogram == "on" and self.privacy.delta > 0:
            raise ValueError("mechanism.pooled_histogram: on needs pure epsilon-DP (privacy.delta: 0); "
                             "under zCDP it gains nothing (docs/privacy.md section 3f)")
        return self

    @model_validator(mode="after")
    def _catalog_table_output(self) -> ReleaseConfig:
        if self.output.format == "table" and not self.ledger.path:
            raise ValueError("ledger.path is required with output.table (a catalog table has no "
                             "folder to keep the ledger beside)")
        if self.output.format == "table" and self.output.partition_by is not None:
            raise ValueError("output.partition_by is not supported with output.table")
        return self

    @model_validator(mode="after")
    def _partition_column_exists(self) -> ReleaseConfig:
        part = self.output.partition_by
        if part is not None and part != "date" and part not in {c.name for c in self.columns}:
            raise ValueError(f"output.partition_by must be a configured column or 'date', got {part!r}")
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
            raise ValueError(f"bernstein.label is required for function {self.bernstein.function!r}")
        if self.distance.metric == "bourgain" and not self.distance.queries:
            raise ValueError("distance.queries (a file of query points) is required for metric bourgain")
        return self

    @model_validator(mode="after")
    def _seed_needs_test_mode(self) -> ReleaseConfig:
        if self.seed is not None and not self.test_mode:
            raise ValueError("seed is only allowed with test_mode: true (seeded noise is not a secure release)")
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
        """Where the budget ledger lives (default: beside the output, or in the Iceberg warehouse)."""
        if self.ledger.path:
            return self.ledger.path
        if self.output.catalog is not None:
            return str(Path(self.output.catalog.warehouse.removeprefix("file://")) / "dpsmooth_ledger.sqlite")
        return str(Path(self.output.path).parent / "dpsmooth_ledger.sqlite")

    @property
    def lifetime_budget(self) -> tuple[float, float] | None:
        """(epsilon, delta) all releases of the table may spend, if limited."""
        if self.ledger.lifetime_epsilon is None:
            return None
        return self.ledger.lifetime_epsilon, self.ledger.lifetime_delta

    def bernstein_axes(self) -> list[str]:
        """The Bernstein function's input columns (default: all but the label)."""
        return list(self.bernstein.columns) or [n for n in self.column_names if n != self.bernstein.label]

    def public_bounds(self) -> PublicBounds:
        """The columns and their bounds as the mechanism takes them, for tables of float columns
        with numeric bounds (a release reads the column kinds from the table:
        :func:`dpsmooth_spark.spark.io.table_codec`)."""
        bounds = {c.name: c.numeric_bounds for c in self.columns}
        missing = [name for name, b in bounds.items() if b is None]
        if missing:
            raise ConfigError(f"columns {missing} have no numeric bounds; their kind comes from the table")
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


PATH_KEYS = (("input", "path"), ("output", "path"), ("ledger", "path"), ("distance", "queries"),
             ("input", "catalog", "warehouse"), ("output", "catalog", "warehouse"),
             ("input", "catalog", "uri"), ("output", "catalog", "uri"))
"""The keys that hold file paths (an Iceberg ``path`` is a table identifier and is left alone)."""


def resolve_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of a raw config mapping with every relative local path made absolute against
    ``base_dir``: the keys of :data:`PATH_KEYS`, where a catalog ``uri`` counts only as
    ``sqlite:///relative.db``. URIs (``s3://...``) and absolute paths are kept."""
    data = copy.deepcopy(data)
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
