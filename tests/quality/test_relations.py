"""Release quality, seeded: measured relations come back, and what they imply.

Every release here is seeded (test mode), so each assertion is deterministic: it fails only when
the code changes. The false-failure rate a test states is measured over the other seeds it
names (0 where every seed tried passes with the stated margin).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams
from tests.unit.synthesizer_tables import (
    correlated_table,
    fitted_correlation,
)

pytestmark = pytest.mark.quality


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pairs_measured_only_through_a_label_come_out_as_the_label_implies(seed):
    """A 0/1 label and 12 skewed columns, 3000 rows, epsilon 2; only the label's pairs are
    measured (no pair selection). Two columns follow the label (fitted correlation 0.82-0.87), ten
    do not. Given
    the label, the maximum-entropy fit makes the columns independent, so two columns' correlation
    is ``r_iL r_jL``. Where that is below the candidates' chance (two deviations, 0.032 here), the
    fit alone misses it by up to 0.037-0.047 (the candidates' own correlation); with
    ``unrelated_independent`` by at most 0.002. The two strong columns' correlation (0.68-0.74,
    above the chance) stays as fitted (within 1e-3), and every column's mean and variance too.
    Seeded; all three seeds are checked, none was left out."""
    from dpsmooth_spark.core.marginals import weighted_correlation

    rng = np.random.default_rng(7)
    label = rng.integers(0, 2, 3000).astype(float)
    table = {"label": label}
    for i in range(12):
        x = rng.beta(2, 5, 3000)
        table[f"f{i}"] = (
            np.clip(0.5 * x + 0.5 * label * rng.uniform(0.6, 1.0, 3000), 0, 1) if i < 2 else x
        )
    bounds = {c: (0.0, 1.0) for c in table}
    upper = np.triu_indices(13, 1)
    runs = {}
    for flag in (True, False):
        result = (
            ArraySynthesizer(
                2.0,
                bounds,
                params=SynthesizerParams(
                    pair_columns=("label",), pair_selection="off", unrelated_independent=flag
                ),
                levels={"label": 2},
                random_state=seed,
            )
            .fit(table)
            .result_
        )
        assert result.summary.factor_pairs.size == 12
        uncovered = ~result.summary.covered_pairs()[upper]
        assert uncovered.sum() == 66  # every pair without the label
        corr = weighted_correlation(result.candidates, result.weights)
        implied = np.outer(corr[0], corr[0])  # r_iL r_jL
        small = uncovered & (
            np.abs(implied[upper]) < 2.0 / np.sqrt(1.0 / np.sum(result.weights**2))
        )
        assert small.sum() >= 50  # of 66: the strong pair and a few more are above it
        moments = np.cov(result.candidates.T, aweights=result.weights)
        runs[flag] = (
            np.abs(corr[upper] - implied[upper])[small].max(),
            corr[1, 2],
            np.diag(moments),
        )
    (matched, strong, variances), (fitted, strong_fitted, variances_fitted) = (
        runs[True],
        runs[False],
    )
    assert matched < 0.002 and fitted > 0.02, (matched, fitted)
    assert abs(strong - strong_fitted) < 1e-3 and strong > 0.6
    np.testing.assert_allclose(variances, variances_fitted, rtol=1e-3)


def test_a_hubs_biased_histogram_does_not_make_the_fit_invent_relations():
    """A 0/1 label independent of 40 skewed columns (2000 rows, epsilon 1, 5000 candidates),
    whose noisy histogram is then moved by 15% of the rows toward 1 (its mean off by about 0.3,
    as digits' label's was in two of 16 releases at epsilon 1). With ``hub_means: false`` the
    fit keeps that marginal and explains the pair answers by relations: mean |corr| of the label
    with the columns 0.12 and 0.09 in seeds 0 and 2 (0.010-0.015 in 1 and 3, where the fit moved
    the label's mean instead). With ``hub_means`` the pairs put the mean back: at most 0.017 in
    every seed, and the fitted mean closer to the data's in every seed. Seeded; seeds 0 and 1
    are checked, one of each kind of failure."""
    from dpsmooth_spark.core.marginals import weighted_correlation
    from dpsmooth_spark.mechanisms.synthesizer import fit_from_summary

    rng = np.random.default_rng(10)
    shapes = np.linspace(0.5, 6.0, 40)
    table = {f"x{i}": rng.beta(shapes[i], shapes[::-1][i], 2000) for i in range(40)}
    table["label"] = rng.integers(0, 2, 2000).astype(float)
    bounds = {c: (0.0, 1.0) for c in table}
    true_mean = 2 * table["label"].mean() - 1
    invented = []
    for seed in range(2):
        params = SynthesizerParams(pair_columns=("label",), candidates=5000)
        summary = (
            ArraySynthesizer(1.0, bounds, params=params, levels={"label": 2}, random_state=seed)
            .fit(table)
            .result_.summary
        )
        label = summary.bounds.columns.index("label")
        histograms = summary.histograms.copy()
        histograms[label, 0] -= 0.15 * summary.noisy_count
        histograms[label, -1] += 0.15 * summary.noisy_count
        biased = dataclasses.replace(  # keeps the label's levels
            summary,
            statistics=tuple(
                dataclasses.replace(s, values=histograms) if s.kind == "histograms" else s
                for s in summary.statistics
            ),
        )
        found = {}
        for flag in (False, True):
            result = fit_from_summary(
                biased, params.model_copy(update={"hub_means": flag}), np.random.default_rng(seed)
            )
            corr = np.delete(weighted_correlation(result.candidates, result.weights)[label], label)
            found[flag] = (
                np.abs(corr).mean(),
                abs(result.weights @ result.candidates[:, label] - true_mean),
            )
        assert found[True][0] < 0.03, (seed, found)
        assert found[True][1] < found[False][1], (seed, found)
        invented.append(found[False][0])
    assert max(invented) > 0.06, invented  # the failure that hub_means prevents


def narrow_table() -> tuple[dict, dict, np.ndarray]:
    """Four t (3 degrees of freedom) columns on bounds ten scales wide, 20,000 rows, correlated
    0.7 within the pairs (0, 1) and (2, 3): the columns, the bounds, the real correlations."""
    rng = np.random.default_rng(7)
    n = 20_000
    z = rng.multivariate_normal(np.zeros(4), np.kron(np.eye(2), [[1.0, 0.7], [0.7, 1.0]]), size=n)
    t = z / np.sqrt(rng.chisquare(3, size=(n, 1)) / 3)
    return (
        {f"x{i}": t[:, i] for i in range(4)},
        {f"x{i}": (-10.0, 10.0) for i in range(4)},
        np.corrcoef(t.T),
    )


@pytest.mark.parametrize(
    ("epsilon", "baseline", "strong_min", "absent_max"),
    [
        (1.0, {"pair_factors": "chebyshev"}, 0.4, 0.1),
        (0.3, {"factor_degree": 3}, 0.25, 0.08),
    ],
)
def test_spread_factors_keep_the_relations_of_narrow_columns(
    epsilon, baseline, strong_min, absent_max
):
    """Heavy-tailed columns (:func:`narrow_table`) fill a tenth of their range, so
    ``T_1(x_i) T_1(x_j)`` carries a correlation of 0.7 as a signal of 0.004 against noise of
    0.001 (20,000 rows, epsilon 1). The default pair terms, on spread factors of degree 16 here,
    keep both strong pairs at ``strong_min`` or more and the four absent ones within
    ``absent_max`` in the fitted distribution at each of 3 seeds, and their mean correlation
    error is at most 0.75x the baseline's (seeded, so deterministic). At epsilon 1 against the
    Chebyshev pair terms: measured 0.46-0.56 and 0.019, 0.083 against 0.147 (which invented
    -0.50 on one absent pair). At epsilon 0.3 against degree-3 factors, which cannot take as
    sharp a step where the data are: 0.48-0.58 and 0.071, 0.090 against 0.166 (the absent
    pairs move with the release's noise: with the bounds' cells off, 0.28-0.52 and 0.052 on
    the same seeds)."""
    data, bounds, real = narrow_table()
    iu = np.triu_indices(4, 1)
    strong = np.array([True, False, False, False, False, True])  # (0, 1) and (2, 3)
    errors = {}
    for name, params in (("default", {}), ("baseline", baseline)):
        errors[name] = []
        for seed in range(3):
            result = (
                ArraySynthesizer(
                    epsilon, bounds, params=SynthesizerParams(**params), random_state=seed
                )
                .fit(data)
                .result_
            )
            corr = fitted_correlation(result)[iu]
            errors[name].append(np.abs(corr - real[iu]).mean())
            if name == "default":
                assert np.all(corr[strong] >= strong_min), corr
                assert np.all(np.abs(corr[~strong]) <= absent_max), corr
    assert np.mean(errors["default"]) <= 0.75 * np.mean(errors["baseline"]), errors


def test_anchor_pairs_alone_keep_the_labels_relations_and_what_they_imply():
    """20 narrow columns each ``2 y + N(0, 0.6)`` with a 0/1 label ``y`` (real correlations 0.86
    with the label, 0.73 between columns), 2000 rows at epsilon 10: ``auto`` without pair
    selection measures the label's 20 anchor pairs alone (with it, every pair). Candidates drawn as
    independent columns could not hold them (label
    correlations came back at 0.50-0.53 and those between columns at 0.24-0.26 over seeds 0-2);
    with the copula of the measured pairs' maximum-entropy completion, 0.69-0.72 and 0.68-0.78.
    Thresholds at 0.75x and 0.7x-1.2x the real values; seed 0 is checked, and none of seeds 0-2
    comes within 0.05 of a threshold."""
    rng = np.random.default_rng(100)
    n, k = 2000, 20
    y = rng.integers(0, 2, n).astype(float)
    x = 2.0 * y[:, None] + rng.normal(0.0, 0.6, (n, k))
    columns = {f"x{j}": x[:, j] for j in range(k)} | {"y": y}
    bounds = {f"x{j}": (-10.0, 10.0) for j in range(k)} | {"y": (0.0, 1.0)}
    synth = ArraySynthesizer(
        10.0,
        bounds,
        params=SynthesizerParams(pair_columns=("y",), pair_selection="off"),
        levels={"y": 2},
        random_state=0,
    )
    out = synth.fit(columns).sample(n)
    assert synth.result_.summary.functions == k  # the anchor pairs alone
    real = np.corrcoef(np.column_stack([columns[c] for c in bounds]), rowvar=False)
    syn = np.corrcoef(np.column_stack([out[c] for c in bounds]), rowvar=False)
    between = np.triu_indices(k, 1)
    assert syn[k, :k].mean() >= 0.75 * real[k, :k].mean()
    assert (
        0.7 * real[:k, :k][between].mean()
        <= syn[:k, :k][between].mean()
        <= 1.2 * real[:k, :k][between].mean()
    )


def test_the_maximum_entropy_step_keeps_clear_relations_under_either_target():
    """2000 rows at epsilon 0.5 (3 seeds): the fitted correlations of the two clear pairs (0.8
    and -0.5) are within 0.12 of the real ones in every seed, never further with
    ``group_shrinkage: james_stein`` than with the chi-square ball, and the independent pair
    stays independent (|corr| < 0.1). Measured: at most 0.10 off (seed 0) under either target.
    With the independent prior as the step's reference (``reference_correlation`` not used)
    the 0.8 pair came back at 0.51 / 0.60 / 0.76 (james_stein) and 0.49 / 0.58 / 0.66 (ball)."""
    for seed in range(3):
        table, bounds = correlated_table(np.random.default_rng(seed), n=2000)
        real = np.corrcoef(np.column_stack([table[k] for k in "abc"]).T)
        errors = {}
        for shrinkage in ("james_stein", "ball"):
            params = SynthesizerParams(candidates=3000, group_shrinkage=shrinkage)
            synth = ArraySynthesizer(0.5, bounds, params=params, random_state=seed).fit(table)
            corr = fitted_correlation(synth.result_)
            errors[shrinkage] = np.abs(corr - real)[[0, 1], [1, 2]]
            assert abs(corr[0, 2]) < 0.1
            assert np.all(errors[shrinkage] <= 0.12), (seed, shrinkage, errors[shrinkage])
        assert np.all(errors["james_stein"] <= errors["ball"] + 1e-3)


def block_factor_table(seed: int, n: int = 20_000, d: int = 60) -> dict[str, np.ndarray]:
    """``d`` columns in blocks of ten, each block loading on its own factor (within-block
    correlations 0.35-0.9, none across blocks), clipped to +-3."""
    rng = np.random.default_rng(seed)
    table = {}
    for block in range(d // 10):
        factor = rng.normal(size=n)
        for j in range(10):
            load = rng.uniform(np.sqrt(0.35), np.sqrt(0.9))
            noise = np.sqrt(1 - load**2) * rng.normal(size=n)
            table[f"x{block * 10 + j}"] = np.clip(load * factor + noise, -3, 3)
    return table


@pytest.mark.parametrize("seed", [0])
def test_a_wide_factor_table_keeps_its_blocks_through_the_pairs_low_rank_model(seed):
    """60 columns in six blocks, 20,000 rows, zCDP (1, 1e-6): all 1,770 pairs are measured and
    each answer's noise is near a weak relation's. Read through their low-rank model (the
    default from 50 columns), the fit's correlation error is 0.11-0.13 of independence's in
    seeds 0-7, against 0.52-0.58 with the pairs as measured (``pair_denoise: off``, the
    mutant); the model finds the six blocks. Asserted on seed 0: below 0.35, which each of the
    mutant's eight seeds exceeds."""
    from dpsmooth_spark.mechanisms.synthesizer.summary import modelled_pairs

    table = block_factor_table(seed)
    bounds = {c: (-3.0, 3.0) for c in table}
    real = np.corrcoef(np.column_stack(list(table.values())), rowvar=False)
    upper = np.triu_indices(real.shape[0], 1)
    synth = ArraySynthesizer(1.0, bounds, delta=1e-6, random_state=seed).fit(table)
    fitted = fitted_correlation(synth.result_)
    error = np.abs(fitted - real)[upper].mean() / np.abs(real[upper]).mean()
    modelled = modelled_pairs(synth.result_.summary, synth.params)
    assert modelled is not None and modelled.model.rank == 6
    assert error < 0.35


def test_pure_epsilon_finds_the_blocks_of_a_wide_table_through_its_clipped_pairs():
    """The same 60 columns under pure epsilon 2, without the quadrant pairs (``quadrant_pairs:
    off``, as where no second pass over the rows is given; ``tests/unit/test_quadrants.py``
    tests them): no pair term is affordable as a basis function (sensitivity 1,770), so the
    release measures every pair with each row clipped to its typical L1 norm
    (``clipped_pairs``, sensitivity about 300) and reads them through their low-rank model.
    The fit's correlation error is 0.20-0.24 of independence's in seeds 0-3 (1.0 with
    ``clipped_pairs: off``: no relation measured); the model finds the six blocks.
    With 60 columns of one shape, each clear histogram is shrunk towards the others' shape
    (``core.marginals.SHARED_SHAPE_WIDE``) and the fitted weights raked to those marginals: the
    fitted marginals' mean Wasserstein-1 distance to the data is 0.0051-0.0061 in seeds 0-3,
    against 0.012-0.013 with each histogram denoised alone. Asserted on seed 0: below 0.4 and
    0.009."""
    from dpsmooth_spark.mechanisms.synthesizer.summary import modelled_pairs

    table = block_factor_table(0)
    bounds = {c: (-3.0, 3.0) for c in table}
    real = np.corrcoef(np.column_stack(list(table.values())), rowvar=False)
    upper = np.triu_indices(real.shape[0], 1)
    params = SynthesizerParams(quadrant_pairs="off")
    synth = ArraySynthesizer(2.0, bounds, params=params, random_state=0).fit(table)
    summary = synth.result_.summary
    assert summary.plan["shares"]["clipped_pairs"] > 0 and summary.basis.size == 0
    modelled = modelled_pairs(summary, synth.params)
    assert modelled is not None and modelled.model.rank == 6
    fitted = fitted_correlation(synth.result_)
    assert np.abs(fitted - real)[upper].mean() / np.abs(real[upper]).mean() < 0.4
    weights = synth.result_.weights / synth.result_.weights.sum()
    distances = [
        wasserstein_distance(column / 3.0, synth.result_.candidates[:, j], None, weights)
        for j, column in enumerate(table.values())
    ]
    assert np.mean(distances) < 0.009
