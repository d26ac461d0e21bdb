"""The counts a release of persons reads (core/unit_tables.py), against a unit-by-unit count."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from dpsmooth_spark.core.cell_marginals import CellCoding
from dpsmooth_spark.core.unit_tables import SCALE, UnitTables, row_share, valid_codes

CODING = CellCoding((3, 4, 0), (False, False, False), (True, True, False))
K = 4
TABLES = UnitTables(
    CODING,
    (True, False, False),
    K,
    unit_scopes=((0, 3), (1, 3), (0, 1, 3), (3,)),
    pair_columns=(1, 2),
    row_scopes=((0,), (1, 2), (0, 3)),
)


def _units(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells of ``n`` rows, at most ``K`` per unit, units in no particular order."""
    rng = np.random.default_rng(seed)
    units = rng.integers(0, n // 3, n)
    rank = np.zeros(n, dtype=int)
    seen: dict[int, int] = defaultdict(int)
    for i, u in enumerate(units):
        rank[i] = seen[u]
        seen[u] += 1
    keep = rank < K
    codes = np.column_stack([rng.integers(0, 3, n), rng.integers(0, 4, n), rng.integers(0, 16, n)])
    return codes[keep], units[keep]


def _by_hand(codes: np.ndarray, units: np.ndarray) -> dict:
    """Every table unit by unit, in floats (what privacy.md 3k defines)."""
    sizes = TABLES.sizes
    out: dict = {}
    for kind, scope, _ in TABLES.blocks:
        out[kind, scope] = np.zeros(1 if kind == "agreement" else [sizes[v] for v in scope])
    for u in np.unique(units):
        rows = codes[units == u]
        m = len(rows)
        table = np.column_stack([rows, np.full(m, m - 1)])
        table[:, 0] = rows[0, 0]  # the per-unit column: the first row's value
        for kind, scope, _ in TABLES.blocks:
            if kind == "agreement":
                j = scope[0]
                for a in range(m):
                    for b in range(m):
                        if a != b and rows[a, j] == rows[b, j]:
                            out[kind, scope][0] += 1.0 / (m * (m - 1))
                continue
            for row in table:
                out[kind, scope][tuple(row[v] for v in scope)] += 1.0 if kind == "rows" else 1 / m
    return out


def test_counts_match_a_unit_by_unit_count():
    codes, units = _units(300, 0)
    found = TABLES.split(TABLES.counts(codes, units) / SCALE)
    expected = _by_hand(codes, units)
    for key, values in found.items():
        # floors per unit and cell: each unit loses less than one SCALE-th per cell
        np.testing.assert_allclose(
            values, expected[key].ravel(), atol=len(np.unique(units)) / SCALE
        )
    # a unit whose rows all share a cell agrees fully: at most one per unit of two rows or more
    assert found["agreement", (1,)].sum() <= np.sum(np.bincount(units) >= 2)


def test_counts_add_up_over_any_split_of_the_units():
    """Each unit's rows in one place: the merged counts do not depend on where the units are."""
    codes, units = _units(400, 1)
    whole = TABLES.counts(codes, units)
    first = units % 3 == 0
    parts = TABLES.counts(codes[first], units[first]) + TABLES.counts(codes[~first], units[~first])
    np.testing.assert_array_equal(parts, whole)
    # other units' rows between a unit's rows (each unit's own order kept) change nothing
    np.testing.assert_array_equal(TABLES.counts(*_stable_sorted(codes, units)), whole)


def _stable_sorted(codes: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(units, kind="stable")
    return codes[order], units[order]


def test_a_unit_moves_each_table_by_at_most_one():
    """The sensitivity privacy.md 3k derives: a unit of any size moves a unit or pair table by at
    most 1 in L1 (rows tables: by its rows, at most k)."""
    codes, units = _units(300, 3)
    base = TABLES.split(TABLES.counts(codes, units) / SCALE)
    for m in range(1, K + 1):
        extra = np.random.default_rng(m).integers(0, 3, (m, 3)) % [3, 4, 16]
        grown = TABLES.split(
            TABLES.counts(np.vstack([codes, extra]), np.r_[units, np.full(m, 10_000)]) / SCALE
        )
        for key, values in grown.items():
            moved = np.abs(values - base[key]).sum()
            assert moved <= (m if key[0] == "rows" else 1.0) + 1e-12, (key, m, moved)


def test_a_unit_beyond_the_bound_is_refused():
    with pytest.raises(ValueError, match="more rows than the bound"):
        TABLES.counts(np.zeros((K + 1, 3), dtype=int), np.zeros(K + 1, dtype=int))


def test_row_share_keeps_a_unit_within_one():
    m = np.arange(1, 200)
    assert np.all(m * row_share(m) <= 1.0)
    assert np.all(m * row_share(m) > 1.0 - m / SCALE)


def test_valid_codes_follow_the_passs_rule():
    x = np.array([[0.0, 1.0, 5.0], [np.nan, 1.0, 5.0], [0.0, np.nan, 20.0], [1.0, 2.0, 3.0]])
    nulls = np.array([[0, 0, 0], [0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=bool)
    coding = CellCoding((0, 0, 0), (False, True, False), (False, False, False))
    lower, upper = np.zeros(3), np.array([1.0, 2.0, 10.0])
    codes, ok, invalid, clamped = valid_codes(x, nulls, lower, upper, coding)
    assert ok.tolist() == [True, False, True, True]
    assert invalid == 1 and clamped == 1  # 20 > 10 on the third row
    assert codes[1, 1] == 16  # the null cell
    assert codes[1, 2] == 15  # clamped to the upper bound's cell
