"""The data-pass kernel: Chebyshev values, exact fixed-point sums, sensitivities."""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.core import kernel
from dpsmooth_spark.core.bounds import scale_to_unit, unscale_from_unit
from dpsmooth_spark.core.chebyshev import BasisSet, chebyshev_direct, chebyshev_table
from dpsmooth_spark.core.kernel import SCALE, ExactSums, partial_sums
from dpsmooth_spark.privacy import sensitivity

QUANTUM = 1.0 / SCALE


def test_chebyshev_recurrence_matches_cos_arccos(rng):
    x = np.concatenate([rng.uniform(-1, 1, 500), [-1.0, 0.0, 1.0]])
    table = chebyshev_table(x, 9)
    for r in range(10):
        np.testing.assert_allclose(table[:, r], chebyshev_direct(x, r), atol=1e-12)


@pytest.mark.parametrize("kind", ["marginal", "pairwise"])
def test_basis_sums_match_direct_evaluation(rng, kind):
    d, degree = 4, 3
    lower, upper = np.full(d, -2.0), np.full(d, 5.0)
    data = rng.uniform(-2, 5, size=(300, d))
    basis = BasisSet.marginal(d, degree) if kind == "marginal" else BasisSet.pairwise(d, degree)
    sums = partial_sums([data], lower, upper, degree)
    x = scale_to_unit(data, lower, upper)
    direct = np.array(
        [
            np.prod([chebyshev_direct(x[:, i], r) for i, r in enumerate(idx)], axis=0).sum()
            for idx in basis.indices
        ]
    )
    # each row's value is rounded to 2**-16 per factor: at most 2 * 2**-17 + tiny per row
    np.testing.assert_allclose(sums.basis_sums(basis), direct, atol=300 * 2 * QUANTUM)
    assert sums.count == 300
    np.testing.assert_allclose(sums.first_moments(), x.sum(axis=0), atol=300 * QUANTUM)
    np.testing.assert_allclose(sums.second_moments(), x.T @ x, atol=300 * 2 * QUANTUM)


def test_sums_are_exact_and_independent_of_partitioning(rng, monkeypatch):
    d, degree = 3, 4
    lower, upper = np.zeros(d), np.ones(d)
    data = rng.uniform(-0.2, 1.2, size=(1001, d))
    whole = partial_sums([data], lower, upper, degree)
    parts = [partial_sums([chunk], lower, upper, degree) for chunk in np.array_split(data, 7)]
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    assert (merged.gram == whole.gram).all()
    batched = partial_sums(np.array_split(data, 13), lower, upper, degree)
    assert (batched.gram == whole.gram).all()
    # a batch's design matrix built in chunks of 50 rows (the last one short)
    monkeypatch.setattr(kernel, "GEMM_CHUNK_VALUES", 50 * (1 + d * degree))
    chunked = partial_sums([data], lower, upper, degree)
    assert (chunked.gram == whole.gram).all()
    assert whole.rows_clamped == int(((data < 0) | (data > 1)).any(axis=1).sum())


def test_invalid_rows_are_counted_and_excluded():
    data = np.array([[0.5, 0.5], [np.nan, 0.1], [0.2, np.inf], [0.3, 0.3]])
    sums = partial_sums([data], np.zeros(2), np.ones(2), 2)
    clean = partial_sums([data[[0, 3]]], np.zeros(2), np.ones(2), 2)
    assert sums.rows_seen == 4 and sums.rows_invalid == 2 and sums.count == 2
    assert (sums.gram == clean.gram).all()


def test_values_outside_bounds_are_clamped():
    sums = partial_sums([np.array([[100.0], [-100.0]])], np.zeros(1), np.ones(1), 1)
    assert sums.rows_clamped == 2
    assert sums.first_moments()[0] == 0.0  # +1 and -1 after clamping


def worst_case_neighbours(d: int) -> list[np.ndarray]:
    """Records that maximise |T_r| (the cube's corners) and an interior point."""
    corners = [np.ones(d), -np.ones(d), np.array([(-1) ** i for i in range(d)], float)]
    return corners + [np.full(d, 0.3)]


@pytest.mark.parametrize("kind", ["marginal", "pairwise"])
def test_basis_sensitivity_bound_holds_for_added_record(rng, kind):
    d, degree = 5, 3
    basis = BasisSet.marginal(d, degree) if kind == "marginal" else BasisSet.pairwise(d, degree)
    lower, upper = -np.ones(d), np.ones(d)
    base = rng.uniform(-1, 1, size=(50, d))
    before = partial_sums([base], lower, upper, degree)
    worst_l1 = 0.0
    for extra in worst_case_neighbours(d) + list(rng.uniform(-1, 1, size=(20, d))):
        after = partial_sums([np.vstack([base, extra])], lower, upper, degree)
        change = after.basis_sums(basis) - before.basis_sums(basis)
        assert np.abs(change).max() <= 1.0 + 1e-12
        worst_l1 = max(worst_l1, np.abs(change).sum())
        assert np.linalg.norm(change) <= sensitivity.basis_sums_l2(basis.size) + 1e-9
        assert after.count - before.count == sensitivity.count_sensitivity()
    assert worst_l1 <= sensitivity.basis_sums_l1(basis.size) + 1e-9
    # a corner attains the bound for the marginal set: it is tight, not loose
    if kind == "marginal":
        assert worst_l1 == pytest.approx(basis.size)


def test_psi_product_sensitivity_bound(rng):
    d, k = 8, 3
    worst_l1 = worst_l2 = 0.0
    for trial in range(300):
        x = rng.choice([-1.0, 1.0], size=d) if trial % 2 else rng.uniform(-1, 1, size=d)
        basis_q, _ = np.linalg.qr(rng.standard_normal((d, k)))
        change = np.outer(x, x) @ basis_q
        worst_l1 = max(worst_l1, np.abs(change).sum())
        worst_l2 = max(worst_l2, np.linalg.norm(change))
    assert worst_l1 <= sensitivity.psi_product_l1(d, k)
    assert worst_l2 <= sensitivity.psi_product_l2(d) + 1e-9


def test_scale_round_trip(rng):
    lower, upper = np.array([0.0, -5.0]), np.array([10.0, 5.0])
    values = rng.uniform(lower, upper, size=(20, 2))
    np.testing.assert_allclose(
        unscale_from_unit(scale_to_unit(values, lower, upper), lower, upper), values
    )


def test_basis_sets_sizes():
    assert BasisSet.marginal(30, 2).size == 60
    assert BasisSet.pairwise(30, 2).size == 60 + 435
    with pytest.raises(ValueError):
        ExactSums.zero(2, 2).merge(ExactSums.zero(3, 2))


def test_anchor_pairs_add_one_interaction_per_other_column(rng):
    basis = BasisSet.marginal(4, 2).with_anchor_pairs([3])
    assert basis.size == 8 + 3
    pairs = [tuple(np.nonzero(idx)[0]) for idx in basis.indices if (idx != 0).sum() == 2]
    assert sorted(pairs) == [(0, 3), (1, 3), (2, 3)]
    assert BasisSet.pairwise(4, 2).with_anchor_pairs([3]).size == BasisSet.pairwise(4, 2).size
    data = rng.uniform(-1, 1, size=(50, 4))
    sums = partial_sums([data], -np.ones(4), np.ones(4), 2)
    np.testing.assert_allclose(
        sums.basis_sums(basis), basis.evaluate(data).sum(axis=1), atol=50 * 2 * QUANTUM
    )


def test_on_lattice_drops_exactly_the_functions_that_repeat_lower_ones():
    # column 0 continuous, 1 boolean (2 levels), 2 a category of 3 levels
    basis = BasisSet.pairs(3, 3).on_lattice(np.array([0, 2, 3]))
    kept = {tuple(idx) for idx in basis.indices}
    assert kept == {
        tuple(idx) for idx in BasisSet.pairs(3, 3).indices if idx[1] <= 1 and idx[2] <= 2
    }
    assert BasisSet.pairs(3, 3).on_lattice(None).size == BasisSet.pairs(3, 3).size


def test_null_cells_count_nulls_and_keep_those_rows_out_of_the_joint_sums():
    """A row whose only missing values are nulls in nullable columns is in the histograms of its
    other columns and in the null counts (one cell per column, as before), not in the Gram
    matrix; a NaN elsewhere still makes the row invalid."""
    from dpsmooth_spark.core.kernel import PassSpec, partial_sums

    x = np.array([[0.5, 0.2], [np.nan, 0.9], [0.1, np.nan], [np.nan, np.nan], [0.3, 0.4]])
    mask = np.array([[False, False], [True, False], [False, False], [True, True], [False, False]])
    spec = PassSpec(1, histogram_cells=4, null_cells=True)
    sums = partial_sums([(x, mask)], np.zeros(2), np.ones(2), spec)
    assert (sums.rows_seen, sums.rows_invalid, sums.rows_null, sums.count) == (5, 1, 2, 2)
    assert sums.nulls.tolist() == [2, 1]
    # 4 cells of [0, 1]: column 0 holds 0.5, 0.3 -> cells 2, 1; column 1 holds 0.2, 0.9, 0.4 -> 0,
    # 3, 1
    assert sums.histograms.tolist() == [[0, 1, 1, 0], [1, 1, 0, 1]]
    assert (
        sums.histograms.sum(axis=1).tolist() == [2, 3]
        and (sums.histograms.sum(axis=1) + sums.nulls == 4).all()
    )
    split = partial_sums([(x[:2], mask[:2]), (x[2:], mask[2:])], np.zeros(2), np.ones(2), spec)
    assert (split.gram == sums.gram).all() and (split.nulls == sums.nulls).all()


def test_clipped_second_moments_are_each_rows_products_clipped_to_the_norm(rng):
    """The data pass's norm bands give, at every level, ``sum_x min(1, kappa / |x|_1)^2 x_i x_j``
    of the scaled rows (to the fixed-point rounding), whatever the batches; and the bound of
    ``sensitivity.clipped_pairs_l1`` holds for any added record, with equality where its values
    are equal in size."""
    from dpsmooth_spark.core.kernel import PassSpec

    n, d = 3000, 8
    x = np.clip(rng.normal(0, 0.4, (n, d)) + rng.normal(0, 0.3, (n, 1)), -1, 1)
    levels = tuple(d * 0.75 * 2.0 ** (-k / 4) for k in range(12, -1, -1))
    spec = PassSpec(1, clip_levels=levels)
    sums = partial_sums([x[:1000], x[1000:]], -np.ones(d), np.ones(d), spec)
    assert np.array_equal(sums.clipped, partial_sums([x], -np.ones(d), np.ones(d), spec).clipped)
    norms = np.abs(x).sum(axis=1)
    upper = np.triu_indices(d, 1)
    for k, kappa in enumerate(levels):
        clipped = x * np.minimum(1.0, kappa / norms)[:, None]
        direct = (clipped.T @ clipped)[upper]
        np.testing.assert_allclose(sums.clipped_second_moments(k), direct, atol=1e-3)
    for record in (np.full(d, 0.9), rng.uniform(-1, 1, d), np.full(d, 0.05)):
        added = partial_sums([np.vstack([x, record])], -np.ones(d), np.ones(d), spec)
        for k, kappa in enumerate(levels):
            moved = np.abs(added.clipped_second_moments(k) - sums.clipped_second_moments(k)).sum()
            assert moved <= sensitivity.clipped_pairs_l1(kappa, d)
    corner = partial_sums([np.vstack([x, np.ones(d)])], -np.ones(d), np.ones(d), spec)
    moved = np.abs(corner.clipped_second_moments(6) - sums.clipped_second_moments(6)).sum()
    assert moved == pytest.approx(sensitivity.clipped_pairs_l1(levels[6], d), rel=1e-3)
