"""The budget plan: computed from public inputs alone, spent as planned."""

import numpy as np
import pytest

from dpsmooth_spark.core.kernel import partial_sums
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams
from dpsmooth_spark.mechanisms.synthesizer.measure import release_noisy_count
from dpsmooth_spark.mechanisms.synthesizer.plan import COUNT_NOISE_TARGET, plan_budget
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def _same(a, b) -> bool:
    return a.to_dict(0.9) == b.to_dict(0.9) and np.array_equal(a.basis.indices, b.basis.indices)


def _table(rng, n=3000, d=6):
    z = rng.multivariate_normal(np.zeros(d), 0.5 * np.eye(d) + 0.5, size=n)
    data = {f"x{i}": np.clip(z[:, i], -3, 3) for i in range(d)}
    data["label"] = (z[:, 0] > 0).astype(float)
    return data, {c: (-3.0, 3.0) for c in data if c != "label"} | {"label": (0.0, 1.0)}


@pytest.mark.parametrize("epsilon, delta", [(0.1, 0.0), (1.0, 0.0), (10.0, 0.0), (1.0, 1e-6)])
def test_plan_charges_nothing_and_depends_on_public_inputs_alone(epsilon, delta):
    params = SynthesizerParams(pair_columns=("label",))
    columns = tuple(f"x{i}" for i in range(6)) + ("label",)
    lattice = np.array([0] * 6 + [2])
    accountant = PrivacyAccountant(epsilon, delta)
    plan = plan_budget(params, columns, 3000.0, accountant, 256, lattice)
    assert accountant.charges == []  # planning spends nothing
    again = plan_budget(params, columns, 3000.0, PrivacyAccountant(epsilon, delta), 256, lattice)
    assert _same(plan, again)
    shares = plan.to_dict(params.pooled_fraction)["shares"]
    assert sum(shares.values()) <= 1.0 + 1e-12
    assert shares["count"] == params.count_fraction


@pytest.mark.parametrize("epsilon, delta", [(0.1, 0.0), (1.0, 0.0), (10.0, 0.0), (1.0, 1e-6)])
def test_a_release_spends_what_its_plan_says(epsilon, delta):
    """Every stage the accountant charged is a stage of the plan, at the planned share; the
    pair selection and the picked pairs may spend less (fewer resolvable pairs than planned
    picks leave their share unspent), never more."""
    data, bounds = _table(np.random.default_rng(0))
    params = SynthesizerParams(pair_columns=("label",), candidates=2000)
    synth = ArraySynthesizer(
        epsilon, bounds, delta, params, random_state=0, levels={"label": 2}
    ).fit(data)
    planned = synth.result_.summary.plan["shares"]
    total = epsilon if delta == 0 else synth.accountant_.total_rho
    spent: dict[str, float] = {}
    for charge in synth.accountant_.charges:
        spent[charge.stage] = spent.get(charge.stage, 0.0) + (
            charge.epsilon if delta == 0 else charge.rho
        )
    assert set(spent) <= set(planned)
    for stage, amount in spent.items():
        if stage in ("pair_selection", "selected_pairs"):
            assert amount / total <= planned[stage] * (1 + 1e-9), stage
        else:
            assert amount / total == pytest.approx(planned[stage], rel=1e-9), stage
    assert sum(spent.values()) <= total * (1 + 1e-9)


@pytest.mark.parametrize("rows, top_up", [(20_000, False), (500, True)])
def test_the_count_draws_again_only_where_its_first_draw_is_not_clear(rows, top_up):
    """At epsilon 1 the first draw (0.2 of 0.05) has noise std sqrt(2) / 0.01 = 141: 0.7% of
    20,000 rows, clear, and the other stages get the rest of the budget; 28% of 500 rows, and a
    second draw at 0.05 sqrt(1 - 0.2^2) = 0.049 gives the count the noise of one at 0.05."""
    data, bounds = _table(np.random.default_rng(0), n=rows)
    params = SynthesizerParams(pair_columns=("label",), candidates=500)
    synth = ArraySynthesizer(1.0, bounds, 0.0, params, random_state=0, levels={"label": 2})
    spent = {c.stage: c.epsilon for c in synth.fit(data).accountant_.charges}
    assert spent["count"] == pytest.approx(0.01)
    assert ("count_top_up" in spent) == top_up
    if top_up:
        assert spent["count_top_up"] == pytest.approx(0.05 * np.sqrt(0.96))
    assert sum(spent.values()) == pytest.approx(1.0)
    assert np.sqrt(2.0) / 0.01 > COUNT_NOISE_TARGET * 500  # the cases' premises
    assert np.sqrt(2.0) / 0.01 < COUNT_NOISE_TARGET * 20_000


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_counts_two_draws_are_as_clear_as_one_at_count_fraction(delta):
    """500 rows at epsilon 1 with a first draw at 0.4 of the count's 0.05: over 20,000
    releases the count's error has the noise std of one draw at 0.05, within 4% (the sample
    std's standard error is 0.8% for Laplace noise: a false failure below 1e-6). Pure epsilon:
    noise stds 70.7 and 30.9, pooled 28.3 (the first alone 70.7, the second alone 30.9, their
    plain mean 38.6); zCDP (rho 0.0087): 0.4 and 0.6 of rho."""
    params = SynthesizerParams(count_probe=0.4)
    noise = NoiseSource(np.random.default_rng(3))
    found = []
    for _ in range(20_000):
        accountant = PrivacyAccountant(1.0, delta)
        noisy, std, shares = release_noisy_count(500, params, accountant, noise)
        found.append(noisy - 500)
    one = accountant.noise_scale(1.0, accountant.share(0.05))
    one = one * np.sqrt(2.0) if delta == 0 else one
    if delta == 0:
        assert shares == pytest.approx((0.02, 0.05 * np.sqrt(1 - 0.4**2)))
    else:
        assert shares == pytest.approx((0.02, 0.03))
    assert std == pytest.approx(one)
    assert np.std(found) == pytest.approx(one, rel=0.04)
    assert abs(np.mean(found)) < 4 * one / np.sqrt(len(found))


def test_the_exact_sums_do_not_enter_the_plan():
    """Two tables of the same shape give the same plan for the same noisy count."""
    params = SynthesizerParams()
    plans = []
    for seed in range(2):
        data, bounds = _table(np.random.default_rng(seed))
        columns = tuple(bounds)
        sums = partial_sums(
            [np.column_stack([data[c] for c in columns])],
            np.array([b[0] for b in bounds.values()]),
            np.array([b[1] for b in bounds.values()]),
            params.pass_spec(len(columns)),
        )
        plans.append(
            plan_budget(params, columns, 3000.0, PrivacyAccountant(1.0), sums.histograms.shape[1])
        )
    assert _same(*plans)


@pytest.mark.parametrize(
    "d, n, epsilon, delta, clippable, measured",
    [
        (100, 1e5, 1.0, 0.0, True, True),  # no pair term affordable: the clipped pairs
        (100, 1e5, 0.5, 0.0, True, False),  # their noise too: everything on the marginals
        (100, 1e5, 1.0, 1e-6, True, False),  # zCDP: the pairs as basis functions
        (100, 1e5, 1.0, 0.0, False, False),  # the data pass did not compute them
        (10, 1e5, 1.0, 0.0, True, False),  # a basis is affordable on ten columns
    ],
)
def test_the_clipped_pairs_take_the_relations_share_where_no_pair_term_is_affordable(
    d, n, epsilon, delta, clippable, measured
):
    params = SynthesizerParams()
    columns = tuple(f"x{i}" for i in range(d))
    plan = plan_budget(
        params, columns, n, PrivacyAccountant(epsilon, delta), 256, clippable=clippable
    )
    shares = plan.to_dict(params.pooled_fraction)["shares"]
    assert ("clipped_pairs" in shares) == measured
    if measured:
        rest = 1.0 - params.count_fraction
        assert shares["clipped_pairs"] == pytest.approx(rest * (1.0 - params.marginal_fraction))
        assert plan.basis.size == 0 and plan.selected == 0
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_data_pass_computes_the_clip_norms_from_the_width_alone():
    from dpsmooth_spark.mechanisms.synthesizer.params import CLIP_COLUMNS

    params = SynthesizerParams()
    assert params.pass_spec(CLIP_COLUMNS[0] - 1).clip_levels == ()
    levels = params.pass_spec(100).clip_levels
    assert len(levels) == 13 and levels == tuple(sorted(levels))
    assert levels[-1] == pytest.approx(75.0) and levels[0] == pytest.approx(75.0 / 8)
    assert SynthesizerParams(clipped_pairs="off").pass_spec(100).clip_levels == ()
    assert params.pass_spec(CLIP_COLUMNS[1] + 1).clip_levels == ()


@pytest.mark.parametrize("alone, expected", [(0.15, 0.15), (0.5, None), (0.001, None)])
def test_the_tables_alone_take_their_own_share_and_the_histograms_the_rest(alone, expected):
    """Where no pair term is affordable, the tables get ``table_alone_fraction`` of what the
    count leaves, at most their share of the relations' (``None``: that share), and the
    histograms all the rest; a share that affords no table leaves them theirs."""
    columns = tuple(f"c{i}" for i in range(14))
    params = SynthesizerParams(table_alone_fraction=alone)
    accountant = PrivacyAccountant(0.1)
    plan = plan_budget(params, columns, 48842.0, accountant, 256, np.full(14, 8), table_pairs=91)
    rest = 1.0 - plan.count
    relations = rest * (1.0 - params.marginal_fraction) * params.table_fraction
    assert plan.basis.size == 0 and not plan.selected and plan.tables > 0
    assert plan.table_share == pytest.approx(rest * expected if expected else relations)
    assert plan.marginals == pytest.approx(rest - plan.table_share)
    shares = plan.to_dict(params.pooled_fraction)["shares"]
    assert sum(shares.values()) == pytest.approx(1.0)
