"""A new kind of statistic is one record, one codec and one fit reader: nothing else changes."""

import json
from dataclasses import replace

import numpy as np
import pytest

from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.core.chebyshev import HistogramBasis, coarsen_histograms
from dpsmooth_spark.core.kernel import PassSpec, partial_sums
from dpsmooth_spark.mechanisms.stages import noise_std, release_basis_sums, release_histograms
from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams, fit_from_summary, summary
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource


class ColumnMean:
    """The toy query: the mean of one scaled column."""

    def __init__(self, column: int) -> None:
        self.column = column

    def evaluate(self, points: np.ndarray) -> np.ndarray:
        return np.atleast_2d(points)[:, self.column][None, :]


def test_a_toy_measurement_kind_runs_end_to_end(monkeypatch):
    """Plan, release, persist, reload, fit: the fitted mean of column 0 follows the toy's noisy
    answer (0.75, the data's; its two-cell histogram alone says 0.5)."""
    codec = (ColumnMean, lambda q: {"column": q.column}, lambda s: ColumnMean(int(s["column"])))
    monkeypatch.setitem(summary.QUERY_CODECS, "column_mean", codec)

    def read(released, s):  # the toy's answers as a measurement the fit matches
        n = max(released.noisy_count, 1.0)
        groups, tolerance = np.zeros(1, np.int64), np.ones(1)
        return [
            summary.Measurement("toy", s.query, s.values / n, s.noise_std / n, groups, tolerance)
        ]

    monkeypatch.setitem(summary.FIT_READERS, "column_mean", read)
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.uniform(0.5, 1.0, 20_000), rng.uniform(-1, 1, 20_000)])
    sums = partial_sums([x], -np.ones(2), np.ones(2), PassSpec(1, histogram_cells=4))
    plan = {"histograms": 0.02, "column_mean": 0.98}  # shares of epsilon = 1
    accountant, noise = PrivacyAccountant(1.0), NoiseSource(np.random.default_rng(1))
    counts = coarsen_histograms(sums.histograms, 2)  # two cells: too coarse to show the mean
    hist, scale = release_histograms(
        counts, accountant.share(plan["histograms"]), accountant, noise
    )
    exact = np.array([float(sums.real_gram()[0, 1])])  # sum of column 0's scaled values
    toy, toy_scale = release_basis_sums(exact, plan["column_mean"], accountant, noise, "toy_mean")
    released = summary.NoisySummary(
        PublicBounds.from_mapping({"a": (-1.0, 1.0), "b": (-1.0, 1.0)}),
        20_000.0,
        (
            summary.NoisyStatistic(
                "histograms", "histograms", HistogramBasis(2, 2), hist, noise_std(scale, accountant)
            ),
            summary.NoisyStatistic(
                "column_mean",
                "toy_mean",
                ColumnMean(0),
                toy,
                noise_std(toy_scale, accountant),
                (0,),
            ),
        ),
    )
    again = summary.NoisySummary.from_dict(json.loads(json.dumps(released.to_dict())))
    assert [s.kind for s in again.statistics] == ["histograms", "column_mean"]
    assert [m.name for m in summary.measurements(again)] == ["histograms", "toy"]
    means = []
    for found in (again, replace(again, statistics=again.statistics[:1])):  # with, without toy
        fit = fit_from_summary(found, SynthesizerParams(candidates=3000), np.random.default_rng(2))
        means.append(fit.weights @ fit.candidates[:, 0])
    assert abs(means[0] - 0.75) < 0.03 and abs(means[1] - 0.5) < 0.03, means


def test_a_query_without_a_codec_is_a_clear_error():
    record = summary.NoisyStatistic("toy", "toy", ColumnMean(0), np.zeros(1), 1.0)
    with pytest.raises(ValueError, match="register one in QUERY_CODECS"):
        record.to_dict()
