"""The measured pairs' low-rank model (core/low_rank.py): it keeps factors, drops noise, fills
unmeasured pairs, and invents nothing where there is no structure.

Each test draws seeded Gaussian noise on the pairs of a known correlation matrix. The margins are
set from 200 seeds of each case (the worst seed's number is in each docstring): a new seed
fails at a rate below 1 in 200.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.core.low_rank import low_rank_covariance

D = 60
SIGMA = 0.08


def block_correlation(seed: int, blocks: int = 6) -> np.ndarray:
    """``D`` columns in ``blocks`` blocks, each loading on one factor (loadings 0.59-0.95,
    within-block correlations 0.35-0.9), none across blocks."""
    rng = np.random.default_rng(seed)
    width = D // blocks
    loadings = np.zeros((D, blocks))
    for b in range(blocks):
        loadings[b * width : (b + 1) * width, b] = rng.uniform(np.sqrt(0.35), np.sqrt(0.9), width)
    truth = loadings @ loadings.T
    np.fill_diagonal(truth, 1.0)
    return truth


def noisy_pairs(
    truth: np.ndarray, seed: int, share: float = 1.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``share`` of the pairs (at random), each with Gaussian noise of std ``SIGMA``."""
    rng = np.random.default_rng(1000 + seed)
    upper = np.column_stack(np.triu_indices(truth.shape[0], 1))
    pairs = upper[rng.random(len(upper)) < share]
    rho = truth[pairs[:, 0], pairs[:, 1]] + rng.normal(0.0, SIGMA, len(pairs))
    return pairs, rho, np.full(len(pairs), SIGMA)


def pair_error(matrix: np.ndarray, truth: np.ndarray, pairs: np.ndarray) -> float:
    return float(np.abs(matrix[pairs[:, 0], pairs[:, 1]] - truth[pairs[:, 0], pairs[:, 1]]).mean())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_pair_measured_the_model_keeps_the_factors_and_drops_the_noise(seed):
    """All 1,770 pairs measured: the rank is the six factors (in each of 200 seeds), and the
    mean error over the pairs is under 0.15 of the measured pairs' (worst of 200 seeds: 0.092);
    the pairs across blocks are off zero by 0.005 on average (worst: 0.0013)."""
    truth = block_correlation(seed)
    pairs, rho, std = noisy_pairs(truth, seed)
    model = low_rank_covariance(np.ones(D), pairs, rho, std)
    assert model.rank == 6
    measured_error = float(np.abs(rho - truth[pairs[:, 0], pairs[:, 1]]).mean())
    assert pair_error(model.matrix, truth, pairs) < 0.15 * measured_error
    across = truth[pairs[:, 0], pairs[:, 1]] == 0
    assert np.abs(model.matrix[pairs[across, 0], pairs[across, 1]]).mean() < 0.005
    assert np.allclose(np.diag(model.matrix), 1.0)
    assert np.linalg.eigvalsh(model.matrix).min() > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_half_the_pairs_measured_the_model_fills_the_others(seed):
    """Half of the pairs measured at random: the unmeasured pairs within blocks come back with a
    mean error under 0.3 of their mean correlation (worst of 200 seeds: 0.21); the maximum-entropy
    completion, which has no model of the blocks, leaves most of them near zero."""
    truth = block_correlation(seed)
    pairs, rho, std = noisy_pairs(truth, seed, share=0.5)
    model = low_rank_covariance(np.ones(D), pairs, rho, std)
    unmeasured = np.ones((D, D), dtype=bool)
    unmeasured[pairs[:, 0], pairs[:, 1]] = unmeasured[pairs[:, 1], pairs[:, 0]] = False
    upper = np.triu(unmeasured & (truth != 0), 1)
    error = np.abs(model.matrix - truth)[upper].mean()
    assert error < 0.3 * np.abs(truth[upper]).mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_structure_the_model_is_independence(seed):
    """No relation at all: at most one component (the noise's largest, in a few of 200 seeds)
    and the pairs off zero by under 0.01 on average (worst of 200 seeds: 0.0042), where the
    measured pairs are off by 0.064; at most 2 of 1,770 pairs keep a measured value beyond
    ``MISS_DEVIATIONS`` (4 sigma; worst of 200 seeds: 2)."""
    truth = np.eye(D)
    pairs, rho, std = noisy_pairs(truth, seed)
    model = low_rank_covariance(np.ones(D), pairs, rho, std)
    assert model.rank <= 1
    upper = np.triu_indices(D, 1)
    assert np.abs(model.matrix[upper]).mean() < 0.01
    assert np.triu(model.kept, 1).sum() <= 2


def test_a_strong_pair_outside_the_factors_keeps_its_measured_value():
    """Two columns of different blocks share a relation of their own (0.8, where the factors
    imply 0): the model misses it by more than 4 sigma, so it keeps its measured value and noise
    (in each of 200 seeds)."""
    truth = block_correlation(0)
    truth[0, D - 1] = truth[D - 1, 0] = 0.8
    pairs, rho, std = noisy_pairs(truth, 0)
    model = low_rank_covariance(np.ones(D), pairs, rho, std)
    assert model.kept[0, D - 1] and model.noise_ratio[0, D - 1] == 1.0
    assert model.kept.sum() <= 4  # the pair, both ways, and at most one more


def test_no_measured_pair_is_independence():
    model = low_rank_covariance(np.ones(4), np.zeros((0, 2)), np.zeros(0), np.zeros(0))
    assert model.rank == 0 and np.array_equal(model.matrix, np.eye(4))


def test_auto_reads_the_pairs_through_the_model_only_on_wide_tables():
    """``pair_denoise: auto`` leaves a table of fewer than 50 columns as measured; ``on`` uses
    the model on any table whose pairs on spread factors are measured, ``off`` never."""
    from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams
    from dpsmooth_spark.mechanisms.synthesizer.summary import modelled_pairs

    rng = np.random.default_rng(0)
    factor = rng.normal(size=4000)
    table = {f"x{j}": np.clip(factor + rng.normal(size=4000), -4, 4) for j in range(8)}
    bounds = {c: (-4.0, 4.0) for c in table}
    found = {}
    for mode in ("auto", "on", "off"):
        params = SynthesizerParams(pair_denoise=mode, fit="lp", candidates=200)
        synth = ArraySynthesizer(5.0, bounds, delta=1e-6, params=params, random_state=0)
        summary = synth.fit(table).result_.summary
        assert summary.factor_pairs is not None and summary.factor_pairs.size == 28
        found[mode] = modelled_pairs(summary, params)
    assert found["auto"] is None and found["off"] is None
    assert found["on"] is not None and found["on"].model.rank == 1
