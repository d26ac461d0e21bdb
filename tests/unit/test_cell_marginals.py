"""Cell coding and marginal counts (core/cell_marginals.py), against the marginal yardstick's
own coder (shared/tools/marginals.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dpsmooth_spark.core.cell_marginals import CellCoding, CellMarginals

SCORER = Path(__file__).resolve().parents[3] / "shared" / "tools" / "marginals.py"


@pytest.fixture(scope="module")
def scorer():
    if not SCORER.exists():
        pytest.skip("shared/tools/marginals.py is not next to the checkout")
    spec = importlib.util.spec_from_file_location("marginals", SCORER)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.mark.parametrize(
    ("column", "levels", "nominal"),
    [
        ({"name": "n", "lower": 0, "upper": 84}, 85, False),  # a wide integer: 16 cells
        ({"name": "n", "lower": 3, "upper": 9}, 7, False),  # a narrow one: a cell per value
        ({"name": "n", "lower": 0.0, "upper": 5.0}, 0, False),  # continuous
        ({"name": "n", "values": list(range(42))}, 42, True),  # 42 categories: 42 cells
    ],
)
def test_codes_are_the_yardsticks_cells(scorer, column, levels, nominal) -> None:
    rng = np.random.default_rng(0)
    lo, hi = (0, levels - 1) if nominal else (column["lower"], column["upper"])
    if levels:
        values = rng.integers(lo, hi + 1, 5_000)
    else:
        values = rng.uniform(lo, hi, 5_000)
    code, _ = scorer.coder(column)
    expected = code(pa.array(values.tolist()))
    scaled = -1.0 + 2.0 * (values - lo) / (hi - lo)
    coding = CellCoding((levels,), (False,), (nominal,))
    np.testing.assert_array_equal(coding.codes(scaled[:, None])[:, 0], expected)


def test_decoded_values_fall_in_their_cells() -> None:
    coding = CellCoding((85, 0, 5, 2), (False, True, False, False), (False, False, True, False))
    rng = np.random.default_rng(1)
    codes = np.column_stack([rng.integers(0, k, 10_000) for k in coding.sizes])
    scaled, nulls = coding.decode(codes, rng)
    assert np.array_equal(nulls[:, 1], codes[:, 1] == 16)
    again = coding.codes(np.nan_to_num(scaled), nulls)
    np.testing.assert_array_equal(again, codes)
    lattice = (scaled[:, 0] + 1.0) / 2.0 * 84  # on the integer points
    np.testing.assert_allclose(lattice, np.rint(lattice), atol=1e-9)


def test_decoded_rows_of_a_cell_spread_over_it_evenly() -> None:
    """The rows of one cell draw one stratified sample: 1,000 rows in a continuous cell (beside
    200 in other cells) put 100 (+-1) in each tenth of it, and the 6 levels of a wide integer's
    cell get 1,000 / 6 (+-1) each. The stratified draw always meets this (false-failure rate 0:
    the +-1 is rounding); i.i.d. draws (the mutant) miss it with probability above 0.99 (a
    binomial count's sd is 9.5 and 11.8)."""
    coding = CellCoding((0, 96), (False, False), (False, False))
    codes = np.column_stack([np.full(1_000, 3), np.full(1_000, 5)])
    codes = np.vstack([codes, np.column_stack([np.full(200, 4), np.full(200, 6)])])
    scaled, _ = coding.decode(codes, np.random.default_rng(2))
    cell = scaled[:1_000, 0]
    tenths = np.floor(((cell + 1.0) * 8.0 - 3.0) * 10.0).astype(int)
    assert np.abs(np.bincount(tenths, minlength=10) - 100).max() <= 1
    levels = np.rint((scaled[:1_000, 1] + 1.0) / 2.0 * 95).astype(int)
    assert np.abs(np.bincount(levels - 30, minlength=6) - 1_000 / 6).max() <= 1


def test_a_one_way_splits_with_its_bounds_apart() -> None:
    """The rows on each bound are counted beside the one-way, which splits into: the lower
    bound, the 16 cells without the bounds, the upper bound, the null cell."""
    coding = CellCoding((3, 0), (False, True), (True, False))
    x = np.array([[0.0, -1.0], [0.0, -0.99], [0.0, 0.3], [0.0, 0.99], [0.0, 1.0], [0.0, 0.0]])
    nulls = np.array([[False, False]] * 5 + [[False, True]])
    assert coding.points == (1,)
    spec = CellMarginals(coding, ((0,), (1,)), coding.points)
    split = spec.split_points(spec.counts(x, nulls))[1]
    expected = np.zeros(19, dtype=np.int64)
    expected[[0, 1, 1 + 10, 16, 17, 18]] = 1  # -1, cell 0, cell 10, cell 15, +1, null
    np.testing.assert_array_equal(split, expected)


def test_a_continuous_columns_rows_off_its_bounds_count_in_sub_cells() -> None:
    """A continuous column's shape counts its rows strictly between the bounds in 16 sub-cells
    of each cell (256 here): not the rows on a bound, not a null; its sums per cell are the
    one-way's cells with the bounds apart."""
    coding = CellCoding((3, 0), (False, True), (True, False))
    x = np.array([[0.0, -1.0], [0.0, -0.99], [0.0, 0.3], [0.0, 0.99], [0.0, 1.0], [0.0, 0.0]])
    nulls = np.array([[False, False]] * 5 + [[False, True]])
    assert coding.points == (1,)
    spec = CellMarginals(coding, ((0,), (1,)), coding.points, coding.points)
    counts = spec.counts(x, nulls)
    shape = spec.split_shapes(counts)[1]
    expected = np.zeros(256, dtype=np.int64)
    expected[[1, 166, 254]] = 1  # floor((x + 1) * 128)
    np.testing.assert_array_equal(shape, expected)
    points = spec.split_points(counts)[1]
    np.testing.assert_array_equal(shape.reshape(16, 16).sum(axis=1), points[1:17])


def test_decoded_rows_of_a_cell_follow_its_shape() -> None:
    """1,600 rows of a continuous cell whose shape holds 0.75 in its sub-cell 2 and 0.25 in its
    sub-cell 5 decode to 1,200 and 400 (+-1, the stratified draw's rounding) rows in those
    sixteenths of the cell and none elsewhere; without the shape (the mutant) they spread over
    the cell."""
    coding = CellCoding((0,), (False,), (False,))
    shape = np.full((16, 16), 1.0 / 16)
    shape[3] = 0.0
    shape[3, 2], shape[3, 5] = 0.75, 0.25
    codes = np.full((1_600, 1), 3)
    scaled, _ = coding.decode(codes, np.random.default_rng(5), None, {0: shape})
    sub = np.floor(((scaled[:, 0] + 1.0) * 8.0 - 3.0) * 16.0).astype(int)
    found = np.bincount(sub, minlength=16)
    assert abs(found[2] - 1_200) <= 1 and abs(found[5] - 400) <= 1
    assert found.sum() == found[2] + found[5]


def test_a_wide_lattices_rows_off_its_bounds_count_per_level() -> None:
    """A wide integer's shape counts its rows per level: not on a bound level, not a null."""
    coding = CellCoding((96, 2), (True, False), (False, True))
    assert coding.points == (0,)
    levels = np.array([0, 1, 1, 40, 95, 94, 7])
    x = np.column_stack([-1.0 + 2.0 * levels / 95.0, np.zeros(7)])
    nulls = np.zeros((7, 2), bool)
    nulls[6, 0] = True  # a null: in no level
    spec = CellMarginals(coding, ((0,), (1,)), coding.points, coding.points)
    shape = spec.split_shapes(spec.counts(x, nulls))[0]
    expected = np.zeros(96, dtype=np.int64)
    expected[[1, 40, 94]] = [2, 1, 1]
    np.testing.assert_array_equal(shape, expected)
    np.testing.assert_array_equal(coding.shape_cells(0), np.arange(96) // 6)


def test_decoded_rows_of_a_wide_lattices_cell_follow_its_levels_shares() -> None:
    """A cell of 6 levels whose shape gives its third level 0.7 and the others 0.06 each: of
    1,000 rows, 700 (+-1) take that level and 60 (+-1) each other one; the first cell, with a
    lower-bound share of 0.5 and its bound level's share 1/6, puts 300 of its 600 rows on the
    bound and the rest on its other levels by their shares (none on the bound level through
    the shape). Without the shape (the mutant) the 0.7 level would get 1,000 / 6."""
    coding = CellCoding((96,), (False,), (False,))
    shape = np.full(96, 1.0 / 6)
    shape[30:36] = 0.06
    shape[32] = 0.7
    codes = np.concatenate([np.full(1_000, 5), np.zeros(600, int)])[:, None]
    scaled, _ = coding.decode(codes, np.random.default_rng(6), {0: (0.5, 0.0)}, {0: shape})
    levels = np.rint((scaled[:, 0] + 1.0) / 2.0 * 95).astype(int)
    found = np.bincount(levels[:1_000] - 30, minlength=6)
    assert abs(found[2] - 700) <= 1 and np.abs(np.delete(found, 2) - 60).max() <= 1
    first = np.bincount(levels[1_000:], minlength=6)
    assert abs(first[0] - 300) <= 1 and np.abs(first[1:6] - 60).max() <= 1


def test_a_wider_lattices_shape_counts_and_decodes_in_sub_cells_of_its_levels() -> None:
    """Past ``MAX_SHAPE_LEVELS`` levels a lattice's shape has 16 sub-cells of equally many
    levels per cell (10,240 levels: 40 a sub-cell). Counting: a bound level in none, level 41
    in sub-cell 1. Decoding 1,000 rows of cell 2 whose shape holds all in its sub-cell 3
    (levels 1,400-1,439) gives levels there only, 25 (+-1) on each."""
    levels = 10_240
    coding = CellCoding((levels,), (False,), (False,))
    assert coding.points == (0,) and not coding.per_level(0)
    x = (-1.0 + 2.0 * np.array([0, 41, levels - 1]) / (levels - 1))[:, None]
    spec = CellMarginals(coding, ((0,),), coding.points, coding.points)
    shape = spec.split_shapes(spec.counts(x))[0]
    assert shape.size == 256 and shape.sum() == 1 and shape[1] == 1
    shares = np.full((16, 16), 1.0 / 16)
    shares[2] = 0.0
    shares[2, 3] = 1.0
    scaled, _ = coding.decode(
        np.full((1_000, 1), 2), np.random.default_rng(7), None, {0: shares.ravel()}
    )
    found = np.rint((scaled[:, 0] + 1.0) / 2.0 * (levels - 1)).astype(int)
    assert found.min() >= 1_400 and found.max() <= 1_439
    assert np.abs(np.bincount(found - 1_400, minlength=40) - 25).max() <= 1


def test_decoded_edge_cells_put_their_shares_on_the_bounds() -> None:
    """1,000 rows in the first cell with a lower-bound share of 0.3, 1,000 in the last with an
    upper share of 0.25: exactly 300 and 250 (+-1, the stratified draw's rounding) on the
    bounds, the rest inside their cells and none on a bound."""
    coding = CellCoding((0,), (False,), (False,))
    codes = np.concatenate([np.zeros(1_000, int), np.full(1_000, 15)])[:, None]
    scaled, _ = coding.decode(codes, np.random.default_rng(3), {0: (0.3, 0.25)})
    first, last = scaled[:1_000, 0], scaled[1_000:, 0]
    assert abs(int((first == -1.0).sum()) - 300) <= 1
    assert abs(int((last == 1.0).sum()) - 250) <= 1
    inside = first[first > -1.0]
    assert inside.min() > -1.0 and inside.max() < -0.875
    inside = last[last < 1.0]
    assert inside.min() >= 0.875 and inside.max() < 1.0


def test_a_wide_integers_edge_cell_puts_its_share_on_the_bound_and_the_rest_off_it() -> None:
    """96 levels (6 a cell): 1,200 rows in the first cell with a lower-bound share of 0.5 give
    600 (+-1) on level 0 and 120 (+-1) on each of levels 1-5; the last cell's 600 rows with an
    upper share of 0 (none found there) spread over all its 6 levels (100 +-1 each)."""
    coding = CellCoding((96,), (False,), (False,))
    assert coding.points == (0,)
    codes = np.concatenate([np.zeros(1_200, int), np.full(600, 15)])[:, None]
    scaled, _ = coding.decode(codes, np.random.default_rng(4), {0: (0.5, 0.0)})
    levels = np.rint((scaled[:, 0] + 1.0) / 2.0 * 95).astype(int)
    first = np.bincount(levels[:1_200], minlength=6)
    assert abs(first[0] - 600) <= 1 and np.abs(first[1:6] - 120).max() <= 1
    last = np.bincount(levels[1_200:] - 90, minlength=6)
    assert np.abs(last - 100).max() <= 1


def test_counts_of_scopes_with_nulls() -> None:
    coding = CellCoding((2, 0), (False, True), (True, False))
    spec = CellMarginals(coding, ((0,), (1,), (0, 1)))
    x = np.array([[-1.0, -0.99], [1.0, 0.99], [1.0, 0.0]])
    nulls = np.array([[False, False], [False, False], [False, True]])
    parts = spec.split(spec.counts(x, nulls))
    assert parts[(0,)].tolist() == [1, 2]
    assert parts[(1,)][0] == 1 and parts[(1,)][15] == 1 and parts[(1,)][16] == 1
    assert parts[(0, 1)].reshape(2, 17)[1, 16] == 1
