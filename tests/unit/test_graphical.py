"""The graphical-model estimator: exact marginals, fitting, sampling (core/graphical.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsmooth_spark.core import graphical
from dpsmooth_spark.core.graphical import (
    GraphicalModel,
    Observed,
    TreeSize,
    coarse_table,
    fit_model,
    junction_tree,
    tree_cells,
)

SIZES = (3, 4, 2, 3, 2)
SCOPES = [(0, 1), (1, 2), (2, 3), (0, 3), (3, 4)]  # a cycle 0-1-2-3-0 and a leaf


def _random_model(seed: int) -> GraphicalModel:
    model = GraphicalModel.uniform(SIZES, SCOPES)
    rng = np.random.default_rng(seed)
    model.potentials[:] = [rng.normal(0, 1.5, p.shape) for p in model.potentials]
    return model


def _brute_joint(model: GraphicalModel) -> np.ndarray:
    """The normalised product of the potentials over the whole domain, by enumeration."""
    log = np.zeros(SIZES)
    for scope, potential in zip(model.scopes, model.potentials, strict=True):
        shape = [SIZES[v] if v in scope else 1 for v in range(len(SIZES))]
        log = log + potential.reshape(shape)
    joint = np.exp(log - log.max())
    return joint / joint.sum()


def _exact_marginals(joint: np.ndarray) -> list[Observed]:
    """The marginals of ``joint`` on :data:`SCOPES`, as measurements of noise 0.01."""
    out = []
    for scope in SCOPES:
        other = tuple(v for v in range(len(SIZES)) if v not in scope)
        out.append(Observed(scope, joint.sum(axis=other).ravel(), 0.01))
    return out


def test_junction_tree_has_the_running_intersection_property() -> None:
    tree = junction_tree(SIZES, SCOPES)
    for scope in SCOPES:
        assert any(set(scope) <= set(c) for c in tree.cliques)
    for v in range(len(SIZES)):  # the cliques holding v are connected in the tree
        holding = {i for i, c in enumerate(tree.cliques) if v in c}
        tops = {i for i in holding if tree.parents[i] not in holding}
        assert len(tops) == 1, (v, tree)


def _elimination_cliques(sizes: tuple[int, ...], scopes: list[tuple[int, ...]]) -> set:
    """Greedy elimination written plainly: every clique it forms, then the maximal ones."""
    neighbours = [set() for _ in sizes]
    for scope in scopes:
        for v in scope:
            neighbours[v] |= set(scope) - {v}
    left, found = set(range(len(sizes))), []
    while left:
        v = min(left, key=lambda u: (sizes[u] * int(np.prod([sizes[w] for w in neighbours[u]])), u))
        found.append(frozenset(neighbours[v] | {v}))
        for u in neighbours[v]:
            neighbours[u] = (neighbours[u] | neighbours[v]) - {u, v}
        left.remove(v)
    return {tuple(sorted(c)) for c in found if not any(c < o for o in found)}


def test_the_trees_cliques_are_plain_greedy_eliminations_maximal_cliques() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        d = int(rng.integers(2, 12))
        sizes = tuple(int(v) for v in rng.integers(2, 6, d))
        scopes = [
            tuple(sorted(rng.choice(d, int(rng.integers(1, min(d, 3) + 1)), replace=False)))
            for _ in range(int(rng.integers(1, 2 * d)))
        ]
        expected = _elimination_cliques(sizes, scopes)
        assert set(junction_tree(sizes, scopes).cliques) == expected
        cells = sum(int(np.prod([sizes[v] for v in c])) for c in expected)
        assert tree_cells(sizes, tuple(sorted(set(scopes)))) == cells


def test_a_grown_trees_cells_are_counted_part_by_part_as_over_the_whole_graph() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        d = int(rng.integers(2, 14))
        sizes = tuple(int(v) for v in rng.choice([2, 3, 16, 16], d))
        scopes = [
            tuple(
                int(v)
                for v in sorted(rng.choice(d, int(rng.integers(1, min(d, 3) + 1)), replace=False))
            )
            for _ in range(int(rng.integers(1, d + 2)))
        ]
        size = TreeSize(sizes, scopes)
        assert size.cells == tree_cells(sizes, tuple(sorted(set(scopes))))
        for _ in range(5):
            grows = tuple(
                int(v)
                for v in sorted(
                    rng.choice(d, int(rng.integers(1, 4)) if d > 2 else 1, replace=False)
                )
            )
            assert size.with_scope(grows) == tree_cells(sizes, tuple(sorted({*scopes, grows})))
            # the same parts over other sizes: a tree of its own, not the one just cached
            other = tuple(v + 1 for v in sizes)
            expected = tree_cells(other, tuple(sorted({*scopes, grows})))
            assert TreeSize(other, scopes).with_scope(grows) == expected


def test_scope_marginals_are_the_marginals_of_the_scopes() -> None:
    model = _random_model(1)
    cliques = model.clique_marginals()
    for scope, table in zip(model.scopes, model.scope_marginals(cliques), strict=True):
        np.testing.assert_allclose(table.ravel(), model.marginal(scope), atol=1e-12)
        assert table.shape == tuple(SIZES[v] for v in scope)


@pytest.mark.parametrize("large", [0, graphical.LARGE_TABLE_CELLS])
def test_a_cliques_scopes_reduced_together_match_the_enumerated_joint(
    large: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nested and overlapping scopes homed in one clique (``_gather`` adds their potentials
    through shared smaller tables where a clique is large, here every clique with ``large`` 0;
    ``_reduce`` sums their marginals out the same way), and every 1-, 2- and 3-way scope a
    clique holds (``held_marginals``, the others left out), against the joint enumerated from
    the potentials."""
    monkeypatch.setattr(graphical, "LARGE_TABLE_CELLS", large)
    scopes = [(0, 1, 2), (0, 1), (1,), (2,), (2, 3), (0, 3), (3, 4), (3,), (0, 2, 3)]
    model = GraphicalModel.uniform(SIZES, scopes)
    rng = np.random.default_rng(5)
    model.potentials[:] = [rng.normal(0, 1.5, p.shape) for p in model.potentials]
    joint = _brute_joint(model)

    def expected(scope: tuple[int, ...]) -> np.ndarray:
        return joint.sum(axis=tuple(v for v in range(len(SIZES)) if v not in scope))

    cliques = model.clique_marginals()
    for scope, table in zip(scopes, model.scope_marginals(cliques), strict=True):
        np.testing.assert_allclose(table, expected(scope), atol=1e-12)
    every = [s for k in (1, 2, 3) for s in itertools.combinations(range(len(SIZES)), k)]
    held = model.held_marginals(every, cliques)
    for scope in every:
        holds = any(set(scope) <= set(c) for c in model.tree.cliques)
        assert (scope in held) == holds
        if holds:
            np.testing.assert_allclose(held[scope], expected(scope).ravel(), atol=1e-12)


def test_every_marginal_matches_the_enumerated_joint() -> None:
    model = _random_model(0)
    joint = _brute_joint(model)
    for way in (1, 2, 3):
        for scope in itertools.combinations(range(len(SIZES)), way):
            other = tuple(v for v in range(len(SIZES)) if v not in scope)
            expected = joint.sum(axis=other).ravel()
            np.testing.assert_allclose(model.marginal(scope), expected, atol=1e-12)


@pytest.mark.parametrize("large", [0, graphical.LARGE_TABLE_CELLS])
def test_a_parents_messages_to_several_children_match_the_enumerated_joint(
    large: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clique with three children through separators of one size each, and a chain beyond
    one of them: a parent sends each child its own separator's sums (reduced together where
    the parent is large, every clique with ``large`` 0), and each child's table is normalised
    from those sums."""
    monkeypatch.setattr(graphical, "LARGE_TABLE_CELLS", large)
    sizes = (3, 3, 3, 2, 2, 2, 3)
    scopes = [(0, 1, 2), (0, 3), (1, 4), (2, 5), (5, 6), (0, 1)]
    model = GraphicalModel.uniform(sizes, scopes)
    assert max(model.tree.parents.count(p) for p in set(model.tree.parents) - {-1}) >= 2
    rng = np.random.default_rng(11)
    model.potentials[:] = [rng.normal(0, 1.5, p.shape) for p in model.potentials]
    _assert_cliques_match_the_joint(model, 1e-12)


def _assert_cliques_match_the_joint(model: GraphicalModel, atol: float) -> None:
    """Every clique marginal against the joint enumerated from the potentials."""
    sizes = model.sizes
    log = sum(
        p.reshape([sizes[v] if v in s else 1 for v in range(len(sizes))])
        for s, p in zip(model.scopes, model.potentials, strict=True)
    )
    joint = np.exp(log - log.max())
    for clique, table in zip(model.tree.cliques, model.clique_marginals(), strict=True):
        other = tuple(v for v in range(len(sizes)) if v not in clique)
        np.testing.assert_allclose(table, joint.sum(axis=other) / joint.sum(), atol=atol)


@pytest.mark.parametrize("large", [0, graphical.LARGE_TABLE_CELLS])
def test_clique_marginals_hold_where_a_separators_mass_underflows(
    large: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Log-potentials hundreds apart: a message's separator cells underflow next to their
    table's largest, and a neighbour's potentials may lift them again (the exact paths)."""
    monkeypatch.setattr(graphical, "LARGE_TABLE_CELLS", large)
    sizes = (3, 4, 3, 4, 3, 2)
    scopes = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 2), (4, 5), (1, 5)]
    for seed in range(40):
        rng, spread = np.random.default_rng(seed), [30.0, 300.0, 1000.0, 5000.0][seed % 4]
        model = GraphicalModel.uniform(sizes, scopes)
        model.potentials[:] = [rng.normal(0, spread, p.shape) for p in model.potentials]
        _assert_cliques_match_the_joint(model, 1e-9)


def test_marginals_across_independent_parts_match_the_enumerated_joint() -> None:
    """Parts of the tree joined by empty separators only: their columns' joint is the product
    of the parts' marginals, and scopes that mix parts interleave their columns."""
    model = GraphicalModel.uniform(SIZES, [(0, 2), (1, 3), (4,)])
    rng = np.random.default_rng(4)
    model.potentials[:] = [rng.normal(0, 1.5, p.shape) for p in model.potentials]
    joint = _brute_joint(model)
    for way in (1, 2, 3):
        for scope in itertools.combinations(range(len(SIZES)), way):
            other = tuple(v for v in range(len(SIZES)) if v not in scope)
            np.testing.assert_allclose(
                model.marginal(scope), joint.sum(axis=other).ravel(), atol=1e-12
            )


def test_fit_recovers_the_measured_marginals_of_a_model_it_can_express() -> None:
    observed = _exact_marginals(_brute_joint(_random_model(1)))
    model = fit_model(SIZES, observed, 500)
    for o in observed:
        assert np.abs(model.marginal(o.scope) - o.values).sum() < 0.01


def test_unmeasured_relations_stay_independent() -> None:
    """Only one-way marginals measured: the fit is their product (maximum entropy)."""
    rng = np.random.default_rng(2)
    ones = [rng.dirichlet(np.ones(k)) for k in SIZES]
    model = fit_model(SIZES, [Observed((v,), p, 0.01) for v, p in enumerate(ones)], 200)
    np.testing.assert_allclose(
        model.marginal((0, 1)), np.outer(ones[0], ones[1]).ravel(), atol=1e-3
    )


def _simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection onto the simplex by sorting (Duchi et al. 2008)."""
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    last = np.nonzero(u - cumulative / np.arange(1, v.size + 1) > 0)[0][-1]
    return np.maximum(v - cumulative[last] / (last + 1), 0.0)


def test_a_cold_fit_of_one_ways_is_their_projections_at_once() -> None:
    """A 10,000-cell Zipf column and a 3-cell one, one-ways alone with noise (some noisy
    probabilities below zero): five steps give each one's projection onto the simplex (the
    least-squares fit) within 1e-6 TVD, and their product. From the uniform model (the mutant)
    five steps leave the large column 0.74 off, 600 steps 0.034."""
    rng = np.random.default_rng(5)
    weights = 1.0 / np.arange(1, 10_001) ** 1.1
    zipf = weights / weights.sum() + rng.laplace(0.0, 4e-6, 10_000)
    small = np.array([0.6, 0.3, 0.1]) + rng.normal(0.0, 1e-3, 3)
    observed = [Observed((0,), zipf, 6e-6), Observed((1,), small, 1e-3)]
    model = fit_model((10_000, 3), observed, 5)
    for o in observed:
        assert 0.5 * np.abs(model.marginal(o.scope) - _simplex(o.values)).sum() < 1e-6
    np.testing.assert_allclose(
        model.marginal((0, 1)), np.outer(_simplex(zipf), _simplex(small)).ravel(), atol=1e-9
    )


def test_warm_start_continues_from_the_previous_fit() -> None:
    observed = _exact_marginals(_brute_joint(_random_model(3)))
    first = fit_model(SIZES, observed[:3], 300)
    warm = fit_model(SIZES, observed, 1, start=first)
    cold = fit_model(SIZES, observed, 1)
    error = [
        sum(np.abs(m.marginal(o.scope) - o.values).sum() for o in observed[:3])
        for m in (warm, cold)
    ]
    assert error[0] < error[1]


def test_samples_follow_the_model() -> None:
    """200,000 i.i.d. draws: each pair marginal's TVD to the model is about 0.003 (sampling noise);
    0.02 is more than six standard deviations away (false-failure rate below 1e-6)."""
    model = _random_model(4)
    codes = model.sample(200_000, np.random.default_rng(5), stratified=False)
    for scope in itertools.combinations(range(len(SIZES)), 2):
        index = np.ravel_multi_index(tuple(codes[:, v] for v in scope), [SIZES[v] for v in scope])
        empirical = np.bincount(index, minlength=SIZES[scope[0]] * SIZES[scope[1]]) / len(codes)
        assert 0.5 * np.abs(empirical - model.marginal(scope)).sum() < 0.02


def test_stratified_draws_hold_the_root_clique_to_rounding() -> None:
    """The root clique's counts are within one of ``rows * p`` in every cell (i.i.d. draws of
    100,000 rows miss by about 100 in the larger cells), and the other pairs keep their TVD to
    the model within sampling noise (0.01 is over six standard deviations: rate below 1e-6)."""
    model = _random_model(6)
    rows = 100_000
    codes = model.sample(rows, np.random.default_rng(7))
    root = model.tree.cliques[model.tree.order[0]]
    index = np.ravel_multi_index(tuple(codes[:, v] for v in root), [SIZES[v] for v in root])
    counts = np.bincount(index, minlength=int(np.prod([SIZES[v] for v in root])))
    assert np.abs(counts - rows * model.marginal(root)).max() <= 1.0 + 1e-9
    for scope in itertools.combinations(range(len(SIZES)), 2):
        index = np.ravel_multi_index(tuple(codes[:, v] for v in scope), [SIZES[v] for v in scope])
        empirical = np.bincount(index, minlength=SIZES[scope[0]] * SIZES[scope[1]]) / rows
        assert 0.5 * np.abs(empirical - model.marginal(scope)).sum() < 0.01


def test_draws_given_a_separator_are_balanced_against_the_columns_drawn_before() -> None:
    """Cliques (0, 1), (0, 2), (2, 3), drawn in that order: the model holds 2 independent of 1
    given 0, and 3 of 0 and 1 given 2. Each child clique's draws are balanced against the
    columns drawn before it (``stratified_uniforms`` with a key: its parent's other column
    first, then the rest), so the 3-way tables (0, 1, 2), (0, 2, 3) and (1, 2, 3) hold the
    model's counts to within a few rows (over 200 seeds the largest misses were 4.1 / 4.1 /
    6.0, medians 1.9 / 2.6 / 3.0); in a random order (the mutant without a key) they miss by
    about 20 (hypergeometric noise of about 7 rows in the larger cells), and balanced against
    the parent alone (1, 2, 3) misses by as much."""
    sizes = (3, 4, 4, 3)
    model = GraphicalModel.uniform(sizes, [(0, 1), (0, 2), (2, 3)])
    assert model.tree.cliques == ((0, 1), (0, 2), (2, 3)) and model.tree.order == (0, 1, 2)
    rng = np.random.default_rng(12)
    model.potentials[:] = [rng.normal(0, 1.0, p.shape) for p in model.potentials]
    rows = 6_000
    codes = model.sample(rows, np.random.default_rng(13))
    for scope in ((0, 1, 2), (0, 2, 3), (1, 2, 3)):
        shape = [sizes[v] for v in scope]
        index = np.ravel_multi_index(tuple(codes[:, v] for v in scope), shape)
        counts = np.bincount(index, minlength=int(np.prod(shape)))
        assert np.abs(counts - rows * model.marginal(scope)).max() <= 7.0


def test_a_linear_query_of_a_marginal_is_fitted_as_measured() -> None:
    """An observation of the marginal over (0, 1) times weights on column 1, summed over column 1
    (a unit table's reading of rows, with column 1 as the rows per unit): the fit reproduces it
    and the exact one-way marginal of column 1 alongside."""
    joint = _brute_joint(_random_model(3))
    pair = joint.sum(axis=(2, 3, 4))
    weights = (1.0 / np.arange(1, 5)).reshape(1, 4)
    query = (pair * weights).sum(axis=1)
    observed = [
        Observed((0, 1), query, 1e-3, weights, (0,)),
        Observed((1,), pair.sum(axis=0), 1e-3),
    ]
    model = fit_model(SIZES, observed, 300)
    fitted = model.marginal((0, 1)).reshape(3, 4)
    np.testing.assert_allclose((fitted * weights).sum(axis=1), query, atol=2e-3)
    np.testing.assert_allclose(fitted.sum(axis=0), pair.sum(axis=0), atol=2e-3)


def test_a_structure_scope_shapes_the_tree_and_changes_no_probability() -> None:
    joint = _brute_joint(_random_model(4))
    observed = _exact_marginals(joint)
    plain = fit_model(SIZES, observed, 50)
    shaped = fit_model(SIZES, observed, 50, structure=[(0, 2, 4)])
    assert any({0, 2, 4} <= set(c) for c in shaped.tree.cliques)
    np.testing.assert_allclose(shaped.marginal((1, 3)), plain.marginal((1, 3)), atol=1e-9)


def test_draws_given_a_cliques_cells_follow_the_conditional() -> None:
    """Rows drawn given column 0 and 3's cells keep them, and the rest follows the model's
    conditional: column 1 given (0, 3) = (2, 1) on 20,000 draws, within 0.02 of the exact
    shares (over 5 standard deviations of a share: seeded, a false failure below 1e-6)."""
    model = _random_model(5)
    rows = 20_000
    given = np.tile([2, 1], (rows, 1))
    draws = model.sample(rows, np.random.default_rng(0), given=((0, 3), given))
    assert (draws[:, [0, 3]] == given).all()
    joint = _brute_joint(model)
    conditional = joint[2, :, :, 1, :].sum(axis=(1, 2))
    conditional /= conditional.sum()
    shares = np.bincount(draws[:, 1], minlength=4) / rows
    np.testing.assert_allclose(shares, conditional, atol=0.02)


def test_a_fit_driven_to_a_vertex_ends_with_finite_potentials() -> None:
    # two noisy measurements of one column whose noisy total is near zero (a small table at a
    # low budget): the least-squares optimum is a vertex of the simplex, every longer step
    # still passes the line search, and the step used to double to potentials of 1e304 (a
    # tree of such cliques then overflowed into non-finite scores)
    first = [160.9, -178.9, -477.0, 201.0, -636.2, 150.1, -139.6, -2.8]
    first += [423.1, -184.3, -13.5, -79.4, -256.9, -12.5, -267.4, 244.4]
    second = [-132.7, 61.3, -54.8, -539.8, -236.5, 233.1, -225.3, 55.7]
    second += [-12.6, 128.4, 6.9, -108.2, -133.1, -115.3, -115.3, -106.3]
    observed = [
        Observed((0,), np.array(first), 377.7),
        Observed((0,), np.array(second), 220.0),
    ]
    model = fit_model((16,), observed, 1000)
    assert max(float(np.abs(p).max()) for p in model.potentials) < 1e6
    marginal = model.marginal((0,))
    assert np.isfinite(marginal).all() and int(np.argmax(marginal)) == 5


def test_a_coarse_table_sums_runs_and_scattered_groups_alike() -> None:
    """``coarse_table`` sums runs of adjacent cells by ``reduceat`` and other groups by a
    product with their members: both against a loop over the cells."""
    rng = np.random.default_rng(4)
    table = rng.random((5, 4, 3))
    for g in (np.array([0, 0, 1, 2, 2]), np.array([1, 0, 1, 2, 0]), np.array([0, 1, 0, 1, 2])):
        expected = np.zeros((int(g.max()) + 1, 4, 3))
        for cell, group in enumerate(g):
            expected[group] += table[cell]
        np.testing.assert_allclose(coarse_table(table, (g, None, None)), expected)
        moved = coarse_table(table, (None, None, g[:3] % 2))
        np.testing.assert_allclose(moved[..., 0], table[..., g[:3] % 2 == 0].sum(axis=-1))


def test_a_coarse_table_is_the_marginal_summed_over_groups_and_the_fit_meets_it() -> None:
    """``Observed.groups``: the answer is the marginal summed over each column's groups, its
    pull-back the gradient of that sum (a finite-difference check), and a fit of the one-ways
    and a 2 x 2 grouping of a (4 x 3) pair meets all three: within the groups the fit stays
    the one-ways' product (maximum entropy), so a grouped cell's rows split as the one-ways do."""
    rng = np.random.default_rng(9)
    joint = rng.dirichlet(np.ones(12)).reshape(4, 3)
    groups = (np.array([0, 0, 1, 1]), np.array([0, 1, 1]))
    coarse = np.array(
        [[joint[:2, :1].sum(), joint[:2, 1:].sum()], [joint[2:, :1].sum(), joint[2:, 1:].sum()]]
    )
    observed = Observed((0, 1), coarse.ravel(), 0.01, groups=groups)
    np.testing.assert_allclose(observed.answer(joint), coarse.ravel())
    weights = rng.normal(size=4)
    gradient = observed.pull_back(weights, (4, 3))
    step = 1e-6 * rng.normal(size=(4, 3))
    moved = np.dot(observed.answer(joint + step) - observed.answer(joint), weights)
    assert moved == pytest.approx(float((gradient * step).sum()), rel=1e-6)
    ones = [Observed((0,), joint.sum(axis=1), 0.01), Observed((1,), joint.sum(axis=0), 0.01)]
    model = fit_model((4, 3), [*ones, observed], 400)
    fitted = model.marginal((0, 1)).reshape(4, 3)
    np.testing.assert_allclose(observed.answer(fitted), coarse.ravel(), atol=2e-3)
    np.testing.assert_allclose(fitted.sum(axis=1), joint.sum(axis=1), atol=2e-3)
    assert not np.allclose(fitted, np.outer(joint.sum(axis=1), joint.sum(axis=0)), atol=2e-3)


def test_a_one_way_in_runs_of_cells_starts_the_fit_even_within_each_run() -> None:
    """A one-way measured in runs of its cells (``Observed.groups`` on one column) starts the
    fit as the runs' noisy shares projected onto the simplex, each spread evenly over its run's
    cells: with no other measurement of the column the model is exactly that, not mirror
    descent's slow way from the uniform model."""
    runs = np.arange(8) // 2
    observed = Observed((0,), np.array([0.5, 0.3, 0.25, -0.05]), 0.01, groups=(runs,))
    model = fit_model((8, 3), [observed, Observed((1,), np.array([0.2, 0.3, 0.5]), 0.01)], 0)
    expected = np.repeat([29.0, 17.0, 14.0, 0.0], 2) / 120.0  # each less 1/60, then halved
    np.testing.assert_allclose(model.marginal((0,)).ravel(), expected, atol=1e-9)
