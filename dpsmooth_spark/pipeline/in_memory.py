"""The synthesize job on an in-memory table: ``Synthesizer(columns, epsilon).fit(df).sample(n)``.

Columns are declared exactly as in a release config (``ColumnConfig``: bounds, ``values``,
booleans, dates, ``nullable``); ``fit`` takes a pandas DataFrame or an Arrow table and runs the
same stages as the Spark job (the exact sums by the executors' kernel, in this process), with
the same checks before any noise; ``sample`` returns a table of the input's kind and column
types, as the job writes them. No Spark, no JVM.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from dpsmooth_spark.config import UNIT_ROWS_COLUMN, ColumnConfig, PrivacyConfig, check_synthesis
from dpsmooth_spark.core.columns import ColumnTypeError, TableCodec
from dpsmooth_spark.core.contributions import bounded_rows, row_keys
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.core.unit_tables import valid_codes_and_values
from dpsmooth_spark.mechanisms import adaptive, persons, records
from dpsmooth_spark.mechanisms.public_domains import PublicDomains
from dpsmooth_spark.mechanisms.synthesizer import (
    SynthesisResult,
    SynthesizerParams,
    default_rows,
    fit_from_sums,
    rows_pass_over,
    sample_table,
)
from dpsmooth_spark.pipeline.domains import (
    checking_codec,
    domain_warnings,
    find_domains,
    has_auto,
    provisional_codec,
    release_accountant,
    resolved_codec,
)
from dpsmooth_spark.pipeline.row_checks import InvalidDataError, check_rows
from dpsmooth_spark.privacy.noise import NoiseSource


class Synthesizer:
    """A DP synthetic copy of an in-memory table.

    ``Synthesizer(columns, epsilon=1.0).fit(df).sample(10_000)``

    Args:
        columns: the released columns with their public domains, as in a config's ``columns``
            (``ColumnConfig`` objects or mappings such as ``{"name": "age", "lower": 18,
            "upper": 95}``); never read from the data.
        epsilon: the release's epsilon.
        delta: 0 for pure epsilon-DP (Laplace), > 0 for Gaussian noise with zCDP accounting.
        mechanism: the synthesize job's parameters (``SynthesizerParams`` or a mapping, as the
            config's ``mechanism`` section).
        random_state: a seed selects TEST MODE (seeded, non-secure noise); ``None`` is secure.
        on_invalid: rows with a null (in a column not declared nullable), NaN or a value outside
            a categorical domain: ``error`` refuses before any noise, ``drop`` leaves them out.
        unit, max_rows_per_unit: the privacy unit, as the config's ``privacy`` section: at most
            ``max_rows_per_unit`` rows of each ``unit`` (a column of the table, never released)
            are read, and neighbouring tables differ in all rows of one unit.

    Attributes (after ``fit``):
        accountant_: what the release spent, stage by stage.
        domains_: the auto bounds and values found (``None`` when no column is auto).
        result_: the fitted distribution; ``result_.summary`` is the noisy summary (DP).
        codec_: the released columns' kinds and the input's types.
    """

    def __init__(
        self,
        columns: Sequence[ColumnConfig | Mapping[str, Any]],
        epsilon: float,
        delta: float = 0.0,
        mechanism: SynthesizerParams | Mapping[str, Any] | None = None,
        random_state: int | None = None,
        on_invalid: str = "error",
        unit: str | None = None,
        max_rows_per_unit: int | None = None,
    ) -> None:
        self.columns = [ColumnConfig.model_validate(c) for c in columns]
        self.privacy = PrivacyConfig(
            epsilon=epsilon, delta=delta, unit=unit, max_rows_per_unit=max_rows_per_unit
        )
        self.params = SynthesizerParams.model_validate(mechanism or {})
        check_synthesis(self.columns, self.privacy, self.params)
        if on_invalid not in ("error", "drop"):
            raise ValueError("on_invalid must be error or drop")
        self.random_state = random_state
        self.on_invalid = on_invalid

    def fit(self, table: Any) -> Synthesizer:
        """Measure and fit on a pandas DataFrame or an Arrow table (in memory)."""
        self.pandas_ = not isinstance(table, pa.Table)
        data = pa.Table.from_pandas(table, preserve_index=False) if self.pandas_ else table
        provisional = provisional_codec(self.columns, data.schema)
        rng = np.random.default_rng(self.random_state)
        keys = None
        if self.privacy.unit is not None:
            data, keys = _bounded(
                data, self.privacy.unit, self.privacy.unit_rows, rng, provisional.names
            )
        accountant = release_accountant(self.privacy, self.columns)
        noise = NoiseSource(rng if self.random_state is not None else None)
        codec: TableCodec = provisional
        found: PublicDomains | None = None
        auto = has_auto(self.columns)
        if auto:  # the row checks before the domains' noise, as in the Spark job
            _check_rows(checking_codec(provisional, self.columns), data, self.on_invalid)
            # found before any other statistic, as in the Spark job
            found = find_domains(
                lambda grids: {
                    name: grid.counts(provisional.column(name).encode(data.column(name)))
                    for name, grid in grids.items()
                },
                lambda name: _value_counts(data.column(name)),
                self.columns,
                provisional,
                accountant,
                noise,
                self.privacy.domain_fraction,
            )
            for warning in domain_warnings(found, self.privacy):
                warnings.warn(warning, stacklevel=2)
            codec = resolved_codec(self.columns, provisional, found, data.schema)
        bounds, nullable = codec.bounds(), codec.null_columns
        encoded = codec.encode_with_nulls(data)
        self.result_: SynthesisResult | adaptive.LoopResult
        self.persons_: persons.PersonTables | None = None
        if self.privacy.unit is not None and self.params.method == "adaptive":
            assert keys is not None
            unit_spec = persons.unit_tables(
                records.cell_coding(codec),
                [c.per_unit for c in self.columns],
                self.privacy.unit_rows,
                self.settings_,
            )
            x, nulls = encoded if isinstance(encoded, tuple) else (encoded, None)
            codes, scaled, ok, invalid, clamped = valid_codes_and_values(
                x, nulls, bounds.lower, bounds.upper, unit_spec.coding
            )
            if not auto:
                check_rows(x.shape[0], invalid, clamped, self.on_invalid)
            units = data.column(self.privacy.unit).combine_chunks().dictionary_encode().indices
            labels = np.asarray(units.to_numpy(zero_copy_only=False))
            order = np.lexsort((keys[ok], labels[ok]))  # each unit's rows in their rank order
            counts = unit_spec.counts(codes[order], labels[ok][order], scaled[order])
            self.accountant_, self.domains_ = accountant, found
            self.result_, self.persons_ = persons.release(
                counts, unit_spec, accountant, noise, self.settings_
            )
            self.codec_, self.rng_ = codec, rng
            return self
        if self.params.method == "adaptive":
            spec = records.pass_spec(records.cell_coding(codec), self.settings_)
            sums = partial_sums([encoded], bounds.lower, bounds.upper, spec)
            if not auto:
                check_rows(sums.rows_seen, sums.rows_invalid, sums.rows_clamped, self.on_invalid)
            self.accountant_, self.domains_ = accountant, found
            self.result_ = records.release(sums, spec, accountant, noise, self.settings_)
            self.codec_, self.rng_ = codec, rng
            return self
        spec = replace(
            self.params.pass_spec(bounds.d, codec.lattice(), codec.nominal()),
            null_cells=bool(nullable.any()),
        )
        sums = partial_sums([encoded], bounds.lower, bounds.upper, spec)
        if not auto:
            check_rows(sums.rows_seen, sums.rows_invalid, sums.rows_clamped, self.on_invalid)
        self.accountant_, self.domains_ = accountant, found
        self.result_ = fit_from_sums(
            sums,
            bounds,
            self.params,
            self.accountant_,
            noise,
            rng,
            codec.lattice(),
            nullable,
            codec.nominal(),
            rows_pass=rows_pass_over(encoded[0] if isinstance(encoded, tuple) else encoded, bounds),
        )
        self.codec_, self.rng_ = codec, rng
        return self

    @property
    def settings_(self) -> adaptive.LoopSettings:
        names = [c.name for c in self.columns]
        return adaptive.LoopSettings.named(self.params.rounds, names, self.params.pair_columns)

    def sample(self, rows: int | None = None, units: int | None = None) -> Any:
        """Synthetic rows (default: as many as the noisy count says), as a pandas DataFrame or an
        Arrow table like the one fitted, with its column types. A release of persons (a privacy
        unit and ``method: adaptive``) draws ``units`` units (default: the noisy unit count),
        each with its rows, the unit column first with fresh ids."""
        if self.persons_ is not None:
            assert isinstance(self.result_, adaptive.LoopResult) and self.privacy.unit
            if rows is not None:
                raise ValueError("a release of persons draws units: sample(units=...)")
            count = units or persons.units_released(self.result_, self.persons_)
            lambdas = self.persons_.agreements(self.result_.model, self.result_.total)
            data = persons.persons_table(
                self.result_,
                self.persons_,
                lambdas,
                self.codec_,
                count,
                self.rng_,
                self.privacy.unit,
                0,
                f"{int(self.rng_.integers(2**32)):08x}",
            )
            return data.to_pandas() if self.pandas_ else data
        if units is not None:
            raise ValueError("units: only a release of persons (privacy unit, method adaptive)")
        if isinstance(self.result_, adaptive.LoopResult):
            count = rows if rows is not None else max(1, round(self.result_.total))
            data = records.sample_table(self.result_, self.codec_, count, self.rng_)
            return data.to_pandas() if self.pandas_ else data
        count = rows if rows is not None else default_rows(self.result_.summary)
        data, _ = sample_table(
            self.result_, count, self.rng_, self.params.herding_rows, self.codec_
        )
        return data.to_pandas() if self.pandas_ else data

    def units_table(self, sample: Any) -> Any:
        """The units of a :meth:`sample` of persons (an Arrow table or a pandas DataFrame; the
        answer is the same kind), one row each: the unit column, the per-unit columns and
        ``rows``, its row count (what ``output.units_table`` writes; no budget)."""
        if self.persons_ is None or self.privacy.unit is None:
            raise ValueError("units_table: only a release of persons (privacy unit, adaptive)")
        arrow = isinstance(sample, pa.Table)
        table = sample if arrow else pa.Table.from_pandas(sample, preserve_index=False)
        names = [c.name for c in self.columns if c.per_unit]
        found = persons.unit_table(table, self.privacy.unit, names, UNIT_ROWS_COLUMN)
        return found if arrow else found.to_pandas()


def _check_rows(codec: TableCodec, data: pa.Table, on_invalid: str) -> None:
    """:func:`check_rows` on ``data`` read through ``codec``."""
    bounds = codec.bounds()
    sums = partial_sums(
        [codec.encode_with_nulls(data)],
        bounds.lower,
        bounds.upper,
        PassSpec(1, null_cells=bool(codec.null_columns.any())),
    )
    check_rows(sums.rows_seen, sums.rows_invalid, sums.rows_clamped, on_invalid)


def _value_counts(column: pa.ChunkedArray) -> dict[Any, int]:
    """Every non-null value of ``column`` with its count."""
    counts = column.drop_null().value_counts()
    return dict(
        zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
    )


def _bounded(
    data: pa.Table, unit: str, rows: int, rng: np.random.Generator, names: list[str]
) -> tuple[pa.Table, np.ndarray]:
    """At most ``rows`` rows of each ``unit`` (:func:`core.contributions.bounded_rows`), ordered
    by the seeded hash of the unit and the released columns ``names``, with their hashes (a
    unit's rows in the order of their hashes are its rows in rank order)."""
    if unit not in data.column_names:
        raise ColumnTypeError(f"privacy unit column {unit!r} not found in the table")
    units = data.column(unit)
    if units.null_count:
        raise InvalidDataError(
            f"privacy unit column {unit!r} has nulls: every row must name its unit; nothing was "
            "released"
        )
    seed = int(rng.integers(2**31))
    keys = row_keys(data.select([unit, *(n for n in names if n in data.column_names)]), seed)
    keep = bounded_rows(units.to_numpy(zero_copy_only=False), keys, rows)
    return data.take(pa.array(keep)), np.asarray(keys)[keep]
