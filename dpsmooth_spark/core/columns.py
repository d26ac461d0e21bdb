"""Column kinds: how a lake column (float, integer, boolean, categorical, date, timestamp) enters
the smooth domain and how a synthetic value leaves it with the input's Arrow type.

Every kind is a number on public bounds (docs/mechanisms.md, "Column kinds"):

* float: its value, on the configured bounds;
* integer, date (days since 1970-01-01): its value, on the integers within the bounds;
* boolean: 0 or 1 on ``[0, 1]``; categorical: the index of the value in its public domain,
  ``0..k-1`` on ``[0, k - 1]``;
* timestamp: seconds since the epoch (continuous).

The lattice of an integer, date, boolean or categorical column spans its bounds, so after
scaling its points run from -1 to 1 and a binary column's ``T_1`` has full amplitude (the signal
of every pair term with it); the fit keeps such a column's candidates on the lattice
(``TableCodec.lattice``), so synthetic values are lattice points and decode exactly.

A value outside its domain (or the kind's type) encodes as NaN: an invalid row, handled by
``input.on_invalid`` like a null. The encodings are per record, so they cost no privacy.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpsmooth_spark.core.bounds import PublicBounds

MAX_CATEGORIES = 10_000
"""The largest categorical domain: its histogram has one cell per value (the data pass's cells
grow to hold them, ``SynthesizerParams.histogram_cells``)."""
EPOCH = dt.date(1970, 1, 1)


class ColumnTypeError(ValueError):
    """A column's type in the table does not match the kind its config declares."""


class ColumnValueError(ValueError):
    """A column's values cannot be encoded as its kind. The message names the column, its kind
    and the error's type only: the underlying error's text may quote a record's value, so it is
    dropped (``raise ... from None``), also from the tracebacks that Spark's task logs print."""


@dataclass(frozen=True)
class ColumnCodec:
    """One released column: its kind, output type, and encoded bounds.

    Attributes:
        name: the column.
        kind: ``float``, ``integer``, ``boolean``, ``categorical``, ``date`` or ``timestamp``.
        arrow_type: the input's Arrow type, which the output keeps.
        nullable: the input field's nullability, which the output keeps.
        lower, upper: the encoded bounds (see the module docstring).
        values: the categorical domain, in index order.
        nulls: the config declares the column nullable: its nulls are counted (and their share
            released) instead of making the row invalid.
        fallback: for a domain found by partition selection, the index of its ``other`` value,
            which every value outside the domain encodes as (``None``: such a value is invalid).
    """

    name: str
    kind: str
    arrow_type: pa.DataType
    nullable: bool
    lower: float
    upper: float
    values: tuple[Any, ...] = ()
    nulls: bool = False
    fallback: int | None = None

    def encode(self, array: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The column's values in encoded units (float64; NaN for null, NaN or out of domain).

        Raises:
            ColumnValueError: a value cannot be encoded (no value in the message).
        """
        try:
            return self._encode(array)
        except Exception as exc:  # any library's message may quote a value
            raise ColumnValueError(
                f"column {self.name!r} ({self.kind}, table type {array.type}): its values cannot "
                f"be encoded ({type(exc).__name__}); nothing was released"
            ) from None

    def _encode(self, array: pa.Array | pa.ChunkedArray) -> np.ndarray:
        if self.kind == "categorical":
            domain = pa.array(list(self.values), type=array.type)
            codes = pc.index_in(array, value_set=domain)
            if self.fallback is not None:  # a value outside the found domain is `other`
                codes = pc.if_else(
                    pc.and_(pc.is_null(codes), pc.is_valid(array)), self.fallback, codes
                )
            return np.asarray(codes.to_numpy(zero_copy_only=False), dtype=np.float64)
        if self.kind == "boolean":
            array = pc.cast(array, pa.int8())
        elif self.kind == "date":
            array = pc.cast(pc.cast(array, pa.date32()), pa.int32())
        elif self.kind == "timestamp":  # sub-microsecond digits truncated: a per-value map
            micros = pc.cast(array, pa.timestamp("us"), safe=False)
            array = pc.divide(pc.cast(micros, pa.int64()), 1e6)
        elif pa.types.is_decimal(array.type):
            array = pc.cast(array, pa.float64())
        values = array.to_numpy(zero_copy_only=False)
        return np.asarray(values, dtype=np.float64)  # nulls arrive as NaN

    def decode(self, values: np.ndarray, null: np.ndarray | None = None) -> pa.Array:
        """Synthetic values (encoded units) as an Arrow array of the input's type, on the
        column's lattice or domain and inside its bounds; ``null`` marks the rows that get a
        null."""
        array = self._decode(values)
        if null is None or not null.any():
            return array
        return pc.if_else(pa.array(null, pa.bool_()), pa.scalar(None, self.arrow_type), array)

    def _decode(self, values: np.ndarray) -> pa.Array:
        values = np.clip(np.asarray(values, dtype=np.float64), self.lower, self.upper)
        if self.kind in ("float", "timestamp"):
            if self.kind == "timestamp":
                micros = pa.array(np.rint(values * 1e6).astype(np.int64), pa.int64())
                return pc.cast(pc.cast(micros, pa.timestamp("us")), self.arrow_type)
            if pa.types.is_decimal(self.arrow_type):  # to the type's scale, then exact
                values = np.round(values, self.arrow_type.scale)
                return pc.cast(pa.array(values, pa.float64()), self.arrow_type, safe=False)
            return pa.array(values, pa.float64()).cast(self.arrow_type)
        lattice = np.rint(values).astype(np.int64)
        if self.kind == "categorical":
            return pa.array(list(self.values), type=self.arrow_type).take(pa.array(lattice))
        if self.kind == "boolean":
            return pa.array(lattice == 1, pa.bool_())
        if self.kind == "date":
            return pc.cast(
                pa.array(lattice.astype(np.int32), pa.int32()).cast(pa.date32()), self.arrow_type
            )
        return pa.array(lattice, pa.int64()).cast(self.arrow_type)


@dataclass(frozen=True)
class TableCodec:
    """The released columns in config order, and the input's column order for the output."""

    columns: tuple[ColumnCodec, ...]
    output_order: tuple[str, ...]

    @property
    def names(self) -> list[str]:
        """Column names in config order (the mechanism's order)."""
        return [c.name for c in self.columns]

    def column(self, name: str) -> ColumnCodec:
        """The codec of the column ``name``."""
        return next(c for c in self.columns if c.name == name)

    def lattice(self) -> np.ndarray:
        """Per column, the number ``L`` of lattice points (0: continuous); scaled, they are
        ``-1 + 2 j / (L - 1)``, ``j = 0..L-1``."""
        return np.array(
            [
                0 if c.kind in ("float", "timestamp") else round(c.upper - c.lower) + 1
                for c in self.columns
            ]
        )

    def nominal(self) -> np.ndarray:
        """Per column, whether its lattice points are nominal levels (a categorical column's
        values, in domain order) rather than ordered values."""
        return np.array([c.kind == "categorical" for c in self.columns], dtype=bool)

    def bounds(self) -> PublicBounds:
        """The encoded bounds the mechanism scales with."""
        return PublicBounds.from_mapping({c.name: (c.lower, c.upper) for c in self.columns})

    def encode(self, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        """``(rows, d)`` float64 values in encoded units, config order."""
        if batch.num_rows == 0:
            return np.zeros((0, len(self.columns)))
        return np.column_stack([c.encode(batch.column(c.name)) for c in self.columns])

    @property
    def null_columns(self) -> np.ndarray:
        """Per column, whether it is declared nullable (its nulls are counted, not invalid)."""
        return np.array([c.nulls for c in self.columns], dtype=bool)

    def encode_with_nulls(
        self, batch: pa.RecordBatch | pa.Table
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """:meth:`encode`, paired with the ``(rows, d)`` mask of nulls in the columns declared
        nullable when there are such columns (the data pass's ``null_cells`` input)."""
        values = self.encode(batch)
        if not self.null_columns.any():
            return values
        mask = np.zeros(values.shape, dtype=bool)
        for j, c in enumerate(self.columns):
            if c.nulls and batch.num_rows:
                mask[:, j] = np.asarray(
                    batch.column(c.name).is_null().to_numpy(zero_copy_only=False)
                )
        return values, mask

    def decode(self, values: np.ndarray, nulls: np.ndarray | None = None) -> pa.Table:
        """A synthetic table (encoded units, config order) with the input's schema; ``nulls``
        ``(rows, d)`` marks the values that are null."""
        arrays = {
            c.name: c.decode(values[:, i], None if nulls is None else nulls[:, i])
            for i, c in enumerate(self.columns)
        }
        return pa.table([arrays[n] for n in self.output_order], schema=self.schema())

    def schema(self) -> pa.Schema:
        """The output schema: the input's fields of the released columns, in the input's order."""
        fields = {c.name: pa.field(c.name, c.arrow_type, c.nullable) for c in self.columns}
        return pa.schema([fields[n] for n in self.output_order])


def numeric_codec(name: str, lower: float, upper: float) -> ColumnCodec:
    """A float64 column on ``[lower, upper]`` (the codec of a plain numeric config column)."""
    return ColumnCodec(name, "float", pa.float64(), True, float(lower), float(upper))


def column_codec(
    name: str,
    arrow_type: pa.DataType,
    nullable: bool,
    lower: Any = None,
    upper: Any = None,
    values: tuple[Any, ...] | None = None,
    nulls: bool = False,
    other: Any = None,
) -> ColumnCodec:
    """The codec of one configured column given its type in the input table; ``other`` (one of
    ``values``) stands for every value outside them.

    Raises:
        ColumnTypeError: the type does not fit the declaration (message names the column).
    """
    if nulls and not nullable:
        raise ColumnTypeError(f"column {name!r} is declared nullable, but the table's field is not")
    codec = _codec(name, arrow_type, nullable, lower, upper, values)
    fallback = None
    if other is not None:
        matches = [i for i, v in enumerate(codec.values) if v == other]
        if not matches:
            raise ColumnTypeError(f"column {name!r}: other {other!r} is not of the table's type")
        fallback = matches[0]
    return dataclasses.replace(codec, nulls=nulls, fallback=fallback)


def _codec(
    name: str,
    arrow_type: pa.DataType,
    nullable: bool,
    lower: Any,
    upper: Any,
    values: tuple[Any, ...] | None,
) -> ColumnCodec:
    t = arrow_type

    def wrong(expected: str) -> ColumnTypeError:
        return ColumnTypeError(
            f"column {name!r}: the config declares {expected}, but the table's type is {t}"
        )

    if values is not None:
        if not (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_integer(t)
            or pa.types.is_boolean(t)
        ):
            raise wrong("a categorical domain (values: string or integer)")
        if len(values) > MAX_CATEGORIES:
            raise ColumnTypeError(
                f"column {name!r}: {len(values)} categories; at most {MAX_CATEGORIES}"
            )
        try:
            if all(isinstance(v, str) for v in values) and not pa.types.is_string(t):
                domain = tuple(pa.array(list(values)).cast(t).to_pylist())  # from a values_file
            else:
                domain = tuple(pa.array(list(values), type=t).to_pylist())
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            hint = ""
            if any(isinstance(v, bool) for v in values) and not pa.types.is_boolean(t):
                hint = (
                    "; YAML reads an unquoted yes, no, on, off, true or false as a boolean: "
                    "quote the values as the table holds them (values: ['yes', 'no'])"
                )
            raise ColumnTypeError(
                f"column {name!r}: the values {list(values)[:5]} do not have the table's type "
                f"{t}{hint}"
            ) from None
        if len(domain) < 2:
            raise ColumnTypeError(
                f"column {name!r}: a categorical domain needs at least two values"
            )
        return ColumnCodec(name, "categorical", t, nullable, 0.0, len(domain) - 1.0, domain)
    if pa.types.is_boolean(t):
        if lower is not None or upper is not None:
            raise wrong("bounds (a number or a date)")
        return ColumnCodec(name, "boolean", t, nullable, 0.0, 1.0)
    if lower is None or upper is None:
        raise ColumnTypeError(f"column {name!r} (type {t}) needs bounds (lower, upper) or values")
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        if not (isinstance(lower, dt.date) and isinstance(upper, dt.date)):
            raise wrong("numeric bounds") from None
        if pa.types.is_date(t):
            return ColumnCodec(name, "date", t, nullable, _days(lower), _days(upper))
        return ColumnCodec(name, "timestamp", t, nullable, _seconds(lower), _seconds(upper))
    if isinstance(lower, dt.date) or isinstance(upper, dt.date):
        raise wrong("date bounds")
    if pa.types.is_integer(t):
        lo, hi = float(np.ceil(lower)), float(np.floor(upper))
        if lo >= hi:
            raise ColumnTypeError(
                f"column {name!r}: fewer than two integers lie within [{lower}, {upper}]"
            )
        return ColumnCodec(name, "integer", t, nullable, lo, hi)
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return ColumnCodec(name, "float", t, nullable, float(lower), float(upper))
    raise wrong("a numeric column")


def _days(value: dt.date) -> float:
    day = value.date() if isinstance(value, dt.datetime) else value
    return float((day - EPOCH).days)


def _seconds(value: dt.date) -> float:
    if not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def table_codec(columns: list[Any], schema: pa.Schema, csv: bool = False) -> TableCodec:
    """The codec of the configured columns (``ColumnConfig``) given the input's schema; a CSV
    input's text columns take the declared kind's type.

    Raises:
        ColumnTypeError: a configured column is missing, or its type does not fit its
            declaration (the message names the column).
    """
    missing = [c.name for c in columns if c.name not in schema.names]
    if missing:
        raise ColumnTypeError(
            f"columns not found in input: {missing}; the table has {sorted(schema.names)}"
        )
    codecs = []
    for c in columns:
        field = schema.field(c.name)
        arrow_type = _declared_type(c) if csv else field.type
        codecs.append(
            column_codec(
                c.name,
                arrow_type,
                field.nullable,
                c.lower,
                c.upper,
                tuple(c.values) if c.values is not None else None,
                c.nullable,
                getattr(c, "other", None),
            )
        )
    wanted = {c.name for c in columns}
    return TableCodec(tuple(codecs), tuple(n for n in schema.names if n in wanted))


def _declared_type(column: Any) -> pa.DataType:
    """The type a CSV column is parsed as, from its declaration."""
    if column.values is not None:
        kinds = {type(v) for v in column.values}
        return pa.bool_() if kinds == {bool} else pa.int64() if kinds == {int} else pa.string()
    if column.lower is None:
        return pa.bool_()
    if isinstance(column.lower, dt.datetime):
        return pa.timestamp("us")
    if isinstance(column.lower, dt.date):
        return pa.date32()
    return pa.float64()
