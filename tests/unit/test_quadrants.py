"""Quadrant pairs: the signs about the private medians, each column's partner picked privately,
the picked pairs measured and read as a Gaussian copula (core/quadrants.py, privacy.md 3i).

All randomness is seeded (test mode), so each assertion is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.core.function_values import FunctionValues
from dpsmooth_spark.core.quadrants import QuadrantPairs, copula_rho, medians, sign_gram
from dpsmooth_spark.mechanisms.stages import select_partners
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, NoisySummary, SynthesizerParams
from dpsmooth_spark.mechanisms.synthesizer.plan import plan_budget
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


def test_sign_gram_counts_agreements_less_disagreements():
    x = np.random.default_rng(0).uniform(-1, 1, size=(500, 4))
    t = np.array([0.0, 0.2, -0.3, 0.9])
    gram = sign_gram(x, t).reshape(4, 4)
    above = x > t
    for i in range(4):
        for j in range(4):
            agree = int((above[:, i] == above[:, j]).sum())
            assert gram[i, j] == agree - (500 - agree)


def test_medians_read_the_marginal_linearly_within_a_cell():
    probabilities = np.array([[0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 0.8, 0.2], [0.1, 0.2, 0.3, 0.4]])
    # cells of width 0.5 from -1; the third column's half lies 0.2 / 0.3 into its third cell
    expected = [0.0, 0.0 + 0.5 * 0.5 / 0.8, 0.0 + 0.5 * 0.2 / 0.3]
    np.testing.assert_allclose(medians(probabilities), expected)


def test_copula_rho_inverts_the_quadrant_correlation_of_a_gaussian():
    """200,000 draws of a bivariate normal with correlation 0.6: the quadrant correlation's
    standard error is about 0.0017, so ``sin(pi q / 2)`` lies within 0.01 of 0.6 (a deviation
    of about 4: false-failure rate below 1e-4; measured 0.0008 off)."""
    z = np.random.default_rng(1).multivariate_normal([0, 0], [[1, 0.6], [0.6, 1]], size=200_000)
    q = sign_gram(z, np.zeros(2))[1] / len(z)
    assert abs(float(copula_rho(q)) - 0.6) < 0.01
    assert abs(q - 2 / np.pi * np.arcsin(0.6)) < 0.01


def test_few_pairs_take_the_per_pair_products_and_agree_with_the_functions():
    """A chain of 39 pairs over 40 columns (39 left and 39 right columns: 1,521 blocks, more
    than 16 per pair): the fit's operator computes each pair alone, and its products equal the
    functions evaluated."""
    rng = np.random.default_rng(2)
    points = rng.uniform(-1, 1, size=(300, 40))
    chain = np.column_stack([np.arange(39), np.arange(1, 40)])
    query = QuadrantPairs(rng.uniform(-0.5, 0.5, 40), chain)
    scale = rng.uniform(0.5, 2.0, size=39)
    values = FunctionValues.from_functions([query], [scale], points)
    assert values._blocks[0].sparse
    dense = query.evaluate(points) * scale[:, None]
    u, y = rng.uniform(size=300), rng.normal(size=39)
    np.testing.assert_allclose(values @ u, dense @ u, rtol=1e-5)
    np.testing.assert_allclose(values.T @ y, dense.T @ y, rtol=1e-5, atol=1e-5)


def test_partner_picks_spend_their_budget_and_never_pick_the_column_itself():
    accountant = PrivacyAccountant(1.0)
    scores = np.abs(np.random.default_rng(3).normal(size=(6, 6)))
    picked = select_partners(
        scores, 0.4, accountant, NoiseSource(np.random.default_rng(4)), "quadrant_selection"
    )
    assert np.all(picked != np.arange(6))
    assert accountant.spent_epsilon() == pytest.approx(0.4)
    assert accountant.charges[-1].invocations == 6


@pytest.mark.parametrize("epsilon, measured", [(1.0, True), (0.1, False)])
def test_the_plan_measures_quadrant_pairs_only_where_the_picks_resolve(epsilon, measured):
    """300 continuous columns, 10^5 rows, pure epsilon: at 1 a pick's noise resolves a quadrant
    correlation of 0.11 (measured); at 0.1, 1.1 (not: the release stays independent)."""
    columns = tuple(f"x{i}" for i in range(300))
    plan = plan_budget(
        SynthesizerParams(), columns, 1e5, PrivacyAccountant(epsilon), 64, quadrant_columns=300
    )
    assert (plan.quadrants > 0) == measured
    assert plan.quadrant_selection == pytest.approx(plan.quadrants / 2)


def test_each_column_picks_a_partner_in_its_block_and_the_release_keeps_the_blocks():
    """10,000 rows of 60 columns in six blocks of ten (one factor each, loadings^2 in
    0.35-0.9) at epsilon 2: every column's pick lies in its block (a pick's noise, 2 x 60 /
    0.38 = 316 exponential, has its largest of 59 draws near 1,300 against sums of 2,300-7,100
    in a block and about 100 outside), and the release's correlation error is under half the
    independent columns' (0.29; 0.24-0.29 over seeds 0-3; 25,000 rows, past the herding limit,
    reordered to the pairs' copula). The summary's JSON keeps the pairs."""
    rng = np.random.default_rng(5)
    rows, d = 10_000, 60
    data = np.empty((rows, d))
    for start in range(0, d, 10):
        factor = rng.normal(size=rows)
        for j in range(start, start + 10):
            load = rng.uniform(np.sqrt(0.35), np.sqrt(0.9))
            data[:, j] = load * factor + np.sqrt(1 - load**2) * rng.normal(size=rows)
    data = np.clip(data, -3, 3)
    bounds = {f"x{i}": (-3.0, 3.0) for i in range(d)}
    synth = ArraySynthesizer(2.0, bounds, random_state=0)
    out = synth.fit({f"x{i}": data[:, i] for i in range(d)}).sample(25_000)
    summary = synth.result_.summary
    pairs = summary.quadrant_pairs.query.pairs
    assert len(pairs) >= d // 2
    assert np.all(pairs[:, 0] // 10 == pairs[:, 1] // 10)
    assert synth.accountant_.spent_epsilon() == pytest.approx(2.0)
    upper = np.triu_indices(d, 1)
    real = np.corrcoef(data, rowvar=False)[upper]
    synthetic = np.corrcoef(np.column_stack([out[c] for c in bounds]), rowvar=False)[upper]
    assert np.mean(np.abs(synthetic - real)) < 0.5 * np.mean(np.abs(real))
    again = NoisySummary.from_dict(summary.to_dict())
    np.testing.assert_array_equal(again.quadrant_pairs.query.pairs, pairs)
    np.testing.assert_allclose(again.completed_correlation(), summary.completed_correlation())


def test_a_table_without_relations_keeps_none_of_its_partners():
    """60 independent columns, 10,000 rows, epsilon 2: each column still picks a partner and its
    pair is measured, but none clears the threshold (4 noise deviations of about 0.035, plus
    the largest chance correlation among 59 partners, 0.045: a column's pick is its largest),
    so the completed copula is the identity and the sample is reordered to no correlation: the
    release's mean |correlation| is below 0.001 (1e-5 measured; the real table's own is 0.008),
    and its correlation error is the real table's chance correlation (ratio 1.000 +- 0.001;
    seeds 0-3 all 1.000; a threshold of 4 deviations alone kept one pair in three of them,
    1.009-1.011)."""
    rng = np.random.default_rng(6)
    rows, d = 10_000, 60
    data = np.clip(rng.normal(size=(rows, d)), -3, 3)
    bounds = {f"x{i}": (-3.0, 3.0) for i in range(d)}
    synth = ArraySynthesizer(2.0, bounds, random_state=0)
    out = synth.fit({f"x{i}": data[:, i] for i in range(d)}).sample(25_000)
    assert synth.result_.summary.quadrant_pairs.query.size >= d // 2
    np.testing.assert_allclose(synth.result_.copula, np.eye(d), atol=1e-9)
    upper = np.triu_indices(d, 1)
    real = np.corrcoef(data, rowvar=False)[upper]
    synthetic = np.corrcoef(np.column_stack([out[c] for c in bounds]), rowvar=False)[upper]
    assert np.mean(np.abs(synthetic)) < 0.001
    ratio = np.mean(np.abs(synthetic - real)) / np.mean(np.abs(real))
    assert ratio == pytest.approx(1.0, abs=0.001)
