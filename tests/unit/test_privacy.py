"""Accountant composition and the noise samplers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpsmooth_spark.privacy.accountant import PrivacyAccountant, epsilon_for, rho_for
from dpsmooth_spark.privacy.noise import NoiseSource


def test_pure_composition_sums_and_refuses_overspend():
    acc = PrivacyAccountant(1.0)
    acc.charge("a", 1.0, acc.noise_scale(1.0, acc.share(0.25)))
    acc.charge("b", 10.0, acc.noise_scale(10.0, acc.share(0.75), invocations=5), invocations=5)
    assert acc.spent_epsilon() == pytest.approx(1.0)
    with pytest.raises(RuntimeError):
        acc.charge("c", 1.0, 100.0)
    assert len(acc.charges) == 2


def test_zcdp_conversion_round_trip():
    for eps, delta in [(0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-9)]:
        assert epsilon_for(rho_for(eps, delta), delta) == pytest.approx(eps)


def test_gaussian_mode_spends_exactly_the_budget():
    acc = PrivacyAccountant(1.0, 1e-6)
    acc.charge("count", 1.0, acc.noise_scale(1.0, acc.share(0.1)))
    acc.charge("sums", 7.0, acc.noise_scale(7.0, acc.share(0.9)))
    assert acc.spent_epsilon() == pytest.approx(1.0)
    assert acc.to_dict()["rho_spent"] == pytest.approx(rho_for(1.0, 1e-6))


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_bad_epsilon(bad):
    with pytest.raises(ValueError):
        PrivacyAccountant(bad)


def test_seeded_laplace_has_the_requested_distribution():
    # Seeded: deterministic. KS at 1e-4 would fail with probability 1e-4 for a fresh seed.
    source = NoiseSource(np.random.default_rng(3))
    draws = source.laplace(np.zeros(20_000), 2.5)
    assert stats.kstest(draws, stats.laplace(scale=2.5).cdf).pvalue > 1e-4


def test_opendp_samplers_have_the_requested_scale():
    # OpenDP draws from OS entropy and cannot be seeded. With 20k draws the sample std is within
    # 5% of the truth except with probability < 1e-6 (normal approximation; Laplace kurtosis 6:
    # sd of the std estimate ~ sqrt(5/4)/sqrt(n) ~ 0.8%, 5% is > 6 sd), so false failures ~1e-9.
    source = NoiseSource()
    assert source.secure
    lap = source.laplace(np.zeros(20_000), 2.0)
    assert np.std(lap) == pytest.approx(2.0 * math.sqrt(2), rel=0.05)
    gauss = source.gaussian(np.full(20_000, 3.0), 1.5)
    assert np.mean(gauss) == pytest.approx(3.0, abs=0.1)
    assert np.std(gauss) == pytest.approx(1.5, rel=0.05)


def test_noise_rejects_non_finite_input():
    with pytest.raises(ValueError):
        NoiseSource().laplace(np.array([np.nan]), 1.0)


@pytest.mark.parametrize("delta", [0.0, 1e-6], ids=["pure", "zcdp"])
def test_selection_charge_is_what_opendp_states(delta):
    """The accountant's scale and charge for noisy top-k match the privacy map of OpenDP's
    ``make_noisy_top_k`` (scores that may move either way, L-infinity sensitivity 1)."""
    from dpsmooth_spark.privacy.noise import top_k_measurement

    accountant = PrivacyAccountant(2.0, delta)
    budget = accountant.share(0.25)
    scale = accountant.selection_scale(1.0, budget, 7)
    entry = accountant.charge_selection("pair_selection", 1.0, scale, 7)
    stated = top_k_measurement(7, scale, accountant.pure).map(1.0)
    spent = entry.epsilon if accountant.pure else entry.rho
    assert spent == pytest.approx(stated, rel=1e-9)
    assert spent == pytest.approx(budget, rel=1e-9)


@pytest.mark.parametrize(
    "pure, expected",
    [(True, 1.0 - np.exp(-1.0) / 2.0), (False, np.e / (1.0 + np.e))],
    ids=["permute_and_flip", "exponential_mechanism"],
)
def test_seeded_top_k_picks_as_often_as_opendp(pure, expected):
    """Of two scores one noise scale apart, noisy top-1 picks the larger with probability
    ``1 - e^-1 / 2 = 0.816`` under permute-and-flip (report-noisy-max with exponential noise,
    what OpenDP runs under pure epsilon-DP) and ``e / (1 + e) = 0.731`` under the exponential
    mechanism (Gumbel noise, its zCDP form). The seeded and the secure sampler each match it over
    4000 draws (standard error 0.006-0.007; the bound 0.03 is over 4 of them, a false failure
    below 1e-4 per check)."""
    scores = np.array([0.0, 1.0])
    seeded = NoiseSource(np.random.default_rng(7))
    assert np.mean([seeded.top_k(scores, 1, 1.0, pure)[0] for _ in range(4000)]) == pytest.approx(
        expected, abs=0.03
    )
    secure = NoiseSource()
    assert np.mean([secure.top_k(scores, 1, 1.0, pure)[0] for _ in range(4000)]) == pytest.approx(
        expected, abs=0.03
    )


def test_secure_top_k_picks_clear_winners_and_refuses_bad_input():
    """OpenDP's top-k returns k distinct indices, the clearly largest scores when the noise is
    small (scale 1 against gaps of 1000: a swap has probability below 1e-100)."""
    scores = np.array([0.0, 5000.0, 1000.0, 3000.0, 2000.0])
    chosen = NoiseSource().top_k(scores, 3, 1.0, pure=True)
    assert sorted(chosen.tolist()) == [1, 3, 4]
    assert sorted(
        NoiseSource(np.random.default_rng(0)).top_k(scores, 3, 1.0, pure=True).tolist()
    ) == [1, 3, 4]
    with pytest.raises(ValueError, match="non-finite"):
        NoiseSource().top_k(np.array([1.0, np.nan]), 1, 1.0, pure=True)
    with pytest.raises(ValueError, match="cannot select"):
        NoiseSource().top_k(scores, 6, 1.0, pure=True)
