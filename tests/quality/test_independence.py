"""Release quality, seeded: what the measurements cannot tell from noise stays independent,
and the paper's query error holds.

Every release here is seeded (test mode), so each assertion is deterministic: it fails only when
the code changes. The false-failure rate a test states is measured over the other seeds it
names (0 where every seed tried passes with the stated margin).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.evaluation.queries import PAPER_SIGMAS, PAPER_WDBC_EPS1, GaussianMixtureQueries
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams, sample_scaled
from tests.unit.synthesizer_tables import (
    fitted_correlation,
    wdbc_scaled,
    worst_relative,
)

pytestmark = pytest.mark.quality


def test_independent_columns_stay_independent(rng):
    """No invented structure: on a table of independent columns (2000 rows, epsilon 1, where
    ``auto`` measures every pair with noise 0.028 of the normalised answer) the synthetic
    table's largest correlation over its 15 pairs is below 0.1 on the median of 5 seeds. Over
    24 seeds of this table it exceeded 0.1 on 3 (0.11, 0.14, and 0.58 where one pair answer's
    Laplace draw is 9 noise deviations), median 0.03; at that per-seed rate a correct mechanism
    fails this test (3 of 5 seeds above) with probability about 0.02 over seeds; seeded."""
    n, d = 2000, 6
    data = np.column_stack(
        [
            rng.uniform(0, 1, n),
            rng.beta(2, 5, n),
            rng.normal(0.5, 0.1, n),
            rng.exponential(0.2, n),
            rng.uniform(0, 1, n),
            rng.beta(5, 1, n),
        ]
    )
    bounds = {f"c{i}": (0.0, 1.0) if i != 3 else (0.0, 2.0) for i in range(d)}
    largest = []
    for seed in range(5):
        synth = ArraySynthesizer(1.0, bounds, random_state=seed).fit(
            {c: np.clip(data[:, i], *bounds[c]) for i, c in enumerate(bounds)}
        )
        assert synth.result_.summary.factor_pairs is not None  # the pairs are measured
        out = synth.sample(n)
        corr = np.corrcoef(np.column_stack([out[c] for c in bounds]).T)
        largest.append(np.abs(corr[np.triu_indices(d, 1)]).max())
    assert np.median(largest) < 0.1, largest


def test_wdbc_beats_the_papers_worst_case_relative_error(wdbc_table, wdbc_bounds):
    """Acceptance: the paper's protocol on WDBC, epsilon = 1, 10^4 queries, mean of 5 releases."""
    real = wdbc_scaled(wdbc_table, wdbc_bounds)[:, :30]
    queries = GaussianMixtureQueries.draw(30, 10_000, np.random.default_rng(2016))
    truth = queries.answers(real, PAPER_SIGMAS)
    worst = []
    for seed in range(5):
        synth = ArraySynthesizer(1.0, wdbc_bounds, random_state=seed).fit(wdbc_table)
        rows = sample_scaled(synth.result_, 569, synth.sampling_rng_)
        worst.append(worst_relative(truth, rows[:, :30], queries, PAPER_SIGMAS))
    mean_worst = np.mean(worst, axis=0)
    paper = np.array([PAPER_WDBC_EPS1["worst_rel"][s] for s in PAPER_SIGMAS])
    assert np.all(mean_worst <= paper), dict(zip(PAPER_SIGMAS, mean_worst, strict=False))


def test_a_tiny_noisy_release_invents_no_relation():
    """150 rows, epsilon 0.1 (iris's regime): nothing is measurable, so the fitted distribution
    must be the independent-columns prior. Its correlation error stays within 5% of a table of
    independent columns (mean |corr|) in each of 10 seeded releases; before the measured answers
    were clipped to their range and the count pooled, 4 of 10 releases invented relations
    (ratio up to 1.34 on iris)."""
    rng = np.random.default_rng(11)
    cov = 0.6 * np.ones((4, 4)) + 0.4 * np.eye(4)
    x = rng.multivariate_normal(np.zeros(4), cov, 150)
    label = (x[:, 0] + rng.normal(0, 0.5, 150) > 0).astype(float)
    data = {**{f"c{i}": np.clip(x[:, i], -3, 3) for i in range(4)}, "label": label}
    bounds = {**{f"c{i}": (-3.0, 3.0) for i in range(4)}, "label": (0.0, 1.0)}
    real = np.corrcoef(np.column_stack(list(data.values())).T)[np.triu_indices(5, 1)]
    for seed in range(10):
        synth = ArraySynthesizer(
            0.1, bounds, params=SynthesizerParams(pair_columns=("label",)), random_state=seed
        ).fit(data)
        corr = fitted_correlation(synth.result_)
        ratio = np.abs(corr[np.triu_indices(5, 1)] - real).mean() / np.abs(real).mean()
        assert ratio <= 1.05, (seed, ratio)


def test_a_boolean_column_does_not_pull_the_fit_off_its_prior():
    """40 independent Beta(2, 5) columns and a 0/1 column, 1000 rows, epsilon 0.1: only the
    one-way histograms are measured, and the candidates are drawn from their denoised marginals,
    so the fit must stay near the prior. The boolean's candidates sit in its two end cells while
    its noisy histogram has mass in the middle two; when its slack was read off its shrunk
    marginal (spread over all four cells) instead of the candidates, the fit chased the middle
    cells' noise: at seed 4 it kept 7% of the candidates and its mean |corr| was 0.020 (0.006 at
    the other seeds; on digits at 0.1, 0.037 at seed 0). Now every seed of 0-7 keeps at least
    85% (the continuous columns' candidates miss their marginals' chi-square by 1-3%) and
    0.006. Deterministic given the seeds; the thresholds (50%, 0.01) sit between the two."""
    rng = np.random.default_rng(5)
    n, k = 1000, 40
    columns = {f"x{j}": rng.beta(2, 5, n) for j in range(k)} | {
        "y": rng.integers(0, 2, n).astype(float)
    }
    bounds = {f"x{j}": (0.0, 1.0) for j in range(k)} | {"y": (0.0, 1.0)}
    upper = np.triu_indices(k + 1, 1)
    for seed in range(8):
        result = (
            ArraySynthesizer(0.1, bounds, levels={"y": 2}, random_state=seed).fit(columns).result_
        )
        assert result.functions == (k + 1) * result.summary.histograms.shape[1]  # histograms alone
        assert result.support_size >= 0.5 * result.candidates.shape[0], (seed, result.support_size)
        assert np.abs(fitted_correlation(result)[upper]).mean() < 0.01, seed


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_columns_no_measurement_relates_come_out_uncorrelated(seed):
    """8 skewed independent columns, 1000 rows, epsilon 0.2: only the marginals are measured, so
    no two columns are related. The fit alone leaves the candidates' own correlation (largest
    0.011-0.027 over seeds 0-2); with ``unrelated_independent`` the fitted distribution's is
    below 1e-4 with every mean and variance as the fit had them, and the sample's mean |corr|
    is at most half the fit's alone (0.0013-0.0016 against 0.0049-0.0066). Seeded; all three
    seeds are checked, none was left out."""
    rng = np.random.default_rng(5)
    names = [f"c{i}" for i in range(8)]
    table = {c: rng.beta(2, 5, 1000) for c in names}
    bounds = {c: (0.0, 1.0) for c in names}
    upper = np.triu_indices(8, 1)
    runs = {}
    for flag in (True, False):
        synth = ArraySynthesizer(
            0.2, bounds, params=SynthesizerParams(unrelated_independent=flag), random_state=seed
        ).fit(table)
        assert not synth.result_.summary.covered_pairs()[upper].any()
        out = synth.sample(1000)
        sample = np.corrcoef(np.column_stack([out[c] for c in names]).T)[upper]
        u = synth.result_.weights
        runs[flag] = (np.cov(synth.result_.candidates.T, aweights=u), np.abs(sample).mean())
    (matched, matched_sample), (fitted, fitted_sample) = runs[True], runs[False]

    def as_corr(cov):
        return (cov / np.sqrt(np.outer(np.diag(cov), np.diag(cov))))[upper]

    assert np.abs(as_corr(matched)).max() < 1e-4
    assert np.abs(as_corr(fitted)).max() > 5e-3  # what the step removes
    np.testing.assert_allclose(np.diag(matched), np.diag(fitted), rtol=1e-4)
    assert matched_sample <= 0.5 * fitted_sample, (matched_sample, fitted_sample)
