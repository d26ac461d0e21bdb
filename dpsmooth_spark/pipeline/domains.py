"""Auto bounds and auto values: the public domains a release finds with DP before any statistic.

A column declared ``lower: auto`` / ``upper: auto`` (inside a public ``range``, or its integer,
date or timestamp type's range) or ``values: auto`` (with ``other``) is read with a stand-in
domain (:func:`provisional_columns`), so its type is checked before any budget; then one Spark
job counts the auto-bound columns on their grids and one aggregation per auto-values column
counts its values (:func:`find_domains`, charged to the release's accountant), and the release
goes on with the found domains as if they had been declared (:func:`resolved_columns`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from dpsmooth_spark.config import ColumnConfig, PrivacyConfig
from dpsmooth_spark.core.columns import EPOCH, ColumnTypeError, TableCodec, table_codec
from dpsmooth_spark.core.quantile_grid import QuantileGrid
from dpsmooth_spark.mechanisms.public_domains import (
    SELECTION_DELTA_SHARE,
    PublicDomains,
    dp_bounds,
    select_values,
    stage_budgets,
)
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

GridCounts = Callable[[Mapping[str, QuantileGrid]], Mapping[str, tuple[np.ndarray, np.ndarray]]]
"""Counts the named columns on their grids (``spark.data_pass.grid_counts`` in a job)."""
ValueCounts = Callable[[str], Mapping[Any, int]]
"""Counts every non-null value of a column (``spark.data_pass.value_counts`` in a job)."""

FIRST_DAY, LAST_DAY = dt.date(1, 1, 1), dt.date(9999, 12, 31)
"""A date column's type range (Python's and Spark's dates)."""


def has_auto(columns: list[ColumnConfig]) -> bool:
    """Whether any column's domain is found by the release."""
    return any(c.auto_bounds or c.auto_values for c in columns)


def release_accountant(privacy: PrivacyConfig, columns: list[ColumnConfig]) -> PrivacyAccountant:
    """A release's accountant: sensitivities times the rows one unit may contribute, and a part
    of delta set aside for partition selection when a column has ``values: auto``."""
    selection = any(c.auto_values for c in columns)
    return PrivacyAccountant(
        privacy.epsilon,
        privacy.delta,
        unit_rows=privacy.unit_rows,
        selection_delta=privacy.delta * SELECTION_DELTA_SHARE if selection else 0.0,
    )


def type_range(arrow_type: pa.DataType) -> tuple[Any, Any] | None:
    """The range an integer, date or timestamp type can hold (``None`` for other types)."""
    if pa.types.is_integer(arrow_type):
        info = np.iinfo(arrow_type.to_pandas_dtype())
        return float(info.min), float(info.max)
    if pa.types.is_date(arrow_type):
        return FIRST_DAY, LAST_DAY
    if pa.types.is_timestamp(arrow_type):
        return dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)
    return None


def provisional_columns(
    columns: list[ColumnConfig], schema: pa.Schema, csv: bool = False
) -> list[ColumnConfig]:
    """The columns with each auto domain replaced by a stand-in of its kind, to type and read the
    input before the domains are found: an auto bound by its range's end, ``values: auto`` by
    ``other`` and a second value of its type.

    Raises:
        ColumnTypeError: an auto bound without a range on a column whose type has none (a
            float, or any CSV column).
    """
    out = []
    for c in columns:
        if c.auto_bounds:
            span = c.range
            if span is None:
                field = schema.field(c.name) if c.name in schema.names else None
                span = None if csv or field is None else type_range(field.type)
            if span is None:
                raise ColumnTypeError(
                    f"column {c.name!r}: lower/upper: auto needs a public range: [a, b] to search "
                    "(only an integer, date or timestamp column in a typed table has its type's "
                    "range)"
                )
            lower = span[0] if c.lower == "auto" else c.lower
            upper = span[1] if c.upper == "auto" else c.upper
            out.append(c.model_copy(update={"lower": lower, "upper": upper, "range": None}))
        elif c.auto_values:
            second: Any = c.other + 1 if isinstance(c.other, int) else f"{c.other}\x00"
            out.append(c.model_copy(update={"values": [c.other, second], "other": None}))
        else:
            out.append(c)
    return out


def provisional_codec(
    columns: list[ColumnConfig], schema: pa.Schema, csv: bool = False
) -> TableCodec:
    """The codec of :func:`provisional_columns`: the input's types checked, auto domains stood in.

    Raises:
        ColumnTypeError: a declaration that does not fit the table (names the column).
    """
    return table_codec(provisional_columns(columns, schema, csv), schema, csv)


def checking_codec(provisional: TableCodec, columns: list[ColumnConfig]) -> TableCodec:
    """The codec the row checks read before the domains' noise: the provisional one, with every
    value of an auto-values column valid (its stand-in ``other`` takes the values outside it, as
    the found domain's will), so invalid rows and clamping are judged against the declared
    ranges and domains alone (docs/privacy.md section 1c)."""
    auto = {c.name for c in columns if c.auto_values}
    return dataclasses.replace(
        provisional,
        columns=tuple(
            dataclasses.replace(c, fallback=0) if c.name in auto else c for c in provisional.columns
        ),
    )


def find_domains(
    grid_counts: GridCounts,
    value_counts: ValueCounts,
    columns: list[ColumnConfig],
    codec: TableCodec,
    accountant: PrivacyAccountant,
    noise: NoiseSource,
    fraction: float,
) -> PublicDomains:
    """The auto bounds and values of ``columns`` from the exact counts of the input as every
    statistic reads it (contributions bounded), spending ``fraction`` of the budget evenly over
    them; afterwards the accountant's statistics split the rest.

    ``codec`` is the provisional codec (:func:`provisional_columns`): its bounds are the ranges
    searched, in encoded units.
    """
    bound_columns = [c for c in columns if c.auto_bounds]
    value_columns = [c for c in columns if c.auto_values]
    budget = stage_budgets(accountant, fraction, len(bound_columns) + len(value_columns))
    grids = {
        c.name: QuantileGrid(codec.column(c.name).lower, codec.column(c.name).upper)
        for c in bound_columns
    }
    counts = grid_counts(grids) if grids else {}
    bounds = []
    for c in bound_columns:
        encoded = codec.column(c.name)
        fixed = (
            None if c.lower == "auto" else encoded.lower,
            None if c.upper == "auto" else encoded.upper,
        )
        bounds.append(
            dp_bounds(
                c.name,
                grids[c.name],
                *counts[c.name],
                budget,
                accountant,
                noise,
                integer=encoded.kind in ("integer", "date"),
                fixed=fixed,
            )
        )
    values = [
        select_values(
            c.name,
            value_counts(c.name),
            c.other,
            budget,
            accountant.selection_delta / len(value_columns),
            accountant,
            noise,
        )
        for c in value_columns
    ]
    accountant.available = 1.0 - fraction
    return PublicDomains(tuple(bounds), tuple(values))


OUTSIDE_WARNING = 0.01
"""A found bound whose noisy mass outside it (``FoundBounds.outside``) is above this share by
more than twice its noise (``outside_std``) is stated on the console and in the manifest's
warnings."""


class UnresolvedBoundsError(ValueError):
    """An auto bound that no noisy cell cleared, under ``privacy.unresolved_bounds: error``."""


def domain_warnings(found: PublicDomains, privacy: PrivacyConfig) -> list[str]:
    """What a release must say of its found bounds: the unresolved ones (their bounds are the
    range's ends) where ``privacy.unresolved_bounds`` is ``range``, and those that clamp more
    than :data:`OUTSIDE_WARNING` of the column's noisy mass.

    Raises:
        UnresolvedBoundsError: an unresolved bound under ``unresolved_bounds: error`` (names the
            columns and what to do; the caller records the spend first).
    """
    unresolved = [b.column for b in found.bounds if not b.resolved]
    out = []
    if unresolved and privacy.unresolved_bounds == "error":
        raise UnresolvedBoundsError(
            f"columns {unresolved}: no cell of their auto bounds' noisy histograms cleared the "
            "noise, so their bounds would be the ends of the public range and the release would "
            f"spread them over it. The release's epsilon {privacy.epsilon:g} and delta "
            f"{privacy.delta:g} are spent (a job records them in its ledger). Declare the bounds, "
            "give a narrower range, raise privacy.domain_fraction, or set "
            "privacy.unresolved_bounds: range to release with the range's ends"
        )
    if unresolved:
        out.append(
            f"columns {unresolved}: no noisy cell cleared the threshold; their bounds are the "
            "ends of the public range (privacy.unresolved_bounds: range)"
        )
    for b in found.bounds:
        if b.outside is None:
            continue
        if b.outside - 2.0 * (b.outside_std or 0.0) > OUTSIDE_WARNING:
            out.append(
                f"column {b.column!r}: about {100 * b.outside:.1f}% (noise std "
                f"{100 * (b.outside_std or 0.0):.1f}%) of its noisy mass lies outside its found "
                "bounds and is clamped to them; declare wider bounds if the tails matter"
            )
    return out


def resolved_columns(
    columns: list[ColumnConfig], codec: TableCodec, domains: PublicDomains
) -> list[ColumnConfig]:
    """The columns with their found domains in place of ``auto`` (original units: numbers, dates,
    datetimes), as a config that had declared them.

    Raises:
        ColumnTypeError: partition selection released no value but ``other`` (the column would
            be constant).
    """
    kinds = {c.name: c.kind for c in codec.columns}
    out = []
    for c in columns:
        found = domains.range_of(c.name)
        if found is not None:
            lower, upper = (_decoded(v, kinds[c.name]) for v in (found.lower, found.upper))
            out.append(c.model_copy(update={"lower": lower, "upper": upper, "range": None}))
            continue
        chosen = domains.domain(c.name)
        if chosen is not None:
            if len(chosen.values) < 2:
                raise ColumnTypeError(
                    f"column {c.name!r}: no value's noisy count cleared the partition selection's "
                    f"threshold ({chosen.threshold:.1f}), so the column would hold only "
                    f"{chosen.other!r}; list its values or give the release more budget "
                    "(the selection's cost is recorded in the ledger)"
                )
            out.append(c.model_copy(update={"values": list(chosen.values)}))
            continue
        out.append(c)
    return out


def resolved_codec(
    columns: list[ColumnConfig],
    provisional: TableCodec,
    domains: PublicDomains,
    schema: pa.Schema,
    csv: bool = False,
) -> TableCodec:
    """The codec of :func:`resolved_columns`: the release's columns as it types them.

    Raises:
        ColumnTypeError: as :func:`resolved_columns`.
    """
    return table_codec(resolved_columns(columns, provisional, domains), schema, csv)


def _decoded(value: float, kind: str) -> Any:
    """An encoded bound in the column's original units."""
    if kind == "date":
        return EPOCH + dt.timedelta(days=int(value))
    if kind == "timestamp":
        return dt.datetime.fromtimestamp(value, dt.UTC).replace(tzinfo=None)
    return float(value)
