"""Adaptive measurement: the anchor picks and the pair selection.

All randomness is seeded (test mode), so each assertion is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams
from tests.unit.synthesizer_tables import (
    label_of_one_column,
    pair_table,
)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_too_noisy_anchor_pairs_give_way_to_the_clearest_one(seed):
    """3000 rows, 40 columns and a label at epsilon 0.05: the label's 40 anchor pairs would each
    get noise 0.99 (normalised, over ANCHOR_NOISE_LIMIT), so none is measured, and the release
    holds no relation of the label (|corr| < 0.2 with x0; measured <= 0.03). With the default
    ``anchor_picks: 1``, noisy top-1 picks y, x0, whose score (|sum - n~ E|, about 1800) lies 11
    selection noise scales (150) above the others' (below 300), so another pick has probability
    below 40 e^-11 < 1e-3 (seeds 0-29 all picked it), and the pair is measured at noise 0.08
    against an answer of about 0.6: the release keeps the label's relation (corr >= 0.2, real
    0.87; measured 0.27-0.96 over seeds 0-29, the lowest at seed 0, whose histograms put both
    columns' means near 0.4 against 0, so that their product reads as part of the answer) and
    invents none with the other columns (|corr| < 0.2; measured <= 0.14).
    Both releases spend exactly epsilon, the picks charged as their own stages."""
    columns, bounds = label_of_one_column(3000, 40, 11)
    names = list(bounds)
    for picks in (1, 0):
        params = SynthesizerParams(pair_columns=("y",), anchor_picks=picks, candidates=3000)
        synth = ArraySynthesizer(0.05, bounds, params=params, levels={"y": 2}, random_state=seed)
        out = synth.fit(columns).sample(3000)
        syn = np.corrcoef(np.column_stack([out[c] for c in names]), rowvar=False)
        stages = [c.stage for c in synth.accountant_.charges]
        assert synth.accountant_.spent_epsilon() == pytest.approx(0.05)
        summary = synth.result_.summary
        assert summary.basis.size == 0
        others = np.abs(syn[-1, 1:-1])
        if picks:
            assert stages[-2:] == ["anchor_selection", "anchor_pairs"], stages
            assert summary.factor_pairs.pairs.tolist() == [[0, 40]]
            assert syn[-1, 0] >= 0.2, syn[-1, 0]
            assert others.max() < 0.2, others.max()
        else:
            assert "anchor_selection" not in stages and summary.factor_pairs is None
            assert abs(syn[-1, 0]) < 0.2, syn[-1, 0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pair_selection_finds_a_relation_the_anchors_do_not_carry(seed):
    """20,000 rows at epsilon 0.1 afford the label's 6 anchor pairs and 7 more, not all 21:
    with ``pair_selection: on`` noisy top-k picks 7 of the 15 missing pairs by how far each
    pair's sum lies from the anchors' model. x0, x1 lies about 9 noise scales (737) above the
    others, so missing it among the 7 picks has probability far below 1e-3, and the release
    keeps it (real 0.98; in 5,000 drawn rows 0.70-0.72 on seeds 0-2, 0.60-0.76 on seeds 0-11).
    Without the selection nothing can tell it (measured |corr| <= 0.001). Pairs of independent
    columns stay independent either way: five of them average |corr| < 0.05 and each stays
    below 0.2 (over seeds 0-11 with selection: averages 0.001-0.028, largest 0.12). A picked
    pair of independent columns is measured with noise of about 0.1 in correlation and shares
    its group with x0, x1's clear relation, so the group's shrinkage leaves it its draw (the
    0.12 above)."""
    columns, bounds = pair_table(20_000, 7)
    names = list(bounds)
    found = {}
    for mode in ("on", "off"):
        synth = ArraySynthesizer(
            0.1,
            bounds,
            params=SynthesizerParams(
                pair_columns=("y",), pair_selection=mode, selection_fraction=0.5
            ),
            levels={"y": 2},
            random_state=seed,
        )
        out = synth.fit(columns).sample(5_000)
        syn = np.corrcoef(np.column_stack([out[c] for c in names]), rowvar=False)
        stages = [c.stage for c in synth.accountant_.charges]
        assert ("pair_selection" in stages) == (mode == "on")
        assert synth.accountant_.spent_epsilon() == pytest.approx(0.1)
        pairs = synth.result_.summary.factor_pairs.pairs.tolist()
        found[mode] = ([0, 1] in pairs, syn[0, 1])
        independent = np.abs([syn[i, j] for i, j in ((3, 4), (3, 5), (4, 5), (0, 3), (1, 4))])
        assert independent.mean() < 0.05 and independent.max() < 0.2, (mode, independent)
    assert found["on"][0] and found["on"][1] >= 0.6, found
    assert not found["off"][0] and abs(found["off"][1]) < 0.2, found


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pair_selection_leaves_out_pairs_its_measurement_cannot_resolve(seed):
    """The six-column table plus ``r``, at its lower bound in 99% of the rows (``x3`` in the
    rest): at epsilon 0.1 a pair of ``r`` would be measured with a copula correlation noise of
    0.34 (seed 0) or 0.99 (seeds 1, 2; its factor varies in about 200 rows), every other pair
    with at most 0.10, against ``RESOLVABLE_STD`` (0.2): the selection never picks a pair of
    ``r`` and the release leaves them unmeasured. Seeded and deterministic given the noisy
    marginals; without that rule the picks held 1-3 pairs of ``r`` in each of these seeds."""
    columns, bounds = pair_table(20_000, 7)
    rng = np.random.default_rng(11)
    columns["r"] = np.where(rng.random(20_000) < 0.01, columns["x3"], -1.0)
    bounds["r"] = (-1.0, 1.0)
    names = list(bounds)
    synth = ArraySynthesizer(
        0.1,
        bounds,
        params=SynthesizerParams(pair_columns=("y",), pair_selection="on", selection_fraction=0.5),
        levels={"y": 2},
        random_state=seed,
    ).fit(columns)
    assert "pair_selection" in [c.stage for c in synth.accountant_.charges]
    pairs = [
        sorted(names[i] for i in pair) for pair in synth.result_.summary.factor_pairs.pairs.tolist()
    ]
    picked = [pair for pair in pairs if "y" not in pair]
    assert len(picked) == 6 and not [pair for pair in picked if "r" in pair], picked


def test_pair_selection_with_no_resolvable_pair_picks_and_spends_nothing(monkeypatch):
    """With no unmeasured pair resolvable (the limit set to 0), the selection picks none and
    measures none: the anchor pairs stay the only pairs, no selection is charged, the release
    completes, and the selection's and measurement's shares stay unspent."""
    from dpsmooth_spark.mechanisms.synthesizer import measure

    monkeypatch.setattr(measure, "RESOLVABLE_STD", 0.0)
    columns, bounds = pair_table(20_000, 7)
    synth = ArraySynthesizer(
        0.1,
        bounds,
        params=SynthesizerParams(pair_columns=("y",), pair_selection="on", selection_fraction=0.5),
        levels={"y": 2},
        random_state=0,
    ).fit(columns)
    stages = [c.stage for c in synth.accountant_.charges]
    assert "pair_selection" not in stages and "selected_pairs" not in stages, stages
    assert synth.accountant_.spent_epsilon() < 0.1
    pairs = synth.result_.summary.factor_pairs.pairs
    assert (pairs == list(bounds).index("y")).any(axis=1).all()
    assert len(synth.sample(1000)["y"]) == 1000
