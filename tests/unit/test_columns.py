"""Column kinds: encoding into the smooth domain and decoding to the input's type."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from dpsmooth_spark.core.columns import MAX_CATEGORIES, ColumnTypeError, TableCodec, column_codec


@pytest.mark.parametrize("arrow_type", [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8()])
def test_integers_round_trip_on_their_lattice(arrow_type):
    codec = column_codec("age", arrow_type, True, 17.5, 95)
    assert (codec.kind, codec.lower, codec.upper) == ("integer", 18, 95)  # the integers within
    data = pa.array([18, 40, 95, None], arrow_type)
    encoded = codec.encode(data)
    assert encoded[:3].tolist() == [18, 40, 95] and np.isnan(encoded[3])
    decoded = codec.decode(np.array([18.0, 40.4, 40.6, 95.0, 120.0, -3.0]))
    assert decoded.type == arrow_type and decoded.to_pylist() == [18, 40, 41, 95, 95, 18]
    codecs = TableCodec((codec, column_codec("x", pa.float64(), True, 0, 1)), ("age", "x"))
    assert codecs.lattice().tolist() == [78, 0]


def test_lattice_columns_span_the_scaled_cube():
    """Scaled, a lattice runs from -1 to 1, so snapping candidates to it keeps the ends."""
    from dpsmooth_spark.core.sampling import snap_to_lattice

    points = np.array([[-1.0, -0.2], [-0.4, 0.3], [0.1, 0.9], [0.9, -1.0]])
    snapped = snap_to_lattice(points, np.array([2, 0]))
    assert (
        snapped[:, 0].tolist() == [-1.0, -1.0, 1.0, 1.0] and (snapped[:, 1] == points[:, 1]).all()
    )
    assert snap_to_lattice(np.array([[-0.2], [0.2], [0.8]]), np.array([3]))[:, 0].tolist() == [
        0.0,
        0.0,
        1.0,
    ]


def test_floats_keep_their_width_and_bounds():
    codec = column_codec("bmi", pa.float32(), False, 10, 60)
    out = codec.decode(np.array([5.0, 20.5, 70.0]))
    assert out.type == pa.float32() and out.to_pylist() == [10.0, 20.5, 60.0]
    price = column_codec("x", pa.decimal128(10, 2), True, 0, 1)
    assert price.encode(pa.array([Decimal("0.25")], pa.decimal128(10, 2))).tolist() == [0.25]
    assert price.decode(np.array([0.123456])).to_pylist() == [Decimal("0.12")]


def test_booleans_and_categories():
    smoker = column_codec("smoker", pa.bool_(), True)
    assert smoker.encode(pa.array([True, False, None])).tolist()[:2] == [1.0, 0.0]
    assert smoker.decode(np.array([-0.4, 0.49, 0.51, 1.4])).to_pylist() == [
        False,
        False,
        True,
        True,
    ]
    region = column_codec("region", pa.string(), True, values=("north", "south", "east", "west"))
    assert (region.lower, region.upper) == (0, 3)
    codes = region.encode(pa.array(["east", "north", "mars", None]))
    assert (
        codes[:2].tolist() == [2.0, 0.0] and np.isnan(codes[2:]).all()
    )  # outside the domain: invalid
    assert region.decode(np.array([0.2, 2.6, 9.0])).to_pylist() == ["north", "west", "west"]
    label = column_codec("label", pa.int32(), False, values=(0, 1))
    assert label.decode(np.array([0.9, 0.1])).to_pylist() == [1, 0]
    assert label.decode(np.array([0.9])).type == pa.int32()


def test_dates_and_timestamps():
    codec = column_codec("admitted", pa.date32(), True, dt.date(2020, 1, 1), dt.date(2024, 12, 31))
    day = (dt.date(2020, 1, 1) - dt.date(1970, 1, 1)).days
    assert (codec.kind, codec.lower) == ("date", day)
    assert codec.encode(pa.array([dt.date(2020, 1, 2)])).tolist() == [day + 1]
    assert codec.decode(np.array([day + 1.3, 0.0])).to_pylist() == [
        dt.date(2020, 1, 2),
        dt.date(2020, 1, 1),
    ]
    stamp = column_codec(
        "seen", pa.timestamp("ms"), True, dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 2)
    )
    t = dt.datetime(2024, 1, 1, 12, 30)
    value = stamp.encode(pa.array([t], pa.timestamp("ms")))
    assert stamp.decode(value).to_pylist() == [t] and stamp.decode(value).type == pa.timestamp("ms")


@pytest.mark.parametrize(
    ("arrow_type", "kwargs", "message"),
    [
        (pa.string(), {"lower": 0, "upper": 1}, "declares a numeric column"),
        (pa.float64(), {"values": ("a", "b")}, "categorical domain"),
        (pa.int32(), {"values": ("a", "b")}, "do not have the table's type"),
        (pa.date32(), {"lower": 0, "upper": 10}, "declares numeric bounds"),
        (pa.float64(), {"lower": dt.date(2020, 1, 1), "upper": dt.date(2021, 1, 1)}, "date bounds"),
        (pa.bool_(), {"lower": 0, "upper": 1}, "bounds"),
        (pa.float64(), {}, "needs bounds"),
        (pa.string(), {"values": tuple(str(i) for i in range(MAX_CATEGORIES + 1))}, "at most"),
        (pa.int32(), {"lower": 0.2, "upper": 1.8}, "fewer than two integers"),
        (pa.string(), {"values": ("only",)}, "at least two values"),
    ],
)
def test_declarations_that_do_not_fit_the_type_name_the_column(arrow_type, kwargs, message):
    with pytest.raises(ColumnTypeError, match=message) as err:
        column_codec("col", arrow_type, True, **kwargs)
    assert "'col'" in str(err.value)


def test_table_codec_keeps_the_input_order_and_schema():
    columns = (
        column_codec("b", pa.int16(), False, 0, 9),
        column_codec("a", pa.float32(), True, 0, 1),
    )
    codec = TableCodec(columns, ("a", "b"))
    table = codec.decode(np.array([[3.2, 0.5], [8.9, 2.0]]))
    assert table.schema == pa.schema(
        [pa.field("a", pa.float32(), True), pa.field("b", pa.int16(), False)]
    )
    assert table.column("b").to_pylist() == [3, 9] and table.column("a").to_pylist() == [0.5, 1.0]
    assert codec.bounds().columns == ("b", "a")
