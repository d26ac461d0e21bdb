"""The adaptive mechanism's loop (mechanisms/adaptive.py): budget, noise audit, what it picks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from dpsmooth_spark import Synthesizer
from dpsmooth_spark.mechanisms import adaptive, loop_tables
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.noise import NoiseSource

SIZES = (4, 3, 5, 2)


def _table(n: int, seed: int) -> np.ndarray:
    """Column 1 follows column 0 closely; 2 and 3 are on their own."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = np.where(rng.random(n) < 0.9, a % 3, rng.integers(0, 3, n))
    return np.column_stack([a, b, rng.integers(0, 5, n), rng.integers(0, 2, n)])


def _answers(codes: np.ndarray, sizes: tuple[int, ...] = SIZES):
    def answer(scope):
        index = np.ravel_multi_index(tuple(codes[:, v] for v in scope), [sizes[v] for v in scope])
        return np.bincount(index, minlength=int(np.prod([sizes[v] for v in scope]))).astype(float)

    return answer


def _tables(answer) -> loop_tables.Tables:
    return loop_tables.Tables(SIZES, answer, 3)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_the_loop_spends_exactly_its_budget(delta: float) -> None:
    accountant = PrivacyAccountant(1.0, delta)
    rng = np.random.default_rng(0)
    result = adaptive.run_loop(_tables(_answers(_table(5_000, 0))), accountant, NoiseSource(rng))
    if delta == 0:
        assert accountant.spent_epsilon() == pytest.approx(1.0, rel=1e-9)
    else:
        spent = sum(c.rho for c in accountant.charges)
        assert spent == pytest.approx(accountant.total_rho, rel=1e-9)
    assert len(result.measurements) == len(SIZES) + len(result.selected)
    stages = {c.stage.split(".")[1] for c in accountant.charges}
    assert stages == {"marginal", "select"}


def _spend(accountant: PrivacyAccountant) -> dict[int, float]:
    """Epsilon per round (round 0: the first)."""
    out: dict[int, float] = {}
    for c in accountant.charges:
        out[int(c.stage.split(".")[-1])] = out.get(int(c.stage.split(".")[-1]), 0.0) + c.epsilon
    return out


class _GivingTables(loop_tables.Tables):
    """Tables that give a short loop's low picks to the first round (as a release of persons)."""

    keeps_low_picks = False


def test_below_the_signal_rounds_pair_up_and_a_short_loop_keeps_or_gives_its_pick() -> None:
    """The first table's noisy total decides (seeded; the margins are wide): 2,000 rows at
    epsilon 0.1 put a median pair (12 cells) at about 0.7 counts per cell per noise sd of one
    round, under MIN_SIGNAL's 2, so the four later rounds of 2 d = 8 pair up (twice the budget
    each; annealing may double it again); with rounds = 6 only one paired round is left, which
    a table of records keeps and tables that give it (a release of persons) spend on the first
    round, and a pick takes LOW_SELECTION_SHARE of its round. 20,000 rows at epsilon 2 (about
    80) leave the rounds and the pick's SELECTION_SHARE as they are."""
    cases = ((2_000, 0.1, None, True), (2_000, 0.1, 6, True), (2_000, 0.1, 6, False))
    for n, epsilon, rounds, keeps in (*cases, (20_000, 2.0, None, True)):
        accountant = PrivacyAccountant(epsilon)
        kind = loop_tables.Tables if keeps else _GivingTables
        result = adaptive.run_loop(
            kind(SIZES, _answers(_table(n, 2)), 3),
            accountant,
            NoiseSource(np.random.default_rng(3)),
            adaptive.LoopSettings(rounds=rounds),
        )
        spend = _spend(accountant)
        assert sum(spend.values()) == pytest.approx(epsilon, rel=1e-9)
        if rounds == 6 and not keeps:  # one round: the whole budget on the one-way marginals
            assert result.selected == [] and spend == {0: pytest.approx(epsilon, rel=1e-9)}
        elif rounds == 6:  # the first round's 4 of 6 rounds, then one pick with the rest
            assert len(result.selected) == 1
            assert spend[0] == pytest.approx(epsilon * 4 / 6)
        elif n == 2_000:  # the first later round has twice one round's budget
            assert spend[0] == pytest.approx(epsilon / 2)
            assert spend[1] >= 2 * epsilon / 8 * (1 - 1e-9)
            assert _pick(accountant, 1) == pytest.approx(adaptive.LOW_SELECTION_SHARE * spend[1])
        else:
            assert spend[0] == pytest.approx(epsilon / 2)
            assert spend[1] == pytest.approx(epsilon / 8)
            assert _pick(accountant, 1) == pytest.approx(adaptive.SELECTION_SHARE * spend[1])


def _pick(accountant: PrivacyAccountant, round_: int) -> float:
    """Epsilon the pick of ``round_`` spent."""
    return sum(c.epsilon for c in accountant.charges if c.stage == f"adaptive.select.{round_}")


@pytest.mark.parametrize(("n", "epsilon", "times"), [(5_000, 0.1, 2), (20_000, 10.0, 1)])
def test_an_unclear_first_total_measures_the_first_table_again(
    n: int, epsilon: float, times: int
) -> None:
    """A label of 2 cells before eight columns of 16 gets 4.2% of the first round (half the
    budget at 2 d rounds). At epsilon 0.1 its total's noise sd (about 950) is a fifth of the
    5,000 rows, short of TOTAL_CLEAR's tenth, so the label is measured again at FIRST_SHARE of
    the round (Laplace sd sqrt 2 / (0.05 epsilon / 2)); at 10 it is under 10 rows of 20,000, and
    the label is measured once. Seeded; the margins are wide."""
    sizes = (2,) + (16,) * 8
    rng = np.random.default_rng(5)
    codes = np.column_stack([rng.integers(0, s, n) for s in sizes])
    accountant = PrivacyAccountant(epsilon)
    result = adaptive.run_loop(
        loop_tables.Tables(sizes, _answers(codes, sizes), 2),
        accountant,
        NoiseSource(np.random.default_rng(3)),
    )
    label = [m for m in result.measurements if m.round == 0 and m.scope == (0,)]
    assert len(label) == times
    if times == 2:
        assert label[1].std == pytest.approx(np.sqrt(2.0) / (0.05 * epsilon / 2))
    assert accountant.spent_epsilon() == pytest.approx(epsilon, rel=1e-9)


def test_it_picks_the_related_pair_and_keeps_the_rest_independent() -> None:
    """At epsilon 2 on 20,000 rows the related pair's error (about 0.9 of its mass) towers over
    every other candidate's score; seeded, so it never fails by chance."""
    codes = _table(20_000, 1)
    accountant = PrivacyAccountant(2.0)
    result = adaptive.run_loop(
        _tables(_answers(codes)), accountant, NoiseSource(np.random.default_rng(1))
    )
    assert any({0, 1} <= set(s) for s in result.selected)
    exact = _answers(codes)((0, 1)) / len(codes)
    assert np.abs(result.model.marginal((0, 1)) - exact).sum() < 0.05
    unrelated = result.model.marginal((2, 3)).reshape(5, 2)
    product = np.outer(unrelated.sum(axis=1), unrelated.sum(axis=0))
    assert np.abs(unrelated - product).sum() < 0.05


def test_measurement_noise_has_its_stated_spread() -> None:
    """Audit: over many seeded releases, (noisy - exact) / stated std has variance 1. With 2,000
    residuals the sample variance's standard error is about 0.05 (Laplace: kurtosis 6), so
    [0.8, 1.25] (-4 and +5 standard errors) has a false-failure rate below 1e-4; a mechanism
    drawing half the noise it states gives 0.25 and fails."""
    codes = _table(2_000, 2)
    answer = _answers(codes)
    residuals = []
    for seed in range(100):
        result = adaptive.run_loop(
            _tables(answer), PrivacyAccountant(1.0), NoiseSource(np.random.default_rng(seed))
        )
        for m in result.measurements:
            residuals.append((m.values - answer(m.scope)) / m.std)
        if sum(r.size for r in residuals) >= 2_000:
            break
    z = np.concatenate(residuals)[:2_000]
    assert z.size == 2_000
    assert 0.8 < np.var(z) < 1.25


def test_noise_scales_with_the_units_rows() -> None:
    codes = _table(2_000, 3)
    stds = []
    for rows in (1, 4):
        accountant = PrivacyAccountant(1.0, unit_rows=rows)
        result = adaptive.run_loop(
            _tables(_answers(codes)), accountant, NoiseSource(np.random.default_rng(0))
        )
        stds.append(result.measurements[0].std)
    assert stds[1] == pytest.approx(4 * stds[0])


def test_the_library_releases_a_table_of_the_inputs_types() -> None:
    rng = np.random.default_rng(4)
    n = 3_000
    frame = pd.DataFrame(
        {
            "kind": rng.choice(["a", "b", "c"], n),
            "age": rng.integers(18, 90, n),
            "score": np.where(rng.random(n) < 0.2, np.nan, rng.uniform(0, 10, n)),
        }
    )
    columns = [
        {"name": "kind", "values": ["a", "b", "c"]},
        {"name": "age", "lower": 18, "upper": 90},
        {"name": "score", "lower": 0.0, "upper": 10.0, "nullable": True},
    ]
    synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=0)
    out = synth.fit(frame).sample(2_000)
    assert list(out.columns) == ["kind", "age", "score"]
    assert set(out["kind"]) <= {"a", "b", "c"}
    assert out["age"].between(18, 90).all() and out["age"].dtype == np.int64
    # nulls at about their rate: 0.2 +- 0.05 is over five standard deviations of 2,000 draws
    # plus the noise of a 3,000-row release at epsilon 1 (seeded)
    assert 0.15 < out["score"].isna().mean() < 0.25


def test_the_array_synthesizer_runs_the_loop_on_numeric_columns() -> None:
    from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams

    rng = np.random.default_rng(5)
    x = rng.uniform(0, 10, 2_000)
    table = {"x": x, "y": x + rng.normal(0, 1, x.size), "label": (x > 5).astype(float)}
    bounds = {"x": (0.0, 10.0), "y": (-5.0, 15.0), "label": (0.0, 1.0)}
    synth = ArraySynthesizer(
        1.0,
        bounds,
        params=SynthesizerParams(method="adaptive"),
        levels={"label": 2},
        random_state=0,
    ).fit(table)
    out = synth.sample(1_000)
    assert set(np.unique(out["label"])) <= {0.0, 1.0}
    assert (out["y"] >= -5.0).all() and (out["y"] <= 15.0).all()
    assert synth.accountant_.spent_epsilon() == pytest.approx(1.0)


def test_persisted_measurements_give_back_the_same_model() -> None:
    """A retry re-fits the ledger's measurements round by round, as the loop warm-started them:
    every marginal of the model comes back to the last bit."""
    codes = _table(5_000, 6)
    result = adaptive.run_loop(
        _tables(_answers(codes)), PrivacyAccountant(1.0), NoiseSource(np.random.default_rng(6))
    )
    again = adaptive.LoopResult.from_dict(
        result.to_dict(), SIZES, adaptive.LoopSettings().iterations
    )
    assert again.total == result.total
    for scope in [(0,), (0, 1), (1, 2, 3), (0, 3)]:
        np.testing.assert_array_equal(again.model.marginal(scope), result.model.marginal(scope))


def test_a_point_mass_on_a_bound_comes_back_and_none_is_invented() -> None:
    """20,000 rows: ``rain`` 0 (its lower bound) on a fifth of them, ``x`` never on its bounds.
    At epsilon 1 the release puts 0.20 +- 0.02 of ``rain`` on 0 (its noisy bound count's sd is
    about 0.001 of the rows) and a share of 0 of ``x`` on either bound (a release puts rows on
    any bound without values with probability at most 0.05, ``records.BOUND_FALSE_RATE``:
    seeded). The retry's
    replay gives back the same shares. Without the shares (the mutant) ``rain`` has none."""
    from dpsmooth_spark.mechanisms import records

    rng = np.random.default_rng(8)
    rain = np.where(rng.random(20_000) < 0.8, rng.gamma(2.0, 5.0, 20_000), 0.0).clip(0, 100)
    real = pd.DataFrame({"rain": rain, "x": rng.normal(0, 1, 20_000).clip(-5, 5)})
    columns = [
        {"name": "rain", "lower": 0.0, "upper": 100.0},
        {"name": "x", "lower": -6.0, "upper": 6.0},
    ]
    synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=0)
    released = synth.fit(real).sample(20_000)
    assert abs(float((released["rain"] == 0.0).mean()) - 0.2) < 0.02
    assert not ((released["x"] == -6.0) | (released["x"] == 6.0)).any()
    result = synth.result_
    assert result.on_bounds[1] == (0.0, 0.0)
    coding = records.cell_coding(synth.codec_)
    again = records.replay(result.to_dict(), coding, adaptive.LoopSettings())
    assert again.on_bounds == result.on_bounds


def test_a_bound_share_of_a_nearly_empty_edge_cell_is_the_projection() -> None:
    """The bound's share of its edge cell is ``(bound, rest)`` projected onto the pairs at least
    0 summing to the model's count of the cell, also where that count is far below the noisy
    counts (WDBC at epsilon 0.1: a count of 9e-169 once made the projection divide by zero)."""
    from dpsmooth_spark.mechanisms.records import _share

    assert _share(5695.6, -282.8, 9.1e-169, 3880.8) == 1.0
    assert _share(-282.8, 5695.6, 9.1e-169, -1e4) == 0.0
    assert _share(30.0, 10.0, 30.0, 5.0) == pytest.approx(25.0 / 30.0)
    assert _share(4.0, 10.0, 30.0, 5.0) == 0.0  # below the threshold


def test_a_small_tables_pair_is_read_in_coarser_cells_and_keeps_its_relation() -> None:
    """3,000 rows of six normal columns, ``x`` and ``y`` correlated 0.80, at epsilon 1: a pair of
    16-cell columns would get about 12 rows a cell, below two noise sds (19), and the loop reads
    the pairs in groups of cells too. The release keeps a correlation above 0.55 in each of six
    seeded releases (0.66-0.70); without the coarse tables (the mutant) five of them fall below
    (0.31-0.62). The retry's replay gives back the same groups and model."""
    from dpsmooth_spark.mechanisms import records

    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 1.0, 3000)
    y = 0.8 * x + 0.6 * rng.normal(0.0, 1.0, 3000)
    others = {c: rng.normal(0.0, 1.0, 3000) for c in "abcd"}
    real = pd.DataFrame({"x": x, "y": y, **others}).clip(-4.0, 4.0)
    columns = [{"name": c, "lower": -4.0, "upper": 4.0} for c in real.columns]
    for seed in range(6):
        synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=seed)
        released = synth.fit(real).sample(3000)
        assert released.corr().loc["x", "y"] > 0.55
    result = synth.result_
    assert any(m.kind == records.COARSE for m in result.measurements)
    assert all(len(set(g.tolist())) < 16 for g in result.groups.values())
    again = records.replay(
        result.to_dict(), records.cell_coding(synth.codec_), adaptive.LoopSettings()
    )
    assert again.groups.keys() == result.groups.keys()
    for v, g in result.groups.items():
        np.testing.assert_array_equal(again.groups[v], g)
    np.testing.assert_allclose(again.model.marginal((0, 1)), result.model.marginal((0, 1)))


def test_a_clear_pair_below_a_clear_triple_is_also_read_in_groups() -> None:
    """5,000 rows of eight normal columns in two blocks of four correlated 0.80, at epsilon 10: a
    pair of 16-cell columns clears two noise sds and a triple does not, and the loop also reads
    the columns in 8 groups by coarse triples. The mean within-block correlation of a seeded
    release is above 0.692: twelve releases gave 0.695-0.709 (mean 0.703, sd 0.0035: one fails
    about once in 1,200); without the groups (the mutant) eight gave 0.636-0.683 (mean 0.662,
    sd 0.014: one passes about once in 60)."""
    rng = np.random.default_rng(3)
    cov = np.kron(np.eye(2), np.full((4, 4), 0.8)) + 0.2 * np.eye(8)
    real = pd.DataFrame(rng.multivariate_normal(np.zeros(8), cov, size=5000)).clip(-4.0, 4.0)
    real.columns = [f"g{i}" for i in range(8)]
    columns = [{"name": c, "lower": -4.0, "upper": 4.0} for c in real.columns]
    within = [(i, j) for i in range(8) for j in range(i + 1, 8) if i // 4 == j // 4]
    synth = Synthesizer(columns, 10.0, mechanism={"method": "adaptive"}, random_state=0)
    corr = synth.fit(real).sample(5000).corr().to_numpy()
    assert np.mean([corr[i, j] for i, j in within]) > 0.692


def _two_humps(rng: np.random.Generator) -> tuple[pd.DataFrame, list[dict]]:
    """200 rows of six columns, each half N(3, 1) and half N(7, 1) on bounds [0, 10]."""
    real = pd.DataFrame(
        {
            c: np.where(rng.random(200) < 0.5, rng.normal(3, 1, 200), rng.normal(7, 1, 200))
            for c in "abcdef"
        }
    ).clip(0.0, 10.0)
    return real, [{"name": c, "lower": 0.0, "upper": 10.0} for c in real.columns]


def _two_humps_w1(
    epsilon: float, monkeypatch: pytest.MonkeyPatch, pool: bool = True
) -> tuple[float, list[list[Any]]]:
    """The mean W1 of :func:`_two_humps`'s columns ``b`` to ``f`` over eight seeded releases at
    ``epsilon``, and each release's first-round measurements (without pooling if not ``pool``)."""
    from scipy.stats import wasserstein_distance

    from dpsmooth_spark.mechanisms import records

    if not pool:
        monkeypatch.setattr(records.RecordTables, "join_first", loop_tables.Tables.join_first)
    real, columns = _two_humps(np.random.default_rng(5))
    distances, firsts, replayed = [], [], None
    for seed in range(8):
        synth = Synthesizer(columns, epsilon, mechanism={"method": "adaptive"}, random_state=seed)
        released = synth.fit(real).sample(200)
        distances += [wasserstein_distance(real[c], released[c]) for c in "bcdef"]
        result = synth.result_
        firsts.append([m for m in result.measurements if m.round == 0])
        if replayed is None or any(m.kind == records.POOLED for m in firsts[-1]):
            replayed = result, records.cell_coding(synth.codec_)
    result, coding = replayed
    again = records.replay(result.to_dict(), coding, adaptive.LoopSettings())
    np.testing.assert_allclose(again.model.marginal((1, 2)), result.model.marginal((1, 2)))
    return float(np.mean(distances)), firsts


def test_a_small_tables_one_ways_are_measured_in_runs_of_cells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """:func:`_two_humps` at epsilon 0.3, without pooling: 16 cells would get about 12 rows each
    against 28 of noise, and the one-ways after the first are measured in 4 or 8 equal runs of
    cells (``records.RUN_SIGNAL``). Over eight seeded releases the mean W1 of those five columns
    is below 1.15 (0.95; with 16 cells, the mutant, 1.41: the noise spread their values over the
    bounds). A retry's replay gives back the same model."""
    distance, firsts = _two_humps_w1(0.3, monkeypatch, pool=False)
    for first in firsts:
        sizes = {m.scope[0]: m.values.size for m in first}
        assert sizes[0] == 18 and all(sizes[v] in (6, 10) for v in range(1, 6)), sizes
    assert distance < 1.15, distance


def test_a_small_tables_swamped_one_ways_are_pooled(monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`_two_humps` at epsilon 0.3, whose columns share one shape: where the first table's
    noisy total says even 4 runs would be noise, the other five columns are measured as one
    pooled one-way (``RecordTables.join_first``; five of the eight seeded releases). The mean W1
    of those columns is below 0.85 (0.73; the releases without pooling, the mutant, 0.95), and
    a pooled release's retry (its replay) gives back the same model. Seeded: no false
    failures."""
    distance, firsts = _two_humps_w1(0.3, monkeypatch)
    pooled = [[m.scope for m in first if m.kind == "pooled"] for first in firsts]
    assert sum(p == [(1, 2, 3, 4, 5)] for p in pooled) >= 4, pooled
    assert distance < 0.85, distance


def test_a_point_mass_on_a_bound_of_a_column_in_runs_comes_back() -> None:
    """:func:`_two_humps` with ``f`` 0 (its lower bound) on 37% of the rows, at epsilon 1: ``f``
    is measured in 8 runs, and where its bound's count shows rows (seven of eight seeded
    releases) the edge cell leaves its run and holds them. The releases put 0.38 of ``f`` on 0
    on average (0.29-0.48); with the bound's count added to its run, spread over the run's two
    cells (the mutant), 0.22 (0.14-0.34)."""
    rng = np.random.default_rng(5)
    real, columns = _two_humps(rng)
    real.loc[rng.random(200) < 0.4, "f"] = 0.0
    shares = []
    for seed in range(8):
        synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=seed)
        released = synth.fit(real).sample(200)
        result = synth.result_
        first = {m.scope[0]: m.values.size for m in result.measurements if m.round == 0}
        if first[5] == 10 and result.on_bounds[5][0] > 0.0:
            shares.append(float((released["f"] == 0.0).mean()))
    assert len(shares) >= 6, shares
    assert abs(np.mean(shares) - float((real["f"] == 0.0).mean())) < 0.1, shares


def test_a_short_loop_with_a_grouped_column_keeps_its_pick() -> None:
    """Three columns of 2,000 rows at epsilon 1, ``x`` and ``y`` correlated 0.8: one paired round
    would be left below the signal threshold, and a loop with nothing to read in coarser cells
    gives it to the first round; with continuous columns the pick stays and, a coarse table,
    keeps a correlation above 0.45 in six seeded releases (0.61-0.66; the mutant that gives it
    to the first round releases 0.05 at most)."""
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        x = rng.normal(0.0, 1.0, 2000)
        y = 0.8 * x + 0.6 * rng.normal(0.0, 1.0, 2000)
        real = pd.DataFrame({"x": x, "y": y, "z": rng.normal(0.0, 1.0, 2000)}).clip(-4.0, 4.0)
        columns = [{"name": c, "lower": -4.0, "upper": 4.0} for c in real.columns]
        synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=seed)
        assert synth.fit(real).sample(2000).corr().loc["x", "y"] > 0.45


def test_rounds_pair_up_where_even_a_pair_in_groups_would_be_noise() -> None:
    """Four related columns of 4,000 rows at epsilon 1 (8 rounds): a pair of 16 cells each
    would get about 16 rows a cell against two noise sds of one round (25), and a pair of 8
    groups each 62. Continuous columns, which the later rounds may read in groups, keep one
    round's budget per round; the same cells as 16-level categories pair up (twice the budget).
    The mutant that tests the fine pair pairs up both. Seeded; the margins are wide."""
    rng = np.random.default_rng(0)
    x = rng.random(4000)
    real = pd.DataFrame({f"x{i}": np.clip(x + 0.2 * i * rng.random(4000), 0, 1) for i in range(4)})
    levels = [f"v{i}" for i in range(16)]
    cells = real.apply(lambda v: [levels[int(min(a, 0.999) * 16)] for a in v])
    for table, columns, paired in (
        (real, [{"name": c, "lower": 0.0, "upper": 1.0} for c in real.columns], False),
        (cells, [{"name": c, "values": levels} for c in real.columns], True),
    ):
        synth = Synthesizer(columns, 1.0, mechanism={"method": "adaptive"}, random_state=0)
        spend = _spend(synth.fit(table).accountant_)
        assert spend[0] == pytest.approx(0.5)
        assert spend[1] == pytest.approx(0.25 if paired else 0.125)


def test_a_short_loop_of_categories_keeps_its_pick() -> None:
    """Three 8-level categories of 2,000 rows at epsilon 0.3, ``b`` equal to ``a`` in 0.6 of
    the rows: the one paired round is below the signal threshold, and a table of records keeps
    it, so the release keeps the relation: ``a == b`` in more than 0.5 of its rows in six seeded
    releases (0.63-0.67, the real 0.64); the mutant that gives the pick to the first round
    releases about 0.11, independence."""
    for seed in range(6):
        rng = np.random.default_rng(10 + seed)
        a, z = rng.integers(0, 8, 2000), rng.integers(0, 8, 2000)
        b = np.where(rng.random(2000) < 0.6, a, rng.integers(0, 8, 2000))
        codes = {"a": a, "b": b, "z": z}
        real = pd.DataFrame({c: [f"v{x}" for x in v] for c, v in codes.items()})
        columns = [{"name": c, "values": [f"v{i}" for i in range(8)]} for c in "abz"]
        synth = Synthesizer(columns, 0.3, mechanism={"method": "adaptive"}, random_state=seed)
        released = synth.fit(real).sample(2000)
        assert (released["a"] == released["b"]).mean() > 0.5


def test_groups_are_runs_of_cells_of_even_shares_and_the_null_cell_its_own() -> None:
    """A column's 16 cells with noisy counts (one below 0) and a null cell, in 4 groups: runs of
    adjacent cells numbered in order, each about a quarter of the projected counts, the null
    cell a fifth group; a column whose counts sit in two cells gets at most 2 groups there
    (equal cells of its bounds would put it in one); shares of the counts' square roots put a
    skewed column's tail in groups of its own."""
    from dpsmooth_spark.mechanisms.records import _even_groups

    counts = np.array([50, 60, 40, 50, 45, 55, 50, 50, -5, 50, 50, 50, 50, 50, 50, 50, 30.0])
    groups = _even_groups(counts, 16, 4)
    assert groups[-1] == 4 and np.all(np.diff(groups[:16]) >= 0)
    assert set(groups[:16].tolist()) == {0, 1, 2, 3}
    for g in range(4):
        assert abs(counts[:16][groups[:16] == g].clip(0).sum() / counts[:16].sum() - 0.25) < 0.07
    corner = np.zeros(16)
    corner[:2] = [500.0, 480.0]
    assert _even_groups(corner, 16, 4)[:2].tolist() == [0, 1]
    halving = 1000.0 * 0.5 ** np.arange(16)  # a skewed column: its tail in cells 3 to 15
    assert len(set(_even_groups(halving, 16, 8)[3:].tolist())) == 1
    assert len(set(_even_groups(halving, 16, 8, power=0.5)[3:].tolist())) >= 3


def test_the_first_pick_holds_an_anchor() -> None:
    """Without anchors the first pick is a table of the related pair and column 3 (seeded, so
    it never fails by chance); with column 2 an anchor (``pair_columns``) it is one of 2's."""
    codes = _table(20_000, 1)
    first = {}
    for anchors in ((), (2,)):
        result = adaptive.run_loop(
            _tables(_answers(codes)),
            PrivacyAccountant(2.0),
            NoiseSource(np.random.default_rng(1)),
            adaptive.LoopSettings(anchors=anchors),
        )
        first[anchors] = result.selected[0]
    assert 2 not in first[()]
    assert 2 in first[(2,)] and len(first[(2,)]) > 1


@pytest.mark.parametrize(("rows", "epsilon", "low"), [(20_000, 2.0, False), (200, 0.1, True)])
def test_an_anchors_tables_weigh_more_only_where_the_signal_is_low(
    rows: int, epsilon: float, low: bool
) -> None:
    """With column 2 an anchor, a table of two or three columns that holds it weighs
    ``ANCHOR_WEIGHT`` times its columns where a median pair at half a round is below
    ``MIN_SIGNAL`` (200 rows at 0.1), and its columns alone where pairs are clear (20,000 rows at
    2). The selection's sensitivity, in the ledger, is the largest weight it offers: a triple's 3,
    times the weight at low signal, from round 2 on (round 1 offers only the anchor's tables)."""
    accountant = PrivacyAccountant(epsilon)
    adaptive.run_loop(
        _tables(_answers(_table(rows, 1))),
        accountant,
        NoiseSource(np.random.default_rng(1)),
        adaptive.LoopSettings(anchors=(2,)),
    )
    later = [c.sensitivity for c in accountant.charges if c.stage.startswith("adaptive.select.")]
    assert len(later) >= 2
    assert set(later[1:]) == {3.0 * adaptive.ANCHOR_WEIGHT if low else 3.0}


def test_a_way_too_large_for_the_pass_offers_its_smallest_tables() -> None:
    """30 columns of 16 cells and a 0/1 label (WDBC's shape): every pair fits the pass, the
    triples of 4,096 cells do not, the 435 with the label (512 cells) do. 300 columns of 16
    cells: no pair fits, and only the one-ways are offered."""
    found = loop_tables.candidates([16] * 30 + [2], 3)
    triples = [c for c in found if len(c.scope) == 3]
    assert sum(len(c.scope) == 2 for c in found) == 31 * 30 // 2
    assert len(triples) == 30 * 29 // 2 and all(30 in c.scope for c in triples)
    assert sum(c.cells for c in found) <= loop_tables.MAX_PASS_CELLS
    assert [len(c.scope) for c in loop_tables.candidates([16] * 300, 3)] == [1] * 300


FLAG = {"name": "flag", "values": [0, 1]}


def _released(columns: list, real: pd.DataFrame, epsilon: float) -> tuple[Synthesizer, Any]:
    """A seeded adaptive release of ``real`` (its synthesizer, and as many rows)."""
    synth = Synthesizer(columns, epsilon, mechanism={"method": "adaptive"}, random_state=0)
    return synth, synth.fit(real).sample(len(real))


def test_a_columns_shape_within_its_cells_comes_back_where_the_noise_shows_it() -> None:
    """20,000 rows of a log-normal ``amount`` on bounds [0, 1000]: 96.5% of its values lie in
    the first of its 16 cells (below 62.5), with median 10. At epsilon 10 its shape is measured
    (``records.SHAPE``) and the release's median is within 1 of the real one (a draw even over
    the cell, the mutant without the shape, puts it at 32); the retry's replay gives back the
    same shapes. At epsilon 0.1 a sub-cell's noise would swamp an even share of the rows: no
    shape is measured. Seeded (false-failure rate: over 20 seeds the median was 0.18-0.20 off,
    and none of 5 at 0.1 measured a shape)."""
    from dpsmooth_spark.mechanisms import records

    rng = np.random.default_rng(9)
    amount = np.exp(rng.normal(np.log(10.0), 1.0, 20_000)).clip(0.01, 999.0)
    real = pd.DataFrame({"amount": amount, "flag": rng.integers(0, 2, 20_000)})
    columns = [{"name": "amount", "lower": 0.0, "upper": 1000.0}, FLAG]
    synth, released = _released(columns, real, 10.0)
    assert abs(float(np.median(released["amount"])) - float(np.median(amount))) < 1.0
    result = synth.result_
    assert [m.kind for m in result.measurements].count(records.SHAPE) == 1
    again = records.replay(
        result.to_dict(), records.cell_coding(synth.codec_), adaptive.LoopSettings()
    )
    np.testing.assert_array_equal(again.shapes[0], result.shapes[0])
    low = Synthesizer(columns, 0.1, mechanism={"method": "adaptive"}, random_state=0).fit(real)
    assert records.SHAPE not in [m.kind for m in low.result_.measurements]


def test_a_spike_inside_a_wide_integers_cell_comes_back() -> None:
    """20,000 rows of an integer ``hours`` on [1, 99], 40 on 45.7% of them and else uniform: 40
    shares a cell with 5 other levels. At epsilon 1 its shape (per level) is measured and the
    release has 40 on 45.7% +- 1.5% of its rows (20 seeds gave 45.1-46.2%, so the false-failure
    rate is far below 1 in 20); each level of the cell evenly, the mutant without the shape,
    gives 8%."""
    from dpsmooth_spark.mechanisms import records

    rng = np.random.default_rng(10)
    hours = np.where(rng.random(20_000) < 0.45, 40, rng.integers(1, 100, 20_000))
    real = pd.DataFrame({"hours": hours, "flag": rng.integers(0, 2, 20_000)})
    columns = [{"name": "hours", "lower": 1, "upper": 99}, FLAG]
    synth, released = _released(columns, real, 1.0)
    assert abs(float((released["hours"] == 40).mean()) - float((hours == 40).mean())) < 0.015
    assert records.SHAPE in [m.kind for m in synth.result_.measurements]


def test_a_wide_integers_shape_comes_back_in_sub_cells_of_its_levels() -> None:
    """20,000 rows of an integer ``income`` on [0, 1,000,000] (more levels than
    ``MAX_SHAPE_LEVELS``: its shape has 16 sub-cells of equally many levels per cell), log-normal
    with median 30,178: 89% of it in its first cell. At epsilon 10 the release's median is
    within 1,000 of it (20 seeds: 78-108 off); each cell's levels drawn evenly, the mutant
    without the shape, gives 35,092."""
    rng = np.random.default_rng(11)
    income = np.exp(rng.normal(np.log(30_000), 0.6, 20_000)).round().clip(1, 999_999)
    real = pd.DataFrame({"income": income.astype(np.int64), "flag": rng.integers(0, 2, 20_000)})
    _, released = _released([{"name": "income", "lower": 0, "upper": 1_000_000}, FLAG], real, 10.0)
    assert abs(float(np.median(released["income"])) - float(np.median(income))) < 1_000.0
